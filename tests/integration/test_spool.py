"""The durable spool: refused writes are kept, acknowledged truthfully, replayed in order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import (
    async_sessionmaker,
    create_async_engine,
)

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import LongTermMemory, ShortTermMemory, StmEvent
from bot.db.repositories import stm as stm_repo
from bot.db.storage import FaultPlan, faults
from bot.memory.longterm.facts import FactRefused, LongTermService
from bot.memory.service import MemoryService
from bot.memory.spool import durable as spool_module
from bot.memory.spool.durable import (
    ALL_REFUSED_RETRIES,
    DurableSpool,
    ReplayRefused,
    SpoolLocked,
    inspect_spool,
    spool_path,
)
from bot.memory.spool.file import SpoolFile
from bot.memory.stm.change import WriteResult
from bot.memory.turn.types import REASON_CLEARED, TurnStart
from bot.vocabulary.errors import MemoryUnavailable
from bot.vocabulary.model import Category, Provenance, ScopeKey, StmEntry
from tests.helpers.builders import (
    ALICE,
    BOB,
    BOT,
    CAROL,
    CHANNEL,
    GUILD,
    ManualClock,
    make_service,
    message,
    prepare,
    spooled_then_cleared_elsewhere,
    turn_for,
)
from tests.helpers.faults import back, outage, own_sessions

SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)
OTHER = CHANNEL + 1


@pytest.fixture
def spool(tmp_path: Path) -> DurableSpool:
    return DurableSpool(spool_path(tmp_path))


async def summaries(db: Database) -> list[tuple[str, str, int]]:
    async with db.sessions() as session:
        rows = await session.scalars(select(ShortTermMemory).order_by(ShortTermMemory.scope_kind))
        return [(r.scope_kind, r.summary, r.version) for r in rows]


def down(service: MemoryService) -> FaultPlan:
    """The service's database refuses every connection until ``back``."""
    plan = faults(service.sessions)
    plan.fail()
    return plan


