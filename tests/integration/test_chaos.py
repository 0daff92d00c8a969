"""Randomized interleavings ("chaos") of the memory core across two processes.

Two :class:`MemoryService` instances (A with a durable spool, B without) share one
embedded PostgreSQL and one :class:`ManualClock`. A seeded ``random.Random`` drives a
schedule of turns, writes (a summary, or category values in category mode), admin edits
(``/stm edit``: the form reads the memory, may stay open, then saves with
``expected_version`` for a summary), /refresh, /forget-me, messages, clock moves (also
past the TTLs and the retention period, then a janitor pass), guild settings changes
(categories set to summary mode or 1–3 categories; STM disabled or enabled), database
outages (A or B), spool replays and the delivery of real ``LISTEN/NOTIFY`` notices
(captured on one listener connection and handed to each process by hand: late, out of
band, or lost and then reset). Operations run as asyncio tasks and may be parked at
gates (a hydration read done but not cached; a write with the cache mutated but not
persisted; a clear or forget before its database transaction; an admin's edit form
open), so awaits of different operations interleave deterministically. The test knows
when an operation is parked, finished, or waiting on a lock / single-flight held by
another one.

A wipe (an acknowledged /refresh or /forget-me) *has reached* a process once it made it
itself, or a notice of it (or of a later one) was applied there, or the process is deaf
with its database up and the wipe is in the database (the window is checked against the
stored wipe times), or the process's windows were dropped since (listener back). A
guild settings change has reached a process likewise (its own change, the ``guild``
notice applied, deaf with the database up, or the listener back).

During the run each prepared turn's prompt is checked (invariant 8). After each scenario
everything is made quiet (gates released, databases up, listeners reset, spool replayed,
every notice delivered) and these invariants are checked:

1. the last write acknowledged ``saved`` / ``saved, pending sync`` on a key is what the
   database holds (summary and category values), unless a /refresh, /forget-me or
   janitor pass after it may remove it, or a wipe that had not reached its process when
   it built its entry (spooled, built on a cached copy of what was wiped, its replay is
   skipped); (with invariant 7, an acknowledged write is never silently replaced by one
   that was not built on it)
2. no row holds a value (the summary or a category value) of a write derived from a user
   forgotten at or after the start of that write's turn;
3. no row holds a value of a write whose turn started before a /refresh of its channel;
4. each process's cached entries (and what it hydrates) equal the database rows;
5. no unexpected exception escapes an operation;
6. no value of a write reported ``rejected`` is in the database;
7. built on what it replaced: when two writes acknowledged ``saved`` (not spooled) touch
   a key, the second one having built its entry after the first was acknowledged, and no
   /refresh, /forget-me, janitor pass or spool replay ran in between, the entry the
   second replaced is the first's, or one built on it (by content: every write's values
   are unique; an entry begun empty once all of that lineage had expired counts as built
   on it, SPEC §2); an admin edit saved with ``expected_version`` replaced that version;
8. no prompt (its own channel's window, or another channel's raw messages) of a process
   holds a message sent at or before a wipe that had reached the process when the turn
   began: by a user forgotten then, or in a channel cleared then; after quiet, every
   acknowledged wipe has reached both processes (checked with one turn per channel);
9. categories: every acknowledged write was validated against the guild configuration
   of a settings change at or after the last one that had reached its process when it
   built its entry, and stores values only for the categories that configuration
   defines (none in summary mode). So a stored value of a category the guild no longer
   defines was written before the change that removed it reached its process (its
   writer could not know of it); after quiet every row's content is some write's;
10. with STM disabled no write but an admin's is acknowledged: every acknowledged
    non-admin write was validated against an enabled configuration, under 9's rule
    (after a disable had reached its process, a write succeeds only once an enable has).

The numbers of writes acknowledged after a settings change they had not heard of
(their process had not) are reported as figures: late notices allow them.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from bot.config import Settings
from bot.db import storage
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.db.notify import NOTIFY_CHANNEL, CacheListener
from bot.db.repositories import stm as stm_repo
from bot.db.storage import database_answered, faults
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.memory.stm import commit as commit_module
from bot.memory.stm import wipes as wipes_module
from bot.memory.turn.types import PreparedTurn
from bot.vocabulary.errors import MemoryUnavailable
from bot.vocabulary.model import Category, GuildConfig, RawMessage, ScopeKey, StmEntry
from tests.helpers.builders import (
    ALICE,
    BOB,
    CHANNEL,
    GUILD,
    OTHER_CHANNEL,
    ManualClock,
    make_service,
    message,
    prepare,
)
from tests.helpers.database import empty_tables, make_test_settings
from tests.helpers.faults import own_sessions

CAROL = 333_333_333_333_333_003
USERS = (ALICE, BOB, CAROL)
CHANNELS = (CHANNEL, OTHER_CHANNEL)
KEYS = [ScopeKey.server(GUILD, c) for c in CHANNELS] + [
    ScopeKey.user(u, c, GUILD) for u in USERS for c in CHANNELS
]
SCENARIOS = int(os.environ.get("CHAOS_SCENARIOS", "300"))
SEED = int(os.environ.get("CHAOS_SEED", "20261101"))
STEPS = int(os.environ.get("CHAOS_STEPS", "24"))
RETENTION_DAYS = 2
TEXT = re.compile(r"^(w\d+)$")
SLUGS = ("plans", "likes", "facts", "tone")
EARLIEST = datetime.min.replace(tzinfo=UTC)

# What a write's payload, a cache entry or a row holds: the summary and the non-empty
# category values (every write's values are its own text, so contents are unique).
Content = tuple[str, tuple[tuple[str, str], ...]]
# What a write's shape depends on: STM enabled, category mode, the category slugs.
ConfigKey = tuple[bool, bool, frozenset[str]]
DEFAULT_CONFIG: ConfigKey = (True, False, frozenset())
EMPTY: Content = ("", ())


def content(summary: str | None, categories: dict[str, str] | None) -> Content:
    return (summary or "", tuple(sorted((k, v) for k, v in (categories or {}).items() if v)))


def entry_content(entry: StmEntry) -> Content:
    return content(entry.summary, entry.categories)


def config_key(config: GuildConfig) -> ConfigKey:
    slugs = frozenset(c.slug for c in config.categories) if config.category_mode else frozenset()
    return (config.stm_enabled, config.category_mode, slugs)


def values_of(stored: Content) -> list[tuple[str, str]]:
    """(slug or "summary", text) of every value held."""
    summary, categories = stored
    return ([("summary", summary)] if summary else []) + list(categories)


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
    load_entry = stm_repo.load_entry
    lock_channels = stm_repo.lock_channels
    record_clear = stm_repo.record_clear
    record_forget = stm_repo.record_forget

    async def gated_load(session: Any, key: ScopeKey) -> StmEntry | None:
        row = await load_entry(session, key)
        await gate("read")
        return row

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

    monkeypatch.setattr(stm_repo, "load_entry", gated_load)
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


# ------------------------------------------------------------------- notices


class Notices:
    """One LISTEN connection; every notice goes to both processes' inboxes."""

    def __init__(self, url: URL) -> None:
        self._args = CacheListener._asyncpg_connect_args(url)
        self._connection: asyncpg.Connection | None = None
        self._syncs: dict[int, asyncio.Event] = {}
        self._next = 0
        self.inboxes: dict[str, list[dict[str, Any]]] = {}
        # Guild settings notices, numbered in commit order (the n-th is the n-th change:
        # changes run one at a time); reset for each scenario.
        self.guild_notices = 0

    async def start(self) -> None:
        self._connection = await asyncpg.connect(**self._args)
        await self._connection.add_listener(NOTIFY_CHANNEL, self._received)

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()

    def _received(self, _c: Any, _pid: int, _channel: str, payload: str) -> None:
        notice = json.loads(payload)
        if notice.get("t") == "chaos-sync":
            event = self._syncs.pop(notice["n"], None)
            if event is not None:
                event.set()
            return
        if notice.get("t") == "guild":
            self.guild_notices += 1
            notice["chaos_n"] = self.guild_notices  # ignored by the services
        for inbox in self.inboxes.values():
            inbox.append(notice)

    async def sync(self, engine: AsyncEngine) -> None:
        """Every notice committed so far is in the inboxes (NOTIFY keeps commit order)."""
        self._next += 1
        event = self._syncs[self._next] = asyncio.Event()
        async with engine.begin() as connection:
            await connection.execute(
                text("SELECT pg_notify(:c, :p)"),
                {"c": NOTIFY_CHANNEL, "p": json.dumps({"t": "chaos-sync", "n": self._next})},
            )
        async with asyncio.timeout(10):
            await event.wait()


