"""``bot.ops.backup`` without a database: backup names, which client tools fit a server,
and how a database URL reaches them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from bot.config import Settings, load_settings
from bot.config.urls import async_database_url
from bot.ops.backup import (
    default_backup_path,
    latest_backup,
    libpq_environment,
    newest_tools,
    tools_for_server,
)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(data_dir=tmp_path)


def test_a_backup_is_named_for_when_it_was_made(settings: Settings) -> None:
    made = datetime(2026, 12, 2, 13, 5, 9, tzinfo=UTC)
    assert default_backup_path(settings, made) == (
        settings.data_dir / "backups" / "kioku-20261202-130509.dump"
    )


def test_the_latest_backup_is_found_by_its_name_and_hand_named_files_are_left_out(
    settings: Settings,
) -> None:
    assert latest_backup(settings) is None
    folder = settings.data_dir / "backups"
    folder.mkdir()
    for name in ("kioku-20261201-090000.dump", "kioku-20261130-235959.dump", "kioku-old.dump"):
        (folder / name).write_bytes(b"")
    (folder / "kioku-20991231-000000.txt").write_bytes(b"")  # not a backup's suffix

    assert latest_backup(settings) == (
        folder / "kioku-20261201-090000.dump",
        datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
    )


@pytest.mark.parametrize(
    ("server", "tools"),
    [(13, 16), (15, 16), (16, 16), (17, 18), (18, 18), (19, 18)],
)
def test_the_client_tools_fit_the_servers_version(server: int, tools: int) -> None:
    # pg_dump refuses a newer server; pg_restore 17+ sets transaction_timeout, which a
    # server before 17 rejects.
    folder = tools_for_server(server)
    assert (folder / "pg_dump").exists() and (folder / "pg_restore").exists()
    assert folder.parent.name == ("pginstall" if tools == 16 else f"pginstall{tools}")
    assert newest_tools() == tools_for_server(99)


def test_a_url_reaches_the_tools_as_libpq_variables_without_the_password_on_a_command_line() -> (
    None
):
    url = async_database_url("postgresql://kioku:s3cret@db.example:6543/memories?sslmode=require")
    assert libpq_environment(url) == {
        "PGDATABASE": "memories",
        "PGHOST": "db.example",
        "PGPORT": "6543",
        "PGUSER": "kioku",
        "PGPASSWORD": "s3cret",
        "PGSSLMODE": "require",
    }
    socket = make_url("postgresql+asyncpg://postgres:@/postgres?host=/data/postgres")
    assert libpq_environment(socket) == {
        "PGDATABASE": "postgres",
        "PGHOST": "/data/postgres",
        "PGUSER": "postgres",
    }
