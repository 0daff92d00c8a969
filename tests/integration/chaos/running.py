"""A chaos scenario's state, and how its operations run as tasks."""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.config import Settings
from bot.db import storage
from bot.db.engine import Database
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.memory.turn.types import PreparedTurn
from bot.vocabulary.errors import MemoryUnavailable
from bot.vocabulary.model import RawMessage
from tests.helpers.builders import ManualClock, make_service
from tests.helpers.faults import own_sessions
from tests.integration.chaos.gates import CHANGED, CURRENT, Op, instrument
from tests.integration.chaos.model import (
    CHANNELS,
    DEFAULT_CONFIG,
    EARLIEST,
    USERS,
    ConfigKey,
    Proc,
    Turn,
    Write,
)
from tests.integration.chaos.notices import Notices


class Running:
    """A scenario's two processes and its bookkeeping, and how its operations run as
    tasks."""

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
