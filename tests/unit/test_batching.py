"""Batched loads (:class:`bot.runtime.BatchLoader`): keys asked for together share a load, a
burst waits behind a few loads rather than making one each, a key never joins a load
already sent, and a failure reaches every caller of its batch only."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import pytest

from bot.runtime import BatchLoader


class Store:
    """A load that records the batches it was asked for, held until released."""

    def __init__(self, values: Mapping[int, str]) -> None:
        self.values = dict(values)
        self.batches: list[list[int]] = []
        self.running = 0
        self.most_running = 0
        self.hold: asyncio.Event | None = None
        self.started = asyncio.Event()
        self.fail_with: Exception | None = None

    async def load(self, keys: Sequence[int]) -> dict[int, str]:
        self.batches.append(list(keys))
        read = dict(self.values)  # what the database held when the load was sent
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        self.started.set()
        try:
            if self.hold is not None:
                await self.hold.wait()
            if self.fail_with is not None:
                raise self.fail_with
            return {key: read[key] for key in keys if key in read}
        finally:
            self.running -= 1


async def test_keys_asked_for_together_share_one_load_and_a_missing_one_is_none() -> None:
    store = Store({1: "one", 2: "two"})
    loader: BatchLoader[int, str] = BatchLoader(store.load)

    found = await asyncio.gather(loader.get(1), loader.get(2), loader.get(3), loader.get(1))

    assert found == ["one", "two", None, "one"]
    assert store.batches == [[1, 2, 3]]


async def test_a_burst_waits_behind_the_running_loads_and_goes_in_few_batches() -> None:
    store = Store({n: str(n) for n in range(1000)})
    store.hold = asyncio.Event()
    loader: BatchLoader[int, str] = BatchLoader(store.load, max_batch=300, concurrency=2)
    first = asyncio.create_task(loader.get(0))
    await store.started.wait()  # one load runs; the burst arrives meanwhile
    # Their tasks run before the held load wakes (callbacks run in the order scheduled).
    burst = [asyncio.create_task(loader.get(n)) for n in range(1, 1000)]
    store.hold.set()

    assert [await task for task in [first, *burst]] == [str(n) for n in range(1000)]
    assert store.most_running <= 2
    assert sorted(key for batch in store.batches for key in batch) == list(range(1000))
    assert len(store.batches) <= 1 + 1000 // 300 + 1
    assert all(len(batch) <= 300 for batch in store.batches)


async def test_a_key_asked_for_while_its_load_runs_goes_in_the_next_load() -> None:
    store = Store({1: "old"})
    store.hold = asyncio.Event()
    loader: BatchLoader[int, str] = BatchLoader(store.load)
    first = asyncio.create_task(loader.get(1))
    await store.started.wait()  # the load of key 1 is on its way ...
    store.values[1] = "new"  # ... when the key changes, and then someone asks for it
    second = asyncio.create_task(loader.get(1))
    store.hold.set()

    assert await first == "old"
    assert await second == "new"
    assert store.batches == [[1], [1]]


async def test_a_failed_load_fails_its_callers_and_the_next_batch_runs() -> None:
    store = Store({1: "one", 2: "two"})
    store.hold = asyncio.Event()
    store.fail_with = RuntimeError("database down")
    loader: BatchLoader[int, str] = BatchLoader(store.load)
    failing = asyncio.create_task(loader.get(1))
    await store.started.wait()
    later = asyncio.create_task(loader.get(2))  # waits for the next load
    store.hold.set()
    with pytest.raises(RuntimeError, match="database down"):
        await failing
    store.fail_with = None

    assert await later == "two"


async def test_a_cancelled_caller_does_not_cancel_the_load_others_wait_for() -> None:
    store = Store({1: "one"})
    store.hold = asyncio.Event()
    loader: BatchLoader[int, str] = BatchLoader(store.load)
    leaving = asyncio.create_task(loader.get(1))
    staying = asyncio.create_task(loader.get(1))
    await store.started.wait()
    leaving.cancel()
    store.hold.set()

    assert await staying == "one"
    assert leaving.cancelled()


async def test_get_many_loads_its_keys_in_one_batch() -> None:
    store = Store({1: "one", 3: "three"})
    loader: BatchLoader[int, str] = BatchLoader(store.load)

    assert await loader.get_many([1, 2, 3]) == {1: "one", 2: None, 3: "three"}
    assert await loader.get_many([]) == {}
    assert store.batches == [[1, 2, 3]]
