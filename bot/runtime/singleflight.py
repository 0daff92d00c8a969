"""Per-key coordination of concurrent callers: shared loads, locks and bounded queues."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """Caches the in-flight task per key, so N concurrent misses make one query."""

    def __init__(self) -> None:
        self._inflight: dict[K, asyncio.Future[V]] = {}

    async def run(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        future = self._inflight.get(key)
        if future is None:
            future = asyncio.ensure_future(load())
            self._inflight[key] = future
            future.add_done_callback(self._forget(key))
        # shield: one caller being cancelled must not cancel the load the others await.
        return await asyncio.shield(future)

    def _forget(self, key: K) -> Callable[[asyncio.Future[V]], None]:
        def done(_future: asyncio.Future[V]) -> None:
            self._inflight.pop(key, None)

        return done


class KeyedLocks(Generic[K]):
    """One :class:`asyncio.Lock` per key, alive only while someone holds or awaits it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[K, asyncio.Lock] = weakref.WeakValueDictionary()

    def __call__(self, key: K) -> asyncio.Lock:
        """The lock of ``key``: the same one for every caller while any of them keeps it."""
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock


class KeyedQueues(Generic[K]):
    """Callers of one key take turns; beyond ``max_waiting`` waiting, one more is turned away."""

    def __init__(self, max_waiting: int) -> None:
        self._max_waiting = max_waiting
        self._locks: KeyedLocks[K] = KeyedLocks()
        # Callers of each key running or waiting; no entry for a key nobody is in.
        self._inside: dict[K, int] = {}

    @contextlib.asynccontextmanager
    async def place(self, key: K, *, counted: bool = True) -> AsyncIterator[bool]:
        """Yields True once the callers ahead in ``key``'s queue are done, False if it is full.

        A place not ``counted`` is never refused and takes no room in the bound.
        """
        if not counted:
            async with self._locks(key):
                yield True
            return
        # Taken before anything is awaited, so callers run in the order they entered.
        inside = self._inside.get(key, 0)
        if inside > self._max_waiting:
            yield False
            return
        self._inside[key] = inside + 1
        try:
            async with self._locks(key):
                yield True
        finally:
            left = self._inside[key] - 1
            if left:
                self._inside[key] = left
            else:
                del self._inside[key]


async def finish_or_cancel(tasks: Iterable[asyncio.Task[Any]], grace: float) -> int:
    """Await ``tasks`` for ``grace`` seconds, then cancel and await the rest; return how many."""
    waiting = list(tasks)
    if not waiting:
        return 0
    _, late = await asyncio.wait(waiting, timeout=grace)
    for task in late:
        task.cancel()
    if late:
        await asyncio.wait(late)
    return len(late)
