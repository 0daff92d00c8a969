"""The durable spool: memory operations the database refused, kept until it is back.

An operation (an STM write with its events, a /refresh, a /forget-me) is fsynced to the
spool before the caller hears "saved, pending sync", and replayed in order, with backoff,
once the database answers (the rules: docs/reliability.md). The file is
:mod:`bot.memory.spool.file`, the in-memory view :mod:`bot.memory.spool.pending`, the
record format :mod:`bot.memory.spool.records`, and applying a record
:mod:`bot.memory.spool.replay`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from tenacity import AsyncRetrying, RetryCallState, wait_exponential

from bot.db import EventRecord, database_answered, sqlstate
from bot.memory.spool.file import (
    SPOOL_FILE,
    SpoolFile,
    SpoolLocked,
    SpoolStatus,
    inspect_spool,
    spool_in_use,
    spool_path,
)
from bot.memory.spool.pending import SPOOLED_STEP, PendingChanges, PendingOperations
from bot.memory.spool.records import key_from_json, key_to_json
from bot.memory.spool.replay import apply_all, refused_record
from bot.vocabulary import ScopeKey, StmEntry

__all__ = [
    "ALL_REFUSED_RETRIES",
    "REPLAY_BATCH",
    "SPOOLED_STEP",
    "SPOOL_FILE",
    "DurableSpool",
    "PendingChanges",
    "ReplayRefused",
    "SpoolLocked",
    "SpoolStatus",
    "inspect_spool",
    "spool_in_use",
    "spool_path",
]

log = logging.getLogger(__name__)

REPLAY_BATCH = 100
# Batches in a row whose every record the database refused, retried before their records
# are set aside as wrong: about 15 s of the replayer's backoff, long enough for a
# momentary fault of the server, short enough not to hold every write queued behind.
ALL_REFUSED_RETRIES = 5


class ReplayRefused(RuntimeError):
    """The database refused every record of a batch: treated as an outage (retried)."""


class DurableSpool(PendingOperations):
    """An append-only, fsynced operation log with in-order replay."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = SpoolFile(path)
        records, bad, torn = self._file.read()
        if bad:
            self._file.set_aside(bad, "could not be read")
        if torn:
            log.warning("spool: cut off a torn last line (it was never acknowledged)")
        if bad or torn:
            self._file.rewrite(records)
        super().__init__(records)
        if bad:
            # A line set aside just now may hold the words of a user whose /forget-me
            # waits here: it never reaches the database, so nothing else removes them.
            self._purge_set_aside(self._forgetting)
        self._file.open()
        # Set when an operation is appended (work to do) ...
        self._wake = asyncio.Event()
        # ... and when the database is known to be back (ends a backoff wait early; new
        # work does not, or every write during an outage would cost a failed attempt).
        self._back = asyncio.Event()
        # Batches in a row whose every record was refused (see _apply_one_by_one).
        self._all_refused = 0
        # One replay at a time: two would both drop the same batch from the log.
        self._replaying = asyncio.Lock()
        # Names the process in the notices a replay sends, so it ignores its own (the
        # memory service that owns the spool sets it to its instance id).
        self.notice_origin = "spool"

    # -- appending (synchronous: the caller must not be told "saved" before fsync)

    def append(
        self,
        entries: Sequence[StmEntry],
        events: Sequence[EventRecord] = (),
        *,
        started_at: datetime | None = None,
        bases: Sequence[StmEntry] = (),
    ) -> None:
        """Spool a write of ``entries``, each built on its ``bases`` (the entry before)."""
        self._write(self.upsert_record(entries, events, started_at, bases))

    def append_clear(
        self, channel_id: int, guild_id: int | None, actor_user_id: int | None, at: datetime
    ) -> None:
        self._write(
            {
                "op": "clear",
                "channel": channel_id,
                "guild": guild_id,
                "actor": actor_user_id,
                "at": at.isoformat(),
            }
        )

    def append_forget(self, user_id: int, at: datetime) -> None:
        self._write({"op": "forget", "user": user_id, "at": at.isoformat()})

    def blank_channel(self, channel_id: int) -> None:
        """Show the channel's spooled states empty: another process cleared it."""
        # Their version stays, so the next write here still supersedes whatever the
        # replay does; recorded (a local record the replay skips) to outlive a restart.
        if not any(key.channel_id == channel_id for key in self._latest):
            return
        self._blank({"op": "blank", "channel": channel_id})

    def blank_copy(self, key: ScopeKey, created_at: datetime) -> None:
        """Show the state of ``key`` empty: the stored row it carries (``created_at``) was wiped."""
        # Learnt from the database, not by notice; the replay of this state and of every
        # write built on it is skipped (see spool_replay._carries_wiped).
        carried = self.carried_row(key)
        if carried is None or carried[0] != created_at:
            return  # replayed, blanked or written over meanwhile: nothing of it is shown
        self._blank({"op": "blank", "channel": key.channel_id, "key": key_to_json(key)})

    def _blank(self, record: dict[str, Any]) -> None:
        try:
            self._write(record)
        except (OSError, ValueError):
            log.exception("spool: could not record that a spooled state was wiped")
            self._track(record)  # still applied in memory (lost only by a restart)

    def _write(self, record: dict[str, Any]) -> None:
        """Append one record durably, or raise and leave the spool as it was."""
        self._file.append(record)
        self._added(record)
        self._wake.set()

    # -- replaying

    def database_back(self) -> None:
        """The database answers again: replay now instead of at the end of the backoff."""
        self._back.set()
        self._wake.set()

    async def replay(self, sessions: async_sessionmaker[AsyncSession]) -> int:
        """Apply every pending operation in order; return how many, or raise on an outage."""
        # A record the database refuses as wrong is set aside, so one bad record cannot
        # hold every later one back forever.
        done = 0
        touched: set[ScopeKey] = set()
        cleared: set[int] = set()
        async with self._replaying:
            while self._records:
                batch = self._records[:REPLAY_BATCH]
                touched.update(
                    key_from_json(data["key"])
                    for record in batch
                    if record.get("op") == "upsert"
                    for data in record["entries"]
                )
                cleared.update(int(r["channel"]) for r in batch if r.get("op") == "clear")
                try:
                    await apply_all(sessions, batch, self.notice_origin)
                    handled, applied = len(batch), batch
                    self._all_refused = 0  # the row of all-refused batches ends here
                except Exception as exc:
                    if not refused_record(exc):
                        raise
                    handled, applied = await self._apply_one_by_one(sessions, batch)
                if handled == 0:  # nothing stored: the file and the bookkeeping stand
                    raise ConnectionError("the database went away during the spool replay")
                if applied:
                    database_answered(sessions)
                del self._records[:handled]
                # What was handled is in the database: the bookkeeping follows whatever
                # happens to the file.
                self._recount()
                self._file.settle(self._records)
                self._purge_set_aside(int(r["user"]) for r in applied if r.get("op") == "forget")
                done += handled
                if handled < len(batch):
                    raise ConnectionError("the database went away during the spool replay")
            # The owner reads these keys again (see MemoryService.spool_replayed).
            self._replayed(touched, cleared)
        return done

    async def _apply_one_by_one(
        self, sessions: async_sessionmaker[AsyncSession], batch: list[dict[str, Any]]
    ) -> tuple[int, list[dict[str, Any]]]:
        """Apply ``batch`` record by record, setting aside the refused; (handled, applied)."""
        refused: list[tuple[int, dict[str, Any], str | None]] = []
        applied: list[dict[str, Any]] = []
        handled = 0
        for index, record in enumerate(batch):
            try:
                await apply_all(sessions, [record], self.notice_origin)
            except Exception as exc:
                if not refused_record(exc):
                    break  # the database's failure: retried with the rest, later
                refused.append((index, record, sqlstate(exc)))
            else:
                applied.append(record)
            handled += 1
        sent = sum(record.get("op") != "blank" for record in batch)
        if sent > 1 and len(refused) == sent:
            # Every record at once is more likely the server's fault than each record's:
            # retried, a few times. Records that really are all wrong must not block the
            # spool (and every write queued behind them) for good: then they go aside.
            self._all_refused += 1
            if self._all_refused <= ALL_REFUSED_RETRIES:
                raise ReplayRefused(
                    f"the database refused every record of a batch of {len(batch)} "
                    f"(SQLSTATE {refused[0][2]}); retried later, nothing set aside"
                )
        self._all_refused = 0
        aside: list[bytes] = []
        for index, record, code in refused:
            if self._forget_behind(index, record):
                log.warning(
                    "spool: the database refused a %s record (SQLSTATE %s); dropped, a "
                    "/forget-me queued behind it deletes what it holds",
                    record.get("op"),
                    code,
                )
                continue
            log.error(
                "spool: the database refused a %s record (SQLSTATE %s)", record.get("op"), code
            )
            aside.append(json.dumps(record, ensure_ascii=False).encode())
        if aside:
            self._file.set_aside(aside, "were refused by the database")
        return handled, applied

    def forget_set_aside(self, user_id: int) -> int:
        """Drop the user's records from the set-aside files; return how many lines went."""
        return self._file.forget_set_aside(user_id)

    def _purge_set_aside(self, users: Iterable[int]) -> None:
        for user_id in sorted(set(users)):
            try:
                self.forget_set_aside(user_id)
            except Exception:  # never fails the replay or the start (the file is the operator's)
                log.exception("spool: could not remove a user's records from set-aside files")

    async def run_replayer(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        on_replayed: Callable[[], None] | None = None,
        on_retry: Callable[[Exception], None] | None = None,
        first_wait_seconds: float = 0.5,
        max_wait_seconds: float = 30.0,
    ) -> None:
        """Forever: replay what is appended, backing off while the database is unavailable."""

        def before_backoff(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            assert isinstance(exc, Exception)  # only an Exception is retried
            log.info(
                "spool: %d operations wait for the database (%s); retrying in %.1f s",
                self.pending,
                exc.__class__.__name__,
                state.upcoming_sleep,
            )
            if on_retry is not None:
                on_retry(exc)

        while True:
            if not self._records:
                self._wake.clear()
                await self._wake.wait()
            # A fresh backoff for every round of work: it starts over after a replay.
            async for attempt in AsyncRetrying(
                wait=wait_exponential(multiplier=first_wait_seconds, max=max_wait_seconds),
                sleep=self._backoff,
                before_sleep=before_backoff,
            ):
                with attempt:
                    # A "database is back" that arrives during this attempt still cuts the wait.
                    self._back.clear()
                    replayed = await self.replay(sessions)
            if replayed:
                log.info("spool: replayed %d pending memory operations", replayed)
                if on_replayed is not None:
                    on_replayed()

    async def _backoff(self, seconds: float) -> None:
        """Wait ``seconds``, or less if the database is known to be back."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._back.wait(), seconds)

    def close(self) -> None:
        self._file.close()
