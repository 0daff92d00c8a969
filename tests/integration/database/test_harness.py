"""The database harness and engine: empty tables for each test, the statement counter, the ready
log line, no parameters shown, no broken connection left, the embedded server's settings,
TEST_DATABASE_URL."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from bot.config import load_settings
from bot.db import driver
from bot.db.driver import DriverStatement
from bot.db.engine import Database
from bot.db.models import Base, GuildSettings, StmEvent
from tests.helpers.database import count_statements, make_test_settings
from tests.helpers.processes import ROOT


@pytest.mark.parametrize("attempt", [1, 2])
async def test_each_test_starts_with_empty_tables(db: Database, attempt: int) -> None:
    # Run twice: if the harness did not clean between tests, the second run sees rows
    # the first one left, and ids that go on counting.
    async with db.sessions() as session:
        for table in Base.metadata.sorted_tables:
            assert await session.scalar(select(func.count()).select_from(table)) == 0, table
        session.add(GuildSettings(guild_id=1))
        event = StmEvent(event="update")
        session.add(event)
        await session.commit()
        assert await session.scalar(select(func.count()).select_from(GuildSettings)) == 1
        assert event.id == 1


async def test_statement_counter_counts_what_the_engine_sends(db: Database) -> None:
    with count_statements(db.engine) as counter:
        async with db.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
            await connection.execute(text("SELECT 2"))
    assert [s.strip() for s in counter.statements if s.startswith("SELECT")][-2:] == [
        "SELECT 1",
        "SELECT 2",
    ]
    with count_statements(db.engine) as idle:
        pass
    assert idle.count == 0


async def test_statement_counter_also_counts_what_goes_to_asyncpg_directly(db: Database) -> None:
    # The STM write path sends its statements through asyncpg itself (bot.db.driver).
    with count_statements(db.engine) as counter:
        async with db.sessions() as session, session.begin():
            await driver.fetch(session, DriverStatement.compile(text("SELECT 41 + :n")), {"n": 1})
    assert any(s.startswith("SELECT 41 + $1") for s in counter.statements), counter.statements


def refused_database_url() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://kioku:pw@127.0.0.1:{port}/kioku"


async def test_ready_is_not_logged_for_a_database_that_cannot_be_reached(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings(database_url=refused_database_url(), data_dir=tmp_path)
    database = Database(settings)
    try:
        with caplog.at_level(logging.INFO, logger="bot.db.engine"):
            with pytest.raises(OSError):
                await database.start()
            # A failed start leaves nothing half-started behind: trying again tries again.
            with pytest.raises(OSError):
                await database.start()
        assert "database ready" not in caplog.text
    finally:
        await database.close()


async def test_ready_is_logged_once_the_database_answers(
    pg_url: URL, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    database = Database(make_test_settings(pg_url, tmp_path))
    try:
        with caplog.at_level(logging.INFO, logger="bot.db.engine"):
            await database.start()
        (record,) = [r for r in caplog.records if "database ready" in r.getMessage()]
        assert record.getMessage().startswith("database ready (postgresql at ")
    finally:
        await database.close()


async def test_a_failed_statement_never_shows_its_parameters(db: Database) -> None:
    # Error messages end up in logs; the values bound to a write are memory text.
    secret = "the memory text that must not reach a log"
    with pytest.raises(DBAPIError) as failure:
        async with db.sessions() as session:
            await session.execute(text("SELECT CAST(:value AS integer)"), {"value": secret})
    assert secret not in str(failure.value)


async def test_a_statement_sent_to_asyncpg_and_cancelled_leaves_no_broken_connection(
    db: Database,
) -> None:
    # A write's timeout cancels its statement mid-flight: the connection may still be
    # busy with it, and must not serve the next session from the pool.
    sleep = DriverStatement.compile(text("SELECT pg_sleep(:s)"))
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            async with db.sessions() as session, session.begin():
                await driver.fetch(session, sleep, {"s": 5})
    for n in range(db.settings.database.pool_size + 1):
        async with db.sessions() as session, session.begin():
            assert await session.scalar(text(f"SELECT {n}")) == n
            assert [tuple(r) for r in await driver.fetch(session, sleep, {"s": 0})] == [(None,)]


async def test_the_embedded_test_server_runs_without_fsync(db: Database) -> None:
    # The harness turns it off (tests/helpers/database.py); an external server is left
    # as its operator configured it.
    if os.environ.get("TEST_DATABASE_URL"):
        pytest.skip("an external server keeps its own configuration")
    async with db.engine.connect() as connection:
        configured = (
            await connection.execute(
                text("SELECT setting, applied FROM pg_file_settings WHERE name = 'fsync'")
            )
        ).all()
    assert configured and tuple(configured[-1]) == ("off", True)


# Run by a pytest of its own: what the harness's pg_url is, and what that database holds.
REPORTING_TEST = """
import asyncio, json, os
import asyncpg

def test_reports_the_database_it_was_given(pg_url):
    async def ask():
        dsn = pg_url.set(drivername="postgresql").render_as_string(hide_password=False)
        connection = await asyncpg.connect(dsn)
        try:
            return await connection.fetchval("SELECT array_agg(guild_id) FROM guild_settings")
        finally:
            await connection.close()
    report = {"url": pg_url.render_as_string(hide_password=False), "guilds": asyncio.run(ask())}
    with open(os.environ["KIOKU_HARNESS_REPORT"], "w") as out:
        json.dump(report, out)
"""


async def test_test_database_url_makes_the_harness_use_that_server_not_an_embedded_one(
    db: Database, pg_url: URL, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A row only this session's database holds: a pytest pointed at it with
    # TEST_DATABASE_URL sees it; one that started an embedded server would find no
    # guild_settings table at all (nothing migrated it), and leave its data folder.
    token = secrets.randbelow(2**62) + 1
    async with db.sessions() as session:
        session.add(GuildSettings(guild_id=token))
        await session.commit()
    report = pytester.path / "report.json"
    given = pg_url.render_as_string(hide_password=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("TEST_DATABASE_URL", given)
    monkeypatch.setenv("KIOKU_HARNESS_REPORT", str(report))
    # One process, as outside xdist (under xdist this session is a worker itself, and
    # the run would otherwise look for a database of a worker of its own).
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makeconftest('pytest_plugins = ["tests.helpers.fake_llm", "tests.helpers.database"]')
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = session\n")
    pytester.makepyfile(test_reporting=REPORTING_TEST)
    result = await asyncio.to_thread(
        pytester.runpytest_subprocess, "-q", "-p", "no:cacheprovider", "-p", "no:xdist"
    )
    result.assert_outcomes(passed=1)
    assert json.loads(report.read_text()) == {"url": given, "guilds": [token]}
    # pytester gave the run its own --basetemp; the embedded server's data folder would
    # be made in it (tmp_path_factory.mktemp("pg") -> pg0).
    (basetemp,) = [d for d in pytester.path.glob("runpytest-*") if not d.is_symlink()]
    assert basetemp.is_dir()
    assert list(basetemp.rglob("pg*")) == []
