"""An STM write: both rows with their provenance and version, the cache first, one write a turn,
sanitized values, audit events without text, and a failed write never reported saved."""

from __future__ import annotations

import hashlib

from sqlalchemy import select, text

from bot.db.driver import statements_sent
from bot.db.engine import Database
from bot.db.models import StmEvent
from bot.memory.service import MemoryService
from bot.memory.turn.types import REASON_ALREADY_UPDATED
from bot.vocabulary.model import AuditEvent
from tests.helpers.builders import ALICE, CHANNEL, GUILD, message
from tests.helpers.faults import outage
from tests.integration.stm.harness import SERVER_KEY, rows, start_turn

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
