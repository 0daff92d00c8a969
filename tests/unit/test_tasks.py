"""The background task registry: references kept, failures logged, shutdown in two steps."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bot.runtime.tasks import TaskRegistry


async def test_a_failed_task_is_logged_and_let_go(caplog: pytest.LogCaptureFixture) -> None:
    tasks = TaskRegistry()

    async def boom() -> None:
        raise ValueError("broken")

    with caplog.at_level(logging.ERROR, logger="bot.runtime.tasks"):
        task = tasks.spawn(boom(), name="boom")
        assert list(tasks) == [task]  # referenced while it runs
        assert await tasks.wait() == 0
    assert list(tasks) == []
    [record] = caplog.records
    assert record.getMessage() == "background task boom failed"
    assert isinstance(record.exc_info and record.exc_info[1], ValueError)


async def test_wait_lets_work_finish_cancels_late_work_and_leaves_loops_running() -> None:
    tasks = TaskRegistry()
    forever = asyncio.Event()
    quick = tasks.spawn(asyncio.sleep(0, result="done"), name="quick")
    late = tasks.spawn(forever.wait(), name="late")
    loop = tasks.spawn(forever.wait(), name="loop", endless=True)
    assert await quick == "done"

    assert await tasks.wait(grace=0.0) == 1
    assert late.cancelled()
    assert not loop.done(), "a loop waits for cancel_all"

    await tasks.cancel_all()
    assert loop.cancelled()
    assert list(tasks) == []


async def test_wait_without_grace_waits_for_work_that_work_spawned() -> None:
    tasks = TaskRegistry()
    ended: list[str] = []

    async def second() -> None:
        ended.append("second")

    async def first() -> None:
        tasks.spawn(second(), name="second")
        ended.append("first")

    tasks.spawn(first(), name="first")
    await tasks.wait()
    assert ended == ["first", "second"]
