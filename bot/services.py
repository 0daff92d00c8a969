"""The services the bot and the console run on, started in order by :func:`start_services`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import openai
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.config import Settings
from bot.conversation import Summarizer, TurnRunner
from bot.db import CacheListener, Database
from bot.llm import Embedder, TokenCounter, make_client
from bot.memory import (
    DurableSpool,
    LongTermService,
    MemoryService,
    run_janitor,
    run_turn_count_saver,
    spool_path,
)
from bot.runtime import Health, Metrics, MetricsServer, TaskRegistry
from bot.vocabulary import Clock, MemoryUnavailable, SystemClock

log = logging.getLogger(__name__)


class StartupFailed(RuntimeError):
    """Kioku's own start-up failed (not Discord's); the message says why, in one line."""


def describe_local_failure(exc: OSError, data_dir: Path) -> str:
    """An ``OSError`` of a local file, naming the data folder setting when it is there."""
    if exc.filename is None:
        return f"{exc.__class__.__name__}: {exc}"
    inside = Path(os.fsdecode(exc.filename)).absolute().is_relative_to(data_dir.absolute())
    hint = f" (in the data folder {data_dir}, KIOKU_DATA_DIR)" if inside else ""
    return f"cannot use {exc.filename}: {exc.strerror or exc.__class__.__name__}{hint}"


@dataclass(frozen=True)
class Services:
    """What a running Kioku owns; :meth:`close` releases it in the reverse order."""

    settings: Settings
    database: Database
    clock: Clock
    metrics: Metrics
    tasks: TaskRegistry
    spool: DurableSpool | None
    memory: MemoryService
    listener: CacheListener | None
    llm: openai.AsyncOpenAI
    longterm: LongTermService
    turns: TurnRunner
    metrics_server: MetricsServer | None
    health: Health
    _closers: contextlib.AsyncExitStack = field(repr=False)

    @property
    def summarizer(self) -> Summarizer:
        return self.turns.summarizer

    async def close(self, *, grace: float | None = 0.0) -> None:
        """Give background summaries ``grace`` seconds (None: all they need), then close."""
        cancelled = await self.tasks.wait(grace)
        if cancelled:
            # Nobody waits for their answer; a later turn tries again.
            log.info("shutdown: %d background summaries were cancelled", cancelled)
        await self._closers.aclose()


async def start_services(
    settings: Settings,
    database: Database,
    *,
    owns_database: bool,
    clock: Clock | None = None,
    spool: bool = True,
    listen: bool = True,
    janitor: bool = True,
    serve_metrics: bool = True,
) -> Services:
    """Start the services in order; when a step fails, close what was started and raise."""
    clock = clock or SystemClock()
    tasks, metrics = TaskRegistry(), Metrics()
    # Each closer is pushed as its service starts: closing runs them in reverse.
    closers = contextlib.AsyncExitStack()
    try:
        if owns_database:
            closers.push_async_callback(database.close)
        await database.start()
        durable = await _open_spool(settings, database, closers) if spool else None
        memory = MemoryService(database.sessions, settings, clock=clock, spool=durable)
        listener = await _listen(settings, database, memory, durable, closers) if listen else None
        llm = make_client(settings)
        closers.push_async_callback(llm.close)
        closers.push_async_callback(_settle, memory)
        closers.push_async_callback(tasks.cancel_all)
        embedder = Embedder(settings) if settings.embeddings_base_url else None
        if embedder is not None:
            closers.push_async_callback(embedder.close)
        longterm = LongTermService(
            database.sessions, settings, clock, spool=durable, embedder=embedder
        )
        turns = TurnRunner(memory, llm, settings, longterm=longterm, metrics=metrics, tasks=tasks)
        # Loading a tokenizer takes up to a second: not on the first turn's event loop.
        await asyncio.to_thread(TokenCounter.for_model(settings.model, settings.provider).warm)
        _watch_memory(metrics, memory)
        _spawn_background(tasks, memory, durable, database, janitor=janitor)
        health = Health(database.sessions)
        metrics_server: MetricsServer | None = None
        # `kioku sync` runs next to the serving bot, whose port it must leave alone.
        if serve_metrics and settings.metrics.port:
            metrics_server = await _serve_metrics(metrics, health, settings)
            closers.push_async_callback(metrics_server.close)
    except BaseException:
        await closers.aclose()
        raise
    return Services(
        settings=settings,
        database=database,
        clock=clock,
        metrics=metrics,
        tasks=tasks,
        spool=durable,
        memory=memory,
        listener=listener,
        llm=llm,
        longterm=longterm,
        turns=turns,
        metrics_server=metrics_server,
        health=health,
        _closers=closers,
    )


async def _open_spool(
    settings: Settings, database: Database, closers: contextlib.AsyncExitStack
) -> DurableSpool:
    """The data folder's spool, with what the last run left in it replayed."""
    durable = DurableSpool(spool_path(settings.data_dir))
    closers.callback(durable.close)
    if durable.pending:
        await replay_spool_at_start(durable, database.sessions)
    return durable


