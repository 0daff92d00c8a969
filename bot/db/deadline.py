"""Timeouts that measure the database, not this process's own backlog.

A thousand turns starting at once keep the event loop busy for seconds at a stretch: an
answer the database sent in a millisecond waits in the socket until the loop reads it.
With a plain wall-clock timeout such a read "times out", the database is marked down and
every turn falls back to what is cached. :func:`database_deadline` gives the database its
seconds of the loop's attention instead: time during which the loop ran nothing else (it
was late for a ticker that wakes every :data:`TICK_SECONDS`) does not count. A database
that really does not answer is still found out, once the burst is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator

# How often the ticker wakes; lateness beyond one tick counts as the loop being stalled.
TICK_SECONDS = 0.1


class LoopStalls:
    """How long one event loop has been too busy to run its timers, in total."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._stalled = 0.0
        self._last = loop.time()
        # A timer, not a task: nothing to cancel when the loop closes. The timer keeps
        # this object alive; this object keeps no reference to the loop.
        loop.call_later(TICK_SECONDS, self._tick)

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        self.stalled(loop.time())
        loop.call_later(TICK_SECONDS, self._tick)

    def stalled(self, now: float) -> float:
        """Seconds the loop was stalled until ``now`` (a stall still going on included)."""
        late = now - self._last - TICK_SECONDS
        if late > TICK_SECONDS:
            self._stalled += late
            self._last = now
        elif late >= 0:
            self._last = now
        return self._stalled


_stalls: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopStalls] = (
    weakref.WeakKeyDictionary()
)


def loop_stalls() -> LoopStalls:
    """The running loop's stall clock (started on first use)."""
    loop = asyncio.get_running_loop()
    stalls = _stalls.get(loop)
    if stalls is None:
        stalls = _stalls[loop] = LoopStalls(loop)
    return stalls


@contextlib.asynccontextmanager
async def database_deadline(seconds: float) -> AsyncIterator[None]:
    """As ``asyncio.timeout(seconds)`` (TimeoutError when it runs out), with the time the
    loop itself was stalled meanwhile added to it."""
    loop = asyncio.get_running_loop()
    stalls = loop_stalls()
    began, stalled_before = loop.time(), stalls.stalled(loop.time())
    async with asyncio.timeout(None) as timeout:

        def check() -> None:
            now = loop.time()
            left = began + seconds + stalls.stalled(now) - stalled_before - now
            if left <= 0:
                timeout.reschedule(now)  # expire: the block is cancelled as by a timeout
            else:
                pending[0] = loop.call_later(left, check)

        pending = [loop.call_later(seconds, check)]
        try:
            yield
        finally:
            pending[0].cancel()
