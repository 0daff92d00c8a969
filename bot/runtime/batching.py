"""Batched loads: concurrent callers each asking for one key share a few loads of many."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# A load's answer: the value of each key found (a key left out has none).
Load = Callable[[Sequence[K]], Awaitable[Mapping[K, V]]]


class BatchLoader(Generic[K, V]):
    """Gathers the keys asked for while earlier loads run, and loads them together.

    At most ``concurrency`` loads run at once, each of at most ``max_batch`` keys: a
    thousand cold callers make a handful of queries and hold a handful of connections,
    where one query each would queue for the pool past its timeout. A key joins only a
    batch not yet sent, so its load always starts after it was asked for (a caller that
    noted what changed before asking can trust the answer to be no older).
    """

    def __init__(self, load: Load[K, V], *, max_batch: int = 500, concurrency: int = 1) -> None:
        if max_batch < 1 or concurrency < 1:
            raise ValueError("max_batch and concurrency must be at least 1")
        self._load = load
        self._max_batch = max_batch
        self._concurrency = concurrency
        self._waiting: dict[K, asyncio.Future[V | None]] = {}
        self._running: set[asyncio.Task[None]] = set()
        self._dispatch_due = False
        self.loads = 0  # loads started (tests and benchmarks read it)

    async def get(self, key: K) -> V | None:
        """The value of ``key`` (None when the load found none); raises what the load raised."""
        # Shielded: one caller cancelled must not cancel the answer the others await.
        return await asyncio.shield(self._future_of(key))

    async def get_many(self, keys: Iterable[K]) -> dict[K, V | None]:
        """The value of each of ``keys``, loaded together (see :meth:`get`)."""
        futures = {key: self._future_of(key) for key in keys}
        if futures:
            await asyncio.shield(asyncio.gather(*futures.values()))
        return {key: future.result() for key, future in futures.items()}

    def _future_of(self, key: K) -> asyncio.Future[V | None]:
        future = self._waiting.get(key)
        if future is None:
            future = self._waiting[key] = asyncio.get_running_loop().create_future()
            self._schedule()
        return future

    def _schedule(self) -> None:
        # After the callbacks already due: keys asked for in the same pass of the loop go
        # together, even when a slot is free.
        if not self._dispatch_due and len(self._running) < self._concurrency:
            self._dispatch_due = True
            asyncio.get_running_loop().call_soon(self._dispatch)

    def _dispatch(self) -> None:
        self._dispatch_due = False
        while self._waiting and len(self._running) < self._concurrency:
            keys = list(self._waiting)[: self._max_batch]
            batch = {key: self._waiting.pop(key) for key in keys}
            task = asyncio.get_running_loop().create_task(self._run(batch), name="batch-load")
            self._running.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if self._waiting:
            self._schedule()

    async def _run(self, batch: dict[K, asyncio.Future[V | None]]) -> None:
        self.loads += 1
        try:
            found = await self._load(list(batch))
        except asyncio.CancelledError:  # the loop is closing: so are its callers
            for future in batch.values():
                future.cancel()
            raise
        except Exception as exc:  # every caller of the batch sees it
            for future in batch.values():
                if not future.done():
                    future.set_exception(exc)
                    future.exception()  # retrieved: a caller gone is no "never retrieved"
            return
        for key, future in batch.items():
            if not future.done():
                future.set_result(found.get(key))
