"""Writes, /refresh and /forget-me made while the database refuses them: spooled, acknowledged as
pending, replayed in order, kept across a restart."""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import StmEvent
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, inspect_spool, spool_path
from bot.memory.stm.change import WriteResult
from bot.vocabulary.errors import MemoryUnavailable
from bot.vocabulary.model import Category
from tests.helpers.builders import (
    ALICE,
    BOB,
    CHANNEL,
    GUILD,
    ManualClock,
    make_service,
    prepare,
    turn_for,
)
from tests.helpers.faults import back, outage, own_sessions
from tests.integration.spool.harness import SERVER_KEY, down, summaries


async def test_a_refused_write_is_spooled_and_acknowledged_as_pending(
    db: Database, spool: DurableSpool, service: MemoryService
) -> None:
    turn = await turn_for(service)  # warm: hydrated while the database was up
    down(service)
    result = await service.update_stm(turn, summary="written during the outage")
    assert str(result) == "saved, pending sync"
    assert spool.pending == 1 and service.pending_sync == 1
    assert inspect_spool(spool.path.parent.parent).pending == 1
    assert (await service.entry(SERVER_KEY)).summary == "written during the outage"
    assert await summaries(db) == []

    await back(service.sessions)
    assert await spool.replay(db.sessions) == 1
    assert await summaries(db) == [
        ("server", "written during the outage", 1),
        ("user", "written during the outage", 1),
    ]
    async with db.sessions() as session:
        assert [e.event for e in await session.scalars(select(StmEvent))] == ["update", "update"]
    assert spool.pending == 0 and inspect_spool(spool.path.parent.parent).pending == 0


async def test_replay_never_overwrites_a_newer_version(
    db: Database, settings: Settings, spool: DurableSpool, service: MemoryService
) -> None:
    turn = await turn_for(service)
    async with outage(service.sessions):
        await service.update_stm(turn, summary="spooled v1")
    # Meanwhile another process wrote a newer version straight to the database.
    other = make_service(db.sessions, settings)
    assert (await other.update_stm(await turn_for(other, BOB), summary="older elsewhere")).ok
    assert (await other.update_stm(await turn_for(other, BOB), summary="newer from elsewhere")).ok
    await spool.replay(db.sessions)
    assert ("server", "newer from elsewhere", 2) in await summaries(db)


async def test_a_clear_during_the_outage_is_replayed_after_the_writes(
    db: Database, spool: DurableSpool, service: MemoryService
) -> None:
    turn = await turn_for(service)
    down(service)
    await service.update_stm(turn, summary="to be wiped")
    receipt = await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    assert receipt.pending_sync
    # Nothing brings it back before the replay either.
    assert not (await service.entry(SERVER_KEY)).has_content
    await back(service.sessions)
    assert await spool.replay(db.sessions) == 2
    assert await summaries(db) == []
    service.spool_replayed()
    assert not (await service.entry(SERVER_KEY)).has_content


async def test_forget_me_during_the_outage_is_replayed(
    db: Database, spool: DurableSpool, service: MemoryService
) -> None:
    await service.update_stm(await turn_for(service), summary="Alice's plans")
    async with outage(service.sessions):
        receipt = await service.forget_user(ALICE)
    assert receipt.pending_sync
    await spool.replay(db.sessions)
    assert await summaries(db) == []


async def test_a_restarted_process_prefers_spooled_state_over_older_rows(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    first = make_service(own_sessions(db), settings, spool=DurableSpool(spool_path(tmp_path)))
    await first.update_stm(await turn_for(first), summary="in the database")
    down(first)
    await first.update_stm(await turn_for(first), summary="only in the spool")
    assert first.spool is not None
    first.spool.close()

    reopened = DurableSpool(spool_path(tmp_path))
    assert reopened.pending == 1
    restarted = make_service(db.sessions, settings, spool=reopened)
    entry = await restarted.entry(SERVER_KEY)
    assert (entry.summary, entry.version) == ("only in the spool", 2)
    # A write before the replay gets the next version, so the replay cannot beat it.
    await restarted.update_stm(await turn_for(restarted), summary="after restart")
    await reopened.replay(db.sessions)
    assert ("server", "after restart", 3) in await summaries(db)


# ------------------------------------------------ ordering once the database is back


async def spooled_write(service: MemoryService, summary: str) -> WriteResult:
    """One STM update made while the database refuses connections; then it is back (the
    replayer has not run yet)."""
    turn = await turn_for(service)
    async with outage(service.sessions):
        return await service.update_stm(turn, summary=summary)


async def test_a_refresh_after_the_outage_queues_behind_the_spooled_write(
    db: Database, spool: DurableSpool, service: MemoryService
) -> None:
    await spooled_write(service, "secret plan")

    receipt = await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)

    # Deleting the rows now and replaying the write later would bring it back: the clear
    # waits in the spool behind the write instead.
    assert receipt.pending_sync and spool.pending == 2
    assert not (await service.entry(SERVER_KEY)).has_content
    assert await spool.replay(db.sessions) == 2
    assert await summaries(db) == []


