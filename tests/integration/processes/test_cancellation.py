"""Cancellation on the STM path: a command cancelled (at shutdown, or by a caller's
timeout) at a chosen await point must leave the cache and the database agreeing, and
must not half-apply what it had started."""

from __future__ import annotations

import asyncio

import pytest

from bot.db.engine import Database
from bot.db.repositories import stm as stm_repo
from bot.db.storage import Fault, faults
from bot.memory.service import MemoryService
from bot.vocabulary.model import ScopeKey
from tests.helpers.builders import BOB, CHANNEL, GUILD, OTHER_CHANNEL, prepare
from tests.helpers.faults import callbacks_already_scheduled

SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)


def hold(service: MemoryService, step: str) -> Fault:
    """Hold the service's next session of ``step`` on its way to the database until
    released."""
    return faults(service.sessions).hang(step, times=1)


async def stored(db: Database, key: ScopeKey) -> tuple[str, int] | None:
    async with db.sessions() as session:
        row = await stm_repo.load_entry(session, key)
    return (row.summary, row.version) if row is not None else None


async def v2_cancelled_on_its_way(service: MemoryService) -> Fault:
    """The memory written at v1, then a turn's write of v2 cancelled on its way to the
    database, where it is held (until the fault returned is released)."""
    assert str(await service.update_stm((await prepare(service)).turn, summary="v1")) == "saved"
    upserting = hold(service, "STM write")
    writing = asyncio.create_task(service.update_stm((await prepare(service)).turn, summary="v2"))
    await upserting.reached()  # the write is on its way ...
    writing.cancel()  # ... when the turn's task is cancelled
    with pytest.raises(asyncio.CancelledError):
        await writing
    return upserting


async def test_a_refresh_cancelled_on_its_way_to_the_database_leaves_the_channel_writable(
    db: Database, service: MemoryService
) -> None:
    assert str(await service.update_stm((await prepare(service)).turn, summary="v1")) == "saved"

    deleting = hold(service, "clearing a channel")
    clearing = asyncio.create_task(
        service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    )
    await deleting.reached()  # the cache is wiped and the deletion on its way ...
    clearing.cancel()  # ... when the command's task is cancelled
    await callbacks_already_scheduled()
    deleting.release()
    with pytest.raises(asyncio.CancelledError):
        await clearing
    # Whatever the database ended up with, the cache shows it ...
    shown = (await service.entry(SERVER_KEY)).summary
    row = await stored(db, SERVER_KEY)
    assert shown == (row[0] if row is not None else "")
    # ... and the channel's memory can be written again.
    turn = (await prepare(service)).turn
    assert str(await service.update_stm(turn, summary="after")) == "saved"
    assert await stored(db, SERVER_KEY) == ("after", (row[1] if row is not None else 0) + 1)


@pytest.mark.parametrize(("commit", "outcome"), [("fails", ("v1", 1)), ("succeeds", ("v2", 2))])
async def test_a_write_cancelled_during_its_commit_leaves_cache_and_database_agreeing(
    db: Database, service: MemoryService, commit: str, outcome: tuple[str, int]
) -> None:
    upserting = await v2_cancelled_on_its_way(service)

    if commit == "fails":
        faults(service.sessions).drop("STM write", times=1)  # its connection is lost
    upserting.release()  # the transaction ends (v2 never reported, whatever happens)
    await service.writes_settled()

    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.version) == outcome
    assert await stored(db, SERVER_KEY) == outcome
    # And the memory can be written again, on what is stored.
    assert str(await service.update_stm((await prepare(service)).turn, summary="v3")) == "saved"
    assert await stored(db, SERVER_KEY) == ("v3", outcome[1] + 1)


async def test_a_read_while_a_cancelled_turns_write_commits_does_not_cache_the_row_it_replaces(
    db: Database, service: MemoryService
) -> None:
    upserting = await v2_cancelled_on_its_way(service)
    # The cache is dropped meanwhile (missed notices), and a turn reads the memory: the
    # row the write is about to replace.
    service.drop_all()
    assert (await service.entry(SERVER_KEY)).summary == "v1"

    upserting.release()  # the write commits
    await service.writes_settled()

    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.version) == ("v2", 2)
    assert await stored(db, SERVER_KEY) == ("v2", 2)
    assert str(await service.update_stm((await prepare(service)).turn, summary="v3")) == "saved"


async def test_a_write_built_on_a_cancelled_turns_queued_write_commits_after_it(
    db: Database, service: MemoryService
) -> None:
    assert str(await service.update_stm((await prepare(service)).turn, summary="v1")) == "saved"
    # The group commit is busy with another channel's write ...
    upserting = hold(service, "STM write")
    other = asyncio.create_task(
        service.update_stm((await prepare(service, channel=OTHER_CHANNEL)).turn, summary="o")
    )
    await upserting.reached()
    # ... when a turn's write of this channel queues behind it, and the turn is cancelled.
    writing = asyncio.create_task(service.update_stm((await prepare(service)).turn, summary="v2"))
    await callbacks_already_scheduled()
    assert len(service._writer._commits._queue) == 1  # queued, not yet sent
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    # The next turn builds on what it cached (v2, on its way) and queues its own write.
    after = asyncio.create_task(service.update_stm((await prepare(service)).turn, summary="v3"))
    await callbacks_already_scheduled()

    upserting.release()
    assert str(await other) == "saved"
    assert str(await after) == "saved"
    assert await stored(db, SERVER_KEY) == ("v3", 3)
    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.version) == ("v3", 3)
