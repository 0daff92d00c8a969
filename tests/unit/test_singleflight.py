"""Per-key coordination: :class:`KeyedLocks` (one lock per channel, dropped when idle)."""

from __future__ import annotations

import asyncio
import gc
import weakref

from bot.memory.singleflight import KeyedLocks


def test_a_key_has_one_lock_while_it_is_kept_and_other_keys_their_own() -> None:
    locks: KeyedLocks[int] = KeyedLocks()
    first = locks(1)
    assert locks(1) is first
    assert locks(2) is not first


def test_a_lock_nobody_keeps_is_dropped() -> None:
    locks: KeyedLocks[int] = KeyedLocks()
    kept = weakref.ref(locks(1))
    gc.collect()
    assert kept() is None


async def test_holders_of_one_key_take_turns_and_other_keys_do_not_wait() -> None:
    locks: KeyedLocks[int] = KeyedLocks()
    taken, release = asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def hold(key: int, name: str) -> None:
        async with locks(key):
            order.append(name)
            if name == "first":
                taken.set()
                await release.wait()

    first = asyncio.create_task(hold(1, "first"))
    await taken.wait()
    second = asyncio.create_task(hold(1, "second"))
    await hold(2, "other key")  # finishes while key 1 is held
    assert order == ["first", "other key"]
    assert locks(1).locked()

    release.set()
    await asyncio.gather(first, second)
    assert order == ["first", "other key", "second"]
