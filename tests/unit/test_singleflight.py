"""Per-key coordination: :class:`KeyedLocks` (one lock per channel, dropped when idle) and
:class:`KeyedQueues` (a channel's turns, with at most so many waiting)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections import defaultdict

from bot.runtime.singleflight import KeyedLocks, KeyedQueues, finish_or_cancel


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


class Queue:
    """Callers of a :class:`KeyedQueues`, each kept in its place until released."""

    def __init__(self, max_waiting: int) -> None:
        self.queues: KeyedQueues[int] = KeyedQueues(max_waiting)
        self.ran: list[str] = []
        self.turned_away: list[str] = []
        # Released before it started: runs straight through.
        self._release: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    async def join(self, key: int, name: str, *, counted: bool = True) -> asyncio.Task[None]:
        """Start a caller; return once it has its place (or was turned away)."""
        entered = asyncio.Event()
        task = asyncio.create_task(self._run(key, name, entered, counted))
        await entered.wait()  # the place is taken before the caller first waits
        return task

    async def _run(self, key: int, name: str, entered: asyncio.Event, counted: bool) -> None:
        entered.set()
        async with self.queues.place(key, counted=counted) as admitted:
            if not admitted:
                self.turned_away.append(name)
                return
            self.ran.append(name)
            await self._release[name].wait()

    def release(self, name: str) -> None:
        self._release[name].set()


async def test_past_max_waiting_a_caller_is_turned_away_and_the_others_run_in_order() -> None:
    queue = Queue(max_waiting=2)
    callers = [await queue.join(1, f"caller {i}") for i in range(5)]
    # Turned away at once: never waited (checked before awaiting them, which would hang).
    assert queue.turned_away == ["caller 3", "caller 4"]
    assert queue.ran == ["caller 0"]
    for i in range(3):
        queue.release(f"caller {i}")
    await asyncio.gather(*callers)
    assert queue.ran == ["caller 0", "caller 1", "caller 2"]


async def test_with_max_waiting_zero_one_caller_is_in_and_its_place_is_freed() -> None:
    queue = Queue(max_waiting=0)
    first = await queue.join(1, "first")
    second = await queue.join(1, "second")
    assert queue.turned_away == ["second"]
    await second
    queue.release("other key")
    await (await queue.join(2, "other key"))
    queue.release("first")
    await first
    queue.release("third")
    await (await queue.join(1, "third"))
    assert (queue.ran, queue.turned_away) == (["first", "other key", "third"], ["second"])


async def test_a_caller_cancelled_while_waiting_gives_its_place_up() -> None:
    queue = Queue(max_waiting=1)
    first = await queue.join(1, "first")
    waiting = await queue.join(1, "cancelled")
    assert queue.ran == ["first"]
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    later = await queue.join(1, "later")
    queue.release("first")
    queue.release("later")
    await asyncio.gather(first, later)
    assert (queue.ran, queue.turned_away) == (["first", "later"], [])


async def test_an_uncounted_caller_waits_its_turn_and_fills_no_place() -> None:
    queue = Queue(max_waiting=1)
    first = await queue.join(1, "first")
    uncounted = [await queue.join(1, f"uncounted {i}", counted=False) for i in range(3)]
    counted = await queue.join(1, "counted")
    turned_away = await queue.join(1, "one too many")
    assert queue.turned_away == ["one too many"]
    for name in ("first", "uncounted 0", "uncounted 1", "uncounted 2", "counted"):
        queue.release(name)
    await asyncio.gather(first, *uncounted, counted, turned_away)
    assert queue.ran == ["first", "uncounted 0", "uncounted 1", "uncounted 2", "counted"]


async def test_finish_or_cancel_lets_finished_tasks_be_and_cancels_the_rest() -> None:
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    hanging = asyncio.create_task(asyncio.Event().wait())

    cancelled = await finish_or_cancel([done, hanging], grace=0.0)

    assert cancelled == 1
    assert hanging.cancelled() and not done.cancelled()
    assert await finish_or_cancel([], grace=0.0) == 0
