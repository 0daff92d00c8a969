"""Records the database refuses at replay: retried as the server's fault, or set aside as the
record's own, and a user's words never kept in what is set aside."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from bot.config import Settings
from bot.db.engine import Database
from bot.db.storage import faults
from bot.memory.service import MemoryService
from bot.memory.spool.durable import (
    ALL_REFUSED_RETRIES,
    DurableSpool,
    ReplayRefused,
    inspect_spool,
    spool_path,
)
from bot.vocabulary.model import ScopeKey, StmEntry
from tests.helpers.builders import ALICE, CHANNEL, GUILD, ManualClock, make_service, turn_for
from tests.integration.spool.harness import SERVER_KEY, summaries


async def test_a_record_the_database_refuses_is_set_aside_not_retried_forever(
    tmp_path: Path, db: Database, spool: DurableSpool, service: MemoryService
) -> None:
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


class _Deadlock(Exception):
    sqlstate = "40P01"  # what asyncpg reports for "deadlock detected"


async def test_a_transient_refusal_is_retried_never_set_aside(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    service = make_service(db.sessions, settings)
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
    service = make_service(db.sessions, settings)
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
        service = make_service(ro_sessions, settings, spool=spool)
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
    db: Database, tmp_path: Path, spool: DurableSpool, service: MemoryService
) -> None:
    """Every record refused at once is more likely the server's fault than each record's:
    nothing is set aside; once a record goes through, the refused ones are set aside."""
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
    db: Database, tmp_path: Path, spool: DurableSpool, service: MemoryService
) -> None:
    """Retried a few times as the server's fault, then set aside as the records' own: a
    write queued behind them reaches the database."""
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
    db: Database, tmp_path: Path, spool: DurableSpool, service: MemoryService
) -> None:
    """/forget-me queued behind a write of the user's that the database then refuses:
    the refused write is not set aside with the user's words (the forget covers it)."""
    poisoned = beyond_bigint(await service.entry(SERVER_KEY), "ALICE-SECRET-WORDS")
    poisoned.contributor_ids = [ALICE]
    spool.append([poisoned])
    assert (await service.forget_user(ALICE)).pending_sync  # queued behind her write

    assert await spool.replay(db.sessions) == 2

    leftovers = [p.read_text() for p in inspect_spool(tmp_path).set_aside]
    assert not any("ALICE-SECRET-WORDS" in text for text in leftovers), leftovers


async def test_a_replayed_forget_me_clears_what_an_earlier_replay_set_aside(
    db: Database, tmp_path: Path, spool: DurableSpool, service: MemoryService
) -> None:
    """A forget queued in the spool without the command's own clean-up (queued behind a
    spooled write of the user's, see Notices._on_forget) removes the user's
    set-aside records when it is replayed."""
    poisoned = beyond_bigint(await service.entry(SERVER_KEY), "ALICE-SECRET-WORDS")
    poisoned.contributor_ids = [ALICE]
    spool.append([poisoned])
    await spool.replay(db.sessions)
    assert len(inspect_spool(tmp_path).set_aside) == 1

    spool.append_forget(ALICE, ManualClock().now())
    assert await spool.replay(db.sessions) == 1
    assert inspect_spool(tmp_path).set_aside == ()


async def test_forget_me_also_removes_the_users_words_from_set_aside_spool_files(
    db: Database, spool: DurableSpool, service: MemoryService
) -> None:
    """A spooled record the database refused is moved to ``stm.corrupt-*.jsonl`` with its
    full memory text. /forget-me must remove everything derived from the user (tables
    *and spool*); the set-aside copy is never touched."""
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


@contextlib.asynccontextmanager
async def every_memory_write_refused(db: Database) -> AsyncIterator[None]:
    """Every STM row refused by the server meanwhile (see _refuse_every_memory_write)."""
    await _refuse_every_memory_write(db, True)
    try:
        yield
    finally:
        await _refuse_every_memory_write(db, False)


def spool_both(
    spool: DurableSpool,
    entries: tuple[StmEntry, StmEntry],
    summaries: tuple[str, str],
    version: int,
) -> None:
    """Spool a write of each entry, with its summary, at ``version``."""
    for entry, summary in zip(entries, summaries, strict=True):
        entry.summary, entry.version = summary, version
        spool.append([entry])


async def test_an_earlier_incident_does_not_use_up_the_retries_of_the_next_one(
    db: Database, tmp_path: Path, spool: DurableSpool, service: MemoryService
) -> None:
    """ALL_REFUSED_RETRIES counts all-refused batches "in a row"; a replay that went
    through must end the row, or the next incident's writes are set aside at once."""
    first = await service.entry(SERVER_KEY)
    second = await service.entry(ScopeKey.server(GUILD, CHANNEL + 1))
    try:
        # Incident 1: every record refused, retried, and then the server is fine again.
        await _refuse_every_memory_write(db, True)
        spool_both(spool, (first, second), ("one", "two"), version=1)
        for _ in range(ALL_REFUSED_RETRIES):
            with pytest.raises(ReplayRefused):
                await spool.replay(db.sessions)
        await _refuse_every_memory_write(db, False)
        assert await spool.replay(db.sessions) == 2  # stored, nothing set aside
        assert inspect_spool(tmp_path).set_aside == ()

        # Incident 2, later: its first all-refused batch must be retried like the first.
        await _refuse_every_memory_write(db, True)
        spool_both(spool, (first, second), ("three", "four"), version=2)
        with contextlib.suppress(ReplayRefused):
            await spool.replay(db.sessions)
        assert (spool.pending, inspect_spool(tmp_path).set_aside) == (2, ())
    finally:
        await _refuse_every_memory_write(db, False)


async def test_a_local_blank_record_does_not_make_a_refused_batch_look_like_bad_records(
    db: Database, tmp_path: Path, spool: DurableSpool, service: MemoryService
) -> None:
    """A 'blank' record (a clear heard by notice: local bookkeeping, never sent to the
    database) between writes the server refuses must not turn "every record refused"
    (retried as the server's fault) into "some refused" (set aside at once)."""
    first = await service.entry(SERVER_KEY)
    second = await service.entry(ScopeKey.server(GUILD, CHANNEL + 1))
    async with every_memory_write_refused(db):
        spool_both(spool, (first, second), ("one", "two"), version=1)
        spool.blank_channel(CHANNEL + 1)  # a clear elsewhere of the second channel
        assert spool.pending == 2 and len(spool._records) == 3
        with contextlib.suppress(ReplayRefused):
            await spool.replay(db.sessions)
        assert (spool.pending, inspect_spool(tmp_path).set_aside) == (2, ())
