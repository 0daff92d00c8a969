"""What this process has heard changed: the bookkeeping that keeps its caches coherent
with other processes on the same database.

Every change (a notice from another process, or a change made here) counts up one
sequence number, and each thing it names remembers the count then. A read from the
database that such a change overtook (it names what was read, after the read began) may
hold what is gone: it is used once, never cached. While the notice listener is down the
process is *deaf*: caches are only a fallback, read through on every use.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from cachetools import LRUCache
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.db import database_down
from bot.vocabulary import MemoryUnavailable

T = TypeVar("T")

# Marks a /forget-me (or a cache reset, or the janitor's purge): it may concern any entry.
FORGET_NOTICED = "forget"
# A database read overtaken by a notice about what it read is repeated at most this often.
STALE_READ_RETRIES = 3
# Names remembered; a name evicted counts as never noticed, which only matters for reads
# begun before it (far fewer are in flight at once).
NOTICED_REMEMBERED = 100_000


class NoticeLedger:
    """Counts changes and remembers, per thing named, the count of its latest change."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        # Whose outages count (see database_down).
        self.sessions = sessions
        self.seq = 0
        self._noticed: LRUCache[object, int] = LRUCache(NOTICED_REMEMBERED)
        # The notice listener is down: notices from other processes go unheard.
        self.deaf = False

    def note(self, name: object) -> None:
        """Record a change made here (as a notice from elsewhere would): a read already
        in flight about ``name`` must not cache what it read."""
        self.seq += 1
        self._noticed[name] = self.seq

    def heard(self) -> None:
        """A notice arrived: the names it concerns are marked with :meth:`mark`."""
        self.seq += 1

    def mark(self, name: object) -> None:
        """``name`` changed with the latest notice heard."""
        self._noticed[name] = self.seq

    def since(self, seq: int, *names: object) -> bool:
        """Whether any of ``names`` (or everything, by a /forget-me) changed after ``seq``."""
        return any(self._noticed.get(name, 0) > seq for name in (*names, FORGET_NOTICED))

    def last(self, name: object) -> int:
        """The count of ``name``'s latest change (0: none remembered)."""
        return self._noticed.get(name, 0)

    def database_down(self) -> bool:
        """The database failed and has not answered since (see ``storage``): a read with
        a fallback uses it rather than wait for a timeout."""
        return database_down(self.sessions)

    async def cached_or_read(self, cached: T | None, read: Callable[[], Awaitable[T]]) -> T:
        """The cached value if there is one and notices are heard; else read it. Deaf,
        every use reads, and the cached value stands in only when the database is down
        too (then no other process can change it either): at once while it is known to
        be down (each read would wait for its timeout)."""
        if cached is not None and (not self.deaf or self.database_down()):
            return cached
        try:
            return await read()
        except MemoryUnavailable:
            if cached is None:
                raise
            return cached
