"""Rows deleted elsewhere without naming their keys (a janitor purge, a /forget-me): the stand-
ins a process keeps for them never hide a newer memory nor bring a forgotten one back."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select, text

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.vocabulary.model import Category, ScopeKey
from tests.helpers.builders import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL,
    GUILD,
    ManualClock,
    make_service,
    prepare,
    turn_for,
    two_services,
)
from tests.helpers.faults import outage
from tests.helpers.listening import Process
from tests.integration.processes.harness import (
    KEY,
    advance_both,
    category_write,
    clock_of,
    next_of,
    server_rows,
    write,
)


async def expired_stand_in_in_b(two: tuple[Process, Process]) -> None:
    """A writes v1..v3; three months pass; B serves the channel: the expired row is not
    shown, B keeps only its version (3)."""
    a, b = two
    for text_ in ("v1", "v2", "v3"):
        assert await write(a, text_) == "saved"
        await next_of(b, "stm")
    advance_both(two, days=91)
    stand_in = await b.memory.entry(KEY)
    assert (stand_in.has_content, stand_in.version) == (False, 3)


async def test_a_memory_written_after_the_janitor_purge_elsewhere_is_seen_here(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    await expired_stand_in_in_b(two)
    assert await a.memory.purge_expired_rows() == 2  # the server and user rows
    # A new conversation starts; A writes a fresh memory (version 1 again)...
    assert await write(a, "fresh plan: launch on Friday") == "saved"
    await next_of(b, "stm")
    # ...and B, having heard its notice, serves it.
    assert (await b.memory.entry(KEY)).summary == "fresh plan: launch on Friday"


async def test_the_janitor_purge_elsewhere_drops_the_stand_ins_here(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    await expired_stand_in_in_b(two)
    assert await a.memory.purge_expired_rows() == 2
    await next_of(b, "purge")
    # Its version would outrank the row written next (counted from 1 again).
    assert KEY not in b.memory.cache
    assert (await b.memory.entry(KEY)).version == 0


async def test_a_notice_evicts_a_cached_version_higher_than_its_own(
    two: tuple[Process, Process], db: Database
) -> None:
    # Rows deleted with no notice at all (by hand, or an older bot's janitor): B's stand-in
    # keeps version 3; the next memory written elsewhere is version 1.
    a, b = two
    await expired_stand_in_in_b(two)
    async with db.sessions() as session, session.begin():
        await session.execute(text("DELETE FROM short_term_memories"))
    assert await write(a, "fresh plan: launch on Friday") == "saved"
    notice = await next_of(b, "stm")
    assert [k[4] for k in notice["k"]] == [1, 1]
    assert (await b.memory.entry(KEY)).summary == "fresh plan: launch on Friday"


async def test_a_write_here_after_the_janitor_purge_elsewhere_keeps_the_new_memory(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    await a.memory.set_categories(
        GUILD, ALICE, [Category(0, "goals", "Goals", "g"), Category(1, "mood", "Mood", "m")]
    )
    await next_of(b, "guild")
    for n in range(3):
        assert await category_write(a, {"goals": f"old {n}"})
        await next_of(b, "stm")
    advance_both(two, days=91)
    assert not (await b.memory.entry(KEY)).has_content  # expired: version 3 kept in B
    assert await a.memory.purge_expired_rows() == 2
    assert await category_write(a, {"goals": "launch Friday"})
    await next_of(b, "stm")
    # Bob's turn on B sets only the mood ("omitted categories keep their value").
    assert await category_write(b, {"mood": "excited"}, user=BOB)
    await next_of(a, "stm")
    stored = await a.memory.entry(KEY)
    assert stored.categories == {"goals": "launch Friday", "mood": "excited"}


async def test_a_memory_written_after_a_forget_me_elsewhere_is_seen_here(
    two: tuple[Process, Process],
) -> None:
    # No janitor needed: a memory quiet for a day is expired, and its stand-in in B keeps
    # the old version but no contributors, so the /forget-me notice does not name it.
    a, b = two
    for text_ in ("v1", "v2", "v3"):
        assert await write(a, text_) == "saved"
        await next_of(b, "stm")
    advance_both(two, hours=25)
    assert not (await b.memory.entry(KEY)).has_content  # expired row: version 3 kept in B
    await a.memory.forget_user(ALICE)  # deletes the channel's row (Alice contributed)
    await next_of(b, "forget")
    assert KEY not in b.memory.cache
    assert await write(a, "Bob: the launch is on Friday", user=BOB) == "saved"  # version 1
    await next_of(b, "stm")
    assert (await b.memory.entry(KEY)).summary == "Bob: the launch is on Friday"


@pytest.mark.parametrize(
    ("categories", "alive_h", "dead_h"), [(False, 23.9, 24.0), (True, 11.9, 12.0)]
)
async def test_a_memory_hydrated_in_another_process_expires_on_the_writers_schedule(
    two: tuple[Process, Process], categories: bool, alive_h: float, dead_h: float
) -> None:
    a, b = two
    if categories:
        await a.memory.set_categories(GUILD, ALICE, [Category(0, "goals", "Goals", "g")])
        await next_of(b, "guild")
    advance_both(two, hours=5)
    if categories:
        assert await category_write(a, {"goals": "x"})
    else:
        assert await write(a, "x") == "saved"
    await next_of(b, "stm")
    clock_of(b).advance(hours=alive_h)
    assert (await b.memory.entry(KEY)).has_content
    b.memory.cache.clear()
    assert (await b.memory.entry(KEY)).has_content  # hydrated: the TTL runs from the write
    clock_of(b).advance(hours=dead_h - alive_h)
    assert not (await b.memory.entry(KEY)).has_content
    b.memory.cache.clear()
    assert not (await b.memory.entry(KEY)).has_content


async def _stand_in_then_forget(
    db: Database, settings: Settings, tmp_path: Path, *, spooled: bool
) -> tuple[str, str, str]:
    """Alice's memory (v3) expired; process A holds its stand-in (v3, no content). Alice
    runs /forget-me in A (during a database blip when ``spooled``: replayed after). Then
    process C starts a new memory (version 1 again); A, not having heard C's notice yet,
    runs a turn and writes. Returns (the memory A's turn was shown, A's write result,
    the server row's summary)."""
    clock = ManualClock()
    spool = DurableSpool(spool_path(tmp_path))
    a = make_service(db.sessions, settings, clock, spool=spool)
    b = make_service(db.sessions, settings, clock)
    for n in (1, 2, 3):
        assert (await b.update_stm(await turn_for(b, ALICE), summary=f"alice v{n}")).ok
    clock.advance(hours=30)  # past the 24 h TTL, well within retention
    stand_in = await a.entry(ScopeKey.server(GUILD, CHANNEL))
    assert (stand_in.has_content, stand_in.version) == (False, 3)
    if spooled:
        async with outage(a.sessions):
            assert (await a.forget_user(ALICE)).pending_sync
        assert await spool.replay(db.sessions) == 1
        a.spool_replayed()  # as the replayer does (bot/app.py)
    else:
        assert not (await a.forget_user(ALICE)).pending_sync
    assert await server_rows(db) == []  # Alice's rows are gone; versions restart at 1

    clock.advance(minutes=5)
    c = make_service(db.sessions, settings, clock)
    assert str(await c.update_stm(await turn_for(c, BOB), summary="bob: new plan")) == "saved"
    # A has not heard C's notice yet (notices are asynchronous).
    carols = await prepare(a, CAROL)
    shown = carols.entry.summary  # the live entry: the write mutates it
    result = await a.update_stm(carols.turn, summary="carol: hello")
    async with db.sessions() as session:
        row = await session.scalar(
            select(ShortTermMemory).where(ShortTermMemory.scope_kind == "server")
        )
    assert row is not None
    return shown, str(result), row.summary


async def test_an_online_forget_drops_stand_ins_so_no_new_memory_is_overwritten(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    shown, result, _ = await _stand_in_then_forget(db, settings, tmp_path, spooled=False)
    # A re-read the key: its write is built on C's memory.
    assert (shown, result) == ("bob: new plan", "saved")


async def test_a_replayed_forget_drops_stand_ins_so_no_new_memory_is_overwritten(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    shown, result, stored = await _stand_in_then_forget(db, settings, tmp_path, spooled=True)
    # A write never shown C's memory must not replace it (it would be refused as stale).
    assert shown == "bob: new plan" or stored == "bob: new plan", (shown, result, stored)


async def test_a_turn_shown_a_memory_forgotten_elsewhere_unheard_cannot_store_it_again(
    db: Database, settings: Settings
) -> None:
    clock, a, b = two_services(db.sessions, settings)
    assert (await a.update_stm(await turn_for(a, ALICE), summary="Alice's sister is Maria")).ok
    # A's notice connection is down: it reads the database on every use, and hears nothing.
    a.listener_lost()
    clock.advance(seconds=1)
    # Bob's turn in A is shown the channel's memory, which holds Alice's words only (none
    # of her messages are in the window any more).
    prepared = await prepare(a, BOB)
    assert prepared.entry.summary == "Alice's sister is Maria"
    clock.advance(seconds=1)
    await b.forget_user(ALICE)  # /forget-me in process B deletes the channel's rows
    clock.advance(seconds=1)

    # The model keeps what it was shown: that is still Alice's words.
    result = await a.update_stm(prepared.turn, summary="Alice's sister is Maria; Bob likes tea")

    assert not result.ok, str(result)
    async with db.sessions() as session:
        summaries = list(await session.scalars(select(ShortTermMemory.summary)))
    assert not any("Maria" in s for s in summaries), summaries
