"""Every settings test starts from an environment without the bot's variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.settings_sources import clear_settings_environment


@pytest.fixture(autouse=True)
def _no_kioku_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clear_settings_environment(monkeypatch, tmp_path)
