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
import os
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

from bot.config import Settings
from bot.db.engine import Database
from bot.vocabulary.model import ScopeKey
from tests.helpers.builders import BOB, GUILD, OTHER_CHANNEL
from tests.helpers.database import empty_tables, make_test_settings
from tests.integration.chaos.gates import patch_repositories
from tests.integration.chaos.model import CAROL, EMPTY, RETENTION_DAYS
from tests.integration.chaos.notices import Notices
from tests.integration.chaos.scenario import Scenario

SCENARIOS = int(os.environ.get("CHAOS_SCENARIOS", "300"))
SEED = int(os.environ.get("CHAOS_SEED", "20261101"))
STEPS = int(os.environ.get("CHAOS_STEPS", "24"))


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