async def test_forget_me_after_the_outage_reaches_the_spooled_write(
    db: Database, spool: DurableSpool, service: MemoryService
) -> None:
    await spooled_write(service, "Alice's diary")

    receipt = await service.forget_user(ALICE)

    assert receipt.pending_sync
    await spool.replay(db.sessions)
    assert await summaries(db) == []
    assert "Alice's diary" not in spool.path.read_text(encoding="utf-8")


async def test_writes_after_the_outage_queue_behind_the_spool_until_it_is_replayed(
    db: Database, spool: DurableSpool, service: MemoryService
) -> None:
    first = await spooled_write(service, "v1 during the outage")
    second = await service.update_stm(await turn_for(service), summary="v2 after it")

    assert (str(first), str(second)) == ("saved, pending sync", "saved, pending sync")
    assert await summaries(db) == []
    await spool.replay(db.sessions)
    assert await summaries(db) == [("server", "v2 after it", 2), ("user", "v2 after it", 2)]
    third = await service.update_stm(await turn_for(service), summary="v3 direct")
    assert str(third) == "saved" and spool.pending == 0


async def test_hydration_takes_a_newer_row_over_an_older_spooled_state(
    db: Database, settings: Settings, spool: DurableSpool, service: MemoryService
) -> None:
    await spooled_write(service, "spooled v1")
    # Another process writes the same memory, newer, straight to the database.
    other = make_service(db.sessions, settings)
    assert (await other.update_stm(await turn_for(other, BOB), summary="older elsewhere")).ok
    assert (await other.update_stm(await turn_for(other, BOB), summary="newer from elsewhere")).ok
    service.drop_all()  # e.g. the notice connection was lost and came back

    entry = await service.entry(SERVER_KEY)

    assert (entry.summary, entry.version) == ("newer from elsewhere", 2)


async def test_a_replayed_clear_never_deletes_a_newer_write(
    db: Database, clock: ManualClock, spool: DurableSpool, service: MemoryService
) -> None:
    async with outage(service.sessions):
        await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    await spool.replay(db.sessions)
    record = {"op": "clear", "channel": CHANNEL, "guild": GUILD, "actor": BOB}
    record["at"] = clock.now().isoformat()
    clock.advance(seconds=60)
    service.spool_replayed()
    await service.update_stm(await turn_for(service), summary="written after the clear")
    # A crash between the replay's commit and the spool's rewrite replays the clear again.
    spool._write(record)
    await spool.replay(db.sessions)
    assert [s for _, s, _ in await summaries(db)] == ["written after the clear"] * 2


# ---------------------------------------- failed appends; deletions waiting in a spool


