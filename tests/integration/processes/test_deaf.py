"""While the notice listener is down ("deaf"): every use reads through to the database,
the cache standing in only when the database is down too, without undoing writes in
flight or the cadence; and the spool's local 'blank' record (a clear heard by notice)."""

from __future__ import annotations

import asyncio
import resource
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from bot.config import Settings
from bot.conversation.summarizer import Summarizer
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.db.storage import database_answered, faults
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, PendingChanges, inspect_spool, spool_path
from bot.vocabulary.model import ScopeKey
from tests.helpers.builders import (
    ALICE,
    BOB,
    CHANNEL,
    EPOCH,
    GUILD,
    ManualClock,
    make_service,
    message,
    prepare,
    spooled_then_cleared_elsewhere,
    turn_for,
    two_services,
)
from tests.helpers.fake_llm import ScriptedLLM, openai_client
from tests.helpers.faults import back, outage, own_sessions, probes_done

SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)


async def server_summary(db: Database) -> str:
    async with db.sessions() as session:
        row = await session.scalar(
            select(ShortTermMemory).where(ShortTermMemory.scope_kind == "server")
        )
        return row.summary if row is not None else ""


# 1 ------------------------------------------------------------------------------


async def test_the_cadence_still_counts_while_the_listener_is_down(service: MemoryService) -> None:
    """Deaf, every turn re-hydrates the row (turns_since_refresh as last persisted) and
    puts it over the cached entry that finish_turn counted on: the nudge (and the
    automatic summary of tool-less providers) never comes while the listener is down."""
    assert (await service.update_stm(await turn_for(service), summary="warm")).ok
    cadence = (await service.guild_config(GUILD)).refresh_cadence
    service.listener_lost()
    for _ in range(cadence):
        service.finish_turn(await turn_for(service))
    prepared = await prepare(service)
    assert prepared.entry.turns_since_refresh >= cadence, prepared.entry.turns_since_refresh


# 2 ------------------------------------------------------------------------------


