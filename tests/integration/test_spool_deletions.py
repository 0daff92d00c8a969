"""The spool's edges: a failed append leaves nothing to replay, and a /refresh or
/forget-me that waits in a spool (or was heard from another process) is never undone by
what was read or spooled around it: not after a restart, not by a late write, not in the
files set aside."""

from __future__ import annotations

import asyncio
import resource
import signal
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.memory.model import ScopeKey
from bot.memory.service import MemoryService
from bot.memory.spool import DurableSpool, spool_path
from bot.memory.storage import MemoryUnavailable
from bot.memory.turn import TurnState
from tests.helpers.builders import ALICE, BOB, BOT, CHANNEL, GUILD, ManualClock, make_service
from tests.helpers.fake_llm import refused_base_url

SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)


@pytest.fixture
async def dead_engine() -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(
        refused_base_url().replace("http://", "postgresql+asyncpg://u:p@") + "db"
    )
    yield engine
    await engine.dispose()


async def summaries(db: Database) -> list[tuple[str, str, int]]:
    async with db.sessions() as session:
        rows = await session.scalars(select(ShortTermMemory).order_by(ShortTermMemory.scope_kind))
        return [(r.scope_kind, r.summary, r.version) for r in rows]


async def turn_for(service: MemoryService, user: int = ALICE) -> TurnState:
    prepared = await service.prepare_turn(
        channel_id=CHANNEL, user_id=user, guild_id=GUILD, bot_user_id=BOT
    )
    return prepared.turn


async def test_a_spool_append_refused_by_a_full_disk_is_not_replayed_after_a_restart(
    db: Database, settings: Settings, tmp_path: Path, dead_engine: AsyncEngine
) -> None:
    """Disk full while the database is down: the write is (correctly) rejected and the
    cache rolled back. Space comes back, the next write is acknowledged "saved, pending
    sync", then the process is killed before the database returns. After the restart the
    replay must store the acknowledged write, never the rejected one."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    turn = await turn_for(service)  # warm while the database is up
    real = service._sessions
    service._sessions = async_sessionmaker(dead_engine)  # the database goes down
    assert str(await service.update_stm(turn, summary="one")) == "saved, pending sync"

    # The disk fills up: the kernel refuses to grow any file past its current size.
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (spool.path.stat().st_size, hard))
    try:
        rejected = await service.update_stm(await turn_for(service), summary="REJECTED")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert not rejected.ok  # correctly reported as not saved
    assert (await service.entry(SERVER_KEY)).summary == "one"  # and rolled back

    acknowledged = await service.update_stm(await turn_for(service), summary="acknowledged")
    assert str(acknowledged) == "saved, pending sync"
    assert spool.pending == 2
    spool.close()  # SIGKILL: the process is gone before the database is back

    reopened = DurableSpool(spool_path(tmp_path))
    pending_after_restart = reopened.pending
    await reopened.replay(real)
    stored = await summaries(db)
    assert (pending_after_restart, stored) == (
        2,
        [("server", "acknowledged", 2), ("user", "acknowledged", 2)],
    )


async def test_a_refresh_still_in_the_spool_after_a_restart_does_not_bring_the_memory_back(
    db: Database, settings: Settings, tmp_path: Path, dead_engine: AsyncEngine
) -> None:
    """/refresh during an outage is spooled (``pending_sync``); the process restarts with
    it still pending. Until it is replayed, hydration must not serve the wiped row (the
    running process has a tombstone for exactly this; a restarted one has none)."""
    first = make_service(
        db.sessions, settings, ManualClock(), spool=DurableSpool(spool_path(tmp_path))
    )
    await first.update_stm(await turn_for(first), summary="wiped secret")
    real = first._sessions
    first._sessions = async_sessionmaker(dead_engine)
    receipt = await first.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    assert receipt.pending_sync
    assert not (await first.entry(SERVER_KEY)).has_content  # the running process: fine
    assert first.spool is not None
    first.spool.close()

    # Restart; the database is reachable again but the replayer has not run yet.
    restarted = make_service(
        real, settings, ManualClock(), spool=DurableSpool(spool_path(tmp_path))
    )
    assert restarted.pending_sync == 1
    prepared = await restarted.prepare_turn(
        channel_id=CHANNEL, user_id=ALICE, guild_id=GUILD, bot_user_id=BOT
    )
    assert prepared.entry.summary == ""  # the wiped memory is not in the prompt


async def test_a_refresh_heard_by_notice_is_not_undone_by_this_processs_spooled_write(
    db: Database, settings: Settings, tmp_path: Path, dead_engine: AsyncEngine
) -> None:
    """Process A spooled a write (database blip). Process B runs /refresh on the channel;
    A hears the clear notice (evicts, new epoch). A's replay will correctly skip the
    spooled write (the turn started before the clear), but until then A's hydration
    serves the spooled, wiped text from ``spool.latest`` - and once the replay has run,
    A's cache still holds it while the database holds nothing."""
    spool = DurableSpool(spool_path(tmp_path))
    a = make_service(db.sessions, settings, ManualClock(), spool=spool)
    turn = await turn_for(a)
    real = a._sessions
    a._sessions = async_sessionmaker(dead_engine)
    assert str(await a.update_stm(turn, summary="wiped by the refresh")) == "saved, pending sync"
    a._sessions = real  # the database is back; A's replayer is still backing off

    clock_b = ManualClock()
    clock_b.advance(seconds=5)
    b = make_service(db.sessions, settings, clock_b)
    await b.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    a.apply_notice({"o": b.instance_id, "t": "clear", "c": CHANNEL})  # as delivered

    during = (await a.entry(SERVER_KEY)).summary
    await spool.replay(db.sessions)
    a.spool_replayed()
    after = (await a.entry(SERVER_KEY)).summary
    observed = (during, after, await summaries(db))
    assert observed == ("", "", []), observed


