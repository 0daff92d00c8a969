"""Unknown and misspelt variables, and keys of JSON sections, are named with the likely one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.config import SettingsError, load_settings, unknown_variables
from tests.helpers.settings_sources import refusal, write_dotenv, write_toml

ROOT = Path(__file__).resolve().parents[3]


def test_a_section_key_at_the_top_of_the_toml_file_is_pointed_to_its_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(tmp_path, "refresh_cadence = 3\n", monkeypatch)
    with pytest.raises(SettingsError, match=r"unknown key refresh_cadence .*stm\.refresh_cadence"):
        load_settings()


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
    assert refusal() == f"unknown setting {name.upper()} in the environment{suggestion}"


def test_a_misspelt_variable_in_dotenv_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dotenv(
        tmp_path, "POSTGRES_USER=kioku\nKIOKU_STM__RENDERMODE=supersede\n", monkeypatch, name=".env"
    )
    with pytest.raises(SettingsError, match=r"KIOKU_STM__RENDERMODE in .*\.env: did you mean "):
        load_settings()


def test_every_documented_variable_is_known() -> None:
    documented = set(
        re.findall(r"\bKIOKU_[A-Z_]+[A-Z]", (ROOT / "config" / "example.env").read_text())
    )
    assert documented, "config/example.env documents the variables"
    assert unknown_variables(documented, "config/example.env") == []


def test_an_unknown_key_of_a_json_section_variable_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KIOKU_STM", '{"refresh_cadenc": 3}')
    assert refusal() == (
        "unknown key stm.refresh_cadenc in KIOKU_STM (the environment): "
        "did you mean stm.refresh_cadence?"
    )


def test_an_unknown_key_of_a_json_section_in_dotenv_names_the_variable_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = write_dotenv(tmp_path, 'KIOKU_LLM={"timeout": 5}\n', monkeypatch)
    assert refusal().startswith(f"unknown key llm.timeout in KIOKU_LLM ({env_file}): ")


def test_an_unknown_toml_key_is_blamed_on_the_file_while_a_json_section_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sections from the file and a variable are merged: the key says where it came from.
    write_toml(tmp_path, "[stm]\nrefresh_cadance = 3\n", monkeypatch)
    monkeypatch.setenv("KIOKU_STM", '{"raw_window": 40}')
    assert refusal().startswith(f"unknown key stm.refresh_cadance in {tmp_path / 'kioku.toml'}: ")
