"""Values the settings refuse, each in one line that names the setting and why, and
never shows a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import SECTIONS, Settings, SettingsError, load_settings
from tests.helpers.settings_sources import refusal, write_toml


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "KIOKU_STM__REFRESH_CADENCE",
            "abc",
            "invalid setting stm.refresh_cadence (KIOKU_STM__REFRESH_CADENCE) = 'abc': "
            "Input should be a valid integer",
        ),
        ("KIOKU_STM__REFRESH_CADENCE", "0", "(allowed: integer 1–100)"),
        (
            "KIOKU_STM__RENDER_MODE",
            "fancy",
            "invalid setting stm.render_mode (KIOKU_STM__RENDER_MODE) = 'fancy'",
        ),
        ("KIOKU_STM__RENDER_MODE", "fancy", "(allowed: 'crude_summary' | 'supersede')"),
        ("DATABASE_URL", "mysql://u@h/db", "database_url (DATABASE_URL)"),
        ("DATABASE_URL", "mysql://u@h/db", "must be a postgresql:// URL"),
        ("DATABASE_URL", "not a url", "is not a URL like postgresql://"),
        ("DATABASE_URL", "postgresql://u:p@host", "names no database"),
        ("OPENAI_BASE_URL", "localhost:11434", "must start with http:// or https://"),
        ("KIOKU_LOG_LEVEL", "LOUD", "'DEBUG' | 'INFO' | 'WARNING' | 'ERROR'"),
        (
            "KIOKU_LLM__MAX_WAITING_TURNS",
            "101",
            "invalid setting llm.max_waiting_turns (KIOKU_LLM__MAX_WAITING_TURNS) = '101': ",
        ),
        ("KIOKU_LLM__MAX_WAITING_TURNS", "-1", "(allowed: integer 0–100)"),
        (
            "KIOKU_METRICS__PORT",
            "70000",
            "invalid setting metrics.port (KIOKU_METRICS__PORT) = '70000': ",
        ),
        ("KIOKU_METRICS__PORT", "http", "Input should be a valid integer"),
        ("KIOKU_CONTEXT__VISION", "maybe", "context.vision"),
        ("KIOKU_CONTEXT__IMAGE_TRANSPORT", "ftp", "context.image_transport"),
        ("KIOKU_CONTEXT__IMAGE_MAX_MB", "0", "context.image_max_mb"),
        ("KIOKU_CONTEXT__REPLY_CHAIN_DEPTH", "11", "context.reply_chain_depth"),
    ],
)
def test_bad_values_give_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    message = refusal()
    assert "\n" not in message
    assert expected in message


@pytest.mark.parametrize(
    "url",
    [
        "mysql://user:hunter2@host/db",
        "mysql://user:hun/ter2@host/db",  # a "/" in the password
        "mysql://user:hunter2 x@host/db",  # a space
        "mysql://user:p@hunter2@host/db",  # an "@"
        "postgresql://user:hunter2@host:abc/db",
    ],
)
def test_database_password_is_not_echoed(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("DATABASE_URL", url)
    message = refusal()
    assert "hunter2" not in message and "ter2" not in message


# Made up, in the shapes the redaction knows: a bot token starts with the bot's id in
# base64, an OpenAI project key is longer than the 80 characters a value is cut to.
BOT_TOKEN = "MTA4NzY1NDMyMTA5ODc2NTQzMg" + ".GhJkLm.abcdefghijklmnopqrstuvwxyz0123456789AB"


PROJECT_KEY = "sk-proj-x9Kq2_Lm7ZpR4tV-b1Nc8Kd5Wg0Hy3JsA6fQe" + "T3BlbkFJ" + "u2Io5Pa8Sd1Fg4Hj" * 2


@pytest.mark.parametrize(
    ("variable", "value", "secret"),
    [
        # libpq's key=value form, not a URL: no userinfo for the URL masking to find.
        (
            "DATABASE_URL",
            "host=db.example.com user=kioku password=S3cretPW dbname=kioku",
            "S3cretPW",
        ),
        ("DATABASE_URL", "postgresql://bob@db/kioku?password=s3cretpw", "s3cretpw"),
        # A secret put in the wrong variable is refused there, as what it is not.
        ("OPENAI_BASE_URL", BOT_TOKEN, BOT_TOKEN),
        ("OPENAI_BASE_URL", PROJECT_KEY, PROJECT_KEY),
        ("OPENAI_BASE_URL", "https://llm.example/v1?key=opensesame&x=1&x=2", "opensesame"),
    ],
)
def test_a_secret_in_a_refused_value_is_not_shown(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, secret: str
) -> None:
    monkeypatch.setenv(variable, value)
    message = refusal()
    assert "\n" not in message
    assert message.startswith(f"invalid setting {variable.lower()} ({variable}) = ")
    # Not even a piece of it, as a value cut to 80 characters would show its head.
    assert not any(secret[i : i + 8] in message for i in range(len(secret) - 7)), message


def test_a_secret_in_a_refused_json_section_is_not_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KIOKU_STM", f'{{"raw_window": "{PROJECT_KEY}"}}')
    assert refusal().startswith(
        "invalid setting stm.raw_window (KIOKU_STM) = '[REDACTED:openai_key]': "
    )


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (
            "KIOKU_OWNER_IDS",
            "123,456",
            "invalid setting owner_ids (KIOKU_OWNER_IDS) = '123,456': "
            "must be a JSON list, e.g. [123456789012345678]",
        ),
        (
            "KIOKU_STM",
            "notjson",
            "invalid setting stm (KIOKU_STM) = 'notjson': must be a JSON object "
            "(or set single keys as KIOKU_STM__<NAME>)",
        ),
    ],
)
def test_a_list_or_section_variable_that_is_not_json_is_named(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(name, value)
    assert refusal() == expected


@pytest.mark.parametrize(("typed", "meant"), [("olama", "ollama"), ("novelia", "novelai")])
def test_a_misspelt_provider_is_refused_with_the_likely_one(
    monkeypatch: pytest.MonkeyPatch, typed: str, meant: str
) -> None:
    # The generic row it would otherwise get assumes tool calling (novelai has none).
    monkeypatch.setenv("KIOKU_PROVIDER", typed)
    with pytest.raises(SettingsError, match=f"did you mean '{meant}'\\? known: .*generic"):
        load_settings()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:pw@h/db?sslmode=require&channel_binding=require", "'channel_binding'"),
        ("postgresql://u:pw@h/db?application_name=x", "'application_name'"),
        ("postgresql://u:pw@h/db?sslrootcert=/ca.pem", "set PGSSLROOTCERT=<file>"),
        ("postgresql://u:pw@h/db?connect_timeout=5", "KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS"),
        ("postgresql://u:pw@h/db?sslmode=requir", "has sslmode 'requir'; allowed: disable |"),
        ("postgresql://u:pw@h/db?sslmode=require&ssl=require", "sets both sslmode and ssl"),
        ("postgresql://u:pw@h:notaport/db", "has a port that is not a number"),
        ("postgresql://u:pw@h:99999/db", "has port 99999, outside 1–65535"),
        ("postgresql://u:pw@h:0/db", "has port 0, outside 1–65535"),
    ],
)
def test_database_url_problems_give_one_line_naming_the_cause(
    monkeypatch: pytest.MonkeyPatch, url: str, expected: str
) -> None:
    monkeypatch.setenv("DATABASE_URL", url)
    message = refusal()
    assert "\n" not in message
    assert message.startswith("invalid setting database_url (DATABASE_URL) = ")
    assert expected in message
    assert "pw" not in message


@pytest.mark.parametrize(
    ("env", "first", "second"),
    [
        (
            {"KIOKU_STM__MIN_RAW_TAIL": "20", "KIOKU_STM__RAW_WINDOW": "10"},
            "stm.min_raw_tail (KIOKU_STM__MIN_RAW_TAIL) = 20",
            "stm.raw_window (KIOKU_STM__RAW_WINDOW) = 10",
        ),
        (
            {"KIOKU_STM__CRUDE_MESSAGE_COUNT": "8", "KIOKU_STM__RAW_WINDOW": "5"},
            "stm.crude_message_count (KIOKU_STM__CRUDE_MESSAGE_COUNT) = 8",
            "stm.raw_window (KIOKU_STM__RAW_WINDOW) = 5",
        ),
        (
            # The other one set nowhere: no variable to look for, the default.
            {"KIOKU_STM__TTL_EMPTY_HOURS": "48"},
            "stm.ttl_empty_hours (KIOKU_STM__TTL_EMPTY_HOURS) = 48.0",
            "stm.ttl_summary_hours = 24.0 (the default)",
        ),
    ],
)
def test_contradictory_settings_give_one_line_naming_both_keys(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    first: str,
    second: str,
) -> None:
    write_toml(tmp_path, "", monkeypatch)  # config/kioku.toml would set every default
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert refusal() == f"invalid setting {first}: must not exceed {second}"


def test_a_bad_log_level_is_shown_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    # Was shown upper-cased ('VERBOSE'), not as the operator wrote it.
    monkeypatch.setenv("KIOKU_LOG_LEVEL", "verbose")
    assert refusal().startswith("invalid setting log_level (KIOKU_LOG_LEVEL) = 'verbose': ")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            '[123, "x"]',
            "invalid setting owner_ids (item 2 of KIOKU_OWNER_IDS) = 'x': "
            "Input should be a valid integer",
        ),
        (
            "[1, 2, -5.5]",
            "invalid setting owner_ids (item 3 of KIOKU_OWNER_IDS) = -5.5: ",
        ),
    ],
)
def test_a_bad_list_item_is_named_by_its_position_in_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: str
) -> None:
    # There is no KIOKU_OWNER_IDS__1 to name.
    monkeypatch.setenv("KIOKU_OWNER_IDS", value)
    message = refusal()
    assert message.startswith(expected), message
    assert "__" not in message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "[stm]\nrefresh_cadence = true\n",
            "invalid setting stm.refresh_cadence = True (in {toml}): "
            "must be a number, not true/false",
        ),
        (
            "[llm]\ntemperature = false\n",
            "invalid setting llm.temperature = False (in {toml}): must be a number, not true/false",
        ),
        (
            "owner_ids = [true]\n",
            "invalid setting owner_ids = [True] (in {toml}): "
            "must hold Discord user ids (numbers), not true/false",
        ),
    ],
)
def test_a_toml_boolean_is_not_taken_as_a_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, expected: str
) -> None:
    # Pydantic would take `true` as 1 (a cadence of one turn, an owner with id 1).
    write_toml(tmp_path, body, monkeypatch)
    message = refusal()
    expected = expected.format(toml=tmp_path / "kioku.toml")
    assert message.startswith(expected), message


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf"])
def test_a_temperature_that_is_no_finite_number_says_the_range(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # NaN was "Input should be less than or equal to 2": true of no value it could mean.
    monkeypatch.setenv("KIOKU_LLM__TEMPERATURE", value)
    assert refusal() == (
        f"invalid setting llm.temperature (KIOKU_LLM__TEMPERATURE) = {value!r}: "
        "must be a finite number (allowed: number 0–2)"
    )


FLOAT_SETTINGS = [
    (section, name)
    for section in SECTIONS
    for name, field in Settings.model_fields[section].annotation.model_fields.items()  # type: ignore[union-attr]
    if field.annotation is float
]


@pytest.mark.parametrize(("section", "name"), FLOAT_SETTINGS)
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_every_number_setting_refuses_nan_and_infinity_as_no_finite_number(
    monkeypatch: pytest.MonkeyPatch, section: str, name: str, value: str
) -> None:
    variable = f"KIOKU_{section.upper()}__{name.upper()}"
    monkeypatch.setenv(variable, value)
    message = refusal()
    assert message.startswith(
        f"invalid setting {section}.{name} ({variable}) = {value!r}: "
        "must be a finite number (allowed: number "
    ), message


def test_a_summary_cached_longer_than_rows_are_kept_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The janitor deletes rows without telling the caches: a cache entry outliving its
    # row would keep showing (and storing again) a memory retention removed.
    monkeypatch.setenv("KIOKU_STM__RETENTION_DAYS", "1")
    monkeypatch.setenv("KIOKU_STM__TTL_SUMMARY_HOURS", "48")
    assert refusal() == (
        "invalid setting stm.ttl_summary_hours (KIOKU_STM__TTL_SUMMARY_HOURS) = 48.0: "
        "must not exceed stm.retention_days (KIOKU_STM__RETENTION_DAYS) = 1 (24 hours)"
    )
    monkeypatch.setenv("KIOKU_STM__TTL_SUMMARY_HOURS", "24")
    assert load_settings().stm.retention_days == 1, "equal is allowed"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:99999/v1", "has a port that is not a number in 1–65535"),
        ("http://localhost:0/v1", "has a port that is not a number in 1–65535"),
        ("http://localhost:abc/v1", "has a port that is not a number in 1–65535"),
        ("http://[::1/v1", "is not a URL (Invalid IPv6 URL)"),
        ("http://", "names no host"),
        ("http:///v1", "names no host"),
        ("http://local host/v1", "contains a space"),
        ("ftp://localhost/v1", "must start with http:// or https://"),
        ("http://gateway/v1#chat", "has a #fragment"),
        ("http://gateway/v1?tag=a&tag=b", "repeats the query parameter 'tag'"),
    ],
)
def test_an_openai_base_url_that_is_no_url_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, url: str, expected: str
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    # A query's values are masked: any of them may be a credential.
    shown = url.replace("tag=a&tag=b", "tag=***&tag=***")
    assert refusal() == (
        f"invalid setting openai_base_url (OPENAI_BASE_URL) = {shown!r}: {expected} "
        "(allowed: an http:// or https:// URL with a host, e.g. http://localhost:11434/v1)"
    )
