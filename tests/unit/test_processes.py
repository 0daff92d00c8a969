"""The subprocess environment helper (tests/helpers/processes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.processes import ROOT, kioku_env


def test_kioku_env_drops_the_shells_settings_and_points_at_the_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIOKU_MODEL", "from-the-shell")
    monkeypatch.setenv("DATABASE_URL", "postgresql://shell@elsewhere/db")
    monkeypatch.setenv("HOME_LIKE_VARIABLE", "kept")
    env = kioku_env(tmp_path, DISCORD_TOKEN="given")
    assert "KIOKU_MODEL" not in env and "DATABASE_URL" not in env
    assert env["HOME_LIKE_VARIABLE"] == "kept"
    assert env["KIOKU_DATA_DIR"] == str(tmp_path)
    assert not Path(env["KIOKU_ENV_FILE"]).exists()  # no .env read from the checkout
    assert env["PYTHONPATH"] == str(ROOT) and env["DISCORD_TOKEN"] == "given"


def test_kioku_env_lets_a_test_name_its_own_env_file(tmp_path: Path) -> None:
    assert kioku_env(tmp_path, KIOKU_ENV_FILE="x.env")["KIOKU_ENV_FILE"] == "x.env"
