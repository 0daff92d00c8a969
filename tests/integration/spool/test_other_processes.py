"""A spool replayed after another process wrote or wiped the same memory: the newer write and the
wipe win, and a write built on what was wiped is not replayed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.config import Settings
from bot.db.engine import Database
from bot.db.storage import faults
from bot.memory.spool import durable as spool_module
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.memory.turn.types import REASON_CLEARED
from tests.helpers.builders import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL,
    GUILD,
    make_service,
    prepare,
    spooled_then_cleared_elsewhere,
    turn_for,
)
from tests.helpers.faults import back
from tests.integration.spool.harness import (
    SERVER_KEY,
    down,
    rows_derived_from,
    spooling_and_direct,
    spooling_pair,
    stored_server_summary,
    summaries,
)


async def test_a_refresh_heard_by_notice_is_not_undone_by_this_processs_spooled_write(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """Process A spooled a write (database blip). Process B runs /refresh on the channel;
    A hears the clear notice (evicts, new epoch). A's replay will correctly skip the
    spooled write (the turn started before the clear), but until then A's hydration
    serves the spooled, wiped text from ``spool.latest`` - and once the replay has run,
    A's cache still holds it while the database holds nothing."""
    spool = DurableSpool(spool_path(tmp_path))
    a, b = await spooled_then_cleared_elsewhere(db.sessions, settings, spool)
    a.apply_notice({"o": b.instance_id, "t": "clear", "c": CHANNEL})  # as delivered

    during = (await a.entry(SERVER_KEY)).summary
    await spool.replay(db.sessions)
    a.spool_replayed()
    after = (await a.entry(SERVER_KEY)).summary
    observed = (during, after, await summaries(db))
    assert observed == ("", "", []), observed