# ------------------------------------------------------------------- the model


@dataclass
class Proc:
    name: str
    service: MemoryService
    spool: DurableSpool | None
    real: async_sessionmaker  # type: ignore[type-arg]
    down: bool = False
    listening: str = "ok"  # ok | losing (notices lost, not noticed) | deaf
    # Up to when the wipes of a channel / user have reached this process (see the module
    # docstring); the windows were dropped at ``reset_at`` (every wipe before it reached).
    reach_clear: dict[int, datetime] = field(default_factory=dict)
    reach_forget: dict[int, datetime] = field(default_factory=dict)
    reset_at: datetime = EARLIEST
    # The last settings change (index in Scenario.configs) that has reached this process.
    config_reach: int = 0


@dataclass
class Write:
    id: int
    text: str
    proc: str
    channel: int
    user: int
    started_at: datetime
    keys: tuple[ScopeKey, ...]
    status: str | None = None
    ack: int | None = None
    derived: dict[ScopeKey, set[int]] = field(default_factory=dict)
    written_at: datetime | None = None
    turn_seq: int = 0
    ack_seq: int = 0
    kind: str = "write"
    start_seq: int = 0  # the write operation's start (the turn may have begun earlier)
    build_seq: int = 0  # when its entries were built (cache mutated, before persisting)
    built_at: datetime | None = None  # the clock then
    base: dict[ScopeKey, Content] = field(default_factory=dict)  # what it replaced
    base_versions: dict[ScopeKey, int] = field(default_factory=dict)
    after: dict[ScopeKey, Content] = field(default_factory=dict)  # what it stored
    validated: ConfigKey | None = None
    reach: int = 0  # Proc.config_reach when it built its entries
    known: int = 0  # how many settings changes had committed then
    expected_version: int | None = None
    # Up to when wipes had reached its process when it built its entries (_wipe_reach).
    wipe_reach: tuple[dict[int, datetime], dict[int, datetime]] | None = None


@dataclass
class Turn:
    proc: str
    state: Any
    user: int
    channel: int
    seq: int = 0
    written: bool = False


