"""Where the chaos harness's operations park and wait: gates in the services and repositories,
and locks and single-flights that tell when an operation waits."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest

from bot.db import storage
from bot.db.repositories import stm as stm_repo
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool
from bot.memory.stm import commit as commit_module
from bot.memory.stm import wipes as wipes_module
from bot.runtime import BatchLoader
from bot.vocabulary.model import GuildConfig, ScopeKey, StmEntry
from tests.integration.chaos.model import entry_content

# ------------------------------------------------------------------ operations


@dataclass(eq=False)
class Op:
    """One operation running as a task; ``gate`` names where it parks (once)."""

    kind: str
    proc: str
    gate: str | None = None
    parked: bool = False
    blocked: int = 0
    gate_used: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[Any] | None = None
    at: datetime | None = None  # a clear's or forget's time, as the service took it
    start_seq: int = 0
    end_seq: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


CURRENT: contextvars.ContextVar[Op | None] = contextvars.ContextVar("chaos_op", default=None)
CHANGED: list[asyncio.Event] = []  # the harness's event (set when an op parks or blocks)


def _changed() -> None:
    if CHANGED:
        CHANGED[0].set()


async def gate(point: str) -> None:
    op = CURRENT.get()
    if op is None or op.gate != point or op.gate_used:
        return
    op.gate_used = True
    op.parked = True
    _changed()
    task = op.task
    if task is not None and task is not asyncio.current_task():
        # Parked in a read the operation started, which runs in a task of its own (a
        # batch, a single flight): cancelled meanwhile, the operation is no longer
        # parked (see Scenario.parked), and its read goes on as nobody's.
        task.add_done_callback(lambda _: op.release.set())
    await op.release.wait()


class WatchedLock(asyncio.Lock):
    """An asyncio.Lock that tells the harness when an operation has to wait for it."""

    async def acquire(self) -> bool:
        waiters = getattr(self, "_waiters", None)
        if self.locked() or (waiters and any(not w.cancelled() for w in waiters)):
            op = CURRENT.get()
            if op is not None:
                op.blocked += 1
                _changed()
            try:
                return await super().acquire()
            finally:
                if op is not None:
                    op.blocked -= 1
        return await super().acquire()


def watch_batches(loader: BatchLoader[Any, Any]) -> None:
    """An operation waiting for a batched read counts as waiting (blocked) until a batch
    holding its keys runs in its own context (a batch runs in the context of the one that
    sent it: its gate parks that one), as one that joined another's read does."""
    waiting: dict[Any, list[Op]] = {}
    get_many, run = loader.get_many, loader._run

    async def watched_get_many(keys: Any) -> Any:
        keys = list(keys)
        op = CURRENT.get()
        if op is None:
            return await get_many(keys)
        for key in keys:
            waiting.setdefault(key, []).append(op)
            op.blocked += 1
        _changed()
        try:
            return await get_many(keys)
        finally:
            for key in keys:
                if op in waiting.get(key, ()):
                    _stop_waiting(key, op)

    async def watched_get(key: Any) -> Any:
        return (await watched_get_many([key]))[key]

    def _stop_waiting(key: Any, op: Op) -> None:
        ops = waiting[key]
        ops.remove(op)
        op.blocked -= 1
        if not ops:
            del waiting[key]

    async def watched_run(batch: Any) -> None:
        owner = CURRENT.get()
        own = [key for key in batch if owner is not None and owner in waiting.get(key, ())]
        for key in own:
            _stop_waiting(key, owner)  # type: ignore[arg-type]  # it runs its own read
        if not own:
            # Sent from the context of an operation that does not wait for it (it found
            # its keys elsewhere, failed, or finished): that one is not parked here.
            CURRENT.set(None)  # this batch's task has a context of its own
        await run(batch)

    loader.get_many = watched_get_many  # type: ignore[method-assign]
    loader.get = watched_get  # type: ignore[method-assign]
    loader._run = watched_run  # type: ignore[method-assign]


