"""Alembic environment (async). The bot passes its own connection; `alembic` by hand
builds one from the settings (starting the embedded PostgreSQL if DATABASE_URL is unset)."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from bot.db.models import Base

target_metadata = Base.metadata


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        compare_server_default=False,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_own_database() -> None:
    from bot.config import load_settings
    from bot.db.engine import Database

    database = Database(load_settings())
    await database.start()
    try:
        async with database.engine.connect() as connection:
            await connection.run_sync(_configure_and_run)
            await connection.commit()
    finally:
        await database.close()


def run_migrations_offline() -> None:
    context.configure(url="postgresql://", target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _configure_and_run(connection)
    else:
        asyncio.run(_run_with_own_database())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
