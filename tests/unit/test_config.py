"""Settings: defaults, precedence (environment over the TOML file), one-line errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy.exc
from aiohttp import web

from bot.config import (
    DEFAULT_PERSONA_FILE,
    SECTIONS,
    Settings,
    SettingsError,
    load_settings,
    unknown_variables,
)
from bot.config.problems import (
    data_dir_problem,
    database_unreachable,
    embedded_data_dir_problem,
    one_line_error,
)
from bot.llm.client import make_client
from tests.helpers.fake_llm import ScriptedLLM

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_kioku_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("KIOKU_") or name in {
            "DISCORD_TOKEN",
            "DATABASE_URL",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
        }:
            monkeypatch.delenv(name)
    monkeypatch.setenv("KIOKU_ENV_FILE", str(tmp_path / "absent.env"))


def write_toml(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kioku.toml"
    path.write_text(body)
    monkeypatch.setenv("KIOKU_CONFIG", str(path))


def test_defaults_match_the_spec() -> None:
    settings = load_settings()
    assert settings.stm.cache_max_entries == 50_000
    assert settings.stm.ttl_summary_hours == 24
    assert settings.stm.ttl_empty_hours == 12
    assert settings.stm.refresh_cadence == 5
    assert settings.stm.render_mode == "crude_summary"
    assert settings.stm.crude_message_count == 6
    assert settings.stm.max_turns_to_pull == 20
    assert settings.stm.retention_days == 90
    assert settings.llm.max_consecutive_tool_errors == 5
    assert settings.llm.max_waiting_turns == 5
    assert settings.longterm.recall_char_budget == 1200
    assert settings.database_url is None and settings.embedded_database


def test_shipped_toml_equals_code_defaults() -> None:
    # config/kioku.toml documents the defaults; it must not silently change them.
    assert load_settings() == Settings(_env_file=None)  # type: ignore[call-arg]


def test_environment_overrides_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(tmp_path, 'model = "from-file"\n[stm]\nrefresh_cadence = 9\n', monkeypatch)
    assert load_settings().stm.refresh_cadence == 9
    assert load_settings().model == "from-file"
    monkeypatch.setenv("KIOKU_STM__REFRESH_CADENCE", "12")
    monkeypatch.setenv("KIOKU_MODEL", "from-env")
    settings = load_settings()
    assert settings.stm.refresh_cadence == 12
    assert settings.model == "from-env"


def test_well_known_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISCORD_TOKEN", "abc")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1/")
    monkeypatch.setenv("DATABASE_URL", "postgres://kioku:pw@db:5432/kioku")
    settings = load_settings()
    assert settings.discord_token is not None
    assert settings.discord_token.get_secret_value() == "abc"
    assert settings.openai_base_url == "http://localhost:11434/v1"
    assert settings.database_url == "postgresql+asyncpg://kioku:pw@db:5432/kioku"


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
    ],
)
def test_bad_values_give_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
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
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "hunter2" not in str(caught.value) and "ter2" not in str(caught.value)


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
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"invalid setting {variable.lower()} ({variable}) = ")
    # Not even a piece of it, as a value cut to 80 characters would show its head.
    assert not any(secret[i : i + 8] in message for i in range(len(secret) - 7)), message


def test_a_secret_in_a_refused_json_section_is_not_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KIOKU_STM", f'{{"raw_window": "{PROJECT_KEY}"}}')
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value).startswith(
        "invalid setting stm.raw_window (KIOKU_STM) = '[REDACTED:openai_key]': "
    )


def test_unknown_key_in_toml_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(tmp_path, "[stm]\nrefresh_cadance = 3\n", monkeypatch)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"unknown key stm.refresh_cadance in {tmp_path / 'kioku.toml'}: "
        "did you mean stm.refresh_cadence?"
    )


def test_a_misspelt_section_of_the_toml_file_is_pointed_to_the_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only keys were suggested, so "[databse]" (a whole section ignored) got no hint.
    write_toml(tmp_path, "[databse]\npool_size = 2\n", monkeypatch)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"unknown key databse in {tmp_path / 'kioku.toml'}: did you mean database?"
    )


def test_a_section_given_a_plain_value_says_what_a_section_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was "Input should be a valid dictionary or instance of StmSettings": a class name.
    write_toml(tmp_path, "stm = 5\n", monkeypatch)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"invalid setting stm = 5 (in {tmp_path / 'kioku.toml'}): must be a section: [stm] "
        "in the TOML file, or a JSON object in KIOKU_STM (or single keys as KIOKU_STM__<NAME>)"
    )


def test_a_section_key_at_the_top_of_the_toml_file_is_pointed_to_its_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(tmp_path, "refresh_cadence = 3\n", monkeypatch)
    with pytest.raises(SettingsError, match=r"unknown key refresh_cadence .*stm\.refresh_cadence"):
        load_settings()


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
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == expected


@pytest.mark.parametrize(
    ("name", "meant"),
    [("KIOKU_DATABASE_URL", "DATABASE_URL"), ("KIOKU_DISCORD_TOKEN", "DISCORD_TOKEN")],
)
def test_a_prefixed_conventional_name_points_to_the_real_one(
    monkeypatch: pytest.MonkeyPatch, name: str, meant: str
) -> None:
    monkeypatch.setenv(name, "x")
    with pytest.raises(SettingsError, match=f"did you mean {meant}\\?$"):
        load_settings()


@pytest.mark.parametrize(("typed", "meant"), [("olama", "ollama"), ("novelia", "novelai")])
def test_a_misspelt_provider_is_refused_with_the_likely_one(
    monkeypatch: pytest.MonkeyPatch, typed: str, meant: str
) -> None:
    # The generic row it would otherwise get assumes tool calling (novelai has none).
    monkeypatch.setenv("KIOKU_PROVIDER", typed)
    with pytest.raises(SettingsError, match=f"did you mean '{meant}'\\? known: .*generic"):
        load_settings()


@pytest.mark.parametrize("name", ["Azure-OpenAI", "LM_Studio", "generic", "llama.cpp"])
def test_provider_aliases_and_generic_are_accepted(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("KIOKU_PROVIDER", name)
    assert load_settings().provider == name


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("KIOKU_REFRESH_CADENCE", ": did you mean KIOKU_STM__REFRESH_CADENCE?"),
        ("KIOKU_STM__CADENCE", ": did you mean KIOKU_STM__REFRESH_CADENCE?"),
        ("KIOKU_LOGLEVEL", ": did you mean KIOKU_LOG_LEVEL?"),
        ("kioku_llm__timeout", ": did you mean KIOKU_LLM__TIMEOUT_SECONDS?"),
        ("KIOKU_FOO", " (see config/example.env)"),
    ],
)
def test_a_misspelt_environment_variable_is_named_with_the_likely_one(
    monkeypatch: pytest.MonkeyPatch, name: str, suggestion: str
) -> None:
    monkeypatch.setenv(name, "3")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == f"unknown setting {name.upper()} in the environment{suggestion}"


def test_a_misspelt_variable_in_dotenv_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("POSTGRES_USER=kioku\nKIOKU_STM__RENDERMODE=supersede\n")
    monkeypatch.setenv("KIOKU_ENV_FILE", str(env_file))
    with pytest.raises(SettingsError, match=r"KIOKU_STM__RENDERMODE in .*\.env: did you mean "):
        load_settings()


def test_every_documented_variable_is_known() -> None:
    documented = set(
        re.findall(r"\bKIOKU_[A-Z_]+[A-Z]", (ROOT / "config" / "example.env").read_text())
    )
    assert documented, "config/example.env documents the variables"
    assert unknown_variables(documented, "config/example.env") == []


def test_malformed_toml_is_reported_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(tmp_path, "[stm\n", monkeypatch)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(f"cannot read the configuration file {tmp_path / 'kioku.toml'}: ")
    assert "line 1" in message and "\n" not in message


def test_dotenv_is_read_and_foreign_variables_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "POSTGRES_PASSWORD=x\nDISCORD_TOKEN=from-dotenv\nKIOKU_STM__REFRESH_CADENCE=7\n"
    )
    monkeypatch.setenv("KIOKU_ENV_FILE", str(env_file))
    settings = load_settings()
    assert settings.discord_token is not None
    assert settings.discord_token.get_secret_value() == "from-dotenv"
    assert settings.stm.refresh_cadence == 7
    monkeypatch.setenv("KIOKU_STM__REFRESH_CADENCE", "8")
    assert load_settings().stm.refresh_cadence == 8, "the environment wins over .env"


@pytest.mark.parametrize(
    "mode", ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]
)
def test_libpq_sslmode_becomes_asyncpg_ssl(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    # Managed hosts (RDS, Supabase, Neon, Heroku) hand out URLs with ?sslmode=…, which
    # asyncpg.connect() refuses as an unexpected keyword.
    import inspect

    import asyncpg
    from sqlalchemy.engine import make_url

    monkeypatch.setenv(
        "DATABASE_URL", f"postgresql://u:pw@db.example.com:5432/kioku?sslmode={mode}"
    )
    url = make_url(load_settings().database_url)
    assert dict(url.query) == {"ssl": mode}
    _, connect_kwargs = url.get_dialect()().create_connect_args(url)
    inspect.signature(asyncpg.connect).bind(**connect_kwargs)  # what the engine will call


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
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
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
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == f"invalid setting {first}: must not exceed {second}"


def test_equal_limits_are_not_contradictory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIOKU_STM__RAW_WINDOW", "6")
    monkeypatch.setenv("KIOKU_STM__MIN_RAW_TAIL", "6")
    monkeypatch.setenv("KIOKU_STM__TTL_EMPTY_HOURS", "24")
    settings = load_settings()
    assert settings.stm.raw_window == settings.stm.crude_message_count == 6


@pytest.mark.parametrize("value", ["debug", "Warning", " error "])
def test_log_level_is_case_insensitive(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("KIOKU_LOG_LEVEL", value)
    assert load_settings().log_level == value.strip().upper()


def test_a_bad_log_level_is_shown_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    # Was shown upper-cased ('VERBOSE'), not as the operator wrote it.
    monkeypatch.setenv("KIOKU_LOG_LEVEL", "verbose")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value).startswith("invalid setting log_level (KIOKU_LOG_LEVEL) = 'verbose': ")


def test_a_missing_config_file_named_by_kioku_config_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nonexistent" / "kioku.toml"
    monkeypatch.setenv("KIOKU_CONFIG", str(missing))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"cannot read the configuration file {missing} (KIOKU_CONFIG): no such file"
    )


@pytest.mark.parametrize("value", ["", "   ", "\t"])
def test_a_blank_discord_token_counts_as_not_set(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # config/example.env ships `DISCORD_TOKEN=`; run, sync and doctor must all see "unset".
    monkeypatch.setenv("DISCORD_TOKEN", value)
    assert load_settings().discord_token is None
    monkeypatch.setenv("DISCORD_TOKEN", "  abc \n")
    token = load_settings().discord_token
    assert token is not None and token.get_secret_value() == "abc"


def test_a_kioku_config_naming_a_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # TOML's source skips what is not a file, as it skips an absent default file.
    (tmp_path / "kioku.toml").write_text("[stm]\nrefresh_cadence = 9\n")
    monkeypatch.setenv("KIOKU_CONFIG", str(tmp_path))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"cannot read the configuration file {tmp_path} (KIOKU_CONFIG): is not a file"
    )


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
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value).startswith(expected), str(caught.value)
    assert "__" not in str(caught.value)


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
    with pytest.raises(SettingsError) as caught:
        load_settings()
    expected = expected.format(toml=tmp_path / "kioku.toml")
    assert str(caught.value).startswith(expected), str(caught.value)


def test_a_toml_boolean_still_sets_a_boolean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(tmp_path, "[stm]\nenabled = false\nrefresh_cadence = 3\n", monkeypatch)
    settings = load_settings()
    assert (settings.stm.enabled, settings.stm.refresh_cadence) == (False, 3)


def test_a_bad_value_from_the_toml_file_names_the_file_not_a_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was "(KIOKU_STM__REFRESH_CADENCE)": a variable the operator never set, and looked for.
    write_toml(tmp_path, "[stm]\nrefresh_cadence = 0\n", monkeypatch)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"invalid setting stm.refresh_cadence = 0 (in {tmp_path / 'kioku.toml'}): "
        "Input should be greater than or equal to 1 (allowed: integer 1–100)"
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "KIOKU_STM__REFRESH_CADENCE=0",
            "invalid setting stm.refresh_cadence (KIOKU_STM__REFRESH_CADENCE in {env}) = '0': "
            "Input should be greater than or equal to 1 (allowed: integer 1–100)",
        ),
        (
            'KIOKU_LLM={"temperature": 3}',
            "invalid setting llm.temperature (KIOKU_LLM in {env}) = 3: "
            "Input should be less than or equal to 2 (allowed: number 0–2)",
        ),
        (
            "KIOKU_OWNER_IDS=123,456",
            "invalid setting owner_ids (KIOKU_OWNER_IDS in {env}) = '123,456': "
            "must be a JSON list, e.g. [123456789012345678]",
        ),
        (
            'KIOKU_OWNER_IDS=[123, "x"]',
            "invalid setting owner_ids (item 2 of KIOKU_OWNER_IDS in {env}) = 'x': "
            "Input should be a valid integer, unable to parse string as an integer",
        ),
    ],
)
def test_a_bad_value_from_dotenv_names_the_variable_and_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, expected: str
) -> None:
    env_file = tmp_path / "kioku.env"
    env_file.write_text(line + "\n")
    monkeypatch.setenv("KIOKU_ENV_FILE", str(env_file))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == expected.format(env=env_file)


@pytest.mark.parametrize(
    ("in_dotenv", "in_environment", "where"),
    [
        (False, False, "stm.refresh_cadence = 0 (in {toml})"),
        (True, False, "stm.refresh_cadence (KIOKU_STM__REFRESH_CADENCE in {env}) = '200'"),
        (True, True, "stm.refresh_cadence (KIOKU_STM__REFRESH_CADENCE) = '101'"),
        (False, True, "stm.refresh_cadence (KIOKU_STM__REFRESH_CADENCE) = '101'"),
    ],
)
def test_the_line_names_the_source_the_value_was_taken_from(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    in_dotenv: bool,
    in_environment: bool,
    where: str,
) -> None:
    # The environment over .env over the TOML file: the value refused is the one named.
    write_toml(tmp_path, "[stm]\nrefresh_cadence = 0\n", monkeypatch)
    env_file = tmp_path / "kioku.env"
    env_file.write_text("KIOKU_STM__REFRESH_CADENCE=200\n" if in_dotenv else "")
    monkeypatch.setenv("KIOKU_ENV_FILE", str(env_file))
    if in_environment:
        monkeypatch.setenv("KIOKU_STM__REFRESH_CADENCE", "101")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    expected = where.format(toml=tmp_path / "kioku.toml", env=env_file)
    assert str(caught.value).startswith(f"invalid setting {expected}: "), str(caught.value)


def test_a_bad_list_item_in_the_toml_file_is_named_by_its_position_and_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(tmp_path, 'owner_ids = [123, "x"]\n', monkeypatch)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value).startswith(
        f"invalid setting owner_ids = 'x' (item 2, in {tmp_path / 'kioku.toml'}): "
    ), str(caught.value)


def test_contradictory_settings_from_two_sources_name_each_ones_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(tmp_path, "[stm]\nmin_raw_tail = 20\n", monkeypatch)
    monkeypatch.setenv("KIOKU_STM__RAW_WINDOW", "10")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"invalid setting stm.min_raw_tail = 20 (in {tmp_path / 'kioku.toml'}): "
        "must not exceed stm.raw_window (KIOKU_STM__RAW_WINDOW) = 10"
    )


@pytest.mark.parametrize("value", ["", "  "])
def test_a_blank_data_dir_or_persona_file_counts_as_not_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # As for `DISCORD_TOKEN=`: not the working directory (which Path("") is).
    monkeypatch.setenv("KIOKU_DATA_DIR", value)
    monkeypatch.setenv("KIOKU_PERSONA_FILE", value)
    settings = load_settings()
    assert (settings.data_dir, settings.persona_file) == (Path("data"), DEFAULT_PERSONA_FILE)
    # Not set: the file's values apply, as they would with the variables absent.
    write_toml(tmp_path, 'data_dir = "/srv/kioku"\npersona_file = "/srv/persona.md"\n', monkeypatch)
    settings = load_settings()
    assert (settings.data_dir, settings.persona_file) == (
        Path("/srv/kioku"),
        Path("/srv/persona.md"),
    )


def test_a_blank_data_dir_in_dotenv_counts_as_not_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("KIOKU_DATA_DIR=\n")
    monkeypatch.setenv("KIOKU_ENV_FILE", str(env_file))
    assert load_settings().data_dir == Path("data")


@pytest.mark.parametrize("key", ["data_dir", "persona_file"])
def test_a_blank_path_in_the_toml_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    write_toml(tmp_path, f'{key} = ""\n', monkeypatch)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"invalid setting {key} = '' (in {tmp_path / 'kioku.toml'}): "
        "must not be empty (remove the line for the default)"
    )


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf"])
def test_a_temperature_that_is_no_finite_number_says_the_range(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # NaN was "Input should be less than or equal to 2": true of no value it could mean.
    monkeypatch.setenv("KIOKU_LLM__TEMPERATURE", value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"invalid setting llm.temperature (KIOKU_LLM__TEMPERATURE) = {value!r}: "
        "must be a finite number (allowed: number 0–2)"
    )


def test_a_nan_in_the_toml_file_says_the_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(tmp_path, "[llm]\ntemperature = nan\n", monkeypatch)  # TOML has nan
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"invalid setting llm.temperature = nan (in {tmp_path / 'kioku.toml'}): "
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
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value).startswith(
        f"invalid setting {section}.{name} ({variable}) = {value!r}: "
        "must be a finite number (allowed: number "
    ), str(caught.value)


def test_a_summary_cached_longer_than_rows_are_kept_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The janitor deletes rows without telling the caches: a cache entry outliving its
    # row would keep showing (and storing again) a memory retention removed.
    monkeypatch.setenv("KIOKU_STM__RETENTION_DAYS", "1")
    monkeypatch.setenv("KIOKU_STM__TTL_SUMMARY_HOURS", "48")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        "invalid setting stm.ttl_summary_hours (KIOKU_STM__TTL_SUMMARY_HOURS) = 48.0: "
        "must not exceed stm.retention_days (KIOKU_STM__RETENTION_DAYS) = 1 (24 hours)"
    )
    monkeypatch.setenv("KIOKU_STM__TTL_SUMMARY_HOURS", "24")
    assert load_settings().stm.retention_days == 1, "equal is allowed"


def test_data_dir_problems_name_the_variable_and_the_reason(tmp_path: Path) -> None:
    assert data_dir_problem(tmp_path) is None
    assert data_dir_problem(tmp_path / "new" / "data") is None, "created on first use"
    a_file = tmp_path / "data"
    a_file.write_text("")
    assert data_dir_problem(a_file) == (
        f"the data folder {a_file} (KIOKU_DATA_DIR) is a file, not a folder"
    )
    assert data_dir_problem(a_file / "inner") == (
        f"the data folder {a_file / 'inner'} (KIOKU_DATA_DIR) cannot be created: "
        f"{a_file} is a file, not a folder"
    )


@pytest.mark.parametrize("value", ["", "  "])
def test_a_blank_openai_base_url_means_openai_itself(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # compose's env_file turns `OPENAI_BASE_URL=` into a blank variable in the container;
    # the openai client, given no base URL, would read that blank variable itself.
    monkeypatch.setenv("OPENAI_BASE_URL", value)
    settings = load_settings()
    assert settings.openai_base_url is None
    assert str(make_client(settings).base_url) == "https://api.openai.com/v1/"


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
    with pytest.raises(SettingsError) as caught:
        load_settings()
    # A query's values are masked: any of them may be a credential.
    shown = url.replace("tag=a&tag=b", "tag=***&tag=***")
    assert str(caught.value) == (
        f"invalid setting openai_base_url (OPENAI_BASE_URL) = {shown!r}: {expected} "
        "(allowed: an http:// or https:// URL with a host, e.g. http://localhost:11434/v1)"
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("HTTP://localhost:11434/v1", "http://localhost:11434/v1"),
        ("Https://api.example.com/v1/", "https://api.example.com/v1"),
        ("http://[::1]:8080/v1/", "http://[::1]:8080/v1"),
        ("http://gateway/v1/?api-version=1", "http://gateway/v1?api-version=1"),
    ],
)
def test_an_openai_base_url_loses_only_the_trailing_slash_of_its_path(
    monkeypatch: pytest.MonkeyPatch, url: str, expected: str
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    assert load_settings().openai_base_url == expected


class QueryRecordingLLM(ScriptedLLM):
    """Records the query string of each chat request."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[dict[str, list[str]]] = []

    async def _handle_chat(self, request: web.Request) -> web.StreamResponse:
        self.queries.append({key: request.query.getall(key) for key in request.query})
        return await super()._handle_chat(request)