async def test_a_deaf_hydration_never_puts_an_older_row_over_a_write_in_flight(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """Deaf, a hydration that read the row while a local write was being committed puts
    the older row over the newer cached entry (`existing` is ignored while deaf). If the
    database then goes down too, the cache 'stands in': the prompt shows the older
    memory, and a write built on it reuses a version number, is acknowledged 'saved,
    pending sync', and is dropped by the replay as stale (SPEC §2: never lost)."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, spool=spool)
    assert (await service.update_stm(await turn_for(service), summary="v1")).ok
    service.listener_lost()

    committing = faults(service.sessions).hang("STM write", times=1)
    turn_b = await turn_for(service)
    writing = asyncio.create_task(service.update_stm(turn_b, summary="v2"))
    await committing.reached()  # B's v2 is in the cache, its commit in flight
    await turn_for(service, BOB)  # another message in the channel: hydrates while deaf
    committing.release()
    assert str(await writing) == "saved"

    async with outage(service.sessions):  # the database goes down too
        shown = (await service.entry(SERVER_KEY)).summary
        acknowledged = await service.update_stm(await turn_for(service), summary="v3")
    await spool.replay(db.sessions)
    observed = (shown, str(acknowledged), await server_summary(db))
    assert observed == ("v2", "saved, pending sync", "v3"), observed


# 3 ------------------------------------------------------------------------------


async def test_an_opt_out_is_not_undone_by_joining_an_older_read_while_deaf(
    service: MemoryService,
) -> None:
    """Deaf, a read of the opt-in that began before the user's opt-out is joined by a
    caller that asks after the opt-out returned: it is handed the old 'True' (a DM turn
    then shows server facts the user just opted out of)."""
    await service.set_cross_context_opt_in(ALICE, True)
    service.listener_lost()

    read = faults(service.sessions).hang("loading privacy settings", at="end", times=1)
    earlier = asyncio.create_task(service.cross_context_opt_in(ALICE))
    await read.reached()  # that read saw True
    await service.set_cross_context_opt_in(ALICE, False)  # the user opts out (returned)
    joined = asyncio.Event()
    real_run = service._state.guilds._opt_in_flight.run

    async def run(key: int, load: Any) -> bool:
        joined.set()  # real_run takes the in-flight future before its first await
        return await real_run(key, load)

    service._state.guilds._opt_in_flight.run = run  # type: ignore[method-assign]
    later = asyncio.create_task(service.cross_context_opt_in(ALICE))  # asked after it
    await joined.wait()
    read.release()
    await earlier
    assert await later is False


# 4 ------------------------------------------------------------------------------


async def test_a_clear_notice_is_applied_even_when_the_blank_record_cannot_be_written(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """The clear is applied in memory even when the spool cannot record it (disk full):
    the notice is not lost to the listener callback, and the wiped text is not hydrated
    back from the spool."""
    spool = DurableSpool(spool_path(tmp_path))
    a, b = await spooled_then_cleared_elsewhere(db.sessions, settings, spool)

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (spool.path.stat().st_size, hard))
    raised: BaseException | None = None
    try:
        a.apply_notice({"o": b.instance_id, "t": "clear", "c": CHANNEL})  # as delivered
    except OSError as exc:
        raised = exc
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    shown = (await a.entry(SERVER_KEY)).summary
    assert (raised, shown) == (None, ""), (raised, shown)


# 5 ------------------------------------------------------------------------------


def test_doctor_does_not_count_the_local_blank_record_as_pending(tmp_path: Path) -> None:
    from bot.vocabulary.model import StmEntry

    spool = DurableSpool(spool_path(tmp_path))
    spool.append([StmEntry(key=SERVER_KEY, updated_at=ManualClock().now(), version=1)])
    spool.blank_channel(CHANNEL)
    counts = (spool.pending, spool.pending_changes_in(CHANNEL))
    spool.close()
    # The write still waits (the blank only shows it empty), but not as a change of the
    # channel's memory: the clear heard by notice undid it.
    assert (counts, inspect_spool(tmp_path).pending) == ((1, PendingChanges(0, False)), 1)


# 6 ------------------------------------------------------------------------------


async def test_the_always_on_pre_check_does_not_trust_the_cache_while_deaf(
    db: Database, settings: Settings
) -> None:
    a = make_service(db.sessions, settings)
    b = make_service(db.sessions, settings)
    assert CHANNEL not in (await b.guild_config(GUILD)).always_on_channels  # cached in B
    b.listener_lost()
    await a.set_always_on(GUILD, CHANNEL, True, ALICE)  # the notice B cannot hear
    cached = b.cached_guild_config(GUILD)
    # chat._may_be_always_on drops the message when this says "not always-on".
    assert cached is None or CHANNEL in cached.always_on_channels


# 7 ------------------------------------------------------------------------------


async def test_closing_the_listener_is_not_reported_as_a_lost_connection(
    db: Database, settings: Settings, pg_url: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from bot.db.notify import CacheListener

    memory = make_service(db.sessions, settings)
    listener = CacheListener(
        pg_url,
        on_notice=memory.apply_notice,
        on_reset=memory.listening_again,
        on_lost=memory.listener_lost,
    )
    await listener.start()
    await listener.close()  # an orderly shutdown
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert (memory._ledger.deaf, warnings) == (False, []), (memory._ledger.deaf, warnings)


async def test_a_forget_me_missed_while_deaf_is_not_undone_by_the_spool_replay(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    # Process B lost its database and its notice connection together; it spooled a write
    # holding Alice's words. Meanwhile Alice ran /forget-me through process A. B never
    # hears the notice, but its replay meets the forget's record in the database.
    clock = ManualClock()
    spool = DurableSpool(spool_path(tmp_path))
    b = make_service(own_sessions(db), settings, clock, spool=spool)
    a = make_service(db.sessions, settings, clock)
    turn = await turn_for(b)
    b.listener_lost()
    faults(b.sessions).fail()
    assert str(await b.update_stm(turn, summary="Alice's secret plan")) == "saved, pending sync"
    clock.advance(seconds=5)
    await a.forget_user(ALICE)  # announced; B cannot hear it
    clock.advance(seconds=60)

    await back(b.sessions)
    b.listening_again()
    await spool.replay(db.sessions)

    assert await server_summary(db) == ""
    async with db.sessions() as session:
        assert await session.scalar(select(func.count()).select_from(ShortTermMemory)) == 0


async def test_a_forget_me_missed_while_deaf_leaves_nothing_in_the_windows_after_reconnect(
    db: Database, settings: Settings
) -> None:
    # B kept Alice's message in its raw window while it could not hear A's /forget-me: a
    # turn starting after the reconnect (so not refused by the forget's record) must not
    # be shown her words, nor store them.
    clock, a, b = two_services(db.sessions, settings)
    b.observe_message(CHANNEL, message(ALICE, "my secret plan: rob the bank on friday"))
    b.listener_lost()
    clock.advance(seconds=1)
    await a.forget_user(ALICE)  # announced; B cannot hear it
    clock.advance(seconds=60)

    b.listening_again()
    bobs = await prepare(b, BOB)
    result = await b.update_stm(bobs.turn, summary="Bob is here")

    assert ALICE not in [m.author_id for m in bobs.prompt.window]
    assert result.ok
    async with db.sessions() as session:
        rows = await session.scalars(select(ShortTermMemory))
        assert all(ALICE not in row.contributor_ids for row in rows)
    assert not b.windows.is_primed(CHANNEL)  # back-filled again, through the wipe records


# A /forget-me or /refresh made in another process while this one is deaf ------------


async def stored_rows(db: Database) -> list[tuple[str, list[int]]]:
    async with db.sessions() as session:
        return [
            (row.summary, list(row.contributor_ids))
            for row in await session.scalars(select(ShortTermMemory))
        ]


async def test_a_forget_me_made_elsewhere_while_deaf_is_not_undone_by_a_later_turn(
    db: Database, settings: Settings
) -> None:
    clock, a, b = two_services(db.sessions, settings)
    b.observe_message(CHANNEL, message(ALICE, "my secret plan: rob the bank on friday"))
    b.listener_lost()  # B's notice connection is down (it keeps reading through)
    clock.advance(seconds=1)
    assert not (await a.forget_user(ALICE)).pending_sync  # announced; B cannot hear it
    clock.advance(seconds=60)

    # Still deaf: Bob talks in the channel a minute after Alice's /forget-me. His turn
    # began after the forget, so the database would not refuse a write of her words.
    bobs = await prepare(b, BOB)
    assert ALICE not in [m.author_id for m in bobs.prompt.window]
    assert b.windows.channels_with_author(ALICE) == set()  # gone from the window too
    assert (await b.update_stm(bobs.turn, summary="Bob is here")).ok
    assert all(ALICE not in contributors for _, contributors in await stored_rows(db))


async def test_words_said_after_the_listener_was_lost_are_forgotten_too(
    db: Database, settings: Settings
) -> None:
    # Dropping the windows when the listener goes would not do: the deaf spell goes on,
    # and what is said during it may be forgotten during it.
    clock, a, b = two_services(db.sessions, settings)
    b.listener_lost()
    await prepare(b, BOB)  # a deaf turn: the window checked (nothing to wipe yet)
    b.observe_message(CHANNEL, message(BOB, "hi all", at=EPOCH + timedelta(seconds=1)))
    b.observe_message(
        CHANNEL, message(ALICE, "my address is 12 Elm St", at=EPOCH + timedelta(seconds=2))
    )
    clock.advance(seconds=5)
    await a.forget_user(ALICE)
    clock.advance(seconds=5)
    assert [m.content for m in (await prepare(b, BOB)).prompt.window] == ["hi all"]


async def test_a_refresh_made_elsewhere_while_deaf_does_not_bring_back_the_messages(
    db: Database, settings: Settings
) -> None:
    clock, a, b = two_services(db.sessions, settings)
    b.observe_message(CHANNEL, message(ALICE, "the wiped conversation"))
    b.listener_lost()
    clock.advance(seconds=1)
    await a.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    clock.advance(seconds=60)
    b.observe_message(CHANNEL, message(BOB, "after the refresh", at=clock.now()))
    bobs = await prepare(b, BOB)
    assert [m.content for m in bobs.prompt.window] == ["after the refresh"]
    assert [m.content for m in b.windows.get(CHANNEL)] == ["after the refresh"]


async def test_deaf_with_the_database_down_only_messages_sent_since_are_shown(
    db: Database, settings: Settings
) -> None:
    # The wipe times cannot be read: a /forget-me committed elsewhere just before the
    # outage may cover anything older, so only what was said since the first failed read
    # is shown, and the message being answered.
    clock = ManualClock()
    b = make_service(db.sessions, settings, clock)
    b.observe_message(CHANNEL, message(ALICE, "said before the outage"))
    b.listener_lost()
    faults(b.sessions).fail()
    clock.advance(seconds=10)
    question = message(BOB, "anyone there?", at=EPOCH + timedelta(seconds=9))
    b.observe_message(CHANNEL, question)
    first = await prepare(b, BOB, source_message_id=question.message_id)
    assert [m.content for m in first.prompt.window] == ["anyone there?"]
    clock.advance(seconds=10)
    b.observe_message(CHANNEL, message(BOB, "hello?", at=clock.now()))
    later = await prepare(b, BOB)
    assert [m.content for m in later.prompt.window] == ["hello?"]

    await back(b.sessions)  # back (still deaf): checked, and all of it shown again
    assert len((await prepare(b, BOB)).prompt.window) == 3


async def test_the_summarizer_of_a_deaf_process_does_not_read_words_forgotten_elsewhere(
    db: Database, settings: Settings, llm: ScriptedLLM
) -> None:
    clock, a, b = two_services(db.sessions, settings)
    b.observe_message(CHANNEL, message(ALICE, "my secret plan: rob the bank on friday"))
    b.listener_lost()
    clock.advance(seconds=1)
    await a.forget_user(ALICE)
    summarizer = Summarizer(b, openai_client(llm), settings)
    outcome = await summarizer.summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=BOB, reason="test"
    )
    assert (outcome.status, llm.requests) == ("nothing_new", [])


async def _deaf_with_alice_forgotten_between_two_outages(
    db: Database, settings: Settings, clock: ManualClock, gap: int
) -> MemoryService:
    """Deaf process B: a first outage, the database back (B has not seen it answer),
    Alice speaks and another process forgets her (unheard by B), ``gap`` seconds later a
    second outage."""
    a = make_service(db.sessions, settings, clock)
    b = make_service(own_sessions(db), settings, clock)
    await prepare(b, BOB)  # B's entry and settings are cached
    b.observe_message(CHANNEL, message(BOB, "hi", at=EPOCH))
    b.listener_lost()
    plan = faults(b.sessions)
    plan.fail()  # outage 1
    clock.advance(seconds=1)
    await prepare(b, BOB)  # the wipe times cannot be read
    await probes_done()  # B's probe found it down
    plan.clear()  # back
    b.observe_message(
        CHANNEL, message(ALICE, "my address is 12 Elm St", at=clock.now() + timedelta(seconds=1))
    )
    clock.advance(seconds=2)
    await a.forget_user(ALICE)
    clock.advance(seconds=gap)
    plan.fail()  # outage 2
    return b


async def test_a_second_outage_after_a_silence_does_not_reuse_the_first_ones_start(
    db: Database, settings: Settings
) -> None:
    # No failed read for a minute: the database may have answered others (it did: the
    # forget) in between, so the second outage counts from itself.
    clock = ManualClock()
    b = await _deaf_with_alice_forgotten_between_two_outages(db, settings, clock, gap=60)
    window = (await prepare(b, BOB)).prompt.window
    assert "my address is 12 Elm St" not in [m.content for m in window]


async def test_a_second_outage_after_the_database_answered_does_not_reuse_the_first_ones_start(
    db: Database, settings: Settings
) -> None:
    # Seconds apart, but the database was seen answering in between: a new outage.
    clock = ManualClock()
    b = await _deaf_with_alice_forgotten_between_two_outages(db, settings, clock, gap=1)
    database_answered(b.sessions)  # e.g. the spool's replay or the probe got through
    window = (await prepare(b, BOB)).prompt.window
    assert "my address is 12 Elm St" not in [m.content for m in window]


async def test_words_forgotten_between_two_outages_do_not_reach_a_summary(
    db: Database, settings: Settings, tmp_path: Path, llm: ScriptedLLM
) -> None:
    clock = ManualClock()
    b = await _deaf_with_alice_forgotten_between_two_outages(db, settings, clock, gap=60)
    spool = DurableSpool(spool_path(tmp_path))
    b._state.spool = spool
    spool.notice_origin = b.instance_id
    llm.reply_text("Alice lives at 12 Elm St.")
    outcome = await Summarizer(b, openai_client(llm), settings).summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=BOB, reason="test"
    )
    await back(b.sessions)
    b.listening_again()
    await spool.replay(db.sessions)
    async with db.sessions() as session:
        rows = list(await session.scalars(select(ShortTermMemory)))
    assert all("Elm" not in row.summary and ALICE not in row.contributor_ids for row in rows), (
        outcome,
        [(row.summary, row.contributor_ids) for row in rows],
    )
