"""The database harness, the schema contract and the migrations."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import func, select, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine

from bot.config import load_settings
from bot.db import driver
from bot.db.driver import DriverStatement
from bot.db.engine import Database
from bot.db.migrate import alembic_config, current_revision, head_revision, upgrade
from bot.db.models import Base, GuildSettings, StmEvent
from tests.helpers.database import count_statements, make_test_settings, scratch_database

# The database contract of ARCHITECTURE.md: every table and column it names.
CONTRACT: dict[str, set[str]] = {
    "guild_settings": {
        "guild_id",
        "short_term_memory_enabled",
        "refresh_cadence",
        "render_mode",
        "crude_message_count",
        "tool_description_override",
        "nudge_override",
        "updated_at",
    },
    "stm_categories": {"id", "guild_id", "position", "slug", "label", "description"},
    "short_term_memories": {
        "id",
        "scope_kind",
        "guild_id",
        "user_id",
        "channel_id",
        "parent_channel_id",
        "summary",
        "categories",
        "turns_since_refresh",
        "last_refreshed_turn",
        "covered_through_message_id",
        "covered_through_hash",
        "contributor_ids",
        "origin",
        "origin_detail",
        "actor_user_id",
        "source_message_id",
        "version",
        "created_at",
        "updated_at",
    },
    "stm_events": {
        "id",
        "event",
        "scope_kind",
        "guild_id",
        "user_id",
        "channel_id",
        "origin",
        "actor_user_id",
        "message_id",
        "chars_before",
        "chars_after",
        "created_at",
    },
    "long_term_memories": {
        "id",
        "user_id",
        "guild_id",
        "content",
        "origin",
        "origin_detail",
        "source_message_id",
        "created_at",
        "updated_at",
    },
    "user_settings": {"user_id", "cross_context_memory"},
}


async def test_information_schema_has_every_contract_table_and_column(db: Database) -> None:
    async with db.engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = current_schema()"
            )
        )
        found: dict[str, dict[str, str]] = {}
        for table, column, data_type in rows:
            found.setdefault(table, {})[column] = data_type
    for table, columns in CONTRACT.items():
        assert table in found, f"missing table {table}"
        missing = columns - set(found[table])
        assert not missing, f"{table} lacks {sorted(missing)}"
    # Discord ids are bigint, timestamps timestamptz.
    assert found["short_term_memories"]["channel_id"] == "bigint"
    assert found["short_term_memories"]["contributor_ids"] == "ARRAY"
    assert found["short_term_memories"]["categories"] == "jsonb"
    assert found["stm_events"]["created_at"] == "timestamp with time zone"
    assert "summary" not in found["stm_events"] and "content" not in found["stm_events"]


async def test_stm_scope_key_is_unique_even_with_null_guild(db: Database) -> None:
    insert = text(
        "INSERT INTO short_term_memories (scope_kind, guild_id, user_id, channel_id, origin) "
        "VALUES ('user', NULL, 7, 9, 'model_tool')"
    )
    async with db.engine.begin() as connection:
        await connection.execute(insert)
    with pytest.raises(Exception, match="uq_short_term_memories_scope_key"):
        async with db.engine.begin() as connection:
            await connection.execute(insert)


async def test_models_and_migrations_do_not_drift(db: Database) -> None:
    async with db.engine.connect() as connection:
        diff = await connection.run_sync(
            lambda sync: compare_metadata(
                MigrationContext.configure(sync, opts={"compare_type": True}), Base.metadata
            )
        )
    assert diff == []


async def test_upgrade_is_idempotent(db: Database) -> None:
    head = head_revision()
    assert head is not None
    assert await current_revision(db.engine) == head
    assert await upgrade(db.engine) == (head, head)


async def test_migration_0005_goes_down_and_up_again_with_facts_stored(
    db: Database, pg_url: URL
) -> None:
    # In a database of its own: the shared one stays at head for the other tests.
    url = await scratch_database(pg_url, "kioku_migration_0005")
    engine = create_async_engine(url)
    try:
        await upgrade(engine)
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO long_term_memories (user_id, guild_id, channel_id,"
                    " parent_channel_id, private_thread, readable_by_everyone, content, origin)"
                    " VALUES (1, 2, 3, 4, true, true, 'fact one', 'import'),"
                    " (1, NULL, 5, NULL, false, false, 'dm fact', 'import')"
                )
            )
        async with engine.begin() as connection:
            await connection.run_sync(lambda sync: command.downgrade(alembic_config(sync), "0004"))
            columns = await connection.scalars(
                text(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_name = 'long_term_memories'"
                )
            )
            assert {"parent_channel_id", "private_thread", "readable_by_everyone"}.isdisjoint(
                columns.all()
            )
        await upgrade(engine)
        async with engine.begin() as connection:
            rows = await connection.execute(
                text(
                    "SELECT content, channel_id, parent_channel_id, private_thread,"
                    " readable_by_everyone FROM long_term_memories ORDER BY id"
                )
            )
            # The facts survive; what they knew of their place is back to the
            # conservative default (never judged by a parent nor readable by everyone).
            assert rows.all() == [
                ("fact one", 3, None, False, False),
                ("dm fact", 5, None, False, False),
            ]
        assert await current_revision(engine) == head_revision()
    finally:
        await engine.dispose()
        async with db.engine.connect() as connection:
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            await connection.execute(text(f"DROP DATABASE IF EXISTS {url.database}"))


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
