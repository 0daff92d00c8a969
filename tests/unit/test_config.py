"""Settings: defaults, precedence (environment over the TOML file), one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Settings, SettingsError, load_settings


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


def test_database_password_is_not_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://user:hunter2@host/db")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "hunter2" not in str(caught.value)


def test_unknown_key_in_toml_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(tmp_path, "[stm]\nrefresh_cadance = 3\n", monkeypatch)
    with pytest.raises(SettingsError, match=r"stm\.refresh_cadance .*unknown setting"):
        load_settings()


def test_malformed_toml_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(tmp_path, "[stm\n", monkeypatch)
    with pytest.raises(SettingsError, match="configuration file"):
        load_settings()


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
