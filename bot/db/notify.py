"""Cache coherence between processes sharing one PostgreSQL: ``LISTEN/NOTIFY``.

Every change to STM, guild settings or categories sends a notice *inside its own
transaction* (``pg_notify`` is delivered on commit, never for a rolled-back write). Each
process listens on a dedicated asyncpg connection and evicts or refreshes what the
notice names. A lost connection may have missed notices, so the listener reports a
reset (the caller drops its whole cache) and reconnects with backoff.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncSession
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from bot.memory.model import StmEntry

log = logging.getLogger(__name__)

NOTIFY_CHANNEL = "kioku_cache"

Notice = dict[str, Any]


# PostgreSQL refuses a payload of 8,000 bytes or more, and with it the whole transaction.
MAX_PAYLOAD_BYTES = 7_900


async def send_notice(session: AsyncSession, notice: Notice) -> None:
    """Queue a notice on the session's transaction (sent when it commits). An STM notice
    naming too many keys for one payload (a large group commit) goes out in parts."""
    payload = json.dumps(notice, separators=(",", ":"))
    keys = notice.get("k")
    if len(payload.encode()) > MAX_PAYLOAD_BYTES and isinstance(keys, list) and len(keys) > 1:
        half = len(keys) // 2
        await send_notice(session, {**notice, "k": keys[:half]})
        await send_notice(session, {**notice, "k": keys[half:]})
        return
    await session.execute(
        text("SELECT pg_notify(:channel, :payload)"),
        {"channel": NOTIFY_CHANNEL, "payload": payload},
    )


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


def asyncpg_dsn(url: URL) -> str:
    """The SQLAlchemy URL as a plain libpq DSN for asyncpg (Unix-socket hosts included)."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class CacheListener:
    """Listens for notices on its own connection until closed."""

    def __init__(
        self,
        url: URL,
        *,
        on_notice: Callable[[Notice], None],
        on_reset: Callable[[], None],
        max_backoff_seconds: float = 30.0,
    ) -> None:
        self._dsn = asyncpg_dsn(url)
        self._on_notice = on_notice
        self._on_reset = on_reset
        self._max_backoff = max_backoff_seconds
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self.resets = 0

    async def start(self) -> None:
        """Connect and start listening; returns once the first LISTEN is active."""
        self._task = asyncio.create_task(self._supervise(), name="cache-listener")
        await self._listening.wait()

    async def _supervise(self) -> None:
        first = True
        while True:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type((OSError, asyncpg.PostgresError, TimeoutError)),
                wait=wait_exponential(multiplier=0.2, max=self._max_backoff),
                reraise=True,
            ):
                with attempt:
                    connection = await asyncpg.connect(self._dsn, timeout=10)
            lost = asyncio.Event()
            connection.add_termination_listener(lambda _c, lost=lost: lost.set())
            await connection.add_listener(NOTIFY_CHANNEL, self._received)
            if not first:
                # Notices sent while we were away are gone: nothing cached can be trusted.
                self.resets += 1
                self._on_reset()
                log.warning("cache listener reconnected; dropped the whole cache")
            first = False
            self._listening.set()
            try:
                await lost.wait()
            finally:
                if not connection.is_closed():
                    await connection.close()
            log.warning("cache listener lost its connection; reconnecting")

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
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
