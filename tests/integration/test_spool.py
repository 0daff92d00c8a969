"""The durable spool: refused writes are kept, acknowledged truthfully, replayed in order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import ShortTermMemory, StmEvent
from bot.memory.model import ScopeKey
from bot.memory.service import MemoryService
from bot.memory.spool import DurableSpool, count_pending, spool_path
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


@pytest.fixture
def spool(tmp_path: Path) -> DurableSpool:
    return DurableSpool(spool_path(tmp_path))


async def summaries(db: Database) -> list[tuple[str, str, int]]:
    async with db.sessions() as session:
        rows = await session.scalars(select(ShortTermMemory).order_by(ShortTermMemory.scope_kind))
        return [(r.scope_kind, r.summary, r.version) for r in rows]


async def turn_for(service: MemoryService, user: int = ALICE) -> object:
    prepared = await service.prepare_turn(
        channel_id=CHANNEL, user_id=user, guild_id=GUILD, bot_user_id=BOT
    )
    return prepared.turn


async def outage(service: MemoryService, engine: AsyncEngine) -> async_sessionmaker:  # type: ignore[type-arg]
    """Point the service at a database that refuses connections; return the real one."""
    real = service._sessions
    service._sessions = async_sessionmaker(engine)
    return real


async def test_a_refused_write_is_spooled_and_acknowledged_as_pending(
    db: Database, settings: Settings, spool: DurableSpool, dead_engine: AsyncEngine
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    turn = await turn_for(service)  # warm: hydrated while the database was up
    real = await outage(service, dead_engine)
    result = await service.update_stm(turn, summary="written during the outage")  # type: ignore[arg-type]
    assert str(result) == "saved, pending sync"
    assert spool.pending == 1 and service.pending_sync == 1
    assert count_pending(spool.path.parent.parent) == 1
    assert (await service.entry(SERVER_KEY)).summary == "written during the outage"
    assert await summaries(db) == []

    service._sessions = real
    assert await spool.replay(db.sessions) == 1
    assert await summaries(db) == [
        ("server", "written during the outage", 1),
        ("user", "written during the outage", 1),
    ]
    async with db.sessions() as session:
        assert [e.event for e in await session.scalars(select(StmEvent))] == ["update", "update"]
    assert spool.pending == 0 and count_pending(spool.path.parent.parent) == 0


async def test_replay_never_overwrites_a_newer_version(
    db: Database, settings: Settings, spool: DurableSpool, dead_engine: AsyncEngine
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    turn = await turn_for(service)
    real = await outage(service, dead_engine)
    await service.update_stm(turn, summary="spooled v1")  # type: ignore[arg-type]
    service._sessions = real
    # Meanwhile another process wrote a newer version straight to the database.
    other = make_service(db.sessions, settings, ManualClock())
    entry = await other.entry(SERVER_KEY)
    entry.version = 5
    await other.update_stm(await turn_for(other, BOB), summary="newer from elsewhere")  # type: ignore[arg-type]
    await spool.replay(db.sessions)
    assert ("server", "newer from elsewhere", 6) in await summaries(db)


async def test_a_clear_during_the_outage_is_replayed_after_the_writes(
    db: Database, settings: Settings, spool: DurableSpool, dead_engine: AsyncEngine
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    turn = await turn_for(service)
    real = await outage(service, dead_engine)
    await service.update_stm(turn, summary="to be wiped")  # type: ignore[arg-type]
    receipt = await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    assert receipt.pending_sync
    # Nothing brings it back before the replay either.
    assert not (await service.entry(SERVER_KEY)).has_content
    service._sessions = real
    assert await spool.replay(db.sessions) == 2
    assert await summaries(db) == []
    service.spool_replayed()
    assert not (await service.entry(SERVER_KEY)).has_content


async def test_forget_me_during_the_outage_is_replayed(
    db: Database, settings: Settings, spool: DurableSpool, dead_engine: AsyncEngine
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    await service.update_stm(await turn_for(service), summary="Alice's plans")  # type: ignore[arg-type]
    real = await outage(service, dead_engine)
    receipt = await service.forget_user(ALICE)
    assert receipt.pending_sync
    service._sessions = real
    await spool.replay(db.sessions)
    assert await summaries(db) == []


async def test_a_restarted_process_prefers_spooled_state_over_older_rows(
    db: Database, settings: Settings, tmp_path: Path, dead_engine: AsyncEngine
) -> None:
    first = make_service(
        db.sessions, settings, ManualClock(), spool=DurableSpool(spool_path(tmp_path))
    )
    await first.update_stm(await turn_for(first), summary="in the database")  # type: ignore[arg-type]
    real = await outage(first, dead_engine)
    await first.update_stm(await turn_for(first), summary="only in the spool")  # type: ignore[arg-type]
    assert first.spool is not None
    first.spool.close()

    reopened = DurableSpool(spool_path(tmp_path))
    assert reopened.pending == 1
    restarted = make_service(real, settings, ManualClock(), spool=reopened)
    entry = await restarted.entry(SERVER_KEY)
    assert (entry.summary, entry.version) == ("only in the spool", 2)
    # A write before the replay gets the next version, so the replay cannot beat it.
    await restarted.update_stm(await turn_for(restarted), summary="after restart")  # type: ignore[arg-type]
    await reopened.replay(db.sessions)
    assert ("server", "after restart", 3) in await summaries(db)


async def test_a_torn_last_line_is_skipped(
    tmp_path: Path, settings: Settings, db: Database
) -> None:
    path = spool_path(tmp_path)
    spool = DurableSpool(path)
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    entry = await service.entry(SERVER_KEY)
    entry.summary, entry.version = "acknowledged", 1
    spool.append([entry])
    spool.close()
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"op": "upsert", "entries": [{"key": ')  # the crash hit mid-write
    reopened = DurableSpool(path)
    assert reopened.pending == 1
    assert await reopened.replay(db.sessions) == 1
    assert await summaries(db) == [("server", "acknowledged", 1)]
