"""Cancellation on the STM write path: a turn cancelled (at shutdown, or by a caller's
timeout) at a chosen await point must leave the cache and the database agreeing, and
must not lose, or half-apply, what it had started."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from bot.config import Settings
from bot.db.engine import Database
from bot.db.repositories import stm as stm_repo
from bot.memory import commit as commit_module
from bot.memory.model import ScopeKey
from bot.memory.spool import DurableSpool, count_pending, spool_path
from tests.helpers.bot import start_kioku, stop_kioku
from tests.helpers.builders import BOB, CHANNEL, GUILD, ManualClock, make_service, prepare
from tests.helpers.fake_llm import ScriptedLLM

SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)
OTHER = CHANNEL + 1


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


async def test_a_cancelled_writer_whose_write_commits_leaves_no_older_row_cached(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service(db.sessions, settings, ManualClock())
    assert str(await service.update_stm((await prepare(service)).turn, summary="v1")) == "saved"
    second = (await prepare(service)).turn

    committing, go_on = hold(monkeypatch, "writes_refused")
    writing = asyncio.create_task(service.update_stm(second, summary="v2"))
    await committing.wait()  # v2 is in the cache and in the commit's transaction ...
    writing.cancel()  # ... when its turn is cancelled
    await callbacks_already_scheduled()
    # The cache is dropped (a missed notice), and Bob's message starts a turn: a miss,
    # hydrated while v2 has not committed yet.
    service.listener_lost()
    service.listening_again()
    await prepare(service, BOB)
    go_on.set()
    with pytest.raises(asyncio.CancelledError):  # the cancellation is passed on
        await writing
    # A later write of another channel commits after the held one: the queue is quiet.
    later = (await prepare(service, channel=OTHER)).turn
    assert str(await service.update_stm(later, summary="x")) == "saved"
    assert await stored(db, SERVER_KEY) == ("v2", 2)  # committed, reported to nobody
    cached = await service.entry(SERVER_KEY)
    assert (cached.summary, cached.version) == ("v2", 2)
    # And the next write of this process is not refused as stale.
    third = (await prepare(service)).turn
    assert str(await service.update_stm(third, summary="v3")) == "saved"


async def test_a_cancelled_writer_whose_write_fails_is_spooled_not_lost(
    db: Database,
    settings: Settings,
    tmp_path: Path,
    dead_engine: AsyncEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(db.sessions, settings, ManualClock(), spool=spool)
    other = (await prepare(service, channel=OTHER)).turn
    turn = (await prepare(service)).turn
    last = (await prepare(service, channel=OTHER + 1)).turn

    # A write of another channel holds the group commit; this one queues behind it.
    committing, go_on = hold(monkeypatch, "writes_refused")
    first = asyncio.create_task(service.update_stm(other, summary="other channel"))
    await committing.wait()
    writing = asyncio.create_task(service.update_stm(turn, summary="queued"))
    await callbacks_already_scheduled()  # in the queue now
    writing.cancel()
    await callbacks_already_scheduled()
    # One more write shares the queued write's transaction: when it is answered, so is
    # the queued one.
    behind = asyncio.create_task(service.update_stm(last, summary="behind it"))
    await callbacks_already_scheduled()
    # The database goes away before their transaction starts.
    service._sessions = async_sessionmaker(dead_engine)
    go_on.set()
    assert str(await first) == "saved"
    assert str(await behind) == "saved, pending sync"
    with pytest.raises(asyncio.CancelledError):  # the cancellation is passed on
        await writing
    # Nobody heard how the cancelled write ended; still, what the cache shows of it is
    # stored somewhere: in the spool, to be replayed.
    cached = service.cache.get(SERVER_KEY)
    spooled = spool.latest(SERVER_KEY)
    spool.close()
    assert cached is not None and cached.summary == "queued"
    assert spooled is not None and spooled.summary == "queued"


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


async def test_a_write_on_its_way_at_shutdown_reaches_the_spool_before_it_is_closed(
    db: Database,
    llm: ScriptedLLM,
    pg_url: URL,
    tmp_path: Path,
    silent_server: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(commit_module, "DB_TIMEOUT_SECONDS", 1.0)
    harness = await start_kioku(db, llm, pg_url, tmp_path)
    memory = harness.bot.memory
    turn = (await prepare(memory)).turn
    # The database hangs: the write's commit waits for its timeout, then the spool.
    hung = create_async_engine(
        URL.create("postgresql+asyncpg", "u", "p", "127.0.0.1", silent_server, "db")
    )
    try:
        memory._sessions = async_sessionmaker(hung)
        writing = asyncio.create_task(memory.update_stm(turn, summary="on its way"))
        await callbacks_already_scheduled()
        await stop_kioku(harness)  # the operator stops the bot meanwhile
        result = await writing
    finally:
        await hung.dispose()
    assert str(result) == "saved, pending sync"
    assert count_pending(tmp_path) == 1
