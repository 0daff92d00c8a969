"""The Discord application: :func:`build_bot` returns a bot that has not connected yet.

``setup_hook`` wires what the bot owns (database, caches, services, cogs); ``close``
unloads cogs first, then releases what the bot owns, in reverse order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

import discord
from discord.ext import commands

from bot.config import Settings
from bot.db.engine import Database
from bot.db.migrate import upgrade

log = logging.getLogger(__name__)

EXTENSIONS: tuple[str, ...] = ()


class KiokuBot(commands.Bot):
    """The bot. Services hang off it so cogs reach them through ``self.bot``."""

    def __init__(self, settings: Settings, *, database: Database | None = None) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(
            command_prefix=commands.when_mentioned,
            intents=intents,
            help_command=None,
            allowed_mentions=discord.AllowedMentions.none(),
            owner_ids=set(settings.owner_ids) or None,
        )
        self.settings = settings
        self.database = database or Database(settings)
        self._background: set[asyncio.Task[Any]] = set()

    async def setup_hook(self) -> None:
        await self.database.start()
        for extension in EXTENSIONS:
            await self.load_extension(extension)

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        """Run ``coro`` in the background, keep a reference, and log its failure."""
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    async def close(self) -> None:
        for extension in list(self.extensions):
            await self.unload_extension(extension)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        try:
            await super().close()
        finally:
            await self.database.close()


def build_bot(settings: Settings, *, database: Database | None = None) -> KiokuBot:
    """The bot, wired but not connected (tests attach it to dpytest instead)."""
    return KiokuBot(settings, database=database)


async def migrate_database(database: Database) -> tuple[str | None, str | None]:
    """Start the database if needed and upgrade it to head."""
    await database.start()
    return await upgrade(database.engine)