@contextlib.contextmanager
def disk_full(spool: DurableSpool) -> Iterator[None]:
    """The disk fills up: the kernel refuses to grow any file past the spool's size."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (spool.path.stat().st_size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


async def test_a_spool_append_refused_by_a_full_disk_is_not_replayed_after_a_restart(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """Disk full while the database is down: the write is (correctly) rejected and the
    cache rolled back. Space comes back, the next write is acknowledged "saved, pending
    sync", then the process is killed before the database returns. After the restart the
    replay must store the acknowledged write, never the rejected one."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(own_sessions(db), settings, spool=spool)
    turn = await turn_for(service)  # warm while the database is up
    down(service)
    assert str(await service.update_stm(turn, summary="one")) == "saved, pending sync"

    with disk_full(spool):
        rejected = await service.update_stm(await turn_for(service), summary="REJECTED")
    assert not rejected.ok  # correctly reported as not saved
    assert (await service.entry(SERVER_KEY)).summary == "one"  # and rolled back

    acknowledged = await service.update_stm(await turn_for(service), summary="acknowledged")
    assert str(acknowledged) == "saved, pending sync"
    assert spool.pending == 2
    spool.close()  # SIGKILL: the process is gone before the database is back

    reopened = DurableSpool(spool_path(tmp_path))
    pending_after_restart = reopened.pending
    await reopened.replay(db.sessions)
    stored = await summaries(db)
    assert (pending_after_restart, stored) == (
        2,
        [("server", "acknowledged", 2), ("user", "acknowledged", 2)],
    )


async def test_a_refresh_still_in_the_spool_after_a_restart_does_not_bring_the_memory_back(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """/refresh during an outage is spooled (``pending_sync``); the process restarts with
    it still pending. Until it is replayed, hydration must not serve the wiped row (the
    running process has a tombstone for exactly this; a restarted one has none)."""
    first = make_service(own_sessions(db), settings, spool=DurableSpool(spool_path(tmp_path)))
    await first.update_stm(await turn_for(first), summary="wiped secret")
    down(first)
    receipt = await first.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    assert receipt.pending_sync
    assert not (await first.entry(SERVER_KEY)).has_content  # the running process: fine
    assert first.spool is not None
    first.spool.close()

    # Restart; the database is reachable again but the replayer has not run yet.
    restarted = make_service(db.sessions, settings, spool=DurableSpool(spool_path(tmp_path)))
    assert restarted.pending_sync == 1
    prepared = await prepare(restarted)
    assert prepared.entry.summary == ""  # the wiped memory is not in the prompt


async def test_a_refresh_that_failed_does_not_leave_the_channel_unwritable_forever(
    spool: DurableSpool, service: MemoryService
) -> None:
    """/refresh while the database is down and the spool cannot be written (disk full):
    the command correctly reports failure. But the channel keeps its tombstone, so once
    everything is healthy again every STM write there is built on version 0 and refused
    as stale by the existing row - for as long as the process lives."""
    for n in range(3):
        await service.update_stm(await turn_for(service), summary=f"v{n + 1}")
    async with outage(service.sessions):
        with disk_full(spool), pytest.raises(MemoryUnavailable):  # reported as failed: correct
            await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    # Database and disk are fine again.

    results = [
        str(await service.update_stm(await turn_for(service), summary=f"after recovery {n}"))
        for n in range(3)
    ]
    assert results == ["saved"] * 3


async def test_a_forget_me_still_in_the_spool_after_a_restart_does_not_bring_the_memory_back(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """Same as the refresh case for /forget-me: spooled during an outage, the process
    restarts, the database answers before the replayer has run."""
    first = make_service(own_sessions(db), settings, spool=DurableSpool(spool_path(tmp_path)))
    await first.update_stm(await turn_for(first), summary="Alice's diary")
    down(first)
    assert (await first.forget_user(ALICE)).pending_sync
    assert first.spool is not None
    first.spool.close()

    restarted = make_service(db.sessions, settings, spool=DurableSpool(spool_path(tmp_path)))
    assert restarted.pending_sync == 1
    prepared = await prepare(restarted, BOB)
    assert "Alice's diary" not in prepared.entry.summary


async def test_a_spooled_record_does_not_change_when_the_cache_entry_does(
    spool: DurableSpool, service: MemoryService
) -> None:
    """The record replayed is what was acknowledged: a later write of this process
    mutates the live cache entry's categories in place, never the record's copy."""
    await service.set_categories(GUILD, BOB, [Category(0, "plans", "Plans", "plans")])
    first, second = await turn_for(service), await turn_for(service)
    down(service)
    assert str(await service.update_stm(first, categories={"plans": "first"})) == (
        "saved, pending sync"
    )
    assert str(await service.update_stm(second, categories={"plans": "second"})) == (
        "saved, pending sync"
    )
    assert spool._records[0]["entries"][0]["categories"] == {"plans": "first"}
