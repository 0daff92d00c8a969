"""The one registry of a process's background tasks, started and stopped together."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator
from functools import partial
from typing import Any, TypeVar

from bot.runtime.singleflight import finish_or_cancel

log = logging.getLogger(__name__)
T = TypeVar("T")


class TaskRegistry:
    """Background tasks, each kept referenced until it ends and its failure logged."""

    def __init__(self) -> None:
        # Work ends by itself (a summary); loops run until cancelled (the janitor).
        self._work: set[asyncio.Task[Any]] = set()
        self._loops: set[asyncio.Task[Any]] = set()

    def spawn(
        self, coro: Coroutine[Any, Any, T], *, name: str, endless: bool = False
    ) -> asyncio.Task[T]:
        """Run ``coro`` in the background (``endless``: a loop that only cancelling ends)."""
        task = asyncio.create_task(coro, name=name)
        group = self._loops if endless else self._work
        group.add(task)
        task.add_done_callback(partial(self._ended, group))
        return task

    def _ended(self, group: set[asyncio.Task[Any]], task: asyncio.Task[Any]) -> None:
        group.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter([*self._work, *self._loops])

    async def wait(self, grace: float | None = None) -> int:
        """Await the work (not the loops); past ``grace`` seconds cancel it, returning how many."""
        if grace is not None:
            return await finish_or_cancel(self._work, grace)
        while self._work:  # work may spawn more work
            await asyncio.gather(*self._work, return_exceptions=True)
        return 0

    async def cancel_all(self) -> None:
        """Cancel every task, loops included, and wait until they have ended."""
        tasks = list(self)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
