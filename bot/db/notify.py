"""Cache coherence between processes sharing one PostgreSQL: ``LISTEN/NOTIFY``.

A change sends its notice inside its own transaction (delivered on commit, never for a
rolled-back write); each process listens on its own connection, and after a lost one
(notices missed) reports a reset: the caller drops its whole cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncSession
from tenacity import AsyncRetrying, RetryCallState, wait_exponential

import bot.db.driver as driver
from bot.db.deadline import database_deadline
from bot.db.driver import DriverStatement
from bot.db.engine import describe_url
from bot.vocabulary import DatabaseUnavailable, StmEntry

log = logging.getLogger(__name__)

NOTIFY_CHANNEL = "kioku_cache"

Notice = dict[str, Any]


_NOTIFY = DriverStatement.compile(text("SELECT pg_notify(:channel, :payload)"))

# PostgreSQL refuses a payload of 8,000 bytes or more, and with it the whole transaction.
MAX_PAYLOAD_BYTES = 7_900


async def send_notice(session: AsyncSession, notice: Notice) -> None:
    """Queue a notice on the session's transaction, sent when it commits."""
    # An STM notice naming too many keys for one payload (a large group commit) goes out
    # in parts.
    payload = json.dumps(notice, separators=(",", ":"))
    keys = notice.get("k")
    if len(payload.encode()) > MAX_PAYLOAD_BYTES and isinstance(keys, list) and len(keys) > 1:
        half = len(keys) // 2
        await send_notice(session, {**notice, "k": keys[:half]})
        await send_notice(session, {**notice, "k": keys[half:]})
        return
    # Every STM write sends one: straight to asyncpg (see bot.db.driver).
    await driver.fetch(session, _NOTIFY, {"channel": NOTIFY_CHANNEL, "payload": payload})


def stm_notice(origin: str, entries: Sequence[StmEntry]) -> Notice:
    """The notice for written STM entries: each key with its new version."""
    return {
        "o": origin,
        "t": "stm",
        "k": [
            [e.key.kind, e.key.guild_id, e.key.user_id, e.key.channel_id, e.version]
            for e in entries
        ],
    }


class ListenerUnavailable(DatabaseUnavailable):
    """The notice connection did not come up in time at start-up."""


class _CannotConnect(Exception):
    """Connecting the listener failed (the cause says why)."""


