"""The STM cache: TTLs from the last update (summary 24 h, categories 12 h), hydration after a
restart, one shared query per miss, no query on a warm turn, no stale version written."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from bot.db.engine import Database
from bot.db.repositories import stm as stm_repo
from bot.memory.service import MemoryService
from tests.helpers.builders import ALICE, BOB, CHANNEL, GUILD, ManualClock, message
from tests.helpers.database import count_statements
from tests.integration.stm.harness import (
    ALICE_KEY,
    SERVER_KEY,
    fresh_process,
    rows,
    start_turn,
    use_categories,
)

# ------------------------------------------------------------- cache and TTLs


@pytest.mark.parametrize(
    ("written", "ttl_hours"),
    [({"summary": "kept a day"}, 24), ({"categories": {"todo": "docs"}}, 12)],
    ids=["summary-entry-24h", "category-only-entry-12h"],
)
async def test_an_entry_expires_its_ttl_after_its_last_update(
    service: MemoryService, clock: ManualClock, written: dict[str, Any], ttl_hours: int
) -> None:
    if "categories" in written:
        await use_categories(service, "Decisions", "Todo")
    await service.update_stm(await start_turn(service), **written)
    clock.advance(hours=ttl_hours - 1, minutes=59)
    assert service.cache.get(SERVER_KEY) is not None
    clock.advance(minutes=2)
    assert service.cache.get(SERVER_KEY) is None


async def test_ttl_is_measured_from_the_last_update(
    service: MemoryService, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="first")
    clock.advance(hours=20)
    await service.update_stm(await start_turn(service), summary="second")
    clock.advance(hours=20)
    entry = service.cache.get(SERVER_KEY)
    assert entry is not None and entry.summary == "second"


async def test_a_new_instance_hydrates_the_memory_with_no_raw_messages(
    service: MemoryService, clock: ManualClock
) -> None:
    service.observe_message(CHANNEL, message(ALICE, "hi"))
    await service.update_stm(await start_turn(service), summary="remembered")
    restarted = fresh_process(service)
    entry = await restarted.entry(SERVER_KEY)
    assert entry.summary == "remembered" and entry.version == 1
    assert restarted.windows.get(CHANNEL) == ()


async def test_a_row_older_than_its_ttl_hydrates_as_expired(
    service: MemoryService, db: Database, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="stale by tomorrow")
    clock.advance(hours=25)
    restarted = fresh_process(service)
    entry = await restarted.entry(SERVER_KEY)
    assert entry.summary == "" and not entry.has_content
    # ... yet the next write still supersedes the old row.
    assert (await restarted.update_stm(await start_turn(restarted), summary="fresh")).ok
    assert [row.version for row in await rows(db)] == [2, 2]


async def test_concurrent_misses_share_one_hydration_query(
    service: MemoryService, db: Database
) -> None:
    with count_statements(db.engine) as counter:
        entries = await asyncio.gather(*(service.entry(SERVER_KEY) for _ in range(20)))
    loads = [s for s in counter.statements if "FROM short_term_memories" in s]
    assert len(loads) == 1
    assert all(entry is entries[0] for entry in entries)


async def test_a_warm_turn_makes_zero_database_queries(
    service: MemoryService, db: Database
) -> None:
    service.observe_message(CHANNEL, message(ALICE, "hello"))
    await service.update_stm(await start_turn(service), summary="warm")
    await start_turn(service, user=BOB, label_for=lambda e: "#other")  # the first turn loads
    with count_statements(db.engine) as counter:
        for user in (ALICE, BOB):
            turn = await start_turn(service, user=user, label_for=lambda e: "#other")
            service.finish_turn(turn)
    assert counter.count == 0, counter.statements


async def test_guild_settings_are_cached_and_invalidated_on_change(
    service: MemoryService, db: Database
) -> None:
    assert (await service.guild_config(GUILD)).refresh_cadence == 5
    with count_statements(db.engine) as counter:
        await service.guild_config(GUILD)
    assert counter.count == 0
    await service.update_guild_settings(GUILD, ALICE, refresh_cadence=9)
    assert (await service.guild_config(GUILD)).refresh_cadence == 9


async def test_stale_version_never_overwrites_a_newer_row(
    service: MemoryService, db: Database
) -> None:
    await service.update_stm(await start_turn(service), summary="v1")
    stale = replace(await service.entry(SERVER_KEY), summary="stale", version=1)
    await service.update_stm(await start_turn(service), summary="v2")
    async with db.sessions() as session, session.begin():
        assert await stm_repo.replay_entries(session, [stale]) == []
    assert (await rows(db))[0].summary == "v2"


# ------------------------------------------------- hydration TTLs, audit of purges and forgets


async def test_a_category_only_row_older_than_12h_hydrates_as_expired(
    service: MemoryService, db: Database, clock: ManualClock
) -> None:
    await use_categories(service, "Decisions", "Todo")
    await service.update_stm(await start_turn(service), categories={"todo": "write docs"})

    clock.advance(hours=11, minutes=59)
    just_in_time = fresh_process(service)
    assert (await just_in_time.entry(SERVER_KEY)).categories == {"todo": "write docs"}

    clock.advance(minutes=2)  # 12 h 01 min after the update: a summary row would live on
    restarted = fresh_process(service)
    entry = await restarted.entry(SERVER_KEY)
    assert entry.categories == {} and not entry.has_content
    assert not (await restarted.entry(ALICE_KEY)).has_content
    # ... yet the next write still supersedes the old rows.
    turn = await start_turn(restarted)
    assert (await restarted.update_stm(turn, categories={"decisions": "ship Friday"})).ok
    assert [(r.version, r.categories) for r in await rows(db)] == [
        (2, {"decisions": "ship Friday"})
    ] * 2


async def test_a_summary_row_23h_old_hydrates_fresh_and_expires_24h_after_its_update(
    service: MemoryService, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="Alice plans the launch.")

    clock.advance(hours=23)
    restarted = fresh_process(service)
    entry = await restarted.entry(SERVER_KEY)
    assert entry.summary == "Alice plans the launch." and entry.version == 1
    assert (await restarted.entry(ALICE_KEY)).summary == "Alice plans the launch."

    # The hydrated entry keeps its age: it expires 24 h after the update, not after loading.
    clock.advance(minutes=59)
    assert restarted.cache.get(SERVER_KEY) is entry
    clock.advance(minutes=2)
    assert restarted.cache.get(SERVER_KEY) is None
