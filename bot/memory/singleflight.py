"""Per-key coordination of concurrent callers: those asking for the same missing key
share one load (:class:`SingleFlight`); those working on the same key take turns
(:class:`KeyedLocks`), in a queue of bounded length (:class:`KeyedQueues`)."""

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
    """One :class:`asyncio.Lock` per key (a channel's turns run one after another).

    A lock lives only while someone holds or awaits it (weak values), so the thousands
    of channels nobody is talking in cost nothing.
    """

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[K, asyncio.Lock] = weakref.WeakValueDictionary()

    def __call__(self, key: K) -> asyncio.Lock:
        """The lock of ``key``: the same one for every caller while any of them keeps it."""
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock


class KeyedQueues(Generic[K]):
    """Callers of one key take turns (a channel's turns), and at most ``max_waiting`` of
    them wait behind the one running: one more is turned away instead of queued.

    Only keys someone is in cost anything (see :class:`KeyedLocks`).
    """

    def __init__(self, max_waiting: int) -> None:
        self._max_waiting = max_waiting
        self._locks: KeyedLocks[K] = KeyedLocks()
        # Callers of each key running or waiting; no entry for a key nobody is in.
        self._inside: dict[K, int] = {}

    @contextlib.asynccontextmanager
    async def place(self, key: K, *, counted: bool = True) -> AsyncIterator[bool]:
        """A place in ``key``'s queue: yields True once the callers ahead of it are done,
        or False at once when the queue is full (the caller then does nothing). A place
        not ``counted`` is never refused and fills no place of the bound (a caller that
        may well have nothing to do).

        The place is taken on entering, before anything is awaited, so callers run in
        the order they entered; it is given up on leaving, also when cancelled while
        waiting."""
        if not counted:
            async with self._locks(key):
                yield True
            return
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
    """Give ``tasks`` ``grace`` seconds to finish, then cancel those still running and
    wait until they have ended (shutdown); return how many were cancelled."""
    waiting = list(tasks)
    if not waiting:
        return 0
    _, late = await asyncio.wait(waiting, timeout=grace)
    for task in late:
        task.cancel()
    if late:
        await asyncio.wait(late)
    return len(late)
