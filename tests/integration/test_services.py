"""The one builder of the services: a start that fails halfway closes what it started."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.services import StartupFailed, start_services
from tests.helpers.database import make_test_settings

BACKGROUND = {"janitor", "turn-count-saver", "spool-replayer", "cache-listener"}


def running_background() -> set[str]:
    return {task.get_name() for task in asyncio.all_tasks()} & BACKGROUND


async def test_a_start_that_fails_halfway_closes_what_it_started(
    migrated_database: Database, pg_url: URL, tmp_path: Path
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:  # the last step fails
        port = taken.getsockname()[1]
        settings = make_test_settings(pg_url, tmp_path, metrics={"port": port})
        database = Database(settings)
        with pytest.raises(StartupFailed, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            await start_services(settings, database, owns_database=True)
    assert running_background() == set()
    with pytest.raises(RuntimeError, match="has not run"):
        database.engine  # noqa: B018 - closed, as it was the builder's to close
    DurableSpool(spool_path(tmp_path)).close()  # its lock was let go


async def test_services_close_what_they_own_and_leave_a_database_handed_in(
    migrated_database: Database, pg_url: URL, tmp_path: Path
) -> None:
    settings = make_test_settings(pg_url, tmp_path)
    services = await start_services(settings, migrated_database, owns_database=False)
    assert running_background() == BACKGROUND
    await services.close()
    await services.close()  # a second close (the bot's, then discord.py's) finds nothing left
    assert running_background() == set()
    DurableSpool(spool_path(tmp_path)).close()
    async with migrated_database.sessions() as session:  # still open: the caller's
        await session.connection()