class CacheListener:
    """Listens for notices on its own connection, reconnecting with backoff, until closed."""

    def __init__(
        self,
        url: URL,
        *,
        on_notice: Callable[[Notice], None],
        on_reset: Callable[[], None],
        on_lost: Callable[[], None] | None = None,
        max_backoff_seconds: float = 30.0,
        connect_timeout_seconds: float = 10.0,
        start_timeout_seconds: float = 30.0,
        ping_interval_seconds: float = 30.0,
        ping_timeout_seconds: float = 10.0,
    ) -> None:
        self._connect_args = self._asyncpg_connect_args(url)
        self._where = describe_url(url)
        self._on_notice = on_notice
        self._on_reset = on_reset
        self._on_lost = on_lost
        self._max_backoff = max_backoff_seconds
        self._connect_timeout = connect_timeout_seconds
        self._start_timeout = start_timeout_seconds
        self._ping_interval = ping_interval_seconds
        self._ping_timeout = ping_timeout_seconds
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._closing = False
        self.resets = 0

    @staticmethod
    def _asyncpg_connect_args(url: URL) -> dict[str, Any]:
        """asyncpg.connect()'s arguments, built as the engine's dialect builds them."""
        # So the same query parameters, ``ssl`` included, mean the same on both connections.
        _, kwargs = url.get_dialect()().create_connect_args(url)
        for engine_only in ("prepared_statement_cache_size", "prepared_statement_name_func"):
            kwargs.pop(engine_only, None)
        return dict(kwargs)

    async def start(self) -> None:
        """Return once the first LISTEN is active; raise :class:`ListenerUnavailable` if late."""
        self._task = asyncio.create_task(self._supervise(), name="cache-listener")
        self._task.add_done_callback(self._supervisor_done)
        listening = asyncio.ensure_future(self._listening.wait())
        await asyncio.wait(
            {listening, self._task},
            timeout=self._start_timeout,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if listening.done():
            return
        listening.cancel()
        stopped = self._task.done()
        await self.close()
        raise ListenerUnavailable(
            f"the cache listener stopped before listening on {self._where} (see the error above)"
            if stopped
            else f"the cache listener could not listen on {self._where} within "
            f"{self._start_timeout:g} s (see the warnings above)"
        )

    def _supervisor_done(self, task: asyncio.Task[None]) -> None:
        # _supervise only ends by cancellation; anything else would end coherence unseen.
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "cache listener stopped: caches are no longer coherent", exc_info=task.exception()
            )

    async def _supervise(self) -> None:
        """Connect and listen until closed, reconnecting with backoff after failures."""
        while True:
            # The backoff counts failures in a row, of connecting or of listening (a bug
            # here or in on_reset must not end coherence, nor spin); a lost connection
            # after listening starts it over, and reconnects at once.
            async for attempt in AsyncRetrying(
                wait=wait_exponential(multiplier=0.2, max=self._max_backoff),
                before_sleep=self._log_failure,
            ):
                with attempt:
                    await self._connect_and_listen()
            log.warning("cache listener lost its connection; reconnecting")

    async def _connect_and_listen(self) -> None:
        try:
            connection = await asyncpg.connect(
                **self._connect_args,
                timeout=self._connect_timeout,
                server_settings={"application_name": "kioku-listener"},
            )
        except Exception as exc:
            raise _CannotConnect from exc
        try:
            await self._listen(connection)
        finally:
            await self._discard(connection)
            if not self._closing:
                self._lost()  # at once, before any backoff

    def _log_failure(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _CannotConnect):
            cause = exc.__cause__
            log.warning(
                "cache listener cannot connect to %s (attempt %d: %s: %s); retrying in %.1f s",
                self._where,
                state.attempt_number,
                cause.__class__.__name__,
                cause,
                state.upcoming_sleep,
            )
        else:
            log.error("cache listener failed; reconnecting", exc_info=exc)

    def _lost(self) -> None:
        """Tell the owner at once: notices go unheard until the next LISTEN (on_reset)."""
        if self._on_lost is None:
            return
        try:
            self._on_lost()
        except Exception:
            log.exception("the cache listener's on_lost callback failed")

    async def _listen(self, connection: asyncpg.Connection) -> None:
        """LISTEN on ``connection`` until it is lost (closed, or silent to a ping)."""
        lost = asyncio.Event()
        connection.add_termination_listener(lambda _c: lost.set())
        await connection.add_listener(NOTIFY_CHANNEL, self._received)
        if self._listening.is_set():
            # Notices sent while we were away are gone: nothing cached can be trusted.
            self.resets += 1
            log.warning("cache listener reconnected; dropping the whole cache")
            self._on_reset()
        self._listening.set()
        while not lost.is_set():
            try:
                await asyncio.wait_for(lost.wait(), timeout=self._ping_interval)
            except TimeoutError:
                try:
                    # Not asyncpg's own timeout: a loop busy with a burst of turns must
                    # not take its own lateness for a dead connection (and drop caches).
                    async with database_deadline(self._ping_timeout):
                        await connection.execute("SELECT 1")
                except (
                    OSError,
                    TimeoutError,
                    asyncpg.PostgresError,
                    asyncpg.InterfaceError,
                ) as exc:
                    log.warning(
                        "cache listener's connection did not answer a ping (%s)",
                        exc.__class__.__name__,
                    )
                    connection.terminate()  # a polite close would wait on it too
                    return

    @staticmethod
    async def _discard(connection: asyncpg.Connection) -> None:
        # close() aborts the socket itself when it cannot close cleanly.
        with contextlib.suppress(Exception):
            await connection.close(timeout=2)

    def _received(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            notice = json.loads(payload)
        except ValueError:
            log.warning("ignoring a malformed cache notice")
            return
        if isinstance(notice, dict):
            self._on_notice(notice)

    async def close(self) -> None:
        if self._task is not None:
            self._closing = True
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
