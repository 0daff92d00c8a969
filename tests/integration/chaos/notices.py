"""The real LISTEN/NOTIFY notices of a chaos scenario, captured on one connection and handed to
each process by hand."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.db.notify import NOTIFY_CHANNEL, CacheListener

# ------------------------------------------------------------------- notices


class Notices:
    """One LISTEN connection; every notice goes to both processes' inboxes."""

    def __init__(self, url: URL) -> None:
        self._args = CacheListener._asyncpg_connect_args(url)
        self._connection: asyncpg.Connection | None = None
        self._syncs: dict[int, asyncio.Event] = {}
        self._next = 0
        self.inboxes: dict[str, list[dict[str, Any]]] = {}
        # Guild settings notices, numbered in commit order (the n-th is the n-th change:
        # changes run one at a time); reset for each scenario.
        self.guild_notices = 0

    async def start(self) -> None:
        self._connection = await asyncpg.connect(**self._args)
        await self._connection.add_listener(NOTIFY_CHANNEL, self._received)

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()

    def _received(self, _c: Any, _pid: int, _channel: str, payload: str) -> None:
        notice = json.loads(payload)
        if notice.get("t") == "chaos-sync":
            event = self._syncs.pop(notice["n"], None)
            if event is not None:
                event.set()
            return
        if notice.get("t") == "guild":
            self.guild_notices += 1
            notice["chaos_n"] = self.guild_notices  # ignored by the services
        for inbox in self.inboxes.values():
            inbox.append(notice)

    async def sync(self, engine: AsyncEngine) -> None:
        """Every notice committed so far is in the inboxes (NOTIFY keeps commit order)."""
        self._next += 1
        event = self._syncs[self._next] = asyncio.Event()
        async with engine.begin() as connection:
            await connection.execute(
                text("SELECT pg_notify(:c, :p)"),
                {"c": NOTIFY_CHANNEL, "p": json.dumps({"t": "chaos-sync", "n": self._next})},
            )
        async with asyncio.timeout(10):
            await event.wait()
