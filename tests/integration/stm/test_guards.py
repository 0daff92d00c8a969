"""Writes the STM refuses: memory off for the guild (also for a turn or summary begun before),
long-term intent, an excluded provider, a database down, a newer row elsewhere."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.memory.service import MemoryService
from bot.memory.turn.types import (
    REASON_DISABLED,
    REASON_EXPLICIT_INTENT,
    REASON_PROVIDER,
    REASON_STORAGE,
)
from tests.helpers.builders import ALICE, BOB, CHANNEL, GUILD, ManualClock, make_service, prepare
from tests.helpers.fake_llm import refused_base_url
from tests.integration.stm.harness import SERVER_KEY, rows, start_turn

# ---------------------------------------------------------------------- guards


async def test_guard_stm_disabled_by_the_guild(service: MemoryService, db: Database) -> None:
    await service.update_guild_settings(GUILD, ALICE, short_term_memory_enabled=False)
    turn = await start_turn(service)
    assert turn.stm_block_reason() == REASON_DISABLED
    assert str(await service.update_stm(turn, summary="x")) == f"rejected: {REASON_DISABLED}"
    assert await rows(db) == []


async def test_guard_explicit_long_term_intent(service: MemoryService, db: Database) -> None:
    turn = await start_turn(service, explicit_long_term_intent=True)
    result = await service.update_stm(turn, summary="x")
    assert str(result) == f"rejected: {REASON_EXPLICIT_INTENT}"
    assert await rows(db) == []


async def test_guard_provider_excluded(service: MemoryService, db: Database) -> None:
    turn = await start_turn(service, provider_allows_stm=False)
    assert str(await service.update_stm(turn, summary="x")) == f"rejected: {REASON_PROVIDER}"
    assert await rows(db) == []


async def test_with_the_database_down_a_turn_still_prepares_but_cannot_write(
    db: Database, settings: Settings, clock: ManualClock
) -> None:
    broken = create_async_engine(
        refused_base_url().replace("http://", "postgresql+asyncpg://u:p@") + "db"
    )
    try:
        service = make_service(async_sessionmaker(broken), settings, clock)
        turn = await start_turn(service, label_for=lambda e: "#x")
        assert turn.stm_block_reason() == REASON_STORAGE
        result = await service.update_stm(turn, summary="cannot be stored")
        assert str(result) == f"rejected: {REASON_STORAGE}"
    finally:
        await broken.dispose()
    assert await rows(db) == []


async def test_a_write_over_a_newer_row_from_another_process_is_rejected(
    db: Database, settings: Settings, clock: ManualClock
) -> None:
    first = make_service(db.sessions, settings, clock)
    second = make_service(db.sessions, settings, clock)
    await first.update_stm(await start_turn(first), summary="v1 from first")
    assert (await second.entry(SERVER_KEY)).summary == "v1 from first"
    await first.update_stm(await start_turn(first), summary="v2 from first")
    result = await second.update_stm(await start_turn(second), summary="stale from second")
    assert str(result) == "rejected: a newer version of this memory exists; nothing was saved"
    assert [r.summary for r in await rows(db)] == ["v2 from first"] * 2
    # The stale cache entry is gone: the next read sees the newest row.
    assert (await second.entry(SERVER_KEY)).summary == "v2 from first"


async def test_a_turn_in_flight_when_an_admin_disables_memory_does_not_write(
    db: Database, settings: Settings, clock: ManualClock
) -> None:
    service = make_service(db.sessions, settings, clock)
    prepared = await prepare(service)
    turn = prepared.turn
    assert turn.config.stm_enabled  # the turn began with memory on
    await service.update_guild_settings(GUILD, BOB, short_term_memory_enabled=False)

    result = await service.update_stm(turn, summary="written after memory was turned off")

    assert str(result) == f"rejected: {REASON_DISABLED}"
    async with db.sessions() as session:
        assert await session.scalar(select(func.count()).select_from(ShortTermMemory)) == 0


async def test_a_summarizer_write_after_memory_was_turned_off_is_refused(
    service: MemoryService, db: Database
) -> None:
    turn = await start_turn(service)
    await service.update_guild_settings(GUILD, BOB, short_term_memory_enabled=False)
    result = await service.update_stm(turn, summary="x", origin="summarizer")
    assert str(result) == f"rejected: {REASON_DISABLED}"
    # An admin's own edit still goes through (they may correct what is stored).
    edited = await service.admin_edit(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=BOB, summary="edited"
    )
    assert edited.ok
    assert [r.summary for r in await rows(db)] == ["edited", "edited"]