async def test_a_base_url_query_goes_with_each_request_to_the_chat_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Azure-style gateways want ?api-version=… on every call; left in the base URL, the
    # client would append /chat/completions after it and miss the endpoint.
    async with QueryRecordingLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{llm.base_url}/?api-version=1&tag=")
        settings = load_settings()
        assert settings.openai_base_url == f"{llm.base_url}?api-version=1&tag="
        llm.reply_text("Hello!")
        client = make_client(settings, max_retries=0)
        try:
            completion = await client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "hi"}]
            )
        finally:
            await client.close()
        assert completion.choices[0].message.content == "Hello!"
        assert llm.queries == [{"api-version": ["1"], "tag": [""]}]
        assert llm.unscripted == 0


def test_an_unknown_key_of_a_json_section_variable_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KIOKU_STM", '{"refresh_cadenc": 3}')
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        "unknown key stm.refresh_cadenc in KIOKU_STM (the environment): "
        "did you mean stm.refresh_cadence?"
    )


def test_a_relative_data_folder_under_a_path_with_a_space_names_where_the_space_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default ./data in a checkout under "My Projects": "data" itself has no space.
    checkout = tmp_path / "My Projects" / "kioku"
    checkout.mkdir(parents=True)
    monkeypatch.chdir(checkout)
    assert embedded_data_dir_problem(Path("data")) == (
        f"the data folder data (KIOKU_DATA_DIR) has a space in its path ({checkout / 'data'}), "
        "which the embedded PostgreSQL cannot use: choose a folder without one, or set "
        "DATABASE_URL"
    )