async def test_forget_me_also_removes_the_users_words_from_set_aside_spool_files(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """A spooled record the database refused is moved to ``stm.corrupt-*.jsonl`` with its
    full memory text. /forget-me must remove everything derived from the user (tables
    *and spool*); the set-aside copy is never touched."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    entry = await service.entry(SERVER_KEY)
    poisoned = replace(entry, key=ScopeKey.server(GUILD, 2**63 + 5))  # refused by the DB
    poisoned.summary, poisoned.version = "Alice's home address", 1
    poisoned.contributor_ids = [ALICE]
    spool.append([poisoned])
    await spool.replay(db.sessions)  # set aside, as designed
    service.spool_replayed()

    receipt = await service.forget_user(ALICE)

    assert not receipt.pending_sync
    leftovers = [
        p.name
        for p in spool.path.parent.iterdir()
        if "Alice's home address" in p.read_text(encoding="utf-8", errors="replace")
    ]
    assert leftovers == []


async def test_a_refresh_that_failed_does_not_leave_the_channel_unwritable_forever(
    db: Database, settings: Settings, tmp_path: Path, dead_engine: AsyncEngine
) -> None:
    """/refresh while the database is down and the spool cannot be written (disk full):
    the command correctly reports failure. But the channel keeps its tombstone, so once
    everything is healthy again every STM write there is built on version 0 and refused
    as stale by the existing row - for as long as the process lives."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    for n in range(3):
        await service.update_stm(await turn_for(service), summary=f"v{n + 1}")
    real = service._sessions
    service._sessions = async_sessionmaker(dead_engine)

    def disk_full(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    spool.append_clear = disk_full  # type: ignore[method-assign]
    with pytest.raises(MemoryUnavailable):  # reported as failed: correct
        await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    service._sessions = real  # database and disk are fine again

    results = [
        str(await service.update_stm(await turn_for(service), summary=f"after recovery {n}"))
        for n in range(3)
    ]
    assert results == ["saved"] * 3


async def test_a_forget_me_still_in_the_spool_after_a_restart_does_not_bring_the_memory_back(
    db: Database, settings: Settings, tmp_path: Path, dead_engine: AsyncEngine
) -> None:
    """Same as the refresh case for /forget-me: spooled during an outage, the process
    restarts, the database answers before the replayer has run."""
    first = make_service(
        db.sessions, settings, ManualClock(), spool=DurableSpool(spool_path(tmp_path))
    )
    await first.update_stm(await turn_for(first), summary="Alice's diary")
    real = first._sessions
    first._sessions = async_sessionmaker(dead_engine)
    assert (await first.forget_user(ALICE)).pending_sync
    assert first.spool is not None
    first.spool.close()

    restarted = make_service(
        real, settings, ManualClock(), spool=DurableSpool(spool_path(tmp_path))
    )
    assert restarted.pending_sync == 1
    prepared = await restarted.prepare_turn(
        channel_id=CHANNEL, user_id=BOB, guild_id=GUILD, bot_user_id=BOT
    )
    assert "Alice's diary" not in prepared.entry.summary


async def test_a_forget_me_heard_while_a_write_of_theirs_is_on_its_way_to_the_spool(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """Process B's write of Alice's words is in flight when its database stalls. Process A
    runs /forget-me (its database is fine) and B hears the notice *before* the write
    times out: ``holds_user`` is still False, so no deletion is queued. The write then
    lands in the spool and is replayed whenever B's database answers again - after A's
    one-off sweep (10 s) if the stall lasts longer - and Alice's words are back."""
    connected = asyncio.Event()

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.set()
        await reader.read()  # accept, never answer: a stalled database

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stalled = create_async_engine(f"postgresql+asyncpg://u:p@127.0.0.1:{port}/db")
    try:
        spool = DurableSpool(spool_path(tmp_path))
        b = make_service(db.sessions, settings, ManualClock(), spool=spool)
        turn = await turn_for(b)
        real = b._sessions
        b._sessions = async_sessionmaker(stalled)
        write = asyncio.create_task(b.update_stm(turn, summary="Alice's words"))
        await asyncio.wait_for(connected.wait(), 5)  # the write waits on the stalled database

        a = make_service(db.sessions, settings, ManualClock())
        a.forget_sweep_seconds = 0.01  # its sweep is over before B's database is back
        await a.forget_user(ALICE)
        await a.drain_sweeps()
        b.apply_notice({"o": a.instance_id, "t": "forget", "u": ALICE})  # as delivered

        assert str(await write) == "saved, pending sync"  # after DB_TIMEOUT_SECONDS
        b._sessions = real
        await spool.replay(db.sessions)
        assert await summaries(db) == []
    finally:
        await stalled.dispose()
        server.close()