class Scenario:
    def __init__(
        self,
        seed: int,
        db: Database,
        settings: Settings,
        notices: Notices,
        data_dir: Path,
    ) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.db = db
        self.notices = notices
        self.clock = ManualClock()
        spool = DurableSpool(spool_path(data_dir))
        a, b = own_sessions(db), own_sessions(db)  # each process its own outages
        self.procs = {
            "A": Proc("A", make_service(a, settings, self.clock, spool), spool, a),
            "B": Proc("B", make_service(b, settings, self.clock), None, b),
        }
        for proc in self.procs.values():
            instrument(proc.service, self._built)
            notices.inboxes[proc.name] = []
        notices.guild_notices = 0
        # The guild's configuration after each committed settings change (0: defaults).
        self.configs: list[ConfigKey] = [DEFAULT_CONFIG]
        self.drained: list[int] = []  # seqs at which a replay left A's spool empty
        self.prompts_checked = 0
        self.messages_checked = 0
        self.built_on_checked = 0
        self.ops: list[Op] = []
        self.turns: list[Turn] = []
        self.writes: list[Write] = []
        self.clears: list[tuple[int, datetime, Op, bool]] = []  # channel, at, op, pending
        self.forgets: list[tuple[int, datetime, Op, bool]] = []  # user, at, op, pending
        self.janitor_cutoffs: list[datetime] = []
        self.errors: list[str] = []
        self.log: list[str] = []
        self.acks = 0
        self.seq = 0
        self.replays: list[int] = []
        self.conflicts = 0
        self.violations: list[str] = []  # invariant 8, found while running
        self.messages = 0
        self.late_config = 0
        self.changed = asyncio.Event()
        CHANGED[:] = [self.changed]

    # -- running operations

    def start(
        self,
        kind: str,
        proc: Proc,
        body: Callable[[Op], Awaitable[Any]],
        gates: tuple[str, ...] = (),
    ) -> Op:
        self.clock.advance(milliseconds=1)  # every operation starts at its own instant
        chosen = self.rng.choice(gates) if gates and self.rng.random() < 0.35 else None
        op = Op(kind, proc.name, chosen)
        self.seq += 1
        op.start_seq = self.seq

        async def run() -> Any:
            CURRENT.set(op)
            try:
                result = await body(op)
                self.seq += 1
                op.end_seq = self.seq
                self.log.append(f"  done {kind}@{proc.name} {op.meta.get('outcome', '')}")
                return result
            except MemoryUnavailable:
                local_only = proc.spool is None and kind in ("clear", "forget", "janitor")
                if not (proc.down or local_only):
                    self.errors.append(f"{kind} in {proc.name}: MemoryUnavailable while up")
                return None
            except Exception as exc:  # invariant 5
                self.errors.append(f"{kind} in {proc.name}: {exc.__class__.__name__}: {exc}")
                raise

        op.task = asyncio.get_running_loop().create_task(run(), context=contextvars.copy_context())
        self.ops.append(op)
        self.log.append(f"{kind}@{proc.name} gate={chosen} {op.meta or ''}")
        return op

    async def settle(self) -> None:
        """Until every operation is finished, parked at its gate, or waiting for one."""
        while True:
            # Yield first: ``blocked`` holds from when an operation starts to wait for a
            # channel lock or a joined read until it runs again, so one handed its lock or
            # read while this task was busy (its own awaits: syncing notices, service
            # calls) still counts as waiting; settle would return with it runnable, to
            # interleave with the next action (once in 1,100 scenarios without these
            # yields). A hand-off takes a task one or two loop iterations, a shielded read
            # a few more: 20 leave room for a chain. No clock: the rest is waited for below.
            for _ in range(20):
                await asyncio.sleep(0)
            active = [
                op
                for op in self.ops
                if not op.task.done() and not op.parked and not op.blocked  # type: ignore[union-attr]
            ]
            if storage.outage_number(self.db.sessions) is not None:
                raise AssertionError(
                    f"seed {self.seed}: the real database was marked down (outside the "
                    "model; see the log for the failure)\n" + "\n".join(self.log)
                )
            if not active:
                return
            self.changed.clear()
            waiter = asyncio.ensure_future(self.changed.wait())
            done, _ = await asyncio.wait(
                [waiter, *(op.task for op in active)],  # type: ignore[misc]
                timeout=15,
                return_when=asyncio.FIRST_COMPLETED,
            )
            waiter.cancel()
            if not done:
                raise AssertionError(
                    f"seed {self.seed}: stuck: {[o.kind for o in active]}\n" + "\n".join(self.log)
                )

    def parked(self) -> list[Op]:
        return [op for op in self.ops if op.parked and not op.task.done()]  # type: ignore[union-attr]

    async def release(self, op: Op) -> None:
        self.log.append(f"release {op.kind}@{op.proc}")
        op.parked = False
        op.release.set()
        await self.settle()

    # -- actions

    def _proc(self) -> Proc:
        return self.procs[self.rng.choice("AB")]

    # -- what has reached a process (see the module docstring)

    def _built(self, op: Op) -> None:
        """A write built its entries: when, and which settings change it must know of."""
        proc = self.procs[op.proc]
        op.meta["build_seq"] = self.seq
        op.meta["built_at"] = self.clock.now()
        op.meta["known"] = len(self.configs) - 1
        deaf_up = proc.listening == "deaf" and not proc.down  # reads the settings each use
        op.meta["reach"] = len(self.configs) - 1 if deaf_up else proc.config_reach
        op.meta["wipe_reach"] = self._wipe_reach(proc)

    def _changed_config(self, proc: Proc, key: ConfigKey) -> None:
        self.configs.append(key)
        proc.config_reach = len(self.configs) - 1

    def _committed(self, op: Op, pending: bool) -> bool:
        """The wipe is in the database (a spooled one once a replay emptied the spool)."""
        return not pending or any(d > op.end_seq for d in self.drained)

    def _wipe_reach(self, proc: Proc) -> tuple[dict[int, datetime], dict[int, datetime]]:
        """Per channel and per user: every wipe at or before this time has reached it."""
        clears = {c: max(proc.reach_clear.get(c, EARLIEST), proc.reset_at) for c in CHANNELS}
        forgets = {u: max(proc.reach_forget.get(u, EARLIEST), proc.reset_at) for u in USERS}
        if proc.listening == "deaf" and not proc.down:
            # The window is checked against the wipe times stored in the database.
            for channel, at, op, pending in self.clears:
                if self._committed(op, pending):
                    clears[channel] = max(clears[channel], at)
            for user, at, op, pending in self.forgets:
                if self._committed(op, pending):
                    forgets[user] = max(forgets[user], at)
        return clears, forgets

    def _check_prompt(
        self,
        proc: str,
        channel: int,
        prepared: PreparedTurn,
        reach: tuple[dict[int, datetime], dict[int, datetime]],
        wipes: tuple[list[tuple[int, datetime, Op, bool]], list[tuple[int, datetime, Op, bool]]],
        what: str,
    ) -> None:
        """Invariant 8 for one prepared turn: no message a wipe that had reached the
        process when the turn began covers."""
        clears_reach, forgets_reach = reach
        clears, forgets = wipes
        self.prompts_checked += 1
        shown: list[tuple[int, RawMessage]] = [(channel, m) for m in prepared.prompt.window]
        for other in prepared.prompt.others:
            if other.entry is not None:
                shown += [(other.entry.key.channel_id, m) for m in other.window]
        for shown_in, m in shown:
            self.messages_checked += 1
            cleared = [
                at
                for c, at, _, _ in clears
                if c == shown_in and at <= clears_reach.get(shown_in, EARLIEST)
            ]
            if cleared and m.created_at <= max(cleared):
                self.violations.append(
                    f"invariant 8: {what} in {proc} (ch={channel % 1000}) shows {m.content!r} "
                    f"of ch={shown_in % 1000} sent {m.created_at.time()}, but the channel was "
                    f"cleared at {max(cleared).time()} and that had reached {proc}"
                )
            forgotten = [
                at
                for u, at, _, _ in forgets
                if u == m.author_id and at <= forgets_reach.get(u, EARLIEST)
            ]
            if forgotten and m.created_at <= max(forgotten):
                self.violations.append(
                    f"invariant 8: {what} in {proc} (ch={channel % 1000}) shows {m.content!r} "
                    f"of ch={shown_in % 1000} sent {m.created_at.time()}, but user "
                    f"{m.author_id % 10} was forgotten at {max(forgotten).time()} and that "
                    f"had reached {proc}"
                )

    async def setup(self) -> None:
        """About a third of the scenarios begin in category mode (set before either
        process has read the settings)."""
        if self.rng.random() >= 0.35:
            return
        slugs = self.rng.sample(SLUGS, self.rng.randint(1, 3))
        defined = [Category(i, s, s.title(), f"keep {s}") for i, s in enumerate(slugs)]
        await self.procs["A"].service.set_categories(GUILD, BOB, defined)
        self.configs.append((True, True, frozenset(slugs)))
        for proc in self.procs.values():
            proc.config_reach = 1
        self.log.append(f"categories {slugs} (set up)")

    async def act(self) -> None:
        rng = self.rng
        actions: list[tuple[float, Callable[[], Awaitable[None]]]] = [
            (4, self.prepare),
            (5, self.write),
            (1.2, self.admin_edit),
            (1.2, self.clear),
            (0.8, self.forget),
            (3, self.observe),
            (2, self.advance),
            (0.4, self.janitor),
            (0.8, self.outage),
            (1, self.replay),
            (3, self.deliver),
            (0.6, self.listener),
            (0.6, self.categories),
            (0.4, self.toggle_stm),
            (0.25, self.expire),
            (3 if self.parked() else 0, self.release_one),
        ]
        total = sum(w for w, _ in actions)
        pick = rng.uniform(0, total)
        for weight, action in actions:
            pick -= weight
            if pick <= 0:
                await action()
                break
        await self.settle()

    async def prepare(self) -> None:
        proc, user, channel = self._proc(), self.rng.choice(USERS), self.rng.choice(CHANNELS)
        # What had reached the process when the turn began (invariant 8).
        reach = self._wipe_reach(proc)
        wipes = (list(self.clears), list(self.forgets))

        async def body(op: Op) -> None:
            prepared = await prepare(
                proc.service, user, channel=channel, label_for=lambda e: f"#{e.key.channel_id}"
            )
            self.turns.append(Turn(proc.name, prepared.turn, user, channel, op.start_seq))
            self._check_prompt(proc.name, channel, prepared, reach, wipes, f"turn {op.start_seq}")

        self.start("prepare", proc, body, ("read",))
        self.log[-1] += f" user={user % 10} ch={channel % 1000}"

    @staticmethod
    def _payload(config: GuildConfig, text_: str, rng: random.Random) -> dict[str, Any]:
        """The write a model (or an admin's form) makes under ``config``; now and then
        one of the wrong shape (refused)."""
        if config.category_mode:
            slugs = sorted(c.slug for c in config.categories)
            if rng.random() < 0.05:
                return {"summary": text_}
            chosen = rng.sample(slugs, rng.randint(1, len(slugs)))
            values = {slug: text_ for slug in chosen}
            rest = [slug for slug in slugs if slug not in chosen]
            if rest and rng.random() < 0.25:
                values[rng.choice(rest)] = ""  # clears that category
            return {"categories": values}
        if rng.random() < 0.05:
            return {"categories": {rng.choice(SLUGS): text_}}
        return {"summary": text_}

    async def _write(
        self,
        proc: Proc,
        turn_state: Any,
        user: int,
        channel: int,
        kind: str,
        call: Callable[[Write], Awaitable[Any]],
        turn_seq: int | None = None,
        gates: tuple[str, ...] = ("persist", "read"),
    ) -> None:
        write = Write(
            id=len(self.writes) + 1,
            text=f"w{len(self.writes) + 1}",
            proc=proc.name,
            channel=channel,
            user=user,
            started_at=turn_state.started_at,
            keys=turn_state.write_keys,
            turn_seq=self.seq + 1 if turn_seq is None else turn_seq,
            kind=kind,
        )
        self.writes.append(write)

        async def body(op: Op) -> None:
            write.start_seq = op.start_seq
            result = await call(write)
            write.status = result.status
            self.acks += 1
            write.ack = self.acks
            write.ack_seq = self.seq + 1
            meta = op.meta
            write.derived = meta.get("derived", {})
            write.written_at = meta.get("written_at")
            write.base = meta.get("base", {})
            write.base_versions = meta.get("base_versions", {})
            write.after = meta.get("after", {})
            validated = meta.get("validated")
            write.validated = config_key(validated) if validated is not None else None
            write.reach = meta.get("reach", 0)
            write.known = meta.get("known", 0)
            write.build_seq = meta.get("build_seq", 0)
            write.built_at = meta.get("built_at")
            write.wipe_reach = meta.get("wipe_reach")
            op.meta["outcome"] = f"{write.text}: {result}"

        self.start(kind, proc, body, gates)
        self.log[-1] += (
            f" {write.text} user={user % 10} ch={channel % 1000}"
            f" start={turn_state.started_at.time()}"
        )

    async def write(self) -> None:
        ready = [t for t in self.turns if not t.written]
        if not ready:
            return await self.prepare()
        turn = self.rng.choice(ready)
        turn.written = True
        proc = self.procs[turn.proc]
        # Drawn now: the write's task runs later, interleaved with others.
        shape = random.Random(self.rng.random())

        async def call(write: Write) -> Any:
            payload = self._payload(turn.state.config, write.text, shape)
            return await proc.service.update_stm(turn.state, **payload)

        await self._write(proc, turn.state, turn.user, turn.channel, "write", call, turn.seq)

    async def admin_edit(self) -> None:
        """``/stm edit``: the form reads the settings and the memory, may stay open (a
        gate), then saves; a summary only over the version the form showed."""
        proc, user, channel = self._proc(), self.rng.choice(USERS), self.rng.choice(CHANNELS)
        shape = random.Random(self.rng.random())
        use_expected = self.rng.random() < 0.7
        self.clock.advance(milliseconds=1)
        key = ScopeKey.server(GUILD, channel)

        class _State:
            started_at = self.clock.now()  # replaced by the time the form opened
            write_keys = (key, ScopeKey.user(user, channel, GUILD))

        async def call(write: Write) -> Any:
            config = await proc.service.guild_config(GUILD)
            shown = await proc.service.entry(key)
            epoch, opened = proc.service.channel_epoch(channel), self.clock.now()
            write.started_at = opened
            await gate("form")
            payload = self._payload(config, write.text, shape)
            expected = shown.version if use_expected and "summary" in payload else None
            write.expected_version = expected
            return await proc.service.admin_edit(
                guild_id=GUILD,
                channel_id=channel,
                actor_user_id=user,
                epoch=epoch,
                started_at=opened,
                expected_version=expected,
                **payload,
            )

        await self._write(
            proc, _State, user, channel, "admin", call, gates=("persist", "read", "form")
        )

    async def clear(self) -> None:
        proc, channel = self._proc(), self.rng.choice(CHANNELS)

        async def body(op: Op) -> None:
            receipt = await proc.service.clear_channel(channel, guild_id=GUILD, actor_user_id=BOB)
            assert op.at is not None
            self.clears.append((channel, op.at, op, receipt.pending_sync))
            proc.reach_clear[channel] = max(proc.reach_clear.get(channel, EARLIEST), op.at)
            op.meta["outcome"] = str(receipt)

        op = self.start("clear", proc, body, ("clear",))
        op.meta["channel"] = channel
        self.log[-1] += f" ch={channel % 1000} at={self.clock.now().time()}"

    async def forget(self) -> None:
        proc, user = self._proc(), self.rng.choice(USERS)

        async def body(op: Op) -> None:
            receipt = await proc.service.forget_user(user)
            assert op.at is not None
            self.forgets.append((user, op.at, op, receipt.pending_sync))
            proc.reach_forget[user] = max(proc.reach_forget.get(user, EARLIEST), op.at)
            op.meta["outcome"] = str(receipt)

        self.start("forget", proc, body, ("forget",))
        self.log[-1] += f" user={user % 10} at={self.clock.now().time()}"

    async def observe(self) -> None:
        proc, user, channel = self._proc(), self.rng.choice(USERS), self.rng.choice(CHANNELS)
        self.clock.advance(milliseconds=1)
        self.messages += 1
        msg = message(user, f"m{self.messages} from {user % 10}", at=self.clock.now())
        targets = list(self.procs.values()) if self.rng.random() < 0.3 else [proc]
        for target in targets:
            target.service.observe_message(channel, msg)
        self.log.append(
            f"observe m{self.messages} user={user % 10} ch={channel % 1000} "
            f"in {[t.name for t in targets]} at={msg.created_at.time()}"
        )

    async def advance(self) -> None:
        r = self.rng.random()
        if r < 0.75:
            delta = timedelta(seconds=self.rng.randint(1, 120))
        elif r < 0.95:
            delta = timedelta(hours=self.rng.choice([6, 11, 13, 23, 25]))
        else:
            delta = timedelta(days=self.rng.choice([1, 3]))
        self.clock.advance(seconds=delta.total_seconds())
        self.log.append(f"advance {delta}")

    async def expire(self) -> None:
        """Past the TTLs, or past the retention period: then a janitor pass."""
        hours = self.rng.choice([13, 25, RETENTION_DAYS * 24 + 1, RETENTION_DAYS * 24 + 30])
        self.clock.advance(hours=hours)
        self.log.append(f"advance {hours} h (expire)")
        await self.janitor()

    async def janitor(self) -> None:
        proc = self._proc()

        async def body(op: Op) -> None:
            cutoff = self.clock.now() - timedelta(days=RETENTION_DAYS)
            op.meta["outcome"] = f"{await proc.service.purge_expired_rows()} rows"
            self.janitor_cutoffs.append(cutoff)

        self.start("janitor", proc, body)

    async def categories(self) -> None:
        """``/stm categories set`` (or clear): summary mode, or 1–3 categories."""
        proc, r = self._proc(), self.rng.random()
        _, mode_now, slugs_now = self.configs[-1]
        slugs: list[str]
        if mode_now and self.rng.random() < 0.5:
            # One category replaced by another (renamed): what the old one holds stays
            # in the rows, and the next category write merges onto it.
            gone = self.rng.choice(sorted(slugs_now))
            new = self.rng.choice([s for s in SLUGS if s not in slugs_now])
            slugs = [*sorted(slugs_now - {gone}), new]
        elif r < 0.3:
            slugs = []
        elif r < 0.4:
            slugs = ["summary"]  # one category called "summary": summary mode
        else:
            slugs = self.rng.sample(SLUGS, self.rng.randint(1, 3))
        defined = [Category(i, s, s.title(), f"keep {s}") for i, s in enumerate(slugs)]
        mode = bool(slugs) and slugs != ["summary"]

        async def body(op: Op) -> None:
            await proc.service.set_categories(GUILD, BOB, defined)
            enabled = self.configs[-1][0]
            self._changed_config(proc, (enabled, mode, frozenset(slugs) if mode else frozenset()))

        self.start("categories", proc, body)
        self.log[-1] += f" {slugs or 'none'}"

    async def toggle_stm(self) -> None:
        """``/stm settings``: short-term memory disabled (or enabled) for the guild."""
        proc = self._proc()
        current = self.configs[-1][0]
        enabled = not current if self.rng.random() < 0.8 else current

        async def body(op: Op) -> None:
            await proc.service.update_guild_settings(GUILD, BOB, short_term_memory_enabled=enabled)
            _, mode, slugs = self.configs[-1]
            self._changed_config(proc, (enabled, mode, slugs))

        self.start("settings", proc, body)
        self.log[-1] += f" stm {'on' if enabled else 'off'}"

    async def outage(self) -> None:
        proc = self._proc()
        self._set_down(proc, not proc.down)
        self.log.append(f"{proc.name} {'down' if proc.down else 'up'}")

    def _set_down(self, proc: Proc, down: bool) -> None:
        proc.down = down
        plan = faults(proc.real)
        if down:
            plan.fail()
        else:
            plan.clear()
            database_answered(proc.real)  # as its probe would find: the model counts it up

    async def replay(self) -> None:
        proc = self.procs["A"]
        assert proc.spool is not None
        if proc.down or not proc.spool.pending:
            return
        spool = proc.spool

        async def body(op: Op) -> None:
            op.meta["outcome"] = await spool.replay(proc.real)
            self.replays.append(self.seq + 1)
            if not spool.pending:
                self.drained.append(self.seq + 1)
                proc.service.spool_replayed()

        self.start("replay", proc, body)

    async def deliver(self, proc: Proc | None = None, everything: bool = False) -> None:
        proc = proc or self._proc()
        await self.notices.sync(self.db.engine)
        # Settings changes run one at a time: the n-th guild notice is the n-th change.
        assert self.notices.guild_notices == len(self.configs) - 1, "a change went unrecorded"
        inbox = self.notices.inboxes[proc.name]
        count = len(inbox) if everything else self.rng.randint(0, len(inbox))
        delivered, inbox[:] = inbox[:count], inbox[count:]
        if proc.listening != "ok":
            self.log.append(f"lost {len(delivered)} notices for {proc.name}")
            return
        now = self.clock.now()
        for notice in delivered:
            proc.service.apply_notice(notice)
            if notice.get("o") == proc.service.instance_id:
                continue  # its own echo: ignored
            kind = notice.get("t")
            if kind == "clear":
                proc.reach_clear[int(notice["c"])] = now
            elif kind == "forget":
                proc.reach_forget[int(notice["u"])] = now
            elif kind == "guild":
                proc.config_reach = max(proc.config_reach, int(notice["chaos_n"]))
        self.log.append(
            f"deliver {[(n['t'], n.get('k', n.get('c', n.get('u')))) for n in delivered]}"
            f" to {proc.name}"
        )

    async def listener(self) -> None:
        proc = self._proc()
        if proc.listening == "ok":
            proc.listening = self.rng.choice(["losing", "deaf"])
            if proc.listening == "deaf":
                proc.service.listener_lost()
        elif proc.listening == "losing":
            proc.listening = "deaf"
            proc.service.listener_lost()
        else:
            await self._reconnect(proc)
        self.log.append(f"listener {proc.name} {proc.listening}")

    async def _reconnect(self, proc: Proc) -> None:
        await self.notices.sync(self.db.engine)
        self.notices.inboxes[proc.name].clear()  # sent while away: lost
        proc.listening = "ok"
        proc.service.listening_again()
        # Every window and the settings were dropped: read again from now on.
        proc.reset_at = self.clock.now()
        proc.config_reach = len(self.configs) - 1

    async def release_one(self) -> None:
        parked = self.parked()
        if parked:
            await self.release(self.rng.choice(parked))

    # -- quiet, then check

    async def quiesce(self) -> None:
        while parked := self.parked():
            await self.release(parked[0])
        await self.settle()
        for proc in self.procs.values():
            if proc.down:
                self._set_down(proc, False)
            if proc.listening != "ok":
                await self._reconnect(proc)
        a = self.procs["A"]
        assert a.spool is not None
        # Rounds, not one pass: an operation that was waiting on real I/O (a lock held by
        # another connection) rather than parked ends in finish_stragglers, and what it
        # announced or spooled must still reach both processes before the check.
        for _ in range(3):
            for _ in range(3):
                if a.spool.pending:
                    self.log.append(f"quiesce: replayed {await a.spool.replay(a.real)}")
                    self.seq += 1
                    self.replays.append(self.seq)
                    if not a.spool.pending:
                        self.drained.append(self.seq)
                    a.service.spool_replayed()
                for proc in self.procs.values():
                    await self.deliver(proc, everything=True)
            await self.settle()
            if not self.parked() and all(op.task is None or op.task.done() for op in self.ops):
                break
            await self.finish_stragglers()

    async def finish_stragglers(self) -> None:
        """Give an operation still waiting time to end: ``settle`` does not count one
        waiting for a lock or a read led by a task outside the harness's view (a
        replay, a delivery), which ends once its real I/O does. One that waits for 15 s
        more is reported by ``check`` as never ended."""
        for _ in range(3):
            while parked := self.parked():
                await self.release(parked[0])
            waiting = [op.task for op in self.ops if op.task is not None and not op.task.done()]
            if not waiting:
                return
            await asyncio.wait(waiting, timeout=15)

    async def rows(self) -> dict[ScopeKey, ShortTermMemory]:
        async with self.db.sessions() as session:
            rows = list(await session.scalars(select(ShortTermMemory)))
        return {stm_repo.entry_from_row(r).key: r for r in rows}

    def fail(self, what: str) -> None:
        raise AssertionError(f"seed {self.seed}: {what}\nschedule:\n  " + "\n  ".join(self.log))

    async def check(self) -> None:
        if self.errors:
            self.fail(f"invariant 5 (exceptions): {self.errors}")
        if self.violations:
            self.fail("\n".join(self.violations))
        for op in self.ops:
            if op.task is None or not op.task.done():
                self.fail(f"{op.kind}@{op.proc} (started at step {op.start_seq}) never ended")
        rows = await self.rows()
        by_text = {w.text: w for w in self.writes}
        acknowledged = ("saved", "saved, pending sync")
        for key, row in rows.items():
            stored = content(row.summary, dict(row.categories or {}))
            if not values_of(stored):
                continue
            row_derived = {row.user_id, row.actor_user_id, *(row.contributor_ids or ())} - {None}
            for slug, value in values_of(stored):
                write = by_text.get(value)
                if write is None:
                    self.fail(f"{key} holds {value!r} under {slug}: no write made it")
                    return
                if write.status not in acknowledged:
                    self.fail(f"invariant 6: {key} holds {write.text}, reported {write.status}")
                # Whose words the value carries: the users its write was derived from.
                derived = write.derived.get(key, row_derived)
                for user, at, _, _ in self.forgets:
                    if user in derived and at >= write.started_at:
                        self.fail(
                            f"invariant 2: {key} holds {write.text} under {slug} (turn started "
                            f"{write.started_at}) derived from user {user % 10}, forgotten "
                            f"at {at}"
                        )
                for channel, at, _, _ in self.clears:
                    if channel == key.channel_id and at > write.started_at:
                        self.fail(
                            f"invariant 3: {key} holds {write.text} under {slug} (turn started "
                            f"{write.started_at}) but the channel was cleared at {at}"
                        )
            self._check_row_categories(key, stored)
        # 1: the last acknowledged write of each key survives unless something removed it.
        for key in KEYS:
            acked = [w for w in self.writes if key in w.keys and w.status in acknowledged]
            if not acked:
                continue
            last = max(acked, key=lambda w: w.ack or 0)
            if self._may_be_removed(last, key):
                continue
            if self._spool_conflict(acked, key):
                self.conflicts += 1
                continue
            row = rows.get(key)
            held = content(row.summary, dict(row.categories or {})) if row is not None else None
            if held != last.after.get(key):
                self.fail(
                    f"invariant 1: {key}: {last.text} acknowledged {last.status!r} "
                    f"({last.after.get(key)}) but the row holds {held!r}"
                )
        # 4: the caches (and what they hydrate) equal the rows.
        for proc in self.procs.values():
            for key in KEYS:
                row = rows.get(key)
                for how, entry in (
                    ("cached", proc.service.cache.get(key)),
                    ("hydrated", await proc.service.entry(key)),
                ):
                    if entry is None:
                        continue
                    if row is None or proc.service.cache.is_expired(stm_repo.entry_from_row(row)):
                        if entry.has_content:
                            self.fail(
                                f"invariant 4: {proc.name} {how} {key} = {entry.summary!r} "
                                f"{entry.categories} v{entry.version}, the row is "
                                f"{'gone' if row is None else 'expired'}"
                            )
                        continue
                    if (entry.summary, entry.categories, entry.version) != (
                        row.summary,
                        dict(row.categories or {}),
                        row.version,
                    ):
                        self.fail(
                            f"invariant 4: {proc.name} {how} {key} = {entry.summary!r} "
                            f"{entry.categories} v{entry.version}, row = {row.summary!r} "
                            f"{row.categories} v{row.version}"
                        )
        self._check_built_on()
        self._check_configs()
        # 8, after quiet: every acknowledged wipe has reached both processes.
        wipes = (
            [w for w in self.clears if self._committed(w[2], w[3])],
            [w for w in self.forgets if self._committed(w[2], w[3])],
        )
        now = self.clock.now()
        everything = ({c: now for c in CHANNELS}, {u: now for u in USERS})
        for proc in self.procs.values():
            for channel in CHANNELS:
                prepared = await prepare(
                    proc.service, ALICE, channel=channel, label_for=lambda e: f"#{e.key.channel_id}"
                )
                self._check_prompt(proc.name, channel, prepared, everything, wipes, "after quiet")
        if self.violations:
            self.fail("\n".join(self.violations))

    def _check_row_categories(self, key: ScopeKey, stored: Content) -> None:
        """Invariant 9 for a row: it is some write's content, and a value of a category
        the guild no longer defines was written before that change reached its writer."""
        writers = [w for w in self.writes if w.after.get(key) == stored]
        if not writers:
            self.fail(f"invariant 9: {key} holds {stored}, which no write built")
        writer = writers[0]
        _, mode, slugs = self.configs[-1]
        for slug, value in stored[1]:
            if mode and slug in slugs:
                continue
            assert writer.validated is not None
            if (
                slug not in writer.validated[2]
                or writer.validated not in self.configs[writer.reach : writer.known + 1]
            ):
                self.fail(
                    f"invariant 9: {key} holds {value} under {slug!r}, no longer defined; its "
                    f"write {writer.text} was validated against {writer.validated} while "
                    f"changes up to #{writer.reach} had reached {writer.proc}: "
                    f"{self.configs}"
                )

    def _check_configs(self) -> None:
        """Invariants 9 and 10 for every acknowledged write."""
        for w in self.writes:
            if w.status not in ("saved", "saved, pending sync"):
                continue
            if w.validated is None:
                self.fail(f"harness: {w.text} acknowledged without a configuration read")
                return
            current = self.configs[w.reach : w.known + 1]
            if w.validated not in current:
                number = 10 if w.validated[0] != any(c[0] for c in current) else 9
                self.fail(
                    f"invariant {number}: {w.kind} {w.text} in {w.proc} acknowledged "
                    f"{w.status!r}, validated against {w.validated}, but settings changes up "
                    f"to #{w.reach} had reached {w.proc}: {self.configs}"
                )
            if w.kind != "admin" and not w.validated[0]:
                self.fail(f"invariant 10: {w.kind} {w.text} acknowledged with STM disabled")
            _, mode, slugs = w.validated
            for key, (_, categories) in w.after.items():
                undefined = [slug for slug, _ in categories if not mode or slug not in slugs]
                if undefined:
                    self.fail(
                        f"invariant 9: {w.text} stored {key} with categories {undefined} "
                        f"that {w.validated} does not define"
                    )
            if w.validated != self.configs[w.known]:
                self.late_config += 1

    def _disturbed(self, key: ScopeKey, low: int, high: int) -> bool:
        """A deletion or a spool replay ran (at least partly) between ``low`` and ``high``."""
        for op in self.ops:
            if op.kind not in ("clear", "forget", "janitor", "replay"):
                continue
            if op.kind == "clear" and op.meta.get("channel") != key.channel_id:
                continue
            end = op.end_seq or 10**9
            if op.start_seq <= high and end >= low:
                return True
        return any(low <= r <= high for r in self.replays)

    def _expired(self, write: Write, key: ScopeKey, at: datetime | None) -> bool:
        """Whether what ``write`` stored under ``key`` is past its TTL at ``at``."""
        if write.written_at is None or at is None:
            return False
        stored = StmEntry(key=key, updated_at=write.written_at, summary=write.after[key][0])
        ttl = self.procs["A"].service.cache.ttl_for(stored)
        return (at - write.written_at).total_seconds() >= ttl

    def _check_built_on(self) -> None:
        """Invariant 7: a saved write replaced the last saved one, or one built on it."""
        for w in self.writes:
            if w.status == "saved" and w.kind == "admin" and w.expected_version is not None:
                key = ScopeKey.server(GUILD, w.channel)
                if w.base_versions.get(key) != w.expected_version:
                    self.fail(
                        f"invariant 7: admin {w.text} saved with expected_version "
                        f"{w.expected_version} over version {w.base_versions.get(key)}"
                    )
        for key in KEYS:
            saved = sorted(
                (w for w in self.writes if w.status == "saved" and key in w.after),
                key=lambda w: w.ack_seq,
            )
            built = sorted(
                (w for w in self.writes if key in w.after and key in w.base),
                key=lambda w: w.build_seq,
            )
            for second in saved:
                prior = [w for w in saved if w.ack_seq < second.build_seq]
                if not prior:
                    continue
                first = prior[-1]
                if self._disturbed(key, first.start_seq, second.ack_seq):
                    continue
                if second.base[key] == EMPTY and self._expired(first, key, second.built_at):
                    continue  # an expired memory counts as gone (SPEC §2)
                self.built_on_checked += 1
                # Built on the first, or on nothing once every value of that lineage had
                # expired (SPEC §2): a write then starts afresh (e.g. a turn's write after
                # a day's pause), and later writes build on it.
                lineage, writers = {first.after[key]}, [first]
                for w in built:
                    if w.base[key] in lineage or (
                        w.base[key] == EMPTY
                        and all(
                            self._expired(x, key, w.built_at)
                            for x in writers
                            if x.status != "rejected"  # its values were never kept
                        )
                    ):
                        lineage.add(w.after[key])
                        writers.append(w)
                if second.base[key] not in lineage:
                    self.fail(
                        f"invariant 7: {key}: {second.kind} {second.text} in {second.proc} "
                        f"(saved, v{second.base_versions.get(key, 0) + 1}) replaced "
                        f"{second.base[key]} v{second.base_versions.get(key)}, not "
                        f"{first.text}'s {first.after[key]} (saved before it was built)"
                    )

    def _spool_conflict(self, acked: list[Write], key: ScopeKey) -> bool:
        """A write spooled in A while B wrote the same key directly before the replay: the
        replay keeps the later of the two by time, and the test's clock often gives both
        the same instant (then the higher version wins, counted apart in each process), so
        which one is "last" is not decided by acknowledgement order here. A write is all or
        nothing: one skipped for a newer row of one of its keys leaves its other keys as
        they were too."""
        stored = [w for w in self.writes if w.status in ("saved", "saved, pending sync")]
        for spooled in (w for w in acked if w.status == "saved, pending sync"):
            replayed = min((r for r in self.replays if r > spooled.ack_seq), default=10**9)
            for direct in stored:
                if (
                    direct.proc != spooled.proc
                    and set(direct.keys) & set(spooled.keys)
                    and spooled.turn_seq < replayed
                    and (direct.ack_seq < replayed and direct.ack_seq > spooled.turn_seq)
                ):
                    return True
        return False

    def _may_be_removed(
        self, write: Write, key: ScopeKey, seen: frozenset[str] = frozenset()
    ) -> bool:
        # A clear or forget not finished when the turn started may remove what it wrote
        # (it takes effect when it commits, or when its spooled record is replayed).
        for channel, _at, op, pending in self.clears:
            if channel == key.channel_id and (pending or op.end_seq > write.turn_seq):
                return True
        derived = write.derived.get(key, {write.user})
        for user, _at, op, pending in self.forgets:
            if user in derived and (pending or op.end_seq > write.turn_seq):
                return True
        if write.wipe_reach is not None:
            # Built on what a wipe its process had not heard of yet deleted (cut off from
            # the database and the notices, it used its cached copy): spooled, its replay
            # finds the row it was built on gone and is skipped, as the live write would
            # have been refused.
            clears_reach, forgets_reach = write.wipe_reach
            for channel, at, _op, _pending in self.clears:
                if channel == key.channel_id and at > clears_reach.get(channel, EARLIEST):
                    return True
            for user, at, _op, _pending in self.forgets:
                if user in derived and at > forgets_reach.get(user, EARLIEST):
                    return True
        if any(
            write.written_at is None or write.written_at < cutoff for cutoff in self.janitor_cutoffs
        ):
            return True
        # Built on a write its process spooled (its state, not replayed yet): it carries
        # that write's text, so what may remove that one may remove it too (the replay
        # refuses both; see spool_replay._chain_wiped), on any of its keys (all or nothing).
        for built_on in write.keys:
            base = write.base.get(built_on)
            if base is None or not values_of(base):
                continue
            if any(
                self._may_be_removed(spooled, built_on, seen | {write.text})
                for spooled in self.writes
                if spooled.proc == write.proc
                and spooled.status == "saved, pending sync"
                and spooled.text not in seen | {write.text}
                and spooled.build_seq < write.build_seq
                and spooled.after.get(built_on) == base
            ):
                return True
        return False


