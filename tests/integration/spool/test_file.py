"""The spool file itself: torn and damaged lines, its lock, failed rewrites and reopens."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from bot.config import Settings
from bot.db.engine import Database
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, SpoolLocked, inspect_spool, spool_path
from bot.memory.spool.file import SpoolFile
from bot.vocabulary.model import StmEntry
from tests.helpers.builders import ALICE, BOB, CHANNEL, GUILD, ManualClock, make_service, turn_for
from tests.helpers.faults import back, outage
from tests.integration.spool.harness import SERVER_KEY, down, summaries

# ------------------------------------------------------------- the file itself


async def closed_after_one_write(
    spool: DurableSpool, service: MemoryService, summary: str
) -> StmEntry:
    """The test channel's entry, written at version 1 with ``summary`` into ``spool``,
    which is then closed (its process stops)."""
    entry = await service.entry(SERVER_KEY)
    entry.summary, entry.version = summary, 1
    spool.append([entry])
    spool.close()
    return entry


async def test_an_append_after_a_torn_line_survives_the_next_restart(
    db: Database, spool: DurableSpool, service: MemoryService
) -> None:
    path = spool.path
    entry = await closed_after_one_write(spool, service, "first")
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
    tmp_path: Path, db: Database, spool: DurableSpool, service: MemoryService, damage: bytes
) -> None:
    path = spool.path
    entry = await closed_after_one_write(spool, service, "before the damage")
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
    db: Database, spool: DurableSpool, service: MemoryService
) -> None:
    """A spooled /refresh is replayed, then rewriting the (now empty) spool file fails
    (a real OSError: here a directory in the way of the temporary file). The clear
    reached the database and nothing is pending: the channel must not stay "being
    cleared" (every hydration skipping the database, so a memory saved afterwards would
    never be read back and the next write, built on version 0, refused as stale)."""
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
    service = make_service(db.sessions, settings, spool=spool)
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
    db: Database, clock: ManualClock, spool: DurableSpool, service: MemoryService
) -> None:
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