def test_a_kioku_env_file_naming_a_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was skipped in silence like an absent file: the operator's DISCORD_TOKEN in
    # <folder>/.env was then "not set" (KIOKU_CONFIG naming a folder is refused too).
    monkeypatch.setenv("KIOKU_ENV_FILE", str(tmp_path))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"cannot read the .env file {tmp_path} (KIOKU_ENV_FILE): it is a folder, not a file"
    )


def test_an_unknown_key_of_a_json_section_in_dotenv_names_the_variable_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "kioku.env"
    env_file.write_text('KIOKU_LLM={"timeout": 5}\n')
    monkeypatch.setenv("KIOKU_ENV_FILE", str(env_file))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value).startswith(f"unknown key llm.timeout in KIOKU_LLM ({env_file}): ")


def test_an_unknown_toml_key_is_blamed_on_the_file_while_a_json_section_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sections from the file and a variable are merged: the key says where it came from.
    write_toml(tmp_path, "[stm]\nrefresh_cadance = 3\n", monkeypatch)
    monkeypatch.setenv("KIOKU_STM", '{"raw_window": 40}')
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value).startswith(
        f"unknown key stm.refresh_cadance in {tmp_path / 'kioku.toml'}: "
    )


def test_a_dotenv_file_that_is_not_utf8_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "kioku.env"
    env_file.write_bytes("KIOKU_MODEL=café\n".encode("latin-1"))
    monkeypatch.setenv("KIOKU_ENV_FILE", str(env_file))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"cannot read the .env file {env_file} (KIOKU_ENV_FILE): "
        "it is not UTF-8 text (byte 15): save it as UTF-8"
    )


