"""The replayer task: woken at once when the database is back, backing off while it is not, and
two of them replaying at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import pytest

from bot.config import Settings
from bot.db.engine import Database
from bot.memory.service import MemoryService
from bot.memory.spool import durable as spool_module
from bot.memory.spool.durable import DurableSpool, spool_path
from tests.helpers.builders import ALICE, CHANNEL, GUILD, ManualClock, make_service, turn_for
from tests.integration.spool.harness import OTHER, down, summaries


async def test_the_replayer_retries_at_once_when_told_the_database_is_back(
    db: Database, spool: DurableSpool, service: MemoryService
) -> None:
    turn = await turn_for(service)
    plan = down(service)
    await service.update_stm(turn, summary="waiting")
    failed, replayed = asyncio.Event(), asyncio.Event()

    task = asyncio.create_task(
        spool.run_replayer(
            service.sessions,
            on_replayed=replayed.set,
            on_retry=lambda _exc: failed.set(),
            # Only a wake-up can make it retry within the test.
            first_wait_seconds=3600,
            max_wait_seconds=3600,
        )
    )
    try:
        await asyncio.wait_for(failed.wait(), timeout=30)
        plan.clear()
        spool.database_back()
        await asyncio.wait_for(replayed.wait(), timeout=30)
    finally:
        task.cancel()
    assert spool.pending == 0
    assert [s for _, s, _ in await summaries(db)] == ["waiting", "waiting"]


async def test_new_writes_during_an_outage_do_not_cut_the_backoff_short(
    spool: DurableSpool, service: MemoryService
) -> None:
    turn = await turn_for(service)
    replays = down(service).fail("replaying the spool")  # counts the replayer's sessions
    await service.update_stm(turn, summary="first")
    attempts: list[Exception] = []
    failed = asyncio.Event()

    def on_retry(exc: Exception) -> None:
        attempts.append(exc)
        failed.set()

    task = asyncio.create_task(
        spool.run_replayer(
            service.sessions, on_retry=on_retry, first_wait_seconds=3600, max_wait_seconds=3600
        )
    )
    try:
        await asyncio.wait_for(failed.wait(), timeout=30)
        assert (replays.met, len(attempts)) == (1, 1)
        for n in range(20):  # each append wakes an idle replayer, not one backing off
            await service.update_stm(await turn_for(service), summary=f"more {n}")
        # A replayer woken from its backoff either has not run yet (the "database is
        # back" event is still set) or has opened a session for its next attempt: the
        # replay clears the event and opens the session without yielding in between.
        assert not spool._back.is_set()
        assert (replays.met, len(attempts)) == (1, 1)
        assert spool.pending == 21
        # What does end the backoff is seen by the same two checks.
        failed.clear()
        spool.database_back()
        await asyncio.wait_for(failed.wait(), timeout=30)
        assert (replays.met, len(attempts)) == (2, 2)
    finally:
        task.cancel()
    assert spool.pending == 21


# The waits of the replayer's default backoff, one per failed attempt in a row: doubling
# from half a second, capped at 30 s.
BACKOFF_WAITS = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


async def test_the_replayers_backoff_doubles_to_its_cap_and_starts_over_after_a_replay(
    db: Database,
    settings: Settings,
    spool: DurableSpool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each failed attempt logs the wait it then takes (the value it waits on). Every
    wait is cut short by the "database is back" call, so nothing really waits (that an
    uncut wait lasts that long is shown above, with first_wait_seconds=3600)."""
    caplog.set_level(logging.INFO, logger=spool_module.__name__)
    service = make_service(db.sessions, settings, spool=spool)
    turn = await turn_for(service)
    plan = down(service)
    assert str(await service.update_stm(turn, summary="first outage")) == "saved, pending sync"
    failures: list[Exception] = []
    replayed, failed_again = asyncio.Event(), asyncio.Event()

    def on_retry(exc: Exception) -> None:
        failures.append(exc)
        if len(failures) == len(BACKOFF_WAITS):
            plan.clear()  # the database is back: the next attempt succeeds
        if len(failures) <= len(BACKOFF_WAITS):
            spool.database_back()  # ends this wait at once
        else:
            failed_again.set()  # the first failure after the replay: left to wait

    def on_replayed() -> None:
        plan.fail()  # the next outage
        replayed.set()

    task = asyncio.create_task(
        spool.run_replayer(service.sessions, on_replayed=on_replayed, on_retry=on_retry)
    )
    try:
        await asyncio.wait_for(replayed.wait(), timeout=30)
        assert spool.pending == 0
        second = await service.update_stm(await turn_for(service), summary="second outage")
        assert str(second) == "saved, pending sync"
        await asyncio.wait_for(failed_again.wait(), timeout=30)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    waits = [
        record.args[2]
        for record in caplog.records
        if record.name == spool_module.__name__
        and isinstance(record.args, tuple)
        and str(record.msg).startswith("spool: %d operations wait for the database")
    ]
    assert len(failures) == len(BACKOFF_WAITS) + 1
    assert waits == [*BACKOFF_WAITS, 0.5]  # after the replay it starts over from 0.5 s
    assert spool.pending == 1


async def test_two_processes_replaying_clears_of_the_same_channels_do_not_deadlock(
    db: Database, tmp_path: Path
) -> None:
    now = ManualClock().now()
    one, two = (
        DurableSpool(spool_path(tmp_path / "one")),
        DurableSpool(spool_path(tmp_path / "two")),
    )
    for channel in (CHANNEL, OTHER):
        one.append_clear(channel, GUILD, ALICE, now)
    for channel in (OTHER, CHANNEL):  # the other order: locks taken as met would deadlock
        two.append_clear(channel, GUILD, ALICE, now)

    assert await asyncio.gather(one.replay(db.sessions), two.replay(db.sessions)) == [2, 2]