def _spawn_background(
    tasks: TaskRegistry,
    memory: MemoryService,
    spool: DurableSpool | None,
    database: Database,
    *,
    janitor: bool,
) -> None:
    """The endless tasks: the janitor and the turn-count saver, the spool's replayer."""
    if janitor:
        tasks.spawn(run_janitor(memory), name="janitor", endless=True)
        tasks.spawn(run_turn_count_saver(memory), name="turn-count-saver", endless=True)
    if spool is not None:
        replayer = spool.run_replayer(database.sessions, on_replayed=memory.spool_replayed)
        tasks.spawn(replayer, name="spool-replayer", endless=True)


async def replay_spool_at_start(
    spool: DurableSpool, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """Replay what the last run spooled, so no turn hydrates a row older than it."""
    pending = spool.pending
    try:
        replayed = await spool.replay(sessions)
        log.info("replayed %d spooled memory operations from the last run", replayed)
    except Exception as exc:
        log.warning(
            "%d spooled memory operations wait for the database (%s)",
            pending,
            exc.__class__.__name__,
        )


async def _listen(
    settings: Settings,
    database: Database,
    memory: MemoryService,
    spool: DurableSpool | None,
    closers: contextlib.AsyncExitStack,
) -> CacheListener:
    """The listener of other processes' cache notices, started."""
    listener = _cache_listener(settings, database, memory, spool)
    closers.push_async_callback(listener.close)
    await listener.start()
    return listener


def _cache_listener(
    settings: Settings, database: Database, memory: MemoryService, spool: DurableSpool | None
) -> CacheListener:
    def listening_again() -> None:
        # The cache may have missed notices, and the database answers again.
        memory.listening_again()
        if spool is not None:
            spool.database_back()

    assert database.url is not None
    return CacheListener(
        database.url,
        on_notice=memory.apply_notice,
        on_reset=listening_again,
        on_lost=memory.listener_lost,
        connect_timeout_seconds=settings.database.connect_timeout_seconds,
    )


async def _settle(memory: MemoryService) -> None:
    # Writes of cancelled tasks still go through (or fail) before the engine goes.
    await memory.writes_settled()
    with contextlib.suppress(MemoryUnavailable):
        await memory.save_turn_counts()


def _watch_memory(metrics: Metrics, memory: MemoryService) -> None:
    metrics.gauge(
        "kioku_stm_cache_entries", "Short-term memories cached", lambda: len(memory.cache)
    )
    metrics.gauge(
        "kioku_spool_pending",
        "Memory operations waiting in the spool for the database",
        lambda: memory.pending_sync,
    )
    metrics.gauge(
        "kioku_cache_notices_heard",
        "1 while other processes' cache notices are heard (0: reading through)",
        lambda: float(memory.hearing_notices),
    )
    metrics.gauge(
        "kioku_database_failing",
        "1 while the database has failed and not answered since",
        lambda: float(memory.database_failing),
    )


async def _serve_metrics(metrics: Metrics, health: Health, settings: Settings) -> MetricsServer:
    host, port = settings.metrics.host, settings.metrics.port
    server = MetricsServer(metrics, health.problems)
    try:
        await server.start(host, port)
    except OSError as exc:
        raise StartupFailed(
            f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); "
            "set KIOKU_METRICS__PORT to a free port, or 0 to turn metrics off"
        ) from exc
    return server