@pytest.fixture
async def notices(pg_url: URL) -> Any:
    listener = Notices(pg_url)
    await listener.start()
    yield listener
    await listener.close()


async def run_scenario(
    seed: int,
    db: Database,
    settings: Settings,
    notices: Notices,
    data_dir: Path,
    steps: int = STEPS,
    script: Callable[[Scenario], Awaitable[None]] | None = None,
) -> Scenario:
    """A seeded scenario of ``steps`` random actions, or the actions ``script`` runs."""
    await empty_tables(db.engine)
    scenario = Scenario(seed, db, settings, notices, data_dir)
    try:
        if script is None:
            await scenario.setup()
            for _ in range(steps):
                await scenario.act()
        else:
            await script(scenario)
        await scenario.quiesce()
        await scenario.check()
    finally:
        for op in scenario.ops:
            if op.task is not None and not op.task.done():
                op.release.set()
        await asyncio.gather(*(op.task for op in scenario.ops if op.task), return_exceptions=True)
        assert scenario.procs["A"].spool is not None
        scenario.procs["A"].spool.close()
    return scenario


async def test_chaos_two_processes(
    db: Database,
    pg_url: URL,
    tmp_path: Path,
    notices: Notices,
    monkeypatch: pytest.MonkeyPatch,
    figures: Any,
) -> None:
    patch_repositories(monkeypatch)
    settings = make_test_settings(pg_url, tmp_path / "data", stm={"retention_days": RETENTION_DAYS})
    counts = {"writes": 0, "acknowledged": 0, "clears": 0, "forgets": 0, "ops": 0}
    only = os.environ.get("CHAOS_ONLY")
    seeds = [int(only)] if only else [SEED + n for n in range(SCENARIOS)]
    collect = os.environ.get("CHAOS_COLLECT")
    failures: list[str] = []
    for seed in seeds:
        try:
            scenario = await run_scenario(seed, db, settings, notices, tmp_path / f"s{seed}")
        except AssertionError as exc:
            if not collect:
                raise
            failures.append(str(exc))
            continue
        counts["writes"] += len(scenario.writes)
        counts["acknowledged"] += sum(w.status != "rejected" for w in scenario.writes)
        counts["clears"] += len(scenario.clears)
        counts["forgets"] += len(scenario.forgets)
        counts["ops"] += len(scenario.ops)
        counts["spool conflicts skipped"] = (
            counts.get("spool conflicts skipped", 0) + scenario.conflicts
        )
        saved = [w for w in scenario.writes if w.status in ("saved", "saved, pending sync")]
        more = {
            "settings changes": len(scenario.configs) - 1,
            "admin edits acknowledged": sum(w.kind == "admin" for w in saved),
            "category writes acknowledged": sum(any(c for _, c in w.after.values()) for w in saved),
            "prompts checked": scenario.prompts_checked,
            "prompt messages checked": scenario.messages_checked,
            "write pairs checked built-on": scenario.built_on_checked,
            "writes acknowledged on settings not heard of": scenario.late_config,
        }
        for name, value in more.items():
            counts[name] = counts.get(name, 0) + value
    for name, value in counts.items():
        figures.record(name, value)
    figures.record("scenarios", len(seeds))
    if failures:
        if collect:
            await asyncio.to_thread(Path(collect).write_text, "\n\n=====\n".join(failures))
        raise AssertionError(f"{len(failures)} failing scenarios")


