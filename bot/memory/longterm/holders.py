"""Which users and channels hold long-term facts at all, asked in batches.

Most users never ask the bot to remember anything and most channels have no captured
facts yet: recall asks this first, so a thousand cold turns starting at once share a few
queries instead of making one full-text search each, and only a turn where facts exist
runs the search. An answer of "holds some" is kept a while (it only lets the search run,
which finds what is really there); "holds none" is the caller's to keep, as it knows
which saves could make it stale.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from cachetools import TTLCache
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.config import Settings
from bot.db import memory_session
from bot.db.repositories import longterm as repo
from bot.runtime import BatchLoader

__all__ = ["FactHolders"]

HOLDING_TTL_SECONDS = 600
# The session's step (a fault plan that holds recall holds this too: it is recall's start).
STEP = "long-term memory: recalling facts (who holds any)"

HolderKey = tuple[Literal["user", "channel"], int]


class FactHolders:
    """Answers, in batches, whether a user has facts of their own and which channels
    hold captured facts."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], settings: Settings) -> None:
        self._sessions = sessions
        self._loader: BatchLoader[HolderKey, bool] = BatchLoader(
            self._load, concurrency=settings.database.batched_loads
        )
        self._holding: TTLCache[HolderKey, bool] = TTLCache(
            maxsize=100_000, ttl=HOLDING_TTL_SECONDS
        )

    async def holding(
        self, user_id: int | None, channel_ids: Sequence[int]
    ) -> tuple[bool, frozenset[int]]:
        """Whether ``user_id`` has facts of their own (False for None), and which of
        ``channel_ids`` hold captured facts; raises ``MemoryUnavailable``."""
        keys: list[HolderKey] = [("channel", channel) for channel in channel_ids]
        if user_id is not None:
            keys.append(("user", user_id))
        unknown = [key for key in keys if key not in self._holding]
        found = await self._loader.get_many(unknown)
        for key, holds in found.items():
            if holds:
                self._holding[key] = True
        held = {key for key in keys if found.get(key) or key in self._holding}
        own = user_id is not None and ("user", user_id) in held
        return own, frozenset(channel for channel in channel_ids if ("channel", channel) in held)

    async def _load(self, keys: Sequence[HolderKey]) -> dict[HolderKey, bool]:
        users = [id_ for kind, id_ in keys if kind == "user"]
        channels = [id_ for kind, id_ in keys if kind == "channel"]
        async with memory_session(self._sessions, STEP) as session:
            with_own, with_captured = await repo.holders_of_facts(session, users, channels)
        found: dict[HolderKey, bool] = {("user", user): True for user in with_own}
        found.update((("channel", channel), True) for channel in with_captured)
        return found
