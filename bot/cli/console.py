"""``kioku console``: the terminal chat, on a database migrated as ``kioku run`` does."""

from __future__ import annotations

from bot.cli.database import migrated
from bot.config import Settings
from bot.console import LOG_FILE, console, logs_to_file
from bot.db import Database


async def run_console(settings: Settings) -> int:
    # Logs go to a file for the whole session: a warning printed mid-conversation reads
    # as part of it.
    with logs_to_file(settings.data_dir / LOG_FILE) as log_file:
        database = Database(settings)
        try:
            await migrated(database)
        except BaseException:
            await database.close()
            raise
        return await console(settings, database=database, log_file=log_file)
