"""The migrations: the models and migrations do not drift, an upgrade is idempotent, a migration
goes down and up again with data stored."""

from __future__ import annotations

from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import DefaultClause, MetaData, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine

from bot.db.engine import Database
from bot.db.migrate import alembic_config, current_revision, head_revision, upgrade
from bot.db.models import OPTIONAL_TABLES, Base
from tests.helpers.database import scratch_database


# Types and server defaults too. PostgreSQL renders a default its own way ('{}'::jsonb
# may come back as another spelling), but Alembic's PostgreSQL comparison does not
# compare the text: when the two spellings differ it asks the server whether they
# evaluate equal, so there are no spurious differences to filter out.
def _declared(name: str | None, type_: str, parent: object) -> bool:
    return not (type_ == "table" and name in OPTIONAL_TABLES)


DRIFT_OPTIONS = {"compare_type": True, "compare_server_default": True, "include_name": _declared}


async def drift(db: Database, metadata: MetaData) -> list[Any]:
    async with db.engine.connect() as connection:
        return await connection.run_sync(
            lambda sync: compare_metadata(
                MigrationContext.configure(sync, opts=DRIFT_OPTIONS), metadata
            )
        )


async def test_models_and_migrations_do_not_drift(db: Database) -> None:
    assert await drift(db, Base.metadata) == []


async def test_drift_check_sees_a_server_default_the_migrations_do_not_have(db: Database) -> None:
    # The check above can fail on a default: models whose refresh_cadence defaults to 7
    # are reported against the migrated schema, where it is 5.
    models = MetaData(naming_convention=Base.metadata.naming_convention)
    for table in Base.metadata.sorted_tables:
        table.to_metadata(models)
    models.tables["guild_settings"].c.refresh_cadence.server_default = DefaultClause(text("7"))
    changes = [op for item in await drift(db, models) for op in item]
    assert [(op[0], op[2], op[3]) for op in changes] == [
        ("modify_default", "guild_settings", "refresh_cadence")
    ]


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
