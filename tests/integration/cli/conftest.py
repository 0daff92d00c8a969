"""The command-line tests' fixture: ``kioku run`` through main() in this process."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from tests.helpers.kioku_cli import RunHere, run_without_discord


@pytest.fixture
def run_here(
    pg_url: URL,
    migrated_database: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> RunHere:
    """``kioku run`` in this process on the migrated test database, Discord accepting the
    token: its exit code and what it wrote to stderr."""

    def run(*, no_key: bool = False, **env: str) -> tuple[int, str]:
        code = run_without_discord(monkeypatch, pg_url, tmp_path, no_key=no_key, **env)
        return code, capsys.readouterr().err

    return run