FIRST = object()  # a scripted draw: the first (only) option


class ScriptedRandom(random.Random):
    """Answers the harness's draws in order from a script: ``choice`` the next answer
    (one of the options, or FIRST), ``random`` the next float."""

    def __init__(self, answers: list[Any]) -> None:
        super().__init__(0)
        self.answers = answers

    def choice(self, seq: Any) -> Any:
        answer = self.answers.pop(0)
        if answer is FIRST:
            return seq[0]
        assert answer in seq, (answer, seq)
        return answer

    def random(self) -> float:
        answer = self.answers.pop(0)
        assert isinstance(answer, float), answer
        return answer


async def test_chaos_write_after_expiry_starts_a_lineage(
    db: Database,
    pg_url: URL,
    tmp_path: Path,
    notices: Notices,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seed 80193 shrunk. w1 is saved; a day passes, so w1 has expired (SPEC §2); w2 is
    built on the empty entry and parks before persisting; w3 waits for w2's lock, then
    builds on w2. Both are saved. w3 built after w1 was acknowledged, but through w2,
    which rightly started afresh: invariant 7 holds (it once reported it violated)."""
    patch_repositories(monkeypatch)
    settings = make_test_settings(pg_url, tmp_path / "data", stm={"retention_days": RETENTION_DAYS})
    no_gate, shape = 0.9, 0.5  # Random(0.5) draws a summary write in summary mode

    async def script(scenario: Scenario) -> None:
        def turn_then_write(user: int, *write_gate: Any) -> list[Any]:
            prepare_ = ["B", user, OTHER_CHANNEL, no_gate]
            return [*prepare_, FIRST, shape, *(write_gate or (no_gate,))]

        scenario.rng = ScriptedRandom(turn_then_write(BOB))
        await scenario.prepare()
        await scenario.settle()
        await scenario.write()
        await scenario.settle()
        scenario.clock.advance(hours=25)
        scenario.log.append("advance 25 h")
        scenario.rng.answers = turn_then_write(CAROL, 0.0, "persist")
        await scenario.prepare()
        await scenario.settle()
        await scenario.write()  # built on the expired (empty) entry, parked
        await scenario.settle()
        scenario.rng.answers = [*turn_then_write(BOB), FIRST]
        await scenario.prepare()
        await scenario.settle()
        await scenario.write()  # waits for w2's channel lock
        await scenario.settle()
        await scenario.release_one()
        assert not scenario.rng.answers

    scenario = await run_scenario(0, db, settings, notices, tmp_path / "scripted", script=script)
    w1, w2, w3 = scenario.writes
    key = ScopeKey.server(GUILD, OTHER_CHANNEL)
    assert [w.status for w in scenario.writes] == ["saved"] * 3
    assert w2.base[key] == EMPTY and w3.base[key] == w2.after[key]
    assert w2.ack_seq >= w3.build_seq > w1.ack_seq  # w1 is the "first" invariant 7 takes
    assert scenario.built_on_checked >= 1