def test_settings_built_directly_refuse_a_dotenv_file_that_is_not_utf8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not blamed on the TOML file (the decoding error is a ValueError, like a TOML one).
    env_file = tmp_path / "kioku.env"
    env_file.write_bytes(b"KIOKU_MODEL=\xff\n")
    monkeypatch.setenv("KIOKU_ENV_FILE", str(env_file))
    with pytest.raises(SettingsError, match=r"\.env file .*kioku\.env .*save it as UTF-8"):
        Settings()


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("DISCORD_TOKEN abc\n", 1),
        # Blank lines and comments before it count, as an editor numbers lines.
        ("# Kioku\n\nKIOKU_MODEL=x\n\n  \nOPENAI_API_KEY 'abc\n", 6),
        ("KIOKU_MODEL='unclosed\n", 1),
    ],
)
def test_a_dotenv_line_that_cannot_be_parsed_is_one_line_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    text: str,
    line: int,
) -> None:
    # python-dotenv skipped it, warning "could not parse statement" without the file.
    env_file = tmp_path / "kioku.env"
    env_file.write_text(text)
    monkeypatch.setenv("KIOKU_ENV_FILE", str(env_file))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"cannot parse line {line} of {env_file} (KIOKU_ENV_FILE): "
        "expected NAME=value, a # comment or a blank line"
    )
    assert capfd.readouterr().err == "", "nothing but the one line"


