"""The Discord application: :func:`build_bot` returns a bot that has not connected yet.

``setup_hook`` wires what the bot owns (database, caches, services, cogs); ``close``
unloads cogs first, then releases what the bot owns, in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import discord
import openai
from discord.ext import commands

from bot.cogs.errors import install_error_handler
from bot.config import Settings
from bot.conversation.summarizer import Summarizer
from bot.conversation.turn import TurnRunner
from bot.db.engine import Database
from bot.db.migrate import upgrade
from bot.db.notify import CacheListener
from bot.db.storage import MemoryUnavailable
from bot.llm.client import make_client
from bot.memory.janitor import run_janitor, run_turn_count_saver
from bot.memory.longterm import LongTermService
from bot.memory.service import MemoryService
from bot.memory.spool import DurableSpool, spool_path
from bot.metrics import Metrics, MetricsServer
from bot.vocabulary.clock import Clock, SystemClock

log = logging.getLogger(__name__)

# At shutdown, after the answers in flight (see bot.cogs.chat.SHUTDOWN_GRACE_SECONDS),
# background summaries get this long before they are cancelled.
SUMMARY_SHUTDOWN_GRACE_SECONDS = 1.0

EXTENSIONS: tuple[str, ...] = (
    "bot.cogs.chat",
    "bot.cogs.refresh",
    "bot.cogs.stm",
    "bot.cogs.privacy",
)


class StartupFailed(RuntimeError):
    """The bot's own start-up failed (not Discord's); the message says why, in one line."""


def describe_local_failure(exc: OSError, data_dir: Path) -> str:
    """An ``OSError`` of a local file, naming the data folder setting when it is there."""
    if exc.filename is None:
        return f"{exc.__class__.__name__}: {exc}"
    inside = Path(os.fsdecode(exc.filename)).absolute().is_relative_to(data_dir.absolute())
    hint = f" (in the data folder {data_dir}, KIOKU_DATA_DIR)" if inside else ""
    return f"cannot use {exc.filename}: {exc.strerror or exc.__class__.__name__}{hint}"


class KiokuBot(commands.Bot):
    """The bot. Services hang off it so cogs reach them through ``self.bot``."""

    memory: MemoryService
    spool: DurableSpool | None
    listener: CacheListener
    llm: openai.AsyncOpenAI
    turns: TurnRunner
    summarizer: Summarizer
    longterm: LongTermService

    def __init__(
        self,
        settings: Settings,
        *,
        database: Database | None = None,
        clock: Clock | None = None,
        janitor: bool = True,
        spool: bool = True,
        serve_metrics: bool = True,
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
        # A database handed in (tests, `kioku console`) belongs to the caller.
        self._owns_database = database is None
        self.database = database or Database(settings)
        self.clock: Clock = clock or SystemClock()
        self._janitor = janitor
        self._use_spool = spool
        self._background: set[asyncio.Task[Any]] = set()
        self.metrics = Metrics()
        self._serve_metrics_endpoint = serve_metrics
        self._metrics_server: MetricsServer | None = None

    async def setup_hook(self) -> None:
        # discord.py runs this inside login(), where an OSError would pass for the
        # network's: the bot's own files failing (the spool in the data folder) say so.
        try:
            await self._wire()
        except OSError as exc:
            raise StartupFailed(describe_local_failure(exc, self.settings.data_dir)) from exc

    async def _wire(self) -> None:
        await self.database.start()
        # `kioku sync` runs next to the serving bot and writes no memory: no spool.
        self.spool = DurableSpool(spool_path(self.settings.data_dir)) if self._use_spool else None
        if self.spool is not None and self.spool.pending:
            await self._replay_spool_at_start(self.spool)
        self.memory = MemoryService(
            self.database.sessions, self.settings, clock=self.clock, spool=self.spool
        )
        assert self.database.url is not None
        self.listener = CacheListener(
            self.database.url,
            on_notice=self.memory.apply_notice,
            on_reset=self._listener_reset,
            on_lost=self.memory.listener_lost,
            connect_timeout_seconds=self.settings.database.connect_timeout_seconds,
        )
        await self.listener.start()
        self.llm = make_client(self.settings)
        self.longterm = LongTermService(
            self.database.sessions, self.settings, self.clock, spool=self.spool
        )
        self.turns = TurnRunner(
            self.memory, self.llm, self.settings, longterm=self.longterm, metrics=self.metrics
        )
        self.summarizer = self.turns.summarizer
        install_error_handler(self.tree)
        for extension in EXTENSIONS:
            await self.load_extension(extension)
        self._watch_state()
        # `kioku sync` runs next to the serving bot, whose port it must leave alone.
        if self.settings.metrics.port and self._serve_metrics_endpoint:
            await self._serve_metrics()
        if self._janitor:
            self.spawn(run_janitor(self.memory), name="janitor")
            self.spawn(run_turn_count_saver(self.memory), name="turn-count-saver")
        if self.spool is not None:
            self.spawn(
                self.spool.run_replayer(
                    self.database.sessions, on_replayed=self.memory.spool_replayed
                ),
                name="spool-replayer",
            )

    def _watch_state(self) -> None:
        """Gauges read at each scrape: the state of what this bot owns."""
        memory, gauge = self.memory, self.metrics.gauge
        gauge("kioku_stm_cache_entries", "Short-term memories cached", lambda: len(memory.cache))
        gauge(
            "kioku_spool_pending",
            "Memory operations waiting in the spool for the database",
            lambda: memory.pending_sync,
        )
        gauge(
            "kioku_cache_notices_heard",
            "1 while other processes' cache notices are heard (0: reading through)",
            lambda: float(memory.hearing_notices),
        )
        gauge(
            "kioku_database_failing",
            "1 while the database has failed and not answered since",
            lambda: float(memory.database_failing),
        )
        gauge("kioku_guilds", "Servers this process serves", lambda: len(self.guilds))
        gauge(
            "kioku_gateway_latency_seconds",
            "Discord gateway heartbeat latency (NaN before the first heartbeat)",
            lambda: self.latency,
        )

    async def _serve_metrics(self) -> None:
        host, port = self.settings.metrics.host, self.settings.metrics.port
        server = MetricsServer(self.metrics)
        try:
            await server.start(host, port)
        except OSError as exc:
            raise StartupFailed(
                f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); "
                "set KIOKU_METRICS__PORT to a free port, or 0 to turn metrics off"
            ) from exc
        self._metrics_server = server

    def _listener_reset(self) -> None:
        """The notice connection came back: the cache may have missed notices, and the
        database answers again, so spooled operations can go now."""
        self.memory.listening_again()
        if self.spool is not None:
            self.spool.database_back()

    async def _replay_spool_at_start(self, spool: DurableSpool) -> None:
        """Writes acknowledged before a crash or outage reach the database before the
        first turn can hydrate an older row."""
        pending = spool.pending
        try:
            replayed = await spool.replay(self.database.sessions)
            log.info("replayed %d spooled memory operations from the last run", replayed)
        except Exception as exc:
            log.warning(
                "%d spooled memory operations wait for the database (%s)",
                pending,
                exc.__class__.__name__,
            )

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

    async def on_message(self, message: discord.Message, /) -> None:
        """Kioku has no prefix commands: messages are the chat cog's business only (the
        default would try to run "@Kioku hi" as a command and log CommandNotFound)."""

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
        if hasattr(self, "turns"):
            await self.turns.stop(SUMMARY_SHUTDOWN_GRACE_SECONDS)
        if self._metrics_server is not None:
            await self._metrics_server.close()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if hasattr(self, "memory"):
            # Writes of cancelled tasks still go through (or fail) before the engine goes.
            await self.memory.writes_settled()
            with contextlib.suppress(MemoryUnavailable):
                await self.memory.save_turn_counts()
        try:
            await super().close()
        finally:
            if hasattr(self, "llm"):
                await self.llm.close()
            if hasattr(self, "listener"):
                await self.listener.close()
            spool = getattr(self, "spool", None)
            if spool is not None:
                spool.close()
            if self._owns_database:
                await self.database.close()


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
) -> KiokuBot:
    """The bot, wired but not connected (tests attach it to dpytest instead). With
    ``shard_ids`` it runs those shards of ``shard_count`` in this process; other
    processes may run the rest against the same PostgreSQL."""
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
        **sharding,
    )


async def migrate_database(database: Database) -> tuple[str | None, str | None]:
    """Start the database if needed and upgrade it to head."""
    await database.start()
    return await upgrade(database.engine)
