"""Waiting, without sleeps, for the asyncio tasks discord.py started for one fed gateway event."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any


class HarnessTimeoutError(TimeoutError):
    """The tasks dispatched for an event did not finish within the safety timeout."""


class _TaskTracker:
    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[Any]] = []

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        before = asyncio.all_tasks()
        try:
            yield
        finally:
            self.tasks.extend(asyncio.all_tasks() - before)

    async def wait(self, limit: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        finished: set[asyncio.Task[Any]] = set()
        errors: list[BaseException] = []
        # Tasks may add more tasks to the tracker (message echoes) while we wait.
        while pending := [t for t in self.tasks if t not in finished]:
            done, not_done = await asyncio.wait(pending, timeout=max(deadline - loop.time(), 0))
            for task in done:
                finished.add(task)
                if not task.cancelled() and task.exception() is not None:
                    errors.append(task.exception())  # type: ignore[arg-type]
            if not_done:
                names = ", ".join(sorted(t.get_name() for t in not_done))
                raise HarnessTimeoutError(f"still running after {limit}s: {names}")
        if errors:
            raise errors[0]


_TRACKER: contextvars.ContextVar[_TaskTracker | None] = contextvars.ContextVar(
    "kioku_event_tasks", default=None
)


@contextlib.contextmanager
def tracked() -> Iterator[None]:
    """Count the tasks created in this block as the current event's, if one is being fed."""
    tracker = _TRACKER.get()
    if tracker is None:
        yield
        return
    with tracker.capture():
        yield


# Tasks the bot spawns itself (asyncio.create_task) are not awaited: tests wait for those
# through the bot's own means.
async def run_tracked(fn: Callable[..., Any], *args: Any, limit: float) -> Any:
    """Call the synchronous ``fn`` (a ``state.parse_*``), then await the tasks it started."""
    tracker = _TaskTracker()
    token = _TRACKER.set(tracker)
    try:
        with tracker.capture():
            result = fn(*args)
        await tracker.wait(limit)
    finally:
        _TRACKER.reset(token)
    return result