def test_settings_built_directly_refuse_a_dotenv_line_that_cannot_be_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "kioku.env"
    env_file.write_text("KIOKU_MODEL=x\nDISCORD_TOKEN abc\n")
    monkeypatch.setenv("KIOKU_ENV_FILE", str(env_file))
    with pytest.raises(SettingsError, match=r"^cannot parse line 2 of .*kioku\.env "):
        Settings()


def test_an_error_without_text_is_named_by_its_class() -> None:
    assert one_line_error(TimeoutError()) == "TimeoutError"
    assert one_line_error(ConnectionRefusedError(111, "Connection refused")) == (
        "[Errno 111] Connection refused"
    )


def test_sqlalchemys_documentation_link_is_not_part_of_the_line() -> None:
    # What the pool raises when every connection is taken (its code adds the link).
    error = sqlalchemy.exc.TimeoutError("QueuePool limit of size 5 overflow 5 reached", code="3o7r")
    assert "Background on this error" in str(error)
    assert one_line_error(error, with_class=True) == (
        "TimeoutError: QueuePool limit of size 5 overflow 5 reached"
    )


def test_a_database_that_never_answered_is_named_as_a_timeout() -> None:
    settings = load_settings()
    assert database_unreachable(TimeoutError(), settings) == (
        "no answer within 10 s (KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS sets how long to wait)"
    )


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("KIOKU_CONTEXT__VISION", "maybe", "context.vision"),
        ("KIOKU_CONTEXT__IMAGE_TRANSPORT", "ftp", "context.image_transport"),
        ("KIOKU_CONTEXT__IMAGE_MAX_MB", "0", "context.image_max_mb"),
        ("KIOKU_CONTEXT__REPLY_CHAIN_DEPTH", "11", "context.reply_chain_depth"),
    ],
)
def test_bad_context_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "\n" not in message and expected in message
