"""A refusal names where the value came from: the TOML file, the .env file or the
environment; and files that cannot be read are refused in one line naming them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Settings, SettingsError
from tests.helpers.settings_sources import refusal, write_dotenv, write_toml


def test_malformed_toml_is_reported_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(tmp_path, "[stm\n", monkeypatch)
    message = refusal()
    assert message.startswith(f"cannot read the configuration file {tmp_path / 'kioku.toml'}: ")
    assert "line 1" in message and "\n" not in message


@pytest.mark.parametrize(
    ("variable", "inside", "expected"),
    [
        pytest.param(
            "KIOKU_CONFIG",
            "nonexistent/kioku.toml",
            "cannot read the configuration file {path} (KIOKU_CONFIG): no such file",
            id="missing-config-file",
        ),
        # TOML's source skips what is not a file, as it skips an absent default file.
        pytest.param(
            "KIOKU_CONFIG",
            "",
            "cannot read the configuration file {path} (KIOKU_CONFIG): is not a file",
            id="config-names-a-folder",
        ),
        # Was skipped in silence like an absent file: the operator's DISCORD_TOKEN in
        # <folder>/.env was then "not set".
        pytest.param(
            "KIOKU_ENV_FILE",
            "",
            "cannot read the .env file {path} (KIOKU_ENV_FILE): it is a folder, not a file",
            id="env-file-names-a-folder",
        ),
    ],
)
def test_a_file_named_by_a_variable_that_is_no_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, inside: str, expected: str
) -> None:
    (tmp_path / "kioku.toml").write_text("[stm]\nrefresh_cadence = 9\n")
    path = tmp_path / inside
    monkeypatch.setenv(variable, str(path))
    assert refusal() == expected.format(path=path)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # Was "(KIOKU_STM__REFRESH_CADENCE)": a variable the operator never set, and looked for.
        pytest.param(
            "[stm]\nrefresh_cadence = 0\n",
            "invalid setting stm.refresh_cadence = 0 (in {toml}): "
            "Input should be greater than or equal to 1 (allowed: integer 1–100)",
            id="out-of-range",
        ),
        pytest.param(
            'data_dir = ""\n',
            "invalid setting data_dir = '' (in {toml}): "
            "must not be empty (remove the line for the default)",
            id="blank-data-dir",
        ),
        pytest.param(
            'persona_file = ""\n',
            "invalid setting persona_file = '' (in {toml}): "
            "must not be empty (remove the line for the default)",
            id="blank-persona-file",
        ),
        pytest.param(
            "[llm]\ntemperature = nan\n",  # TOML has nan
            "invalid setting llm.temperature = nan (in {toml}): "
            "must be a finite number (allowed: number 0–2)",
            id="nan",
        ),
        pytest.param(
            "[stm]\nrefresh_cadance = 3\n",
            "unknown key stm.refresh_cadance in {toml}: did you mean stm.refresh_cadence?",
            id="unknown-key",
        ),
        # Only keys were suggested, so "[databse]" (a whole section ignored) got no hint.
        pytest.param(
            "[databse]\npool_size = 2\n",
            "unknown key databse in {toml}: did you mean database?",
            id="misspelt-section",
        ),
        # Was "Input should be a valid dictionary or instance of StmSettings": a class name.
        pytest.param(
            "stm = 5\n",
            "invalid setting stm = 5 (in {toml}): must be a section: [stm] in the TOML file, "
            "or a JSON object in KIOKU_STM (or single keys as KIOKU_STM__<NAME>)",
            id="section-given-a-plain-value",
        ),
    ],
)
def test_a_toml_file_refused_is_named_in_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, expected: str
) -> None:
    write_toml(tmp_path, body, monkeypatch)
    assert refusal() == expected.format(toml=tmp_path / "kioku.toml")


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
    env_file = write_dotenv(tmp_path, line + "\n", monkeypatch)
    assert refusal() == expected.format(env=env_file)


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
    env_file = write_dotenv(
        tmp_path, "KIOKU_STM__REFRESH_CADENCE=200\n" if in_dotenv else "", monkeypatch
    )
    if in_environment:
        monkeypatch.setenv("KIOKU_STM__REFRESH_CADENCE", "101")
    message = refusal()
    expected = where.format(toml=tmp_path / "kioku.toml", env=env_file)
    assert message.startswith(f"invalid setting {expected}: "), message


def test_a_bad_list_item_in_the_toml_file_is_named_by_its_position_and_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(tmp_path, 'owner_ids = [123, "x"]\n', monkeypatch)
    message = refusal()
    assert message.startswith(
        f"invalid setting owner_ids = 'x' (item 2, in {tmp_path / 'kioku.toml'}): "
    ), message


def test_contradictory_settings_from_two_sources_name_each_ones_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(tmp_path, "[stm]\nmin_raw_tail = 20\n", monkeypatch)
    monkeypatch.setenv("KIOKU_STM__RAW_WINDOW", "10")
    assert refusal() == (
        f"invalid setting stm.min_raw_tail = 20 (in {tmp_path / 'kioku.toml'}): "
        "must not exceed stm.raw_window (KIOKU_STM__RAW_WINDOW) = 10"
    )


def test_a_dotenv_file_that_is_not_utf8_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = write_dotenv(tmp_path, "KIOKU_MODEL=café\n".encode("latin-1"), monkeypatch)
    assert refusal() == (
        f"cannot read the .env file {env_file} (KIOKU_ENV_FILE): "
        "it is not UTF-8 text (byte 15): save it as UTF-8"
    )


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
    env_file = write_dotenv(tmp_path, text, monkeypatch)
    assert refusal() == (
        f"cannot parse line {line} of {env_file} (KIOKU_ENV_FILE): "
        "expected NAME=value, a # comment or a blank line"
    )
    assert capfd.readouterr().err == "", "nothing but the one line"


@pytest.mark.parametrize(
    ("content", "match"),
    [
        # Not blamed on the TOML file (the decoding error is a ValueError, like a TOML one).
        pytest.param(
            b"KIOKU_MODEL=\xff\n", r"\.env file .*kioku\.env .*save it as UTF-8", id="not-utf8"
        ),
        pytest.param(
            "KIOKU_MODEL=x\nDISCORD_TOKEN abc\n",
            r"^cannot parse line 2 of .*kioku\.env ",
            id="line-that-cannot-be-parsed",
        ),
    ],
)
def test_settings_built_directly_refuse_a_dotenv_file_they_cannot_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | bytes, match: str
) -> None:
    write_dotenv(tmp_path, content, monkeypatch)
    with pytest.raises(SettingsError, match=match):
        Settings()
