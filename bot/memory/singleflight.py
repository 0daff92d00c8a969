"""Per-key coordination of concurrent callers: those asking for the same missing key
share one load (:class:`SingleFlight`); those working on the same key take turns
(:class:`KeyedLocks`)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

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