async def test_a_refused_write_is_spooled_and_acknowledged_as_pending(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    turn = await turn_for(service)  # warm: hydrated while the database was up
    down(service)
    result = await service.update_stm(turn, summary="written during the outage")
    assert str(result) == "saved, pending sync"
    assert spool.pending == 1 and service.pending_sync == 1
    assert inspect_spool(spool.path.parent.parent).pending == 1
    assert (await service.entry(SERVER_KEY)).summary == "written during the outage"
    assert await summaries(db) == []

    await back(service.sessions)
    assert await spool.replay(db.sessions) == 1
    assert await summaries(db) == [
        ("server", "written during the outage", 1),
        ("user", "written during the outage", 1),
    ]
    async with db.sessions() as session:
        assert [e.event for e in await session.scalars(select(StmEvent))] == ["update", "update"]
    assert spool.pending == 0 and inspect_spool(spool.path.parent.parent).pending == 0


async def test_replay_never_overwrites_a_newer_version(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    turn = await turn_for(service)
    async with outage(service.sessions):
        await service.update_stm(turn, summary="spooled v1")
    # Meanwhile another process wrote a newer version straight to the database.
    other = make_service(db.sessions, settings, ManualClock())
    assert (await other.update_stm(await turn_for(other, BOB), summary="older elsewhere")).ok
    assert (await other.update_stm(await turn_for(other, BOB), summary="newer from elsewhere")).ok
    await spool.replay(db.sessions)
    assert ("server", "newer from elsewhere", 2) in await summaries(db)


async def test_a_clear_during_the_outage_is_replayed_after_the_writes(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    turn = await turn_for(service)
    down(service)
    await service.update_stm(turn, summary="to be wiped")
    receipt = await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    assert receipt.pending_sync
    # Nothing brings it back before the replay either.
    assert not (await service.entry(SERVER_KEY)).has_content
    await back(service.sessions)
    assert await spool.replay(db.sessions) == 2
    assert await summaries(db) == []
    service.spool_replayed()
    assert not (await service.entry(SERVER_KEY)).has_content


async def test_forget_me_during_the_outage_is_replayed(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    await service.update_stm(await turn_for(service), summary="Alice's plans")
    async with outage(service.sessions):
        receipt = await service.forget_user(ALICE)
    assert receipt.pending_sync
    await spool.replay(db.sessions)
    assert await summaries(db) == []


async def test_a_restarted_process_prefers_spooled_state_over_older_rows(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    first = make_service(
        own_sessions(db), settings, ManualClock(), spool=DurableSpool(spool_path(tmp_path))
    )
    await first.update_stm(await turn_for(first), summary="in the database")
    down(first)
    await first.update_stm(await turn_for(first), summary="only in the spool")
    assert first.spool is not None
    first.spool.close()

    reopened = DurableSpool(spool_path(tmp_path))
    assert reopened.pending == 1
    restarted = make_service(db.sessions, settings, ManualClock(), spool=reopened)
    entry = await restarted.entry(SERVER_KEY)
    assert (entry.summary, entry.version) == ("only in the spool", 2)
    # A write before the replay gets the next version, so the replay cannot beat it.
    await restarted.update_stm(await turn_for(restarted), summary="after restart")
    await reopened.replay(db.sessions)
    assert ("server", "after restart", 3) in await summaries(db)


# ------------------------------------------------ ordering once the database is back


async def spooled_write(service: MemoryService, summary: str) -> WriteResult:
    """One STM update made while the database refuses connections; then it is back (the
    replayer has not run yet)."""
    turn = await turn_for(service)
    async with outage(service.sessions):
        return await service.update_stm(turn, summary=summary)


async def test_a_refresh_after_the_outage_queues_behind_the_spooled_write(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    await spooled_write(service, "secret plan")

    receipt = await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)

    # Deleting the rows now and replaying the write later would bring it back: the clear
    # waits in the spool behind the write instead.
    assert receipt.pending_sync and spool.pending == 2
    assert not (await service.entry(SERVER_KEY)).has_content
    assert await spool.replay(db.sessions) == 2
    assert await summaries(db) == []


async def test_forget_me_after_the_outage_reaches_the_spooled_write(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    await spooled_write(service, "Alice's diary")

    receipt = await service.forget_user(ALICE)

    assert receipt.pending_sync
    await spool.replay(db.sessions)
    assert await summaries(db) == []
    assert "Alice's diary" not in spool.path.read_text(encoding="utf-8")


async def test_writes_after_the_outage_queue_behind_the_spool_until_it_is_replayed(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    first = await spooled_write(service, "v1 during the outage")
    second = await service.update_stm(await turn_for(service), summary="v2 after it")

    assert (str(first), str(second)) == ("saved, pending sync", "saved, pending sync")
    assert await summaries(db) == []
    await spool.replay(db.sessions)
    assert await summaries(db) == [("server", "v2 after it", 2), ("user", "v2 after it", 2)]
    third = await service.update_stm(await turn_for(service), summary="v3 direct")
    assert str(third) == "saved" and spool.pending == 0


async def test_hydration_takes_a_newer_row_over_an_older_spooled_state(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    await spooled_write(service, "spooled v1")
    # Another process writes the same memory, newer, straight to the database.
    other = make_service(db.sessions, settings, ManualClock())
    assert (await other.update_stm(await turn_for(other, BOB), summary="older elsewhere")).ok
    assert (await other.update_stm(await turn_for(other, BOB), summary="newer from elsewhere")).ok
    service.drop_all()  # e.g. the notice connection was lost and came back

    entry = await service.entry(SERVER_KEY)

    assert (entry.summary, entry.version) == ("newer from elsewhere", 2)


# ------------------------------------------------------------- the file itself


async def test_an_append_after_a_torn_line_survives_the_next_restart(
    tmp_path: Path, settings: Settings, db: Database
) -> None:
    path = spool_path(tmp_path)
    spool = DurableSpool(path)
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    entry = await service.entry(SERVER_KEY)
    entry.summary, entry.version = "first", 1
    spool.append([entry])
    spool.close()
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"op": "upsert", "entries": [{"key": ')  # SIGKILL mid-write

    reopened = DurableSpool(path)
    assert reopened.pending == 1  # the torn line was never acknowledged: cut off
    entry.summary, entry.version = "second, acknowledged after the restart", 2
    reopened.append([entry])
    reopened.close()

    again = DurableSpool(path)
    assert again.pending == 2
    await again.replay(db.sessions)
    assert await summaries(db) == [("server", "second, acknowledged after the restart", 2)]


def test_a_second_process_cannot_take_over_a_spool(tmp_path: Path) -> None:
    first = DurableSpool(spool_path(tmp_path))
    with pytest.raises(SpoolLocked, match="KIOKU_DATA_DIR"):
        DurableSpool(spool_path(tmp_path))
    first.close()
    DurableSpool(spool_path(tmp_path)).close()  # free again once the owner is gone


@pytest.mark.parametrize(
    "damage",
    [b"\xff\xfe not utf-8\n", b"[1, 2]\n", b'{"op": "upsert"}\n', b'{"op": "teleport"}\n'],
    ids=["invalid-utf8", "not-an-object", "missing-fields", "unknown-op"],
)
async def test_a_damaged_line_is_set_aside_and_the_rest_replays(
    tmp_path: Path, settings: Settings, db: Database, damage: bytes
) -> None:
    path = spool_path(tmp_path)
    spool = DurableSpool(path)
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    entry = await service.entry(SERVER_KEY)
    entry.summary, entry.version = "before the damage", 1
    spool.append([entry])
    spool.close()
    with path.open("ab") as handle:
        handle.write(damage)
    spool = DurableSpool(path)
    entry.summary, entry.version = "after the damage", 2
    spool.append([entry])
    spool.close()

    reopened = DurableSpool(path)

    assert reopened.pending == 2
    status = inspect_spool(tmp_path)
    assert status.pending == 2 and len(status.set_aside) == 1
    assert status.set_aside[0].read_bytes() == damage
    await reopened.replay(db.sessions)
    assert await summaries(db) == [("server", "after the damage", 2)]


async def test_a_record_the_database_refuses_is_set_aside_not_retried_forever(
    tmp_path: Path, settings: Settings, db: Database
) -> None:
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    entry = await service.entry(SERVER_KEY)
    entry.summary, entry.version = "fine", 1
    spool.append([entry])
    poisoned = replace(entry, key=ScopeKey.server(GUILD, 2**63 + 5))  # beyond bigint
    poisoned.summary = "cannot be stored"
    spool.append([poisoned])

    assert await spool.replay(db.sessions) == 2

    assert await summaries(db) == [("server", "fine", 1)]
    assert spool.pending == 0
    assert len(inspect_spool(tmp_path).set_aside) == 1


async def test_a_replayed_clear_never_deletes_a_newer_write(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    clock = ManualClock()
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, clock, spool=spool)
    async with outage(service.sessions):
        await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    await spool.replay(db.sessions)
    record = {"op": "clear", "channel": CHANNEL, "guild": GUILD, "actor": BOB}
    record["at"] = clock.now().isoformat()
    clock.advance(seconds=60)
    service.spool_replayed()
    await service.update_stm(await turn_for(service), summary="written after the clear")
    # A crash between the replay's commit and the spool's rewrite replays the clear again.
    spool._write(record)
    await spool.replay(db.sessions)
    assert [s for _, s, _ in await summaries(db)] == ["written after the clear"] * 2


async def test_the_replayer_retries_at_once_when_told_the_database_is_back(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    turn = await turn_for(service)
    plan = down(service)
    await service.update_stm(turn, summary="waiting")
    failed, replayed = asyncio.Event(), asyncio.Event()

    task = asyncio.create_task(
        spool.run_replayer(
            service.sessions,
            on_replayed=replayed.set,
            on_retry=lambda _exc: failed.set(),
            # Only a wake-up can make it retry within the test.
            first_wait_seconds=3600,
            max_wait_seconds=3600,
        )
    )
    try:
        await asyncio.wait_for(failed.wait(), timeout=30)
        plan.clear()
        spool.database_back()
        await asyncio.wait_for(replayed.wait(), timeout=30)
    finally:
        task.cancel()
    assert spool.pending == 0
    assert [s for _, s, _ in await summaries(db)] == ["waiting", "waiting"]


async def test_new_writes_during_an_outage_do_not_cut_the_backoff_short(
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    turn = await turn_for(service)
    replays = down(service).fail("replaying the spool")  # counts the replayer's sessions
    await service.update_stm(turn, summary="first")
    attempts: list[Exception] = []
    failed = asyncio.Event()

    def on_retry(exc: Exception) -> None:
        attempts.append(exc)
        failed.set()

    task = asyncio.create_task(
        spool.run_replayer(
            service.sessions, on_retry=on_retry, first_wait_seconds=3600, max_wait_seconds=3600
        )
    )
    try:
        await asyncio.wait_for(failed.wait(), timeout=30)
        assert (replays.met, len(attempts)) == (1, 1)
        for n in range(20):  # each append wakes an idle replayer, not one backing off
            await service.update_stm(await turn_for(service), summary=f"more {n}")
        # A replayer woken from its backoff either has not run yet (the "database is
        # back" event is still set) or has opened a session for its next attempt: the
        # replay clears the event and opens the session without yielding in between.
        assert not spool._back.is_set()
        assert (replays.met, len(attempts)) == (1, 1)
        assert spool.pending == 21
        # What does end the backoff is seen by the same two checks.
        failed.clear()
        spool.database_back()
        await asyncio.wait_for(failed.wait(), timeout=30)
        assert (replays.met, len(attempts)) == (2, 2)
    finally:
        task.cancel()
    assert spool.pending == 21


# The waits of the replayer's default backoff, one per failed attempt in a row: doubling
# from half a second, capped at 30 s.
BACKOFF_WAITS = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


async def test_the_replayers_backoff_doubles_to_its_cap_and_starts_over_after_a_replay(
    db: Database,
    settings: Settings,
    spool: DurableSpool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each failed attempt logs the wait it then takes (the value it waits on). Every
    wait is cut short by the "database is back" call, so nothing really waits (that an
    uncut wait lasts that long is shown above, with first_wait_seconds=3600)."""
    caplog.set_level(logging.INFO, logger=spool_module.__name__)
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    turn = await turn_for(service)
    plan = down(service)
    assert str(await service.update_stm(turn, summary="first outage")) == "saved, pending sync"
    failures: list[Exception] = []
    replayed, failed_again = asyncio.Event(), asyncio.Event()

    def on_retry(exc: Exception) -> None:
        failures.append(exc)
        if len(failures) == len(BACKOFF_WAITS):
            plan.clear()  # the database is back: the next attempt succeeds
        if len(failures) <= len(BACKOFF_WAITS):
            spool.database_back()  # ends this wait at once
        else:
            failed_again.set()  # the first failure after the replay: left to wait

    def on_replayed() -> None:
        plan.fail()  # the next outage
        replayed.set()

    task = asyncio.create_task(
        spool.run_replayer(service.sessions, on_replayed=on_replayed, on_retry=on_retry)
    )
    try:
        await asyncio.wait_for(replayed.wait(), timeout=30)
        assert spool.pending == 0
        second = await service.update_stm(await turn_for(service), summary="second outage")
        assert str(second) == "saved, pending sync"
        await asyncio.wait_for(failed_again.wait(), timeout=30)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    waits = [
        record.args[2]
        for record in caplog.records
        if record.name == spool_module.__name__
        and isinstance(record.args, tuple)
        and str(record.msg).startswith("spool: %d operations wait for the database")
    ]
    assert len(failures) == len(BACKOFF_WAITS) + 1
    assert waits == [*BACKOFF_WAITS, 0.5]  # after the replay it starts over from 0.5 s
    assert spool.pending == 1


class _Deadlock(Exception):
    sqlstate = "40P01"  # what asyncpg reports for "deadlock detected"


async def test_a_transient_refusal_is_retried_never_set_aside(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    service = make_service(db.sessions, settings, ManualClock())
    await service.update_stm(await turn_for(service), summary="Alice's plans")
    spool = DurableSpool(spool_path(tmp_path))
    spool.append_forget(ALICE, ManualClock().now().replace(year=2030))
    faults(db.sessions).fail("replaying the spool", error=_Deadlock("deadlock detected"), times=1)
    with pytest.raises(_Deadlock):
        await spool.replay(db.sessions)  # the replayer backs off and tries again
    assert spool.pending == 1 and inspect_spool(tmp_path).set_aside == ()

    assert await spool.replay(db.sessions) == 1
    assert await summaries(db) == []


class _ServerRefusal(Exception):
    """What asyncpg raises for a failure of the server, not of the record."""

    def __init__(self, sqlstate: str | None) -> None:
        super().__init__(f"server refused ({sqlstate})")
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    "code",
    [
        "53100",  # disk full
        "53300",  # too many connections
        "57P01",  # admin shutdown
        "58030",  # I/O error
        "08006",  # connection failure
        "42P01",  # undefined table: a schema older than this version of the bot
        None,  # no SQLSTATE at all
    ],
)
async def test_a_server_failure_while_it_answers_is_retried_never_set_aside(
    db: Database, settings: Settings, tmp_path: Path, code: str
) -> None:
    service = make_service(db.sessions, settings, ManualClock())
    entry = await service.entry(SERVER_KEY)
    entry.summary, entry.version = "acknowledged", 1
    spool = DurableSpool(spool_path(tmp_path))
    spool.append([entry])
    faults(db.sessions).fail("replaying the spool", error=_ServerRefusal(code), times=1)
    with pytest.raises(_ServerRefusal):  # SELECT 1 works meanwhile: still not the record's
        await spool.replay(db.sessions)
    assert spool.pending == 1 and inspect_spool(tmp_path).set_aside == ()
    assert await spool.replay(db.sessions) == 1
    assert await summaries(db) == [("server", "acknowledged", 1)]


async def test_a_read_only_database_does_not_set_aside_acknowledged_writes(
    db: Database, settings: Settings, tmp_path: Path, pg_url: URL
) -> None:
    """The database answers but refuses writes for a while (a failover to a standby that
    is still read-only, SQLSTATE 25006): the write acknowledged "saved, pending sync"
    waits, and reaches the database once it is writable."""
    read_only = create_async_engine(
        pg_url, connect_args={"server_settings": {"default_transaction_read_only": "on"}}
    )
    spool = DurableSpool(spool_path(tmp_path))
    try:
        ro_sessions = async_sessionmaker(read_only, expire_on_commit=False)
        service = make_service(ro_sessions, settings, ManualClock(), spool=spool)
        result = await service.update_stm(await turn_for(service), summary="during failover")
        assert str(result) == "saved, pending sync"
        with pytest.raises(DBAPIError):  # the replayer backs off and tries again
            await spool.replay(ro_sessions)
    finally:
        await read_only.dispose()
    assert (spool.pending, inspect_spool(tmp_path).set_aside) == (1, ())

    assert await spool.replay(db.sessions) == 1  # writable again
    assert ("server", "during failover", 1) in await summaries(db)


def beyond_bigint(entry: StmEntry, summary: str, channel_offset: int = 5) -> StmEntry:
    """A copy of ``entry`` the database refuses (its channel id does not fit a bigint)."""
    poisoned = replace(entry, key=ScopeKey.server(GUILD, 2**63 + channel_offset))
    poisoned.summary, poisoned.version = summary, 1
    return poisoned


async def test_a_batch_whose_every_record_is_refused_is_retried_not_set_aside(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """Every record refused at once is more likely the server's fault than each record's:
    nothing is set aside; once a record goes through, the refused ones are set aside."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    entry = await service.entry(SERVER_KEY)
    spool.append([beyond_bigint(entry, "one", 5)])
    spool.append([beyond_bigint(entry, "two", 6)])
    with pytest.raises(ReplayRefused):
        await spool.replay(db.sessions)
    assert (spool.pending, inspect_spool(tmp_path).set_aside) == (2, ())

    entry.summary, entry.version = "fine", 1
    spool.append([entry])
    assert await spool.replay(db.sessions) == 3
    assert await summaries(db) == [("server", "fine", 1)]
    (aside,) = inspect_spool(tmp_path).set_aside
    assert len(aside.read_text().splitlines()) == 2


async def test_records_that_are_all_wrong_do_not_block_the_spool_for_good(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """Retried a few times as the server's fault, then set aside as the records' own: a
    write queued behind them reaches the database."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    entry = await service.entry(SERVER_KEY)
    spool.append([beyond_bigint(entry, "one", 5)])
    spool.append([beyond_bigint(entry, "two", 6)])
    for _ in range(ALL_REFUSED_RETRIES):
        with pytest.raises(ReplayRefused):
            await spool.replay(db.sessions)
    assert (spool.pending, inspect_spool(tmp_path).set_aside) == (2, ())
    assert await spool.replay(db.sessions) == 2
    (aside,) = inspect_spool(tmp_path).set_aside
    assert len(aside.read_text().splitlines()) == 2
    entry.summary, entry.version = "queued behind them", 1
    spool.append([entry])
    assert await spool.replay(db.sessions) == 1
    assert await summaries(db) == [("server", "queued behind them", 1)]


async def test_a_replayed_forget_me_also_clears_records_set_aside_by_the_same_replay(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """/forget-me queued behind a write of the user's that the database then refuses:
    the refused write is not set aside with the user's words (the forget covers it)."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    poisoned = beyond_bigint(await service.entry(SERVER_KEY), "ALICE-SECRET-WORDS")
    poisoned.contributor_ids = [ALICE]
    spool.append([poisoned])
    assert (await service.forget_user(ALICE)).pending_sync  # queued behind her write

    assert await spool.replay(db.sessions) == 2

    leftovers = [p.read_text() for p in inspect_spool(tmp_path).set_aside]
    assert not any("ALICE-SECRET-WORDS" in text for text in leftovers), leftovers


async def test_a_replayed_forget_me_clears_what_an_earlier_replay_set_aside(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """A forget queued in the spool without the command's own clean-up (queued behind a
    spooled write of the user's, see Notices._on_forget) removes the user's
    set-aside records when it is replayed."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    poisoned = beyond_bigint(await service.entry(SERVER_KEY), "ALICE-SECRET-WORDS")
    poisoned.contributor_ids = [ALICE]
    spool.append([poisoned])
    await spool.replay(db.sessions)
    assert len(inspect_spool(tmp_path).set_aside) == 1

    spool.append_forget(ALICE, ManualClock().now())
    assert await spool.replay(db.sessions) == 1
    assert inspect_spool(tmp_path).set_aside == ()


async def test_a_damaged_line_set_aside_at_open_loses_the_words_of_a_user_forgetting(
    tmp_path: Path,
) -> None:
    """A damaged line naming a user whose /forget-me waits in the same spool is set aside
    when the spool is opened: the user's words go at once (the line never reaches the
    database, so no replayed deletion would remove them)."""
    path = spool_path(tmp_path)
    spool = DurableSpool(path)
    spool.append_forget(ALICE, ManualClock().now())
    spool.close()
    with path.open("ab") as handle:
        handle.write(b'{"op": "upsert", "summary": "ALICE-SECRET", "contributors": [%d]\n' % ALICE)
        handle.write(b'{"op": "upsert", "summary": "someone else\'s", "contributors": [%d]\n' % BOB)

    reopened = DurableSpool(path)

    assert reopened.forgetting(ALICE)
    (aside,) = inspect_spool(tmp_path).set_aside
    assert "ALICE-SECRET" not in aside.read_text() and "someone else" in aside.read_text()


async def test_two_processes_replaying_clears_of_the_same_channels_do_not_deadlock(
    db: Database, tmp_path: Path
) -> None:
    now = ManualClock().now()
    one, two = (
        DurableSpool(spool_path(tmp_path / "one")),
        DurableSpool(spool_path(tmp_path / "two")),
    )
    for channel in (CHANNEL, OTHER):
        one.append_clear(channel, GUILD, ALICE, now)
    for channel in (OTHER, CHANNEL):  # the other order: locks taken as met would deadlock
        two.append_clear(channel, GUILD, ALICE, now)

    assert await asyncio.gather(one.replay(db.sessions), two.replay(db.sessions)) == [2, 2]


async def test_a_failed_rewrite_leaves_the_spool_writable(db: Database, tmp_path: Path) -> None:
    spool = DurableSpool(spool_path(tmp_path))
    spool.append_clear(CHANNEL, GUILD, ALICE, ManualClock().now())
    in_the_way = spool.path.with_suffix(".tmp")  # a real OSError: see the test below
    in_the_way.mkdir()
    try:
        # The clear reached the database: the replay is done, the file is rewritten later.
        assert await spool.replay(db.sessions) == 1
        assert (spool.pending, spool.clearing(CHANNEL)) == (0, False)
    finally:
        in_the_way.rmdir()

    spool.append_forget(BOB, ManualClock().now())  # still appends (the file is open)
    assert spool.pending == 1
    spool.close()
    # The forget survives a restart (the replayed clear may be replayed again: harmless).
    assert DurableSpool(spool_path(tmp_path)).forgetting(BOB)


async def test_a_failed_rewrite_after_the_last_batch_does_not_hide_the_channel(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """A spooled /refresh is replayed, then rewriting the (now empty) spool file fails
    (a real OSError: here a directory in the way of the temporary file). The clear
    reached the database and nothing is pending: the channel must not stay "being
    cleared" (every hydration skipping the database, so a memory saved afterwards would
    never be read back and the next write, built on version 0, refused as stale)."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    await turn_for(service)
    async with outage(service.sessions):
        receipt = await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    assert receipt.pending_sync

    in_the_way = spool.path.with_suffix(".tmp")
    in_the_way.mkdir()  # os.open(stm.tmp, O_WRONLY | O_CREAT | O_TRUNC): IsADirectoryError
    try:
        assert await spool.replay(db.sessions) == 1  # as the bot's replayer does it
        service.spool_replayed()
    finally:
        in_the_way.rmdir()
    assert spool.pending == 0

    assert str(await service.update_stm(await turn_for(service), summary="said after")) == "saved"
    service.drop_all()  # e.g. the cache listener reconnected
    shown = (await service.entry(SERVER_KEY)).summary
    next_write = await service.update_stm(await turn_for(service), summary="and later")
    assert (shown, str(next_write)) == ("said after", "saved")


# ---------------------------------------- failed appends; deletions waiting in a spool


@contextlib.contextmanager
def disk_full(spool: DurableSpool) -> Iterator[None]:
    """The disk fills up: the kernel refuses to grow any file past the spool's size."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (spool.path.stat().st_size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


async def test_a_spool_append_refused_by_a_full_disk_is_not_replayed_after_a_restart(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """Disk full while the database is down: the write is (correctly) rejected and the
    cache rolled back. Space comes back, the next write is acknowledged "saved, pending
    sync", then the process is killed before the database returns. After the restart the
    replay must store the acknowledged write, never the rejected one."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(own_sessions(db), settings, ManualClock(), spool=spool)
    turn = await turn_for(service)  # warm while the database is up
    down(service)
    assert str(await service.update_stm(turn, summary="one")) == "saved, pending sync"

    with disk_full(spool):
        rejected = await service.update_stm(await turn_for(service), summary="REJECTED")
    assert not rejected.ok  # correctly reported as not saved
    assert (await service.entry(SERVER_KEY)).summary == "one"  # and rolled back

    acknowledged = await service.update_stm(await turn_for(service), summary="acknowledged")
    assert str(acknowledged) == "saved, pending sync"
    assert spool.pending == 2
    spool.close()  # SIGKILL: the process is gone before the database is back

    reopened = DurableSpool(spool_path(tmp_path))
    pending_after_restart = reopened.pending
    await reopened.replay(db.sessions)
    stored = await summaries(db)
    assert (pending_after_restart, stored) == (
        2,
        [("server", "acknowledged", 2), ("user", "acknowledged", 2)],
    )


async def test_a_refresh_still_in_the_spool_after_a_restart_does_not_bring_the_memory_back(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """/refresh during an outage is spooled (``pending_sync``); the process restarts with
    it still pending. Until it is replayed, hydration must not serve the wiped row (the
    running process has a tombstone for exactly this; a restarted one has none)."""
    first = make_service(
        own_sessions(db), settings, ManualClock(), spool=DurableSpool(spool_path(tmp_path))
    )
    await first.update_stm(await turn_for(first), summary="wiped secret")
    down(first)
    receipt = await first.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    assert receipt.pending_sync
    assert not (await first.entry(SERVER_KEY)).has_content  # the running process: fine
    assert first.spool is not None
    first.spool.close()

    # Restart; the database is reachable again but the replayer has not run yet.
    restarted = make_service(
        db.sessions, settings, ManualClock(), spool=DurableSpool(spool_path(tmp_path))
    )
    assert restarted.pending_sync == 1
    prepared = await restarted.prepare_turn(
        TurnStart(channel_id=CHANNEL, user_id=ALICE, guild_id=GUILD, bot_user_id=BOT)
    )
    assert prepared.entry.summary == ""  # the wiped memory is not in the prompt


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
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """/refresh while the database is down and the spool cannot be written (disk full):
    the command correctly reports failure. But the channel keeps its tombstone, so once
    everything is healthy again every STM write there is built on version 0 and refused
    as stale by the existing row - for as long as the process lives."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    for n in range(3):
        await service.update_stm(await turn_for(service), summary=f"v{n + 1}")
    async with outage(service.sessions):
        with disk_full(spool), pytest.raises(MemoryUnavailable):  # reported as failed: correct
            await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    # Database and disk are fine again.

    results = [
        str(await service.update_stm(await turn_for(service), summary=f"after recovery {n}"))
        for n in range(3)
    ]
    assert results == ["saved"] * 3


async def test_a_forget_me_still_in_the_spool_after_a_restart_does_not_bring_the_memory_back(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """Same as the refresh case for /forget-me: spooled during an outage, the process
    restarts, the database answers before the replayer has run."""
    first = make_service(
        own_sessions(db), settings, ManualClock(), spool=DurableSpool(spool_path(tmp_path))
    )
    await first.update_stm(await turn_for(first), summary="Alice's diary")
    down(first)
    assert (await first.forget_user(ALICE)).pending_sync
    assert first.spool is not None
    first.spool.close()

    restarted = make_service(
        db.sessions, settings, ManualClock(), spool=DurableSpool(spool_path(tmp_path))
    )
    assert restarted.pending_sync == 1
    prepared = await restarted.prepare_turn(
        TurnStart(channel_id=CHANNEL, user_id=BOB, guild_id=GUILD, bot_user_id=BOT)
    )
    assert "Alice's diary" not in prepared.entry.summary


async def test_a_forget_me_heard_while_a_write_of_theirs_is_on_its_way_to_the_spool(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """Process B's write of Alice's words is in flight when its database stalls. Process A
    runs /forget-me (its database is fine) and B hears the notice *before* the write
    times out: ``holds_user`` is still False, so no deletion is queued. The write, begun
    before the forget, must not land in the spool, to be replayed whenever B's database
    answers again (Alice's words back), nor be acknowledged as saved."""
    spool = DurableSpool(spool_path(tmp_path))
    b = make_service(own_sessions(db), settings, ManualClock(), spool=spool)
    turn = await turn_for(b)
    plan = faults(b.sessions)
    stalled = plan.hang("STM write")
    write = asyncio.create_task(b.update_stm(turn, summary="Alice's words"))
    await stalled.reached()  # the write waits on the stalled database

    a = make_service(db.sessions, settings, ManualClock())
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
    other = await b.prepare_turn(
        TurnStart(channel_id=OTHER, user_id=ALICE, guild_id=GUILD, bot_user_id=BOT)
    )
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


async def test_a_refresh_heard_by_notice_stays_applied_after_a_restart(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    spool = DurableSpool(spool_path(tmp_path))
    a, b = await spooled_then_cleared_elsewhere(db.sessions, settings, spool)
    a.apply_notice({"o": b.instance_id, "t": "clear", "c": CHANNEL})  # as delivered
    spool.close()  # A restarts before its replayer ran

    restarted = make_service(
        db.sessions, settings, ManualClock(), spool=DurableSpool(spool_path(tmp_path))
    )
    prepared = await restarted.prepare_turn(
        TurnStart(channel_id=CHANNEL, user_id=ALICE, guild_id=GUILD, bot_user_id=BOT)
    )
    assert prepared.entry.summary == ""  # the wiped text is not in the prompt


async def test_a_failed_reopen_after_replay_never_writes_into_a_reused_descriptor(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spool = DurableSpool(spool_path(tmp_path))
    spool.append_clear(CHANNEL, GUILD, ALICE, ManualClock().now())
    stale_fd = spool._file._fd

    def out_of_descriptors(self: SpoolFile) -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(SpoolFile, "open", out_of_descriptors)
    assert await spool.replay(db.sessions) == 1  # replayed; the file is reopened later
    monkeypatch.undo()

    # The process opens something else (a socket, a log file...) under the freed number.
    victim_path = tmp_path / "unrelated.log"
    victim = os.open(victim_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    if victim != stale_fd:  # (the kernel usually hands out that very number anyway)
        os.dup2(victim, stale_fd)
    try:
        with contextlib.suppress(OSError, ValueError):
            spool.append_forget(BOB, ManualClock().now())  # must fail (or reopen), never ...
        # ... write memory records into an unrelated file.
        assert victim_path.read_bytes() == b""
        assert spool.pending == 1, "the spool reopened its own file for the append"
        assert '"op": "forget"' in spool.path.read_text()
    finally:
        for fd in {victim, stale_fd}:
            os.close(fd)


async def rows_derived_from(db: Database, user_id: int) -> list[str]:
    async with db.sessions() as session:
        rows = await session.scalars(select(ShortTermMemory))
        return [r.summary for r in rows if user_id in r.contributor_ids or r.user_id == user_id]


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

    assert await longterm.recall_notes(ALICE, GUILD, "what about my cat", False) == []
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


async def stored_server_summary(db: Database) -> str | None:
    async with db.sessions() as session:
        row = await stm_repo.load_entry(session, ScopeKey.server(GUILD, CHANNEL))
    return row.summary if row is not None else None


def spooling_and_direct(
    db: Database, settings: Settings, spool: DurableSpool
) -> tuple[ManualClock, MemoryService, MemoryService]:
    """Processes A (with ``spool``) and B (without) on one database and one clock (each
    with its own session factory: A's outages leave B alone)."""
    clock = ManualClock()
    return (
        clock,
        make_service(own_sessions(db), settings, clock, spool=spool),
        make_service(db.sessions, settings, clock),
    )


def spooling_pair(
    db: Database, settings: Settings, tmp_path: Path
) -> tuple[ManualClock, DurableSpool, MemoryService, MemoryService]:
    """As :func:`spooling_and_direct`, A's spool in ``tmp_path``."""
    clock = ManualClock()
    spool = DurableSpool(spool_path(tmp_path / "a"))
    a = make_service(own_sessions(db), settings, clock, spool=spool)
    return clock, spool, a, make_service(db.sessions, settings, clock)


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
    db: Database, settings: Settings, spool: DurableSpool
) -> None:
    clock = ManualClock()
    service = make_service(db.sessions, settings, clock, spool=spool)
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


# A damaged line that is valid JSON but not a record this version can replay (a key
# lost, a provenance cut short): set aside at open as "could not be read".
DAMAGED = (
    b'{"op": "upsert", "entries": [{"summary": "x", "provenance": ["admin"]}], "events": []}\n'
)


def damaged_spool(tmp_path: Path) -> DurableSpool:
    """A spool whose file had one damaged line: it is set aside when opened."""
    path = spool_path(tmp_path)
    DurableSpool(path).close()
    with path.open("ab") as handle:
        handle.write(DAMAGED)
    spool = DurableSpool(path)
    assert len(inspect_spool(tmp_path).set_aside) == 1
    return spool


async def test_a_damaged_set_aside_line_does_not_block_every_forget_me(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    spool = damaged_spool(tmp_path)
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    assert (
        str(await service.update_stm(await turn_for(service), summary="Alice's words")) == "saved"
    )

    receipt = await service.forget_user(ALICE)  # the damaged line is judged by the id

    assert receipt.user_rows >= 1


async def test_a_damaged_line_does_not_stop_the_bot_when_a_forget_me_waits(tmp_path: Path) -> None:
    path = spool_path(tmp_path)
    spool = DurableSpool(path)
    spool.append_forget(ALICE, ManualClock().now())
    spool.close()
    with path.open("ab") as handle:
        handle.write(DAMAGED)

    reopened = DurableSpool(path)  # the bot starts

    assert reopened.forgetting(ALICE) and reopened.pending == 1


async def test_a_replayed_forget_me_with_a_damaged_set_aside_file_keeps_the_bookkeeping(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    clock = ManualClock()
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, clock, spool=spool)
    await turn_for(service)
    down(service)
    assert (await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)).pending_sync
    spool.append_forget(BOB, clock.now())  # as _on_forget queues one
    await back(service.sessions)
    # A line an earlier run set aside as unreadable.
    spool.path.with_name("stm.corrupt-20260101T000000000000.jsonl").write_bytes(DAMAGED)

    # As the bot's replayer runs it (run_replayer): an exception is logged and retried,
    # and spool_replayed (on_replayed) is called only after a replay that returned > 0.
    replayed = await spool.replay(db.sessions)  # the damaged file cannot make it raise
    assert replayed == 2
    service.spool_replayed()
    assert spool.pending == 0  # both reached the database

    written = await service.update_stm(await turn_for(service), summary="said after")
    service.drop_all()  # e.g. the cache listener reconnected
    shown = (await service.entry(SERVER_KEY)).summary
    assert (str(written), shown) == ("saved", "said after")


async def _refuse_every_memory_write(db: Database, on: bool) -> None:
    """A real server-side refusal of every STM row (SQLSTATE 23514), as a constraint of
    another schema version would give, switched on and off."""
    statement = (
        "ALTER TABLE short_term_memories ADD CONSTRAINT audit_glitch CHECK (false) NOT VALID"
        if on
        else "ALTER TABLE short_term_memories DROP CONSTRAINT IF EXISTS audit_glitch"
    )
    async with db.sessions() as session, session.begin():
        await session.execute(text(statement))


async def test_an_earlier_incident_does_not_use_up_the_retries_of_the_next_one(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """ALL_REFUSED_RETRIES counts all-refused batches "in a row"; a replay that went
    through must end the row, or the next incident's writes are set aside at once."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    first = await service.entry(SERVER_KEY)
    second = await service.entry(ScopeKey.server(GUILD, CHANNEL + 1))
    try:
        # Incident 1: every record refused, retried, and then the server is fine again.
        await _refuse_every_memory_write(db, True)
        first.summary, first.version = "one", 1
        second.summary, second.version = "two", 1
        spool.append([first])
        spool.append([second])
        for _ in range(ALL_REFUSED_RETRIES):
            with pytest.raises(ReplayRefused):
                await spool.replay(db.sessions)
        await _refuse_every_memory_write(db, False)
        assert await spool.replay(db.sessions) == 2  # stored, nothing set aside
        assert inspect_spool(tmp_path).set_aside == ()

        # Incident 2, later: its first all-refused batch must be retried like the first.
        await _refuse_every_memory_write(db, True)
        first.summary, first.version = "three", 2
        second.summary, second.version = "four", 2
        spool.append([first])
        spool.append([second])
        with contextlib.suppress(ReplayRefused):
            await spool.replay(db.sessions)
        assert (spool.pending, inspect_spool(tmp_path).set_aside) == (2, ())
    finally:
        await _refuse_every_memory_write(db, False)


async def test_a_local_blank_record_does_not_make_a_refused_batch_look_like_bad_records(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """A 'blank' record (a clear heard by notice: local bookkeeping, never sent to the
    database) between writes the server refuses must not turn "every record refused"
    (retried as the server's fault) into "some refused" (set aside at once)."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    first = await service.entry(SERVER_KEY)
    second = await service.entry(ScopeKey.server(GUILD, CHANNEL + 1))
    try:
        await _refuse_every_memory_write(db, True)
        first.summary, first.version = "one", 1
        second.summary, second.version = "two", 1
        spool.append([first])
        spool.append([second])
        spool.blank_channel(CHANNEL + 1)  # a clear elsewhere of the second channel
        assert spool.pending == 2 and len(spool._records) == 3
        with contextlib.suppress(ReplayRefused):
            await spool.replay(db.sessions)
        assert (spool.pending, inspect_spool(tmp_path).set_aside) == (2, ())
    finally:
        await _refuse_every_memory_write(db, False)


async def test_a_spooled_record_does_not_change_when_the_cache_entry_does(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """The record replayed is what was acknowledged: a later write of this process
    mutates the live cache entry's categories in place, never the record's copy."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    await service.set_categories(GUILD, BOB, [Category(0, "plans", "Plans", "plans")])
    first, second = await turn_for(service), await turn_for(service)
    down(service)
    assert str(await service.update_stm(first, categories={"plans": "first"})) == (
        "saved, pending sync"
    )
    assert str(await service.update_stm(second, categories={"plans": "second"})) == (
        "saved, pending sync"
    )
    assert spool._records[0]["entries"][0]["categories"] == {"plans": "first"}


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