def instrument(service: MemoryService, on_build: Callable[[Op], None]) -> None:
    """Locks and single-flights that tell when an operation waits, the persist gate, and
    what each write was built on (``on_build`` adds the harness's view at that point)."""
    locks: dict[int, asyncio.Lock] = {}

    def lock(channel_id: int) -> asyncio.Lock:
        if channel_id not in locks:
            locks[channel_id] = WatchedLock()
        return locks[channel_id]

    service._state.locks = lock

    flight = service._reader._entry_flight
    run = flight.run

    async def joined(key: Any, load: Callable[[], Awaitable[Any]]) -> Any:
        future = flight._inflight.get(key)
        op = CURRENT.get()
        if future is None or future.done() or op is None:
            return await run(key, load)
        op.blocked += 1
        _changed()
        try:
            return await run(key, load)
        finally:
            op.blocked -= 1

    flight.run = joined  # type: ignore[method-assign]
    watch_batches(service._reader.rows)
    watch_batches(service._reader.wipe_times)

    persist = service._writer._persist

    async def gated_persist(entries: Any, events: Any, before: Any, turn: Any) -> Any:
        op = CURRENT.get()
        if op is not None and op.kind in ("write", "admin"):
            op.meta["derived"] = {e.key: e.derived_from_users() for e in entries}
            op.meta["written_at"] = entries[0].updated_at
            op.meta["versions"] = {e.key: e.version for e in entries}
            # Copies: the entries are the cache's live objects, a later write mutates them.
            op.meta["base"] = {e.key: entry_content(e) for e in before}
            op.meta["base_versions"] = {e.key: e.version for e in before}
            op.meta["after"] = {e.key: entry_content(e) for e in entries}
            # The configuration the write was validated against (the last one read).
            op.meta["validated"] = op.meta.get("config")
            on_build(op)
        await gate("persist")
        return await persist(entries, events, before, turn)

    service._writer._persist = gated_persist  # type: ignore[method-assign]

    read_config = service._state.guilds.config

    async def watched_config(guild_id: int | None) -> GuildConfig:
        config = await read_config(guild_id)
        op = CURRENT.get()
        if op is not None:
            op.meta["config"] = config
        return config

    service._state.guilds.config = watched_config  # type: ignore[method-assign]


# Outages are modelled (a fault plan refuses a process's sessions); a real one
# is outside the model. On a loaded machine a statement can take seconds, and the 5 s
# timeout would mark the shared database down while the model counts it up (a deaf
# process then falls back to what it can show without the database, which the model's
# bookkeeping of what reached it does not expect). So the timeout is out of the way here,
# and a real failure is reported as such (see Scenario.settle).
REAL_TIMEOUT_SECONDS = 120.0


def patch_repositories(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (storage, commit_module, wipes_module):
        monkeypatch.setattr(module, "DB_TIMEOUT_SECONDS", REAL_TIMEOUT_SECONDS)
    load_entries = stm_repo.load_entries
    lock_channels = stm_repo.lock_channels
    record_clear = stm_repo.record_clear
    record_forget = stm_repo.record_forget

    async def gated_load(session: Any, keys: Sequence[ScopeKey]) -> dict[ScopeKey, StmEntry]:
        # Cold reads go in batches: the batch runs in the task of the first operation
        # that asked (it copies that task's context), and that operation parks here.
        rows = await load_entries(session, keys)
        await gate("read")
        return rows

    async def gated_lock(session: Any, channel_ids: Any, *, shared: bool) -> None:
        op = CURRENT.get()
        if op is not None and op.kind in ("clear", "forget") and not shared:
            await gate(op.kind)
        await lock_channels(session, channel_ids, shared=shared)

    async def seen_clear(session: Any, channel_id: int, at: datetime) -> None:
        op = CURRENT.get()
        if op is not None and op.kind == "clear" and op.at is None:
            op.at = at
        await record_clear(session, channel_id, at)

    async def seen_forget(session: Any, user_id: int, at: datetime) -> None:
        op = CURRENT.get()
        if op is not None and op.kind == "forget" and op.at is None:
            op.at = at
        await record_forget(session, user_id, at)

    monkeypatch.setattr(stm_repo, "load_entries", gated_load)
    monkeypatch.setattr(stm_repo, "lock_channels", gated_lock)
    monkeypatch.setattr(stm_repo, "record_clear", seen_clear)
    monkeypatch.setattr(stm_repo, "record_forget", seen_forget)
    append_clear = DurableSpool.append_clear
    append_forget = DurableSpool.append_forget

    def spooled_clear(self: DurableSpool, channel_id: int, *args: Any) -> None:
        op = CURRENT.get()
        append_clear(self, channel_id, *args)
        if op is not None and op.kind == "clear" and op.at is None:
            op.at = args[-1]

    def spooled_forget(self: DurableSpool, user_id: int, at: datetime) -> None:
        op = CURRENT.get()
        append_forget(self, user_id, at)
        if op is not None and op.kind == "forget" and op.at is None:
            op.at = at

    monkeypatch.setattr(DurableSpool, "append_clear", spooled_clear)
    monkeypatch.setattr(DurableSpool, "append_forget", spooled_forget)
