"""``kioku console``: the terminal chat, on a database migrated as ``kioku run`` does."""

from __future__ import annotations

from bot.cli.database import migrated
from bot.config import Settings
from bot.console import console
from bot.db.engine import Database


async def run_console(settings: Settings) -> int:
    database = Database(settings)
    try:
        await migrated(database)
    except BaseException:
        await database.close()
        raise
    return await console(settings, database=database)  # which closes the database
