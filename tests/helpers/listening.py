"""Bot processes on one database for tests: each its own memory service, cache and
listener connection, the notices it heard from the others queued for the test."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sqlalchemy.engine import URL

from bot.config import Settings
from bot.db.engine import Database
from bot.db.notify import CacheListener, Notice
from bot.memory.service import MemoryService
from tests.helpers.builders import ManualClock, make_service
from tests.helpers.faults import own_sessions


@dataclass
class Process:
    memory: MemoryService
    listener: CacheListener
    notices: asyncio.Queue[Notice]
    resets: asyncio.Queue[None]

    async def next_notice(self) -> Notice:
        async with asyncio.timeout(10):
            return await self.notices.get()


async def start_process(db: Database, settings: Settings, url: URL) -> Process:
    memory = make_service(own_sessions(db), settings, ManualClock())
    notices: asyncio.Queue[Notice] = asyncio.Queue()
    resets: asyncio.Queue[None] = asyncio.Queue()

    def on_notice(notice: Notice) -> None:
        memory.apply_notice(notice)
        if notice.get("o") != memory.instance_id:
            notices.put_nowait(notice)

    def on_reset() -> None:
        memory.listening_again()
        resets.put_nowait(None)

    listener = CacheListener(
        url,
        on_notice=on_notice,
        on_reset=on_reset,
        on_lost=memory.listener_lost,
        max_backoff_seconds=1,
    )
    await listener.start()
    return Process(memory, listener, notices, resets)
