"""The Discord application: :func:`build_bot` returns a bot that has not connected yet."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Generic, TypeVar, cast

import discord
import openai
from discord.ext import commands

from bot.config import Settings
from bot.conversation import Summarizer, TurnRunner
from bot.db import Database
from bot.fetch import Fetcher
from bot.memory import DurableSpool, LongTermService, MemoryService
from bot.runtime import NOT_CONNECTED_YET, Metrics, TaskRegistry
from bot.services import Services, StartupFailed, describe_local_failure, start_services
from bot.vocabulary import Clock, SystemClock

log = logging.getLogger(__name__)
T = TypeVar("T")

# At shutdown, after the answers in flight (see bot.cogs.chat.SHUTDOWN_GRACE_SECONDS),
# background summaries get this long before they are cancelled.
SUMMARY_SHUTDOWN_GRACE_SECONDS = 1.0

# The error handler first, so every command's failures go through it.
EXTENSIONS: tuple[str, ...] = (
    "bot.cogs.errors",
    "bot.cogs.needs",
    "bot.cogs.chat",
    "bot.cogs.refresh",
    "bot.cogs.stm",
    "bot.cogs.privacy",
    "bot.cogs.kioku",
)


class _Started(Generic[T]):
    """The bot's started service of the same name: an error before ``setup_hook`` ran."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, bot: KiokuBot, owner: type | None = None) -> T:
        return cast(T, getattr(bot._started(), self._name))


class KiokuBot(commands.Bot):
    """The bot; cogs reach the services through ``self.bot``."""

    def __init__(
        self,
        settings: Settings,
        *,
        database: Database | None = None,
        clock: Clock | None = None,
        janitor: bool = True,
        spool: bool = True,
        serve_metrics: bool = True,
        image_fetcher: Fetcher | None = None,
        **options: Any,
    ) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(
            command_prefix=commands.when_mentioned,
            intents=intents,
            help_command=None,
            allowed_mentions=discord.AllowedMentions.none(),
            owner_ids=set(settings.owner_ids) or None,
            **options,
        )
        self.settings = settings
        # A database handed in (tests, the command line) belongs to the caller.
        self._owns_database = database is None
        self.database = database or Database(settings)
        self.clock: Clock = clock or SystemClock()
        self._janitor = janitor
        self._use_spool = spool
        self._serve_metrics = serve_metrics
        # What reads Discord's copies of images (None: the chat cog's guarded fetcher).
        self.image_fetcher = image_fetcher
        self.services: Services | None = None
        # Set by on_disconnect until the gateway is back (on_connect, on_resumed).
        self._gateway_down = False

    async def setup_hook(self) -> None:
        # discord.py runs this inside login(), where an OSError would pass for the
        # network's: the bot's own files failing (the spool in the data folder) say so.
        try:
            self.services = await start_services(
                self.settings,
                self.database,
                owns_database=self._owns_database,
                clock=self.clock,
                spool=self._use_spool,
                janitor=self._janitor,
                serve_metrics=self._serve_metrics,
            )
        except OSError as exc:
            raise StartupFailed(describe_local_failure(exc, self.settings.data_dir)) from exc
        self.services.health.watch_discord(self.discord_problem)
        for extension in EXTENSIONS:
            await self.load_extension(extension)
        self.metrics.gauge("kioku_guilds", "Servers this process serves", lambda: len(self.guilds))
        self.metrics.gauge(
            "kioku_gateway_latency_seconds",
            "Discord gateway heartbeat latency (NaN before the first heartbeat)",
            lambda: self.latency,
        )

    def _started(self) -> Services:
        if self.services is None:
            raise RuntimeError("the bot's services start in setup_hook")
        return self.services

    # The started services, by name (see _Started).
    memory = _Started[MemoryService]()
    longterm = _Started[LongTermService]()
    turns = _Started[TurnRunner]()
    summarizer = _Started[Summarizer]()
    llm = _Started[openai.AsyncOpenAI]()
    spool = _Started[DurableSpool | None]()
    metrics = _Started[Metrics]()
    tasks = _Started[TaskRegistry]()

    async def on_ready(self) -> None:
        # The gateway's own "connected" line is quieted with the rest of its chatter (below
        # KIOKU_LOG_LEVEL=DEBUG): this is the operator's sign that the bot is online.
        if self.user is None:
            return
        servers = len(self.guilds)
        log.info(
            "online as %s (id %d) in %d server%s",
            self.user,
            self.user.id,
            servers,
            "" if servers == 1 else "s",
        )

    def discord_problem(self) -> str | None:
        """Why this process is not connected to Discord now (``None``: it is), for /healthz."""
        if self.is_closed():
            return "discord: the connection is closed"
        if not self.is_ready():
            return NOT_CONNECTED_YET
        if self._gateway_down:
            return "discord: disconnected, reconnecting"
        return None

    async def on_connect(self) -> None:
        self._gateway_down = False

    async def on_resumed(self) -> None:
        self._gateway_down = False

    async def on_disconnect(self) -> None:
        self._gateway_down = True

    async def on_message(self, message: discord.Message, /) -> None:
        """Leave messages to the chat cog (the default would run "@Kioku hi" as a command)."""

    async def close(self) -> None:
        # Cogs first (answers in flight may finish), then the services, then Discord.
        for extension in list(self.extensions):
            await self.unload_extension(extension)
        try:
            if self.services is not None:
                await self.services.close(grace=SUMMARY_SHUTDOWN_GRACE_SECONDS)
        finally:
            await super().close()


class ShardedKiokuBot(KiokuBot, commands.AutoShardedBot):
    """The same bot running several gateway shards in one process."""


def build_bot(
    settings: Settings,
    *,
    database: Database | None = None,
    clock: Clock | None = None,
    janitor: bool = True,
    spool: bool = True,
    serve_metrics: bool = True,
    shard_ids: Sequence[int] | None = None,
    shard_count: int | None = None,
    image_fetcher: Fetcher | None = None,
) -> KiokuBot:
    """The bot, not connected yet, running ``shard_ids`` of ``shard_count`` if given."""
    bot_class: type[KiokuBot] = KiokuBot
    sharding: dict[str, Any] = {}
    if shard_ids is not None:
        bot_class = ShardedKiokuBot
        sharding = {"shard_ids": list(shard_ids), "shard_count": shard_count}
    return bot_class(
        settings,
        database=database,
        clock=clock,
        janitor=janitor,
        spool=spool,
        serve_metrics=serve_metrics,
        image_fetcher=image_fetcher,
        **sharding,
    )
