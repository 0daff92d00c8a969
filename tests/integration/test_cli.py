"""The ``kioku`` command line, driven as a real subprocess (as an operator would)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

from bot.db.engine import Database

ROOT = Path(__file__).resolve().parents[2]
OWN_VARIABLES = {"DISCORD_TOKEN", "DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"}


def kioku(*args: str, data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith("KIOKU_") and k not in OWN_VARIABLES
    }
    clean.update({"KIOKU_DATA_DIR": str(data_dir), **env})
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_run_without_token_exits_2_with_one_line(tmp_path: Path) -> None:
    result = kioku("run", data_dir=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("kioku: DISCORD_TOKEN is not set")
    assert not (tmp_path / "postgres").exists(), "nothing should start without a token"


def test_run_with_dummy_token_migrates_then_fails_cleanly_at_login(tmp_path: Path) -> None:
    result = kioku("run", data_dir=tmp_path, DISCORD_TOKEN="dummy-token")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("kioku: ") and "Discord" in last
    # The embedded database was created and migrated before the login attempt.
    again = kioku("migrate", data_dir=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "already at revision" in again.stdout


def test_migrate_twice_on_embedded_is_a_noop_the_second_time(tmp_path: Path) -> None:
    first = kioku("migrate", data_dir=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "migrated from empty to" in first.stdout
    second = kioku("migrate", data_dir=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "already at revision" in second.stdout


async def test_migrate_twice_on_external_postgres(
    pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # A separate database on the session's server stands in for an operator's PostgreSQL.
    async with migrated_database.engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await connection.execute(text("DROP DATABASE IF EXISTS kioku_cli"))
        await connection.execute(text("CREATE DATABASE kioku_cli"))
    url = pg_url.set(database="kioku_cli").render_as_string(hide_password=False)
    first = kioku("migrate", data_dir=tmp_path, DATABASE_URL=url)
    assert first.returncode == 0, first.stderr
    assert "migrated from empty to" in first.stdout
    second = kioku("migrate", data_dir=tmp_path, DATABASE_URL=url)
    assert "already at revision" in second.stdout
    assert not (tmp_path / "postgres").exists(), "an external URL must not start the embedded one"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KIOKU_STM__REFRESH_CADENCE", "abc"),
        ("KIOKU_STM__RENDER_MODE", "fancy"),
        ("DATABASE_URL", "postgresql//missing-colon"),
    ],
)
def test_bad_setting_stops_start_up_with_one_line(
    tmp_path: Path, variable: str, value: str
) -> None:
    result = kioku("migrate", data_dir=tmp_path, **{variable: value})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kioku: invalid setting") and variable in lines[0]


def test_doctor_reports_an_unreachable_llm(tmp_path: Path) -> None:
    from tests.helpers.fake_llm import refused_base_url

    result = kioku("doctor", data_dir=tmp_path, OPENAI_BASE_URL=refused_base_url())
    assert result.returncode == 1
    table = result.stdout
    assert "database" in table and "migrations" in table
    rows = {line.split()[0]: line for line in table.splitlines()[2:]}
    assert " ok " in rows["database"]
    assert "FAIL" in rows["llm"]
