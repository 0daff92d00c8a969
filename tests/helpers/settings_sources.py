"""Where the settings tests put a configuration: a clean environment, a TOML file, a .env
file, and the one line ``load_settings`` refuses it with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.config import SettingsError, load_settings

# Read without the KIOKU_ prefix, so a developer's shell may hold them.
WELL_KNOWN_VARIABLES = {"DISCORD_TOKEN", "DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"}


def clear_settings_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Remove every variable the settings read, and point KIOKU_ENV_FILE at no file."""
    for name in list(os.environ):
        if name.startswith("KIOKU_") or name in WELL_KNOWN_VARIABLES:
            monkeypatch.delenv(name)
    monkeypatch.setenv("KIOKU_ENV_FILE", str(tmp_path / "absent.env"))


def write_toml(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kioku.toml"
    path.write_text(body)
    monkeypatch.setenv("KIOKU_CONFIG", str(path))


def write_dotenv(
    tmp_path: Path, text: str | bytes, monkeypatch: pytest.MonkeyPatch, name: str = "kioku.env"
) -> Path:
    """Write ``text`` as the .env file KIOKU_ENV_FILE names; returns its path."""
    env_file = tmp_path / name
    if isinstance(text, bytes):
        env_file.write_bytes(text)
    else:
        env_file.write_text(text)
    monkeypatch.setenv("KIOKU_ENV_FILE", str(env_file))
    return env_file


def refusal() -> str:
    """The message of the :class:`SettingsError` that ``load_settings()`` must raise."""
    with pytest.raises(SettingsError) as caught:
        load_settings()
    return str(caught.value)
