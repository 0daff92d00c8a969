"""The background passes: the janitor purges rows past retention and records it without text,
turn counts are saved (and kept across a restart), and both loops outlive an outage."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from sqlalchemy import func, select, text

from bot.db.engine import Database
from bot.db.models import StmEvent
from bot.memory.janitor import run_janitor, run_turn_count_saver
from bot.memory.service import MemoryService
from bot.vocabulary.errors import MemoryUnavailable
from tests.helpers.builders import CHANNEL, GUILD, OTHER_CHANNEL, ManualClock, prepare
from tests.helpers.faults import outage
from tests.integration.stm.harness import SERVER_KEY, fresh_process, rows, start_turn


async def test_turn_counts_are_saved_and_a_restart_keeps_counting_from_them(
    service: MemoryService, db: Database, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="the plan")
    updated_at = (await rows(db))[0].updated_at
    for _ in range(3):
        service.finish_turn(await start_turn(service))
    assert [r.turns_since_refresh for r in await rows(db)] == [0, 0]  # a turn never waits

    assert await service.save_turn_counts() == 1  # the channel's row
    assert await service.save_turn_counts() == 0  # nothing counted since

    server = next(r for r in await rows(db) if r.scope_kind == "server")
    # Counting is not an update: neither the version nor the TTL's start moves.
    assert (server.turns_since_refresh, server.version, server.updated_at) == (3, 1, updated_at)
    restarted = fresh_process(service)
    assert (await restarted.entry(SERVER_KEY)).turns_since_refresh == 3
    for _ in range(2):  # the cadence (5) comes due where it would have without the restart
        restarted.finish_turn(await start_turn(restarted))
    prepared = await prepare(restarted)
    assert prepared.prompt.nudge_new_messages is not None


async def test_a_turn_count_saved_after_a_write_leaves_the_write_s_own(
    service: MemoryService, db: Database, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="first")
    service.finish_turn(await start_turn(service))
    # Another process writes the channel (its version 2, its count 0); this one has not
    # heard of it yet when it saves the count it made on version 1.
    other = fresh_process(service)
    assert (await other.update_stm(await start_turn(other), summary="second")).ok

    assert await service.save_turn_counts() == 0

    assert [(r.version, r.turns_since_refresh) for r in await rows(db)] == [(2, 0), (2, 0)]


async def test_turn_counts_that_could_not_be_saved_are_saved_next_time(
    service: MemoryService, db: Database
) -> None:
    await service.update_stm(await start_turn(service), summary="the plan")
    service.finish_turn(await start_turn(service))
    async with outage(service.sessions):
        with pytest.raises(MemoryUnavailable):
            await service.save_turn_counts()
    service.finish_turn(await start_turn(service))

    assert await service.save_turn_counts() == 1

    server = next(r for r in await rows(db) if r.scope_kind == "server")
    assert server.turns_since_refresh == 2


async def test_janitor_deletes_rows_past_retention_only(
    service: MemoryService, db: Database, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="old")
    clock.advance(days=60)
    await service.update_stm(await start_turn(service, channel=OTHER_CHANNEL), summary="newer")
    clock.advance(days=31)
    assert await service.purge_expired_rows() == 2
    assert {r.channel_id for r in await rows(db)} == {OTHER_CHANNEL}


async def test_the_janitor_records_its_pass_and_each_channel_it_emptied_without_text(
    service: MemoryService, db: Database, clock: ManualClock
) -> None:
    summary = "the secret launch codename"
    await service.update_stm(await start_turn(service), summary=summary)
    clock.advance(days=91)
    await service.update_stm(
        await start_turn(service, channel=OTHER_CHANNEL), summary="recent and kept"
    )

    assert await service.purge_expired_rows() == 2  # the server and user rows of CHANNEL

    async with db.sessions() as session:
        expired = list(
            await session.scalars(
                select(StmEvent).where(StmEvent.event == "expire").order_by(StmEvent.id)
            )
        )
    # One event for the channel, in its server's /stm history: the size of both rows.
    # And one for the pass.
    assert [
        (e.guild_id, e.channel_id, e.user_id, e.actor_user_id, e.chars_before, e.chars_after)
        for e in expired
    ] == [(GUILD, CHANNEL, None, None, 2 * len(summary), 0), (None, None, None, None, None, None)]
    async with db.engine.connect() as connection:
        dump = (await connection.execute(text("SELECT stm_events::text FROM stm_events"))).all()
    assert not any("codename" in row[0] for row in dump)

    # A pass that deletes nothing records nothing.
    assert await service.purge_expired_rows() == 0
    async with db.sessions() as session:
        count = select(func.count()).select_from(StmEvent).where(StmEvent.event == "expire")
        assert await session.scalar(count) == 2


class SteppedSleep:
    """The sleep of a background loop, which returns only when the test lets the loop run
    one more pass."""

    def __init__(self) -> None:
        self.asked: asyncio.Queue[float] = asyncio.Queue()  # what each sleep was asked to wait
        self._woken: asyncio.Queue[None] = asyncio.Queue()

    async def __call__(self, seconds: float) -> None:
        await self.asked.put(seconds)
        await self._woken.get()

    async def next_pass(self) -> float:
        """Let the loop run one pass; what its next sleep then asks to wait."""
        self._woken.put_nowait(None)
        return await self.asked.get()


async def test_the_janitor_waits_its_delay_then_purges_daily_and_outlives_a_failed_pass(
    service: MemoryService, db: Database, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    sleep = SteppedSleep()
    await service.update_stm(await start_turn(service), summary="old news")
    clock.advance(days=91)
    janitor = asyncio.create_task(run_janitor(service, sleep=sleep))
    try:
        # SPEC §2: 60 s after start, then daily.
        assert await sleep.asked.get() == 60
        assert len(await rows(db)) == 2, "nothing is purged before the delay"
        assert await sleep.next_pass() == 24 * 3600
        assert await rows(db) == []

        await service.update_stm(await start_turn(service), summary="old again")
        clock.advance(days=91)
        async with outage(service.sessions):
            assert await sleep.next_pass() == 24 * 3600  # failed, and still running
        assert "janitor pass failed: MemoryUnavailable" in caplog.text
        assert len(await rows(db)) == 2
        assert await sleep.next_pass() == 24 * 3600
        assert await rows(db) == []
    finally:
        janitor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await janitor


async def test_the_turn_count_saver_saves_every_minute_and_outlives_an_outage(
    service: MemoryService, db: Database
) -> None:
    sleep = SteppedSleep()

    async def saved_count() -> int:
        server = next(r for r in await rows(db) if r.scope_kind == "server")
        return server.turns_since_refresh

    await service.update_stm(await start_turn(service), summary="the plan")
    saver = asyncio.create_task(run_turn_count_saver(service, sleep=sleep))
    try:
        assert await sleep.asked.get() == 60
        service.finish_turn(await start_turn(service))
        assert await sleep.next_pass() == 60
        assert await saved_count() == 1

        service.finish_turn(await start_turn(service))
        async with outage(service.sessions):
            assert await sleep.next_pass() == 60  # failed, and still running
        assert await saved_count() == 1
        assert await sleep.next_pass() == 60
        assert await saved_count() == 2
    finally:
        saver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await saver
