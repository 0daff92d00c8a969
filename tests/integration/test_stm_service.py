"""The STM core on real PostgreSQL: seed 003's behaviours and SPEC's improvements."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from bot.config import Settings
from bot.db.driver import statements_sent
from bot.db.engine import Database
from bot.db.models import LongTermMemory, ShortTermMemory, StmEvent
from bot.db.repositories import stm as stm_repo
from bot.memory.janitor import run_janitor, run_turn_count_saver
from bot.memory.service import MemoryService
from bot.memory.stm.change import REASON_CATEGORIES_CHANGED
from bot.memory.turn.prompt import assemble
from bot.memory.turn.types import (
    REASON_ALREADY_UPDATED,
    REASON_CLEARED,
    REASON_DISABLED,
    REASON_EXPLICIT_INTENT,
    REASON_PROVIDER,
    REASON_STORAGE,
    TurnStart,
    TurnState,
)
from bot.vocabulary.errors import MemoryUnavailable
from bot.vocabulary.model import AuditEvent, Category, ScopeKey
from tests.helpers.builders import (
    ALICE,
    BOB,
    BOT,
    CHANNEL,
    GUILD,
    OTHER_CHANNEL,
    ManualClock,
    make_service,
    message,
)
from tests.helpers.database import count_statements
from tests.helpers.fake_llm import refused_base_url
from tests.helpers.faults import outage

SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)
ALICE_KEY = ScopeKey.user(ALICE, CHANNEL, GUILD)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def service(db: Database, settings: Settings, clock: ManualClock) -> MemoryService:
    return make_service(db.sessions, settings, clock)


async def start_turn(
    service: MemoryService,
    *,
    user: int = ALICE,
    channel: int = CHANNEL,
    guild: int | None = GUILD,
    **options: Any,
) -> TurnState:
    prepared = await service.prepare_turn(
        TurnStart(
            channel_id=channel,
            user_id=user,
            guild_id=guild,
            bot_user_id=BOT,
            model="test-model",
            **options,
        )
    )
    return prepared.turn


async def rows(db: Database) -> list[ShortTermMemory]:
    async with db.sessions() as session:
        return list(
            await session.scalars(select(ShortTermMemory).order_by(ShortTermMemory.scope_kind))
        )


async def use_categories(service: MemoryService, *labels: str) -> None:
    await service.set_categories(
        GUILD,
        ALICE,
        [Category(i, label.lower(), label, f"{label} so far") for i, label in enumerate(labels)],
    )


# --------------------------------------------------------------------- writing


async def test_update_writes_server_and_user_rows_with_provenance(
    service: MemoryService, db: Database
) -> None:
    trigger = message(ALICE, "we picked Friday")
    service.observe_message(CHANNEL, trigger)
    turn = await start_turn(service, source_message_id=trigger.message_id)
    result = await service.update_stm(turn, summary="Team picked Friday for the launch.")
    assert str(result) == "saved"
    server, user = await rows(db)
    assert (server.scope_kind, server.guild_id, server.user_id) == ("server", GUILD, None)
    assert (user.scope_kind, user.guild_id, user.user_id) == ("user", GUILD, ALICE)
    for row in (server, user):
        assert row.channel_id == CHANNEL
        assert row.summary == "Team picked Friday for the launch."
        assert row.origin == "model_tool"
        assert row.origin_detail == "test-model"
        assert row.actor_user_id == ALICE
        assert row.source_message_id == trigger.message_id
        assert row.version == 1
        assert row.covered_through_message_id == trigger.message_id
        expected_hash = hashlib.sha256(f"{ALICE}:we picked Friday".encode()).hexdigest()
        assert row.covered_through_hash == expected_hash
        assert row.contributor_ids == [ALICE]


async def test_each_write_increments_the_version(service: MemoryService, db: Database) -> None:
    for n in range(3):
        turn = await start_turn(service)
        assert (await service.update_stm(turn, summary=f"version {n}")).ok
    assert [row.version for row in await rows(db)] == [3, 3]


async def test_cache_is_mutated_before_the_row_is_written(
    service: MemoryService, db: Database
) -> None:
    seen_in_cache: list[str] = []

    def on_statement(statement: str) -> None:
        if "INSERT INTO short_term_memories" in statement:
            entry = service.cache.get(SERVER_KEY)
            seen_in_cache.append(entry.summary if entry else "<missing>")

    with statements_sent(db.engine, on_statement):
        turn = await start_turn(service)
        await service.update_stm(turn, summary="new text")
    assert seen_in_cache and all(summary == "new text" for summary in seen_in_cache)


async def test_update_resets_the_cadence_counters(service: MemoryService, db: Database) -> None:
    for _ in range(3):
        service.finish_turn(await start_turn(service))
    assert (await service.entry(SERVER_KEY)).turns_since_refresh == 3
    turn = await start_turn(service)
    await service.update_stm(turn, summary="reset")
    entry = await service.entry(SERVER_KEY)
    assert (entry.turns_since_refresh, entry.last_refreshed_turn) == (0, 1)
    server = (await rows(db))[0]
    assert (server.turns_since_refresh, server.last_refreshed_turn) == (0, 1)
    service.finish_turn(turn)  # the updating turn itself does not count
    assert entry.turns_since_refresh == 0


async def test_turn_counts_are_saved_and_a_restart_keeps_counting_from_them(
    service: MemoryService, db: Database, settings: Settings, clock: ManualClock
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
    restarted = make_service(db.sessions, settings, clock)
    assert (await restarted.entry(SERVER_KEY)).turns_since_refresh == 3
    for _ in range(2):  # the cadence (5) comes due where it would have without the restart
        restarted.finish_turn(await start_turn(restarted))
    prepared = await restarted.prepare_turn(
        TurnStart(channel_id=CHANNEL, user_id=ALICE, guild_id=GUILD, bot_user_id=BOT)
    )
    assert prepared.prompt.nudge_new_messages is not None


async def test_a_turn_count_saved_after_a_write_leaves_the_write_s_own(
    service: MemoryService, db: Database, settings: Settings, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="first")
    service.finish_turn(await start_turn(service))
    # Another process writes the channel (its version 2, its count 0); this one has not
    # heard of it yet when it saves the count it made on version 1.
    other = make_service(db.sessions, settings, clock)
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


async def test_at_most_one_successful_update_per_turn(service: MemoryService, db: Database) -> None:
    turn = await start_turn(service)
    assert (await service.update_stm(turn, summary="first")).ok
    second = await service.update_stm(turn, summary="second")
    assert str(second) == f"rejected: {REASON_ALREADY_UPDATED}"
    assert [row.summary for row in await rows(db)] == ["first", "first"]


async def test_a_rejected_update_does_not_use_up_the_turn(service: MemoryService) -> None:
    turn = await start_turn(service)
    assert not (await service.update_stm(turn, summary="\x00\x01")).ok
    assert (await service.update_stm(turn, summary="real text")).ok


async def test_values_are_sanitized_before_storage(service: MemoryService, db: Database) -> None:
    token = "MTA4NzY1NDMyMTA5ODc2NTQzMg.GhJkLm.abcdefghijklmnopqrstuvwxyz0123456789AB"
    text_in = "Plan {secret_plan} for {user_name}\x00; bot token " + token + " " + "x" * 3000
    turn = await start_turn(service)
    assert (await service.update_stm(turn, summary=text_in)).ok
    stored = (await rows(db))[0].summary
    assert "{secret_plan}" not in stored and "secret_plan" in stored
    assert "{user_name}" in stored
    assert "\x00" not in stored
    assert token not in stored
    assert len(stored) <= 1500


async def test_a_markdown_labelled_password_is_redacted_before_storage(
    service: MemoryService, db: Database
) -> None:
    # The model writes its notes in Markdown; a bold label must not hide the value.
    summary = "Setup notes for Alice's router:\n- **Admin password**: Tr0ub4dor&3\n- **SSID**: home"
    turn = await start_turn(service)
    assert (await service.update_stm(turn, summary=summary)).ok
    stored = [row.summary for row in await rows(db)]
    assert stored
    for text_stored in stored:
        assert "Tr0ub4dor" not in text_stored
        assert "- **Admin password**: [REDACTED:credential]\n- **SSID**: home" in text_stored


async def test_each_change_adds_audit_events_without_memory_text(
    service: MemoryService, db: Database
) -> None:
    turn = await start_turn(service)
    await service.update_stm(turn, summary="private words about Friday")
    async with db.sessions() as session:
        events = list(await session.scalars(select(StmEvent).order_by(StmEvent.id)))
    assert [(e.event, e.scope_kind) for e in events] == [("update", "server"), ("update", "user")]
    assert all(e.chars_before == 0 and e.chars_after == 26 for e in events)
    async with db.engine.connect() as connection:
        dump = (await connection.execute(text("SELECT stm_events::text FROM stm_events"))).all()
    assert not any("Friday" in row[0] for row in dump)


async def test_recent_events_are_plain_audit_events_newest_first(service: MemoryService) -> None:
    turn = await start_turn(service)
    await service.update_stm(turn, summary="private words about Friday")

    events = await service.recent_events(GUILD)

    # Plain values, not ORM rows: the cogs never hold a database object.
    assert all(type(e) is AuditEvent for e in events)
    assert [(e.event, e.scope_kind, e.channel_id) for e in events] == [
        ("update", "user", CHANNEL),
        ("update", "server", CHANNEL),
    ]
    assert events[0].user_id == ALICE and events[1].user_id is None
    assert all(e.chars_before == 0 and e.chars_after == 26 for e in events)


# ------------------------------------------------------------------ categories


async def test_category_update_merges_omitted_and_clears_empty(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo", "People")
    turn = await start_turn(service)
    await service.update_stm(turn, categories={"decisions": "ship Friday", "todo": "write docs"})
    turn = await start_turn(service)
    result = await service.update_stm(turn, categories={"todo": "", "people": "Alice leads"})
    assert result.ok
    assert (await service.entry(SERVER_KEY)).categories == {
        "decisions": "ship Friday",
        "people": "Alice leads",
    }
    assert (await rows(db))[0].categories == {"decisions": "ship Friday", "people": "Alice leads"}


async def test_values_of_a_removed_category_go_with_the_next_write(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo")
    turn = await start_turn(service)
    await service.update_stm(turn, categories={"decisions": "ship Friday", "todo": "secret plan"})
    await use_categories(service, "Decisions", "Tasks")  # an admin renamed Todo

    result = await service.update_stm(await start_turn(service), categories={"tasks": "docs"})

    assert result.ok
    expected = {"decisions": "ship Friday", "tasks": "docs"}
    assert (await service.entry(SERVER_KEY)).categories == expected
    assert [r.categories for r in await rows(db)] == [expected, expected]


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"nope": "x"}, "unknown categories ['nope']"),
        ({"todo": ""}, "every category would be empty"),
        ({"decisions": "", "todo": ""}, "every category would be empty"),
        ({}, "give at least one category"),
    ],
)
async def test_bad_category_payloads_are_rejected_and_store_nothing(
    service: MemoryService, db: Database, payload: dict[str, str], fragment: str
) -> None:
    await use_categories(service, "Decisions", "Todo")
    turn = await start_turn(service)
    result = await service.update_stm(turn, categories=payload)
    assert not result.ok and fragment in str(result)
    assert await rows(db) == []


async def test_one_category_is_cleared_on_its_own_while_others_keep_theirs(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo")
    first = await start_turn(service)
    assert (
        await service.update_stm(first, categories={"decisions": "ship Friday", "todo": "docs"})
    ).ok

    result = await service.update_stm(await start_turn(service), categories={"todo": ""})

    assert result.ok, str(result)
    assert (await service.entry(SERVER_KEY)).categories == {"decisions": "ship Friday"}
    assert [r.categories for r in await rows(db)] == [{"decisions": "ship Friday"}] * 2


async def test_clearing_the_last_category_with_a_value_is_refused(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo")
    assert (await service.update_stm(await start_turn(service), categories={"todo": "docs"})).ok

    result = await service.update_stm(await start_turn(service), categories={"todo": ""})

    assert not result.ok and "every category would be empty" in str(result)
    assert [r.categories for r in await rows(db)] == [{"todo": "docs"}] * 2


async def test_a_category_write_drops_the_summary_from_before_categories(
    service: MemoryService, db: Database, clock: ManualClock
) -> None:
    # The summary is no longer shown once categories exist; kept, it would also hold the
    # memory for 24 h where a category-only one lives 12 h.
    assert (await service.update_stm(await start_turn(service), summary="launch Monday")).ok
    await use_categories(service, "Decisions", "Todo")
    turn = await start_turn(service)
    assert (await service.update_stm(turn, categories={"decisions": "launch Friday"})).ok

    assert [(r.summary, r.categories) for r in await rows(db)] == [
        ("", {"decisions": "launch Friday"})
    ] * 2
    clock.advance(hours=12, minutes=1)
    assert service.cache.get(SERVER_KEY) is None, "a category-only memory lives 12 h"


async def test_summary_in_category_mode_is_rejected(service: MemoryService, db: Database) -> None:
    await use_categories(service, "Decisions", "Todo")
    turn = await start_turn(service)
    assert "uses categories" in str(await service.update_stm(turn, summary="x"))
    assert await rows(db) == []


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


# ------------------------------------------------------------- cache and TTLs


async def test_summary_entry_expires_24h_after_its_last_update(
    service: MemoryService, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="kept a day")
    clock.advance(hours=23, minutes=59)
    assert service.cache.get(SERVER_KEY) is not None
    clock.advance(minutes=2)
    assert service.cache.get(SERVER_KEY) is None


async def test_category_only_entry_expires_after_12h(
    service: MemoryService, clock: ManualClock
) -> None:
    await use_categories(service, "Decisions", "Todo")
    await service.update_stm(await start_turn(service), categories={"todo": "docs"})
    clock.advance(hours=11, minutes=59)
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
    service: MemoryService, db: Database, settings: Settings, clock: ManualClock
) -> None:
    service.observe_message(CHANNEL, message(ALICE, "hi"))
    await service.update_stm(await start_turn(service), summary="remembered")
    restarted = make_service(db.sessions, settings, clock)
    entry = await restarted.entry(SERVER_KEY)
    assert entry.summary == "remembered" and entry.version == 1
    assert restarted.windows.get(CHANNEL) == ()


async def test_a_row_older_than_its_ttl_hydrates_as_expired(
    service: MemoryService, db: Database, settings: Settings, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="stale by tomorrow")
    clock.advance(hours=25)
    restarted = make_service(db.sessions, settings, clock)
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


# ------------------------------------------------------------------- faults


async def test_database_failure_is_never_reported_as_saved(
    service: MemoryService, db: Database
) -> None:
    await service.update_stm(await start_turn(service), summary="before the outage")
    turn = await start_turn(service)
    async with outage(service.sessions):
        result = await service.update_stm(turn, summary="during the outage")
    assert str(result).startswith("rejected: the memory could not be saved")
    cached = service.cache.get(SERVER_KEY)
    assert cached is not None and cached.summary == "before the outage"
    assert [row.summary for row in await rows(db)] == ["before the outage"] * 2
    assert not turn.stm_updated


async def test_the_cadence_resets_only_when_the_write_is_saved(
    service: MemoryService, db: Database
) -> None:
    # SPEC §3 order: cache, persist, then reset the cadence; a write that could not be
    # persisted leaves the counters as they were (the nudge keeps coming).
    await service.update_stm(await start_turn(service), summary="before the outage")
    for _ in range(3):
        service.finish_turn(await start_turn(service))
    turn = await start_turn(service)
    before = service.cache.get(SERVER_KEY)
    assert before is not None
    counters = (before.turns_since_refresh, before.last_refreshed_turn)
    assert counters == (3, 1)
    async with outage(service.sessions):
        assert not (await service.update_stm(turn, summary="during the outage")).ok
    after = service.cache.get(SERVER_KEY)
    assert after is not None and (after.turns_since_refresh, after.last_refreshed_turn) == counters

    assert (await service.update_stm(await start_turn(service), summary="saved")).ok
    saved = service.cache.get(SERVER_KEY)
    assert saved is not None and (saved.turns_since_refresh, saved.last_refreshed_turn) == (0, 2)
    assert {(r.turns_since_refresh, r.last_refreshed_turn) for r in await rows(db)} == {(0, 2)}


# ----------------------------------------------------------------- deletion


async def test_clear_channel_wipes_every_scope_in_cache_and_rows(
    service: MemoryService, db: Database
) -> None:
    service.observe_message(CHANNEL, message(ALICE, "hi"))
    await service.update_stm(await start_turn(service), summary="to be wiped")
    receipt = await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    assert (receipt.rows, receipt.cache_entries) == (2, 2)
    assert await rows(db) == []
    assert SERVER_KEY not in service.cache and ALICE_KEY not in service.cache
    assert service.windows.get(CHANNEL) == ()
    async with db.sessions() as session:
        events = [e.event for e in await session.scalars(select(StmEvent).order_by(StmEvent.id))]
    assert events[-1] == "refresh"


async def test_a_turn_started_before_a_clear_cannot_write_back(
    service: MemoryService, db: Database
) -> None:
    await service.update_stm(await start_turn(service), summary="old")
    turn = await start_turn(service)
    await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    result = await service.update_stm(turn, summary="resurrected?")
    assert str(result) == f"rejected: {REASON_CLEARED}"
    assert await rows(db) == []
    assert not (await service.entry(SERVER_KEY)).has_content


async def test_a_clear_racing_a_write_always_ends_empty(
    service: MemoryService, db: Database
) -> None:
    turn = await start_turn(service)
    await asyncio.gather(
        service.update_stm(turn, summary="racing"),
        service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB),
    )
    assert await rows(db) == []
    assert not (await service.entry(SERVER_KEY)).has_content


async def test_forget_user_deletes_everything_derived_from_them(
    service: MemoryService, db: Database
) -> None:
    service.observe_message(CHANNEL, message(BOB, "Bob's idea"))
    service.observe_message(CHANNEL, message(ALICE, "Alice agrees"))
    await service.update_stm(await start_turn(service), summary="Bob had an idea")
    await service.update_stm(await start_turn(service, channel=OTHER_CHANNEL), summary="Alice only")
    async with db.sessions() as session, session.begin():
        session.add(LongTermMemory(user_id=BOB, content="Bob likes tea", origin="user_command"))
    receipt = await service.forget_user(BOB)
    # Bob's message was covered by the channel's memory: the server row and Alice's
    # copy of that conversation go too.
    assert (receipt.contributed_rows, receipt.long_term, receipt.raw_messages) == (2, 1, 1)
    remaining = await rows(db)
    assert {(r.scope_kind, r.channel_id) for r in remaining} == {
        ("server", OTHER_CHANNEL),
        ("user", OTHER_CHANNEL),
    }
    assert all(BOB not in r.contributor_ids for r in remaining)
    async with db.sessions() as session:
        assert await session.scalar(select(func.count()).select_from(LongTermMemory)) == 0
        bob_events = await session.scalar(
            select(func.count())
            .select_from(StmEvent)
            .where((StmEvent.user_id == BOB) | (StmEvent.actor_user_id == BOB))
        )
    assert bob_events == 0
    assert SERVER_KEY not in service.cache
    assert all(m.author_id != BOB for m in service.windows.get(CHANNEL))


async def test_forget_user_removes_their_own_rows(service: MemoryService, db: Database) -> None:
    await service.update_stm(await start_turn(service, user=BOB), summary="Bob's channel talk")
    receipt = await service.forget_user(BOB)
    assert (receipt.user_rows, receipt.contributed_rows) == (1, 1)
    assert await rows(db) == []


async def test_janitor_deletes_rows_past_retention_only(
    service: MemoryService, db: Database, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="old")
    clock.advance(days=60)
    await service.update_stm(await start_turn(service, channel=OTHER_CHANNEL), summary="newer")
    clock.advance(days=31)
    assert await service.purge_expired_rows() == 2
    assert {r.channel_id for r in await rows(db)} == {OTHER_CHANNEL}


# ------------------------------------------------------------- turn context


async def test_nudge_is_due_at_the_cadence_and_counts_new_messages(
    service: MemoryService,
) -> None:
    await service.update_guild_settings(GUILD, ALICE, refresh_cadence=2)
    service.observe_message(CHANNEL, message(ALICE, "one"))
    await service.update_stm(await start_turn(service), summary="covers one")
    for text_ in ("two", "three", "four"):
        service.observe_message(CHANNEL, message(BOB, text_))
    prepared = await service.prepare_turn(
        TurnStart(channel_id=CHANNEL, user_id=ALICE, guild_id=GUILD, bot_user_id=BOT)
    )
    assert prepared.prompt.nudge_new_messages is None
    service.finish_turn(prepared.turn)
    service.finish_turn(prepared.turn)
    prepared = await service.prepare_turn(
        TurnStart(channel_id=CHANNEL, user_id=ALICE, guild_id=GUILD, bot_user_id=BOT)
    )
    assert prepared.prompt.nudge_new_messages == 3


async def test_other_channels_are_shown_only_when_the_caller_allows(
    service: MemoryService,
) -> None:
    await service.update_stm(await start_turn(service, channel=OTHER_CHANNEL), summary="public")
    private = OTHER_CHANNEL + 1
    await service.update_stm(await start_turn(service, channel=private), summary="secret")
    labels = {OTHER_CHANNEL: "#general", private: None}
    prepared = await service.prepare_turn(
        TurnStart(
            channel_id=CHANNEL,
            user_id=ALICE,
            guild_id=GUILD,
            bot_user_id=BOT,
            label_for=lambda entry: labels[entry.key.channel_id],
        )
    )
    assert [(o.label, o.entry.summary) for o in prepared.prompt.others if o.entry] == [
        ("#general", "public")
    ]


async def test_dm_shows_server_memories_only_after_opt_in(
    service: MemoryService, db: Database, settings: Settings, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="server talk")
    dm_channel = 777

    async def dm_others(svc: MemoryService) -> list[str]:
        prepared = await svc.prepare_turn(
            TurnStart(
                channel_id=dm_channel,
                user_id=ALICE,
                guild_id=None,
                bot_user_id=BOT,
                label_for=lambda entry: "#general in Guild",
            )
        )
        return [o.entry.summary for o in prepared.prompt.others if o.entry]

    assert await dm_others(service) == []
    await service.set_cross_context_opt_in(ALICE, True)
    assert await dm_others(service) == ["server talk"]
    # After a restart too (the user's rows are hydrated once, on first use).
    assert await dm_others(make_service(db.sessions, settings, clock)) == ["server talk"]


async def test_other_channels_are_the_most_recently_updated_ones(
    db: Database, settings: Settings, clock: ManualClock
) -> None:
    writer = make_service(db.sessions, settings, clock)
    channels = [400_000 + i for i in range(12)]  # channels[0] holds the oldest memory
    for i, channel in enumerate(channels):
        await writer.update_stm(await start_turn(writer, channel=channel), summary=f"memory {i}")
        clock.advance(minutes=30)
    restarted = make_service(db.sessions, settings, clock)
    await start_turn(restarted, channel=999_998, label_for=lambda e: "#x")  # guild hydrated
    await start_turn(restarted, channel=channels[0], label_for=lambda e: "#x")  # an old one

    prepared = await restarted.prepare_turn(
        TurnStart(
            channel_id=999_999,
            user_id=ALICE,
            guild_id=GUILD,
            bot_user_id=BOT,
            label_for=lambda e: "#x",
        )
    )

    shown = [o.entry.summary for o in prepared.prompt.others if o.entry]
    assert shown == ["memory 11", "memory 10", "memory 9"]


async def test_a_dm_shows_a_server_memory_as_that_server_renders_it(
    service: MemoryService,
) -> None:
    # Categories (with the server's own labels) in preference to the summary written
    # before the server chose them; the DM's own settings know nothing of either.
    assert (await service.update_stm(await start_turn(service), summary="OLD: Monday")).ok
    await service.set_categories(
        GUILD,
        ALICE,
        [Category(0, "ri_ben_yu", "日本語", "notes"), Category(1, "todo", "Todo", "t")],
    )
    turn = await start_turn(service)
    assert (await service.update_stm(turn, categories={"ri_ben_yu": "NEW: Friday"})).ok
    await service.set_cross_context_opt_in(ALICE, True)

    dm = await service.prepare_turn(
        TurnStart(
            channel_id=777, user_id=ALICE, guild_id=None, bot_user_id=BOT, label_for=lambda e: "#g"
        )
    )

    notes = "\n".join(assemble(dm.prompt).system_notes)
    assert "日本語:\nNEW: Friday" in notes
    assert "OLD" not in notes


async def test_forget_me_reaches_a_memory_written_from_another_channels_messages(
    service: MemoryService, db: Database
) -> None:
    # The prompt shows other channels' recent messages; a memory written from them is
    # derived from their authors too.
    await service.update_stm(await start_turn(service, channel=OTHER_CHANNEL), summary="release")
    service.observe_message(OTHER_CHANNEL, message(BOB, "my phone number is 555-0199"))
    service.observe_message(CHANNEL, message(ALICE, "what's Bob's number again?"))
    prepared = await service.prepare_turn(
        TurnStart(
            channel_id=CHANNEL,
            user_id=ALICE,
            guild_id=GUILD,
            bot_user_id=BOT,
            label_for=lambda e: "#g",
        )
    )
    assert "555-0199" in "\n".join(assemble(prepared.prompt).system_notes)
    written = await service.update_stm(prepared.turn, summary="Bob's number: 555-0199.")
    assert written.ok

    await service.forget_user(BOB)

    assert [r.summary for r in await rows(db) if "555-0199" in r.summary] == []


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


async def test_forget_me_reaches_other_users_copies_of_the_conversation(
    service: MemoryService, db: Database
) -> None:
    service.observe_message(CHANNEL, message(ALICE, "my door code is 4471"))
    await service.update_stm(await start_turn(service), summary="Alice's door code is 4471.")
    service.observe_message(CHANNEL, message(BOB, "hi"))
    await service.update_stm(
        await start_turn(service, user=BOB), summary="Alice's door code is 4471. Bob said hi."
    )
    await service.forget_user(ALICE)
    assert [r for r in await rows(db) if "4471" in r.summary] == []
    assert all("4471" not in e.summary for e in service.cache.entries())


async def test_a_category_value_that_sanitizes_to_nothing_is_refused_not_cleared(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo")
    assert (await service.update_stm(await start_turn(service), categories={"todo": "docs"})).ok
    before = [(r.scope_kind, r.categories, r.version) for r in await rows(db)]
    assert [categories for _, categories, _ in before] == [{"todo": "docs"}] * 2
    result = await service.update_stm(
        await start_turn(service), categories={"decisions": "ship", "todo": "\u200b"}
    )
    assert str(result) == "rejected: categories ['todo'] are empty after removing unsafe content"
    assert (await service.entry(SERVER_KEY)).categories == {"todo": "docs"}
    assert [(r.scope_kind, r.categories, r.version) for r in await rows(db)] == before


# ------------------------------------------------- hydration TTLs, audit of purges and forgets


async def test_a_category_only_row_older_than_12h_hydrates_as_expired(
    service: MemoryService, db: Database, settings: Settings, clock: ManualClock
) -> None:
    await use_categories(service, "Decisions", "Todo")
    await service.update_stm(await start_turn(service), categories={"todo": "write docs"})

    clock.advance(hours=11, minutes=59)
    just_in_time = make_service(db.sessions, settings, clock)
    assert (await just_in_time.entry(SERVER_KEY)).categories == {"todo": "write docs"}

    clock.advance(minutes=2)  # 12 h 01 min after the update: a summary row would live on
    restarted = make_service(db.sessions, settings, clock)
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
    service: MemoryService, db: Database, settings: Settings, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="Alice plans the launch.")

    clock.advance(hours=23)
    restarted = make_service(db.sessions, settings, clock)
    entry = await restarted.entry(SERVER_KEY)
    assert entry.summary == "Alice plans the launch." and entry.version == 1
    assert (await restarted.entry(ALICE_KEY)).summary == "Alice plans the launch."

    # The hydrated entry keeps its age: it expires 24 h after the update, not after loading.
    clock.advance(minutes=59)
    assert restarted.cache.get(SERVER_KEY) is entry
    clock.advance(minutes=2)
    assert restarted.cache.get(SERVER_KEY) is None


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


async def test_the_janitor_waits_its_delay_then_purges_daily_and_outlives_a_failed_pass(
    service: MemoryService, db: Database, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    asked: asyncio.Queue[float] = asyncio.Queue()  # what each sleep was asked to wait
    woken: asyncio.Queue[None] = asyncio.Queue()

    async def sleep(seconds: float) -> None:
        await asked.put(seconds)
        await woken.get()

    async def pass_then_next_sleep() -> float:
        woken.put_nowait(None)
        return await asked.get()

    await service.update_stm(await start_turn(service), summary="old news")
    clock.advance(days=91)
    janitor = asyncio.create_task(run_janitor(service, sleep=sleep))
    try:
        # SPEC §2: 60 s after start, then daily.
        assert await asked.get() == 60
        assert len(await rows(db)) == 2, "nothing is purged before the delay"
        assert await pass_then_next_sleep() == 24 * 3600
        assert await rows(db) == []

        await service.update_stm(await start_turn(service), summary="old again")
        clock.advance(days=91)
        async with outage(service.sessions):
            assert await pass_then_next_sleep() == 24 * 3600  # failed, and still running
        assert "janitor pass failed: MemoryUnavailable" in caplog.text
        assert len(await rows(db)) == 2
        assert await pass_then_next_sleep() == 24 * 3600
        assert await rows(db) == []
    finally:
        janitor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await janitor


async def test_the_turn_count_saver_saves_every_minute_and_outlives_an_outage(
    service: MemoryService, db: Database
) -> None:
    asked: asyncio.Queue[float] = asyncio.Queue()
    woken: asyncio.Queue[None] = asyncio.Queue()

    async def sleep(seconds: float) -> None:
        await asked.put(seconds)
        await woken.get()

    async def save_then_next_sleep() -> float:
        woken.put_nowait(None)
        return await asked.get()

    async def saved_count() -> int:
        server = next(r for r in await rows(db) if r.scope_kind == "server")
        return server.turns_since_refresh

    await service.update_stm(await start_turn(service), summary="the plan")
    saver = asyncio.create_task(run_turn_count_saver(service, sleep=sleep))
    try:
        assert await asked.get() == 60
        service.finish_turn(await start_turn(service))
        assert await save_then_next_sleep() == 60
        assert await saved_count() == 1

        service.finish_turn(await start_turn(service))
        async with outage(service.sessions):
            assert await save_then_next_sleep() == 60  # failed, and still running
        assert await saved_count() == 1
        assert await save_then_next_sleep() == 60
        assert await saved_count() == 2
    finally:
        saver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await saver


async def test_forget_me_writes_a_forget_event_that_does_not_name_the_user(
    service: MemoryService, db: Database
) -> None:
    service.observe_message(CHANNEL, message(BOB, "Bob's private plan"))
    await service.update_stm(await start_turn(service, user=BOB), summary="Bob's private plan")

    await service.forget_user(BOB)

    async with db.sessions() as session:
        events = list(await session.scalars(select(StmEvent).order_by(StmEvent.id)))
    forgets = [e for e in events if e.event == "forget"]
    # One for the channel (its server's /stm history shows a member's memories went:
    # Bob's copy and the channel's memory he took part in), one for the request.
    assert [
        (e.guild_id, e.channel_id, e.user_id, e.actor_user_id, e.message_id, e.chars_before)
        for e in forgets
    ] == [
        (GUILD, CHANNEL, None, None, None, 2 * len("Bob's private plan")),
        (None, None, None, None, None, None),
    ]
    async with db.engine.connect() as connection:
        dump = (await connection.execute(text("SELECT stm_events::text FROM stm_events"))).all()
    assert not any(str(BOB) in row[0] or "private plan" in row[0] for row in dump)


async def test_a_turn_in_flight_when_an_admin_disables_memory_does_not_write(
    db: Database, settings: Settings, clock: ManualClock
) -> None:
    service = make_service(db.sessions, settings, clock)
    prepared = await service.prepare_turn(
        TurnStart(channel_id=CHANNEL, user_id=ALICE, guild_id=GUILD, bot_user_id=BOT)
    )
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


async def test_a_turn_begun_under_other_categories_is_refused(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo")
    turn = await start_turn(service)
    await use_categories(service, "Decisions", "Risks")
    result = await service.update_stm(turn, categories={"todo": "buy cake"})
    assert str(result) == f"rejected: {REASON_CATEGORIES_CHANGED}"
    assert await rows(db) == []


async def test_a_turn_begun_before_a_category_was_relabelled_still_writes(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo")
    turn = await start_turn(service)
    await service.set_categories(
        GUILD,
        ALICE,
        [Category(0, "todo", "To do", "open tasks"), Category(1, "decisions", "Decided", "")],
    )
    assert (await service.update_stm(turn, categories={"todo": "buy cake"})).ok
    assert [r.categories for r in await rows(db)] == [{"todo": "buy cake"}] * 2
