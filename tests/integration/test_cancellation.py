"""Cancellation on the STM path: a command cancelled (at shutdown, or by a caller's
timeout) at a chosen await point must leave the cache and the database agreeing, and
must not half-apply what it had started."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from bot.config import Settings
from bot.db.engine import Database
from bot.db.repositories import stm as stm_repo
from bot.vocabulary.model import ScopeKey
from tests.helpers.builders import (
    BOB,
    CHANNEL,
    GUILD,
    OTHER_CHANNEL,
    ManualClock,
    make_service,
    prepare,
)

SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)


async def callbacks_already_scheduled() -> None:
    """Return once the callbacks scheduled before this call have run. A cancelled task
    wakes up in a callback scheduled by ``cancel()``: after this, it has taken that step
    (the event loop runs callbacks in the order they were scheduled)."""
    loop = asyncio.get_running_loop()
    ran = loop.create_future()
    loop.call_soon(ran.set_result, None)
    await ran


def hold(monkeypatch: pytest.MonkeyPatch, name: str) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold the first call of ``stm_repo.<name>`` (inside a transaction) until released:
    (reached, release)."""
    reached, release = asyncio.Event(), asyncio.Event()
    real: Callable[..., Awaitable[Any]] = getattr(stm_repo, name)

    async def held(*args: Any, **kwargs: Any) -> Any:
        if not reached.is_set():
            reached.set()
            await release.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(stm_repo, name, held)
    return reached, release


async def stored(db: Database, key: ScopeKey) -> tuple[str, int] | None:
    async with db.sessions() as session:
        row = await stm_repo.load_entry(session, key)
    return (row.summary, row.version) if row is not None else None


async def test_a_refresh_cancelled_on_its_way_to_the_database_leaves_the_channel_writable(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service(db.sessions, settings, ManualClock())
    assert str(await service.update_stm((await prepare(service)).turn, summary="v1")) == "saved"

    deleting, go_on = hold(monkeypatch, "delete_channel")
    clearing = asyncio.create_task(
        service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    )
    await deleting.wait()  # the cache is wiped and the deletion is in its transaction ...
    clearing.cancel()  # ... when the command's task is cancelled
    await callbacks_already_scheduled()
    go_on.set()
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


def fail_after(monkeypatch: pytest.MonkeyPatch, name: str) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold the first call of ``stm_repo.<name>`` until released, then fail it as a
    dropped connection would (later calls go through): (reached, release)."""
    reached, release = asyncio.Event(), asyncio.Event()
    real: Callable[..., Awaitable[Any]] = getattr(stm_repo, name)

    async def dropped(*args: Any, **kwargs: Any) -> Any:
        if reached.is_set():
            return await real(*args, **kwargs)
        reached.set()
        await release.wait()
        raise ConnectionResetError("connection lost")

    monkeypatch.setattr(stm_repo, name, dropped)
    return reached, release


@pytest.mark.parametrize(("commit", "outcome"), [("fails", ("v1", 1)), ("succeeds", ("v2", 2))])
async def test_a_write_cancelled_during_its_commit_leaves_cache_and_database_agreeing(
    db: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    commit: str,
    outcome: tuple[str, int],
) -> None:
    service = make_service(db.sessions, settings, ManualClock())
    assert str(await service.update_stm((await prepare(service)).turn, summary="v1")) == "saved"
    held = fail_after if commit == "fails" else hold
    upserting, go_on = held(monkeypatch, "upsert_entries_returning_keys")
    writing = asyncio.create_task(service.update_stm((await prepare(service)).turn, summary="v2"))
    await upserting.wait()  # the write is in its transaction ...
    writing.cancel()  # ... when the turn's task is cancelled
    with pytest.raises(asyncio.CancelledError):
        await writing

    go_on.set()  # the transaction ends (v2 never reported, whatever happens)
    await service.writes_settled()

    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.version) == outcome
    assert await stored(db, SERVER_KEY) == outcome
    # And the memory can be written again, on what is stored.
    assert str(await service.update_stm((await prepare(service)).turn, summary="v3")) == "saved"
    assert await stored(db, SERVER_KEY) == ("v3", outcome[1] + 1)


async def test_a_read_while_a_cancelled_turns_write_commits_does_not_cache_the_row_it_replaces(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service(db.sessions, settings, ManualClock())
    assert str(await service.update_stm((await prepare(service)).turn, summary="v1")) == "saved"
    upserting, go_on = hold(monkeypatch, "upsert_entries_returning_keys")
    writing = asyncio.create_task(service.update_stm((await prepare(service)).turn, summary="v2"))
    await upserting.wait()  # the write is in its transaction ...
    writing.cancel()  # ... when the turn's task is cancelled
    with pytest.raises(asyncio.CancelledError):
        await writing
    # The cache is dropped meanwhile (missed notices), and a turn reads the memory: the
    # row the write is about to replace.
    service.drop_all()
    assert (await service.entry(SERVER_KEY)).summary == "v1"

    go_on.set()  # the write commits
    await service.writes_settled()

    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.version) == ("v2", 2)
    assert await stored(db, SERVER_KEY) == ("v2", 2)
    assert str(await service.update_stm((await prepare(service)).turn, summary="v3")) == "saved"


async def test_a_write_built_on_a_cancelled_turns_queued_write_commits_after_it(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service(db.sessions, settings, ManualClock())
    assert str(await service.update_stm((await prepare(service)).turn, summary="v1")) == "saved"
    # The group commit is busy with another channel's write ...
    upserting, go_on = hold(monkeypatch, "upsert_entries_returning_keys")
    other = asyncio.create_task(
        service.update_stm((await prepare(service, channel=OTHER_CHANNEL)).turn, summary="o")
    )
    await upserting.wait()
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

    go_on.set()
    assert str(await other) == "saved"
    assert str(await after) == "saved"
    assert await stored(db, SERVER_KEY) == ("v3", 3)
    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.version) == ("v3", 3)