async def test_a_refresh_heard_by_notice_stays_applied_after_a_restart(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    spool = DurableSpool(spool_path(tmp_path))
    a, b = await spooled_then_cleared_elsewhere(db.sessions, settings, spool)
    a.apply_notice({"o": b.instance_id, "t": "clear", "c": CHANNEL})  # as delivered
    spool.close()  # A restarts before its replayer ran

    restarted = make_service(db.sessions, settings, spool=DurableSpool(spool_path(tmp_path)))
    prepared = await prepare(restarted)
    assert prepared.entry.summary == ""  # the wiped text is not in the prompt


async def test_a_spool_replay_does_not_overwrite_a_newer_write_saved_by_another_process(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    clock, spool, a, b = spooling_pair(db, settings, tmp_path)
    first, second = (await prepare(a, ALICE)).turn, (await prepare(a, BOB)).turn
    down(a)  # process A loses the database
    assert str(await a.update_stm(first, summary="old plan, take 1")) == "saved, pending sync"
    assert str(await a.update_stm(second, summary="old plan, take 2")) == "saved, pending sync"

    clock.advance(minutes=10)  # later, process B (database fine) saves the current memory
    turn = (await prepare(b, CAROL)).turn
    assert str(await b.update_stm(turn, summary="the current plan")) == "saved"
    assert await stored_server_summary(db) == "the current plan"

    await back(a.sessions)  # A is back and replays its spool
    await spool.replay(db.sessions)
    a.spool_replayed()
    # The replayed write is older (its turns ended ten minutes earlier) but carries a
    # higher version number (A counted two local writes): it silently replaces B's.
    assert await stored_server_summary(db) == "the current plan"
    spool.close()


async def test_a_refused_replay_does_not_leave_a_blank_entry_that_hides_the_newer_row(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    clock, spool, a, b = spooling_pair(db, settings, tmp_path)
    first, second = (await prepare(a, ALICE)).turn, (await prepare(a, BOB)).turn
    down(a)  # A loses the database, spools v1 and v2
    assert str(await a.update_stm(first, summary="before the refresh 1")) == "saved, pending sync"
    assert str(await a.update_stm(second, summary="before the refresh 2")) == "saved, pending sync"

    clock.advance(seconds=5)  # B runs /refresh; A hears it (its spooled state goes blank)
    await b.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    a.apply_notice({"o": b.instance_id, "t": "clear", "c": CHANNEL})
    clock.advance(seconds=5)  # after the refresh, B saves a new memory (v1); A hears it
    turn = (await prepare(b, CAROL)).turn
    assert str(await b.update_stm(turn, summary="after the refresh")) == "saved"
    a.apply_notice({"o": b.instance_id, "t": "stm", "k": [["server", GUILD, None, CHANNEL, 1]]})

    await back(a.sessions)  # A is back; a turn there, then the replay (refused: cleared)
    await prepare(a, CAROL)
    await spool.replay(db.sessions)
    a.spool_replayed()
    assert await stored_server_summary(db) == "after the refresh"
    # A keeps showing an empty memory (its blank spooled state, version 2) and ignores
    # the notice of version 1; its next write (v3) would replace B's row.
    assert (await a.entry(SERVER_KEY)).summary == "after the refresh"
    spool.close()


async def test_a_spooled_refresh_also_wipes_what_an_earlier_turn_wrote_before_its_replay(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    clock, spool, a, b = spooling_pair(db, settings, tmp_path)
    turn = (await prepare(b, BOB)).turn  # a turn in process B starts (the model is thinking)

    clock.advance(seconds=5)  # a moderator runs /refresh; A's database connection is down
    down(a)
    receipt = await a.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=ALICE)
    assert receipt.pending_sync

    clock.advance(seconds=5)  # B's turn, begun before the /refresh, saves its summary
    assert str(await b.update_stm(turn, summary="from before the refresh")) == "saved"

    await back(a.sessions)  # A is back: the /refresh is replayed
    await spool.replay(db.sessions)
    a.spool_replayed()
    # The replayed clear reaches only rows updated before the /refresh: the in-flight
    # turn's write, saved after it, brings back what the /refresh wiped.
    assert await stored_server_summary(db) is None
    spool.close()


async def test_a_spooled_refresh_overtaken_by_a_later_one_leaves_no_empty_stand_in_cached(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    clock, spool, a, b = spooling_pair(db, settings, tmp_path)
    down(a)  # A's database connection is down
    assert (await a.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=ALICE)).pending_sync

    clock.advance(seconds=5)  # B runs a later /refresh, then saves a new memory
    await b.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    a.apply_notice({"o": b.instance_id, "t": "clear", "c": CHANNEL})
    clock.advance(seconds=5)
    turn = (await prepare(b, CAROL)).turn
    assert str(await b.update_stm(turn, summary="after both refreshes")) == "saved"
    a.apply_notice({"o": b.instance_id, "t": "stm", "k": [["server", GUILD, None, CHANNEL, 1]]})

    await back(a.sessions)  # back: a turn in A reads while its /refresh still waits
    assert not (await a.entry(SERVER_KEY)).has_content
    await spool.replay(db.sessions)  # skipped: B's later /refresh covers it
    a.spool_replayed()
    assert await stored_server_summary(db) == "after both refreshes"
    # A kept the empty entry it showed while its /refresh waited: B's memory, written
    # after both refreshes, never reached A's turns (and A's next write would drop it).
    assert (await a.entry(SERVER_KEY)).summary == "after both refreshes"
    spool.close()


@pytest.mark.parametrize("wipe", ["refresh", "forget-me"])
async def test_a_spooled_write_built_on_a_copy_of_what_was_wiped_unheard_is_not_replayed(
    db: Database, settings: Settings, tmp_path: Path, wipe: str
) -> None:
    # A saved Alice's words; B wiped them (a /refresh of the channel, or Alice's
    # /forget-me). A, cut off from the database before the notice reached it, then
    # answered Bob on its cached copy: the write it spooled holds what was wiped, though
    # its turn began after the wipe. Its replay must not bring those words back.
    clock, spool, a, b = spooling_pair(db, settings, tmp_path)
    await prepare(a, BOB)  # Bob's own key is cached too, as after any turn of his
    turn = (await prepare(a, ALICE)).turn
    assert str(await a.update_stm(turn, summary="Alice's plan")) == "saved"
    clock.advance(seconds=5)
    if wipe == "refresh":
        await b.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=CAROL)
    else:
        await b.forget_user(ALICE)
    assert await stored_server_summary(db) is None
    clock.advance(seconds=5)
    down(a)  # A loses the database, unaware

    later = (await prepare(a, BOB)).turn  # begun after the wipe, on A's cached copy
    assert later.started_at is not None and turn.started_at is not None
    written = await a.update_stm(later, summary="Alice's plan, and Bob's part in it")
    assert str(written) == "saved, pending sync"

    await back(a.sessions)
    await spool.replay(db.sessions)
    a.spool_replayed()
    assert await stored_server_summary(db) is None
    assert await rows_derived_from(db, ALICE) == []
    spool.close()


async def test_a_spooled_write_built_on_its_own_earlier_spooled_write_is_replayed(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    # The counterpart: a chain of writes made during one outage, each built on the one
    # before (none of them in the database yet), all reach the database in order.
    _, spool, a, _ = spooling_pair(db, settings, tmp_path)
    first, second = (await prepare(a, ALICE)).turn, (await prepare(a, BOB)).turn
    assert str(await a.update_stm(first, summary="before the outage")) == "saved"
    down(a)
    third = (await prepare(a, ALICE)).turn
    assert str(await a.update_stm(second, summary="take 1")) == "saved, pending sync"
    assert str(await a.update_stm(third, summary="take 2")) == "saved, pending sync"

    await back(a.sessions)
    await spool.replay(db.sessions)
    a.spool_replayed()
    assert await stored_server_summary(db) == "take 2"
    spool.close()


async def test_a_spooled_write_on_a_memory_withheld_for_a_pending_forget_is_replayed(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    # Alice's /forget-me waits in A's spool, so her memory's row is withheld (read as
    # empty); Bob's write on it carries nothing of the row: once the forget's replay has
    # deleted the row, Bob's write is stored all the same.
    _, spool, a, _ = spooling_pair(db, settings, tmp_path)
    turn = (await prepare(a, ALICE)).turn
    assert str(await a.update_stm(turn, summary="Alice's plan")) == "saved"
    down(a)
    assert (await a.forget_user(ALICE)).pending_sync
    await back(a.sessions)  # back, but the spool holds the forget: writes queue behind

    later = (await prepare(a, BOB)).turn
    withheld = await a.entry(later.channel_key)
    assert withheld.summary == "" and withheld.version == 1  # the row's version, no text
    written = await a.update_stm(later, summary="Bob's own plan")
    assert str(written) == "saved, pending sync"

    await spool.replay(db.sessions)
    a.spool_replayed()
    assert await stored_server_summary(db) == "Bob's own plan"
    assert await rows_derived_from(db, ALICE) == []
    spool.close()


@pytest.mark.parametrize(
    "forget", ["here, replayed with the write", "here, replayed before it", "elsewhere, unheard"]
)
async def test_a_write_on_a_copy_without_the_words_of_a_user_forgotten_since_is_replayed(
    db: Database,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    forget: str,
) -> None:
    # A's copy of the memory holds Bob's words only; B, unheard by A, added Alice's to
    # the row. Alice's /forget-me (spooled in A, or made in B and never heard by A)
    # deletes that row, for her words B added. Bob's write, spooled in A on its copy
    # after that, was skipped as "built on a row wiped since": acknowledged, then lost
    # (chaos seeds 141169 and 141949). It carries nothing of Alice's: it is stored. The
    # copy that held her words is
    # test_a_spooled_write_built_on_a_copy_of_what_was_wiped_unheard_is_not_replayed.
    clock, spool, a, b = spooling_pair(db, settings, tmp_path)
    turn = (await prepare(a, BOB)).turn
    assert str(await a.update_stm(turn, summary="Bob's plan")) == "saved"
    down(a)  # A loses the database (and the notices)
    clock.advance(seconds=5)
    turn = (await prepare(b, ALICE)).turn
    assert str(await b.update_stm(turn, summary="Bob's plan; Alice's secret")) == "saved"
    assert await rows_derived_from(db, ALICE) != []
    clock.advance(seconds=5)
    if forget == "elsewhere, unheard":
        await b.forget_user(ALICE)
    else:
        assert (await a.forget_user(ALICE)).pending_sync
    clock.advance(seconds=5)
    later = (await prepare(a, BOB)).turn
    assert (await a.entry(later.channel_key)).summary == "Bob's plan"  # A's copy
    written = await a.update_stm(later, summary="Bob's plan, revised")
    assert str(written) == "saved, pending sync"

    if forget == "here, replayed before it":  # its own transaction, committed first
        monkeypatch.setattr(spool_module, "REPLAY_BATCH", 1)
    await back(a.sessions)
    await spool.replay(db.sessions)
    a.spool_replayed()
    assert await stored_server_summary(db) == "Bob's plan, revised"
    assert await rows_derived_from(db, ALICE) == []
    spool.close()


@pytest.mark.parametrize("clock_step", [0, -1], ids=["same instant", "clock stepped back"])
async def test_two_writes_spooled_at_one_instant_replay_in_order(
    db: Database, settings: Settings, tmp_path: Path, clock_step: int
) -> None:
    # B moved the row on (version 2) unheard by A; A, cut off, spooled two writes (its
    # versions 2 and 3) at one instant of its clock, or the second after the clock
    # stepped back. The first replay lifts the row past B's count (version 3), and the
    # second, at the same time and the same version, was "not later": acknowledged and
    # lost (chaos seed 160119). A spool's own writes replay in their order.
    clock, spool, a, b = spooling_pair(db, settings, tmp_path)
    await prepare(a, BOB)  # Bob's own key is cached too, as after any turn of his
    first = (await prepare(a, ALICE)).turn
    assert str(await a.update_stm(first, summary="v1")) == "saved"
    down(a)
    clock.advance(seconds=5)
    assert str(await b.update_stm((await prepare(b, CAROL)).turn, summary="B's")) == "saved"
    clock.advance(seconds=5)
    second, third = (await prepare(a, ALICE)).turn, (await prepare(a, BOB)).turn
    assert str(await a.update_stm(second, summary="A's first")) == "saved, pending sync"
    clock.advance(seconds=clock_step)
    assert str(await a.update_stm(third, summary="A's second")) == "saved, pending sync"

    await back(a.sessions)
    await spool.replay(db.sessions)
    a.spool_replayed()
    assert await stored_server_summary(db) == "A's second"
    spool.close()


@pytest.mark.parametrize("wipe", ["refresh", "forget-me"])
async def test_a_wipe_read_from_the_database_while_deaf_blanks_the_spooled_copy_of_it(
    db: Database, settings: Settings, tmp_path: Path, wipe: str
) -> None:
    # A spooled a write on its copy of Alice's memory, which B had wiped unheard (as in
    # test_a_spooled_write_built_on_a_copy_of_what_was_wiped_unheard_is_not_replayed).
    # Then the database came back for A, its notice listener still lost: every use reads
    # the database, which records the wipe. A must not go on building on (and showing)
    # the spooled copy: the next write, acknowledged "saved, pending sync", was built on
    # it and skipped at replay with it, lost (chaos seed 160200).
    clock, spool, a, b = spooling_pair(db, settings, tmp_path)
    await prepare(a, BOB)
    turn = (await prepare(a, ALICE)).turn
    assert str(await a.update_stm(turn, summary="Alice's plan")) == "saved"
    clock.advance(seconds=5)
    if wipe == "refresh":
        await b.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=CAROL)
    else:
        await b.forget_user(ALICE)
    clock.advance(seconds=5)
    down(a)  # A loses the database, unaware
    a.listener_lost()  # and its notices
    later = (await prepare(a, BOB)).turn
    written = await a.update_stm(later, summary="Alice's plan, and Bob's part in it")
    assert str(written) == "saved, pending sync"

    clock.advance(seconds=5)
    await back(a.sessions)  # the database is back for A; the listener is still lost
    last = await prepare(a, BOB)
    assert "Alice's plan" not in last.entry.summary
    assert "Alice's plan" not in str(last.prompt)
    # Recorded in the spool: a restart before the replay does not show the copy again.
    spool.close()
    spool = a._state.spool = DurableSpool(spool_path(tmp_path / "a"))
    spool.notice_origin = a.instance_id
    reopened = spool.latest(last.turn.channel_key)
    assert reopened is not None and reopened.summary == ""
    assert reopened.version == last.entry.version  # the next write still supersedes it
    written = await a.update_stm(last.turn, summary="Bob's plan on his own")
    assert str(written) == "saved, pending sync"  # queued behind the spool

    await spool.replay(db.sessions)
    a.spool_replayed()
    assert await stored_server_summary(db) == "Bob's plan on his own"
    assert not [row for row in await summaries(db) if "Alice's plan" in row[1]]
    spool.close()


async def test_a_spooled_write_built_on_a_spooled_write_a_refresh_refuses_is_refused_too(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    clock, a, b = spooling_and_direct(db, settings, spool)
    first = (await prepare(a, ALICE)).turn
    await prepare(a, BOB)
    down(a)
    assert str(await a.update_stm(first, summary="before the refresh")) == "saved, pending sync"
    clock.advance(seconds=1)
    await b.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=CAROL)  # A does not hear it
    clock.advance(seconds=1)
    later = (await prepare(a, BOB)).turn
    assert str(await a.update_stm(later, summary="before the refresh, and more")) == (
        "saved, pending sync"
    )
    await back(a.sessions)

    await spool.replay(db.sessions)

    assert await summaries(db) == []


async def test_a_refresh_heard_while_a_write_waits_for_the_database_refuses_it_not_spooled(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    # A's write (its turn began before the /refresh) is in its transaction when the
    # database goes away; meanwhile B runs /refresh and A hears it. Spooled, the write
    # would be acknowledged "saved, pending sync" and then refused by the replay, and a
    # later turn in A would build on its text (a wiped memory, shown again).
    clock, a, b = spooling_and_direct(db, settings, spool)
    turn = await turn_for(a, ALICE)
    plan = faults(a.sessions)
    # Before the write takes its locks: B's /refresh must not wait for A's transaction.
    waiting = plan.hang("STM write")
    writing = asyncio.create_task(a.update_stm(turn, summary="before the refresh"))
    await waiting.reached()
    clock.advance(seconds=1)
    await b.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    a.apply_notice({"o": b.instance_id, "t": "clear", "c": CHANNEL})
    plan.fail("STM write")  # the database went away
    waiting.release()

    assert str(await writing) == f"rejected: {REASON_CLEARED}"
    assert spool.pending == 0
    assert not (await a.entry(SERVER_KEY)).has_content


async def test_a_write_on_an_expired_spooled_state_does_not_carry_its_refused_text(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    # A spooled a write whose turn began before a /refresh elsewhere (its replay is
    # refused); the state expired before the next turn, which was shown an empty memory:
    # its write carries nothing of the refused one, and is kept.
    clock, a, b = spooling_and_direct(db, settings, spool)
    first = (await prepare(a, ALICE)).turn
    down(a)
    assert str(await a.update_stm(first, summary="before the refresh")) == "saved, pending sync"
    clock.advance(seconds=1)
    await b.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=CAROL)  # A does not hear it
    clock.advance(days=2)  # past every TTL: the spooled state reads as expired
    later = await prepare(a, ALICE)
    assert not later.entry.has_content
    assert str(await a.update_stm(later.turn, summary="anew")) == "saved, pending sync"
    await back(a.sessions)

    await spool.replay(db.sessions)

    assert [s for _, s, _ in await summaries(db)] == ["anew", "anew"]
