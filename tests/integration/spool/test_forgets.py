"""/forget-me and a spool: a deferred deletion reaches every copy of the user's words, and no
replay brings them back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import LongTermMemory, ShortTermMemory
from bot.db.storage import faults
from bot.memory import Distilled
from bot.memory.longterm.facts import FactRefused, LongTermService
from bot.memory.service import MemoryService
from bot.memory.spool import durable as spool_module
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.memory.turn.types import REASON_CLEARED
from bot.vocabulary.errors import MemoryUnavailable
from bot.vocabulary.model import Place, Provenance, ScopeKey
from tests.helpers.builders import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL,
    GUILD,
    ManualClock,
    make_service,
    message,
    prepare,
    recall_notes,
    turn_for,
)
from tests.helpers.faults import back, outage, own_sessions
from tests.integration.spool.harness import (
    OTHER,
    SERVER_KEY,
    down,
    rows_derived_from,
    spooling_and_direct,
    summaries,
)


async def test_a_forget_me_heard_while_a_write_of_theirs_is_on_its_way_to_the_spool(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """Process B's write of Alice's words is in flight when its database stalls. Process A
    runs /forget-me (its database is fine) and B hears the notice *before* the write
    times out: ``holds_user`` is still False, so no deletion is queued. The write, begun
    before the forget, must not land in the spool, to be replayed whenever B's database
    answers again (Alice's words back), nor be acknowledged as saved."""
    spool = DurableSpool(spool_path(tmp_path))
    b = make_service(own_sessions(db), settings, spool=spool)
    turn = await turn_for(b)
    plan = faults(b.sessions)
    stalled = plan.hang("STM write")
    write = asyncio.create_task(b.update_stm(turn, summary="Alice's words"))
    await stalled.reached()  # the write waits on the stalled database

    a = make_service(db.sessions, settings)
    await a.forget_user(ALICE)
    b.apply_notice({"o": a.instance_id, "t": "forget", "u": ALICE})  # as delivered

    # Its timeout: refused, as the database would have refused it.
    plan.fail("STM write", error=TimeoutError())
    stalled.release()
    assert str(await write) == f"rejected: {REASON_CLEARED}" and spool.pending == 0
    await back(b.sessions)
    await spool.replay(db.sessions)
    assert await summaries(db) == []


async def test_a_late_write_refused_by_a_forget_heard_leaves_nothing_of_theirs_cached(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    clock = ManualClock()
    spool = DurableSpool(spool_path(tmp_path))
    b = make_service(own_sessions(db), settings, clock, spool=spool)
    # Alice's memory in another channel of the guild (written while the DB is up).
    other = await prepare(b, channel=OTHER)
    assert (await b.update_stm(other.turn, summary="Alice's secret plan")).ok
    clock.advance(seconds=1)
    # Bob's turn here is shown Alice's memory (other channels); its write lists her.
    prepared = await prepare(b, BOB, label_for=lambda e: "#other")
    assert ALICE in prepared.turn.shown_contributors()
    down(b)  # B's database goes away
    clock.advance(seconds=1)
    # Process A runs Alice's /forget-me; B hears it before its write lands in the spool.
    a = make_service(db.sessions, settings, clock)
    await a.forget_user(ALICE)
    b.apply_notice({"o": a.instance_id, "t": "forget", "u": ALICE})
    clock.advance(seconds=1)
    result = await b.update_stm(prepared.turn, summary="Bob's plan, built on Alice's secret plan")
    assert str(result) == f"rejected: {REASON_CLEARED}"  # begun before the forget

    # After Alice's /forget-me, nothing derived from her may be shown any more ...
    cached = b.cache.get(SERVER_KEY)
    shown_after_forget = cached is not None and cached.derived_from(ALICE)
    # ... and a later turn (begun after the notice) must not store her words again.
    clock.advance(seconds=1)
    later = await prepare(b, BOB)
    assert "Alice's secret plan" in later.entry.summary or not shown_after_forget
    await b.update_stm(later.turn, summary=later.entry.summary + " (continued)")
    await back(b.sessions)
    await spool.replay(db.sessions)
    b.spool_replayed()
    async with db.sessions() as session:
        rows = [
            (r.scope_kind, r.channel_id, r.summary)
            for r in await session.scalars(select(ShortTermMemory))
            if ALICE in (r.contributor_ids or [])
        ]
    assert (shown_after_forget, rows) == (False, [])


async def test_a_deferred_forget_me_also_deletes_what_another_process_wrote_before_its_replay(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    # A could not reach the database: its /forget-me waits in its spool. B, which could,
    # commits a memory of Alice's words (its turn began before the forget, which the
    # database has no record of yet). The replay deletes it too.
    clock, a, b = spooling_and_direct(db, settings, spool)
    alices = (await prepare(b, ALICE)).turn
    clock.advance(seconds=1)
    async with outage(a.sessions):
        assert (await a.forget_user(ALICE)).pending_sync
    clock.advance(seconds=5)
    assert (await b.update_stm(alices, summary="Alice's secret plan")).ok

    await spool.replay(db.sessions)

    assert await rows_derived_from(db, ALICE) == []


async def test_a_spooled_write_replayed_days_after_a_forget_me_elsewhere_stays_refused(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    # B spooled a write of Alice's words and went down for three days; meanwhile Alice ran
    # /forget-me through A and the janitor ran: the forget's record outlives the outage.
    clock = ManualClock()
    b = make_service(own_sessions(db), settings, clock, spool=spool)
    a = make_service(db.sessions, settings, clock)
    turn = (await prepare(b, ALICE)).turn
    down(b)
    assert str(await b.update_stm(turn, summary="Alice's secret plan")) == "saved, pending sync"
    clock.advance(seconds=5)
    await a.forget_user(ALICE)
    clock.advance(days=3)
    await a.purge_expired_rows()

    await spool.replay(db.sessions)

    assert await rows_derived_from(db, ALICE) == []


async def test_a_fact_cannot_be_saved_while_the_users_forget_me_waits_in_the_spool(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    # Its replay deletes every fact of the user: one saved before it would be lost.
    clock = ManualClock()
    spool.append_forget(ALICE, clock.now())
    clock.advance(seconds=10)
    longterm = LongTermService(db.sessions, settings, clock, spool=spool)
    provenance = Provenance("model_tool", "m", ALICE, 1)

    with pytest.raises(FactRefused, match="still being applied"):
        await longterm.remember(ALICE, GUILD, "my new cat is Tofu", provenance)

    await spool.replay(db.sessions)
    saved = await longterm.remember(
        ALICE, GUILD, "my new cat is Tofu", provenance, started_at=clock.now()
    )
    assert saved.created and (await longterm.list_facts(ALICE)).total == 1


async def test_facts_of_a_user_whose_forget_me_waits_in_the_spool_are_not_recalled(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    # The database is back, the replayer has not run yet (it waits out its backoff): the
    # facts are still stored, but the user was told they are forgotten.
    clock = ManualClock()
    longterm = LongTermService(db.sessions, settings, clock, spool=spool)
    provenance = Provenance("model_tool", "m", ALICE, 1)
    await longterm.remember(ALICE, GUILD, "My cat is called Miso", provenance)
    spool.append_forget(ALICE, clock.now())

    assert await recall_notes(longterm, ALICE, GUILD, "what about my cat", False) == []
    assert await longterm.search(ALICE, GUILD, "cat", opted_in=False) == []
    # Nor listed, counted or offered to /memories.
    listed = await longterm.list_facts(ALICE)
    assert (listed.facts, listed.total) == ((), 0)
    assert await longterm.count(ALICE) == 0
    assert await longterm.suggest(ALICE, "cat") == []
    assert await longterm.get(ALICE, 1) is None
    assert await longterm.guild_ids(ALICE) == set()

    await spool.replay(db.sessions)
    assert (await longterm.list_facts(ALICE)).total == 0
    async with db.sessions() as session:  # gone from the database too, now
        assert await session.scalar(select(func.count()).select_from(LongTermMemory)) == 0


async def test_captured_facts_from_a_member_whose_forget_me_waits_are_not_recalled(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    clock = ManualClock()
    longterm = LongTermService(db.sessions, settings, clock, spool=spool)
    for fact, sources in (("Ren's cat is called Miso", [ALICE, BOB]), ("Aki's cat naps", [BOB])):
        stored = await longterm.captured.store(
            [Distilled(fact)],
            guild_id=GUILD,
            place=Place(CHANNEL),
            sources=sources,
            provenance=Provenance("summarizer", "m, capture", BOB, 1),
            started_at=clock.now(),
        )
        assert len(stored.created) == 1
    spool.append_forget(ALICE, clock.now())

    notes = await recall_notes(longterm, CAROL, GUILD, "the cat?", False, channel_ids=[CHANNEL])

    assert notes == ["Aki's cat naps"]


async def test_a_write_of_a_turn_begun_after_a_forget_me_elsewhere_survives_the_replay(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    # Alice ran /forget-me through A at T; B, its database down, spooled a write of hers
    # from a turn that began after T, then heard the notice: the deletion queued behind
    # it is the one made at T, which does not reach a write begun after it.
    clock = ManualClock()
    a = make_service(db.sessions, settings, clock)
    b = make_service(own_sessions(db), settings, clock, spool=spool)
    forgotten_at = clock.now()
    await a.forget_user(ALICE)
    clock.advance(seconds=5)
    turn = (await prepare(b, ALICE)).turn  # begun after the /forget-me
    down(b)
    assert str(await b.update_stm(turn, summary="Alice again")) == "saved, pending sync"
    b.apply_notice({"o": a.instance_id, "t": "forget", "u": ALICE, "at": forgotten_at.isoformat()})

    await spool.replay(db.sessions)

    assert "Alice again" in await rows_derived_from(db, ALICE)


async def test_after_a_replay_the_cache_lets_go_of_writes_a_forget_behind_them_deleted(
    db: Database, spool: DurableSpool, clock: ManualClock, service: MemoryService
) -> None:
    service.observe_message(CHANNEL, message(BOB, "Bob's plan"))
    turn = (await prepare(service, ALICE)).turn
    down(service)
    assert str(await service.update_stm(turn, summary="Bob's plan, noted")) == (
        "saved, pending sync"
    )
    clock.advance(seconds=1)
    assert (await service.forget_user(BOB)).pending_sync
    await back(service.sessions)

    await spool.replay(db.sessions)
    service.spool_replayed()

    assert await rows_derived_from(db, BOB) == []
    assert not (await service.entry(ScopeKey.user(ALICE, CHANNEL, GUILD))).has_content


async def test_a_write_refused_by_a_forget_me_heard_from_elsewhere_is_not_spooled(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    # Bob's turn in A began before Alice's /forget-me through B; A heard the notice.
    # After the forget, B saved a new memory of Alice's (her turn began after it), which
    # A read. Bob's write, built on it, is refused (its turn began before the forget of
    # someone in it); A, its database down, must not spool it as "saved" nor queue a
    # second deletion, which would reach B's later, acknowledged row.
    clock, a, b = spooling_and_direct(db, settings, spool)
    stale = (await prepare(a, BOB)).turn
    clock.advance(seconds=1)
    forgotten_at = clock.now()
    await b.forget_user(ALICE)
    a.apply_notice({"o": b.instance_id, "t": "forget", "u": ALICE, "at": forgotten_at.isoformat()})
    clock.advance(seconds=1)
    assert str(await b.update_stm(await turn_for(b, ALICE), summary="Alice, anew")) == "saved"
    a.apply_notice({"o": b.instance_id, "t": "stm", "k": [["server", GUILD, None, CHANNEL, 1]]})
    await prepare(a, CAROL)  # A reads the new memory
    clock.advance(seconds=1)
    down(a)

    result = await a.update_stm(stale, summary="Bob's words, and Alice's")

    assert str(result) == f"rejected: {REASON_CLEARED}" and spool.pending == 0
    await spool.replay(db.sessions)
    assert await rows_derived_from(db, ALICE) == ["Alice, anew", "Alice, anew"]


async def test_a_spooled_write_built_on_a_spooled_write_a_forget_refuses_is_refused_too(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    # A, cut off, spools Alice's turn; Alice's /forget-me then runs through B (A does not
    # hear it); Bob's turn in A, begun after the forget, rewrites the memory on top of the
    # spooled state, which holds Alice's words. The replay refuses Alice's write (its
    # turn began before the forget) and must refuse Bob's, which carries its text.
    clock, a, b = spooling_and_direct(db, settings, spool)
    alices = (await prepare(a, ALICE)).turn
    await prepare(a, BOB)  # Bob's memory is cached too
    down(a)
    assert str(await a.update_stm(alices, summary="Alice's secret plan")) == ("saved, pending sync")
    clock.advance(seconds=1)
    await b.forget_user(ALICE)
    clock.advance(seconds=1)
    bobs = (await prepare(a, BOB)).turn
    assert str(await a.update_stm(bobs, summary="Alice's secret plan, and Bob's")) == (
        "saved, pending sync"
    )
    await back(a.sessions)

    await spool.replay(db.sessions)

    assert await rows_derived_from(db, ALICE) == []


async def test_spooled_writes_built_on_each_other_after_a_forget_me_all_survive_the_replay(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    # Both turns began after Alice's /forget-me: what Alice said since is hers to keep.
    clock, a, b = spooling_and_direct(db, settings, spool)
    await b.forget_user(ALICE)
    clock.advance(seconds=1)
    alices = (await prepare(a, ALICE)).turn
    await prepare(a, BOB)
    down(a)
    assert str(await a.update_stm(alices, summary="Alice, anew")) == "saved, pending sync"
    clock.advance(seconds=1)
    bobs = (await prepare(a, BOB)).turn
    assert str(await a.update_stm(bobs, summary="Alice, anew, and Bob")) == "saved, pending sync"
    await back(a.sessions)

    await spool.replay(db.sessions)

    assert "Alice, anew, and Bob" in await rows_derived_from(db, ALICE)


async def test_a_forget_me_heard_after_a_partial_replay_drops_the_users_replayed_states(
    db: Database,
    settings: Settings,
    spool: DurableSpool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A's spool holds Alice's write here and Bob's in another channel; its replay stores
    # Alice's, then the database goes away. B runs Alice's /forget-me, A hears it, and A's
    # database is still down: A must not show Alice's words from its spooled state.
    clock, a, b = spooling_and_direct(db, settings, spool)
    alices = (await prepare(a, ALICE)).turn
    bobs = (await prepare(a, BOB, channel=OTHER)).turn
    plan = down(a)
    assert str(await a.update_stm(alices, summary="Alice's secret plan")) == "saved, pending sync"
    assert str(await a.update_stm(bobs, summary="Bob's plan")) == "saved, pending sync"
    monkeypatch.setattr(spool_module, "REPLAY_BATCH", 1)
    plan.clear()
    plan.fail("replaying the spool", after=1)  # the first batch goes through
    with pytest.raises(ConnectionRefusedError):
        await spool.replay(a.sessions)
    assert spool.pending == 1  # Alice's write is stored, Bob's waits
    plan.fail()  # and the database is still down for A
    clock.advance(seconds=1)
    await b.forget_user(ALICE)
    a.apply_notice({"o": b.instance_id, "t": "forget", "u": ALICE, "at": clock.now().isoformat()})

    # Nothing stands in for the deleted row: the memory cannot be read until the database
    # answers (before, the spooled copy of Alice's words was shown).
    with pytest.raises(MemoryUnavailable):
        await a.entry(SERVER_KEY)
