"""Group commit of STM writes: writes that queue up while one transaction is in flight
go together in the next one, each still all-or-nothing, each writer answered only after
the commit. A write is refused (not retried) when its channel was wiped, or a user it is
derived from forgotten, after its turn started, by any process, or when a row already
holds a newer version.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.db import (
    DB_TIMEOUT_SECONDS,
    EventRecord,
    database_answered,
    database_deadline,
    database_failed,
    open_session,
)
from bot.db.repositories import stm as stm_repo
from bot.vocabulary import StmEntry

# At most this many writes (two rows each) share one transaction.
GROUP_COMMIT_MAX = 64

# Called inside the write's transaction, to announce the written rows to other processes.
Announce = Callable[[AsyncSession, Sequence[StmEntry]], Awaitable[None]]


class StaleWrite(Exception):
    """A row already holds a newer version than the write."""


class ClearedElsewhere(Exception):
    """The channel was wiped, or a user the write is derived from forgotten (by any
    process), after the write's turn started."""


class _RefusedInBatch(Exception):
    """Some writes of a group commit were refused (raised inside the transaction, so it
    rolls back); ``outcomes`` says why for each."""

    def __init__(self, outcomes: dict[int, Exception]) -> None:
        super().__init__()
        self.outcomes = outcomes


@dataclass(slots=True)
class _PendingWrite:
    """One write waiting for a group commit; ``outcome`` is None (committed), a
    StaleWrite, ClearedElsewhere, or the database error."""

    entries: Sequence[StmEntry]
    events: Sequence[EventRecord]
    outcome: asyncio.Future[Exception | None]
    # When the writing turn started: a clear after that (in any process) refuses it.
    started_at: datetime | None = None


def _settle(item: _PendingWrite, outcome: Exception | None) -> None:
    # A writer cancelled while waiting (its turn was cancelled) no longer listens.
    if not item.outcome.done():
        item.outcome.set_result(outcome)


class GroupCommit:
    """The STM write queue and the task that commits it."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], announce: Announce) -> None:
        self.sessions = sessions
        self._announce = announce
        self._queue: list[_PendingWrite] = []
        self._flusher: asyncio.Task[None] | None = None

    async def write(
        self,
        entries: Sequence[StmEntry],
        events: Sequence[EventRecord],
        started_at: datetime | None,
        abandoned: Callable[[Exception | None], None] | None = None,
    ) -> Exception | None:
        """Commit ``entries`` and ``events`` together; None when committed, else why not
        (:class:`StaleWrite`, :class:`ClearedElsewhere`, or the database error).

        A writer cancelled meanwhile does not take its write back (it may be committing
        already): ``abandoned`` is called with the outcome once it is known."""
        # Copies: the entries are the cache's live objects, and a writer cancelled while
        # its write waits here lets go of the channel's lock; the next turn's write is
        # applied to those same objects, and must not change what this one commits.
        pending = _PendingWrite(
            [replace(entry, categories=dict(entry.categories)) for entry in entries],
            events,
            asyncio.get_running_loop().create_future(),
            started_at,
        )
        self._queue.append(pending)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="stm-group-commit")
        try:
            # Shielded: the writer's cancellation must not cancel the outcome, which the
            # flusher settles whatever happens.
            return await asyncio.shield(pending.outcome)
        except asyncio.CancelledError:
            if abandoned is not None:
                pending.outcome.add_done_callback(lambda done: abandoned(done.result()))
            raise

    async def settled(self) -> None:
        """Return when every queued write is settled (shutdown, tests)."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.wait([self._flusher])  # never raises: a failure is the writers' to see

    async def _flush(self) -> None:
        while self._queue:
            batch = self._queue[:GROUP_COMMIT_MAX]
            del self._queue[: len(batch)]
            await self.commit(batch)

    async def commit(self, batch: list[_PendingWrite]) -> None:
        """One transaction for ``batch``; every writer in it is settled, or put back at
        the head of the queue when only others were refused."""
        entries = [entry for item in batch for entry in item.entries]
        sessions = self.sessions
        try:
            async with (
                database_deadline(DB_TIMEOUT_SECONDS),
                open_session(sessions, "STM write") as session,
                session.begin(),
            ):
                refused = await _refused_since_start(session, batch)
                if refused:
                    raise _RefusedInBatch(refused)
                written = await stm_repo.upsert_entries_returning_keys(session, entries)
                stale = [i for i in batch if any(e.key not in written for e in i.entries)]
                if stale:  # rolls back: all or nothing per write
                    raise _RefusedInBatch({id(i): StaleWrite() for i in stale})
                await stm_repo.add_events(
                    session, [event for item in batch for event in item.events]
                )
                await self._announce(session, entries)
        except _RefusedInBatch as found:
            for item in batch:
                if id(item) in found.outcomes:
                    _settle(item, found.outcomes[id(item)])
            # The others were fine: they go first in the next transaction.
            self._queue[:0] = [item for item in batch if id(item) not in found.outcomes]
            return
        except Exception as exc:  # each writer spools its own (see Writer._persist)
            # Reported to the breaker of the database that failed (logged once per
            # outage), whatever the writers' service uses by the time they see it.
            keys = ", ".join(str(entry.key) for entry in entries)
            database_failed(sessions, f"STM write for {keys}", exc)
            for item in batch:
                _settle(item, exc)
            return
        # It answered: a breaker opened by an earlier failure closes (see storage).
        database_answered(sessions)
        for item in batch:
            _settle(item, None)


async def _refused_since_start(
    session: AsyncSession, batch: Sequence[_PendingWrite]
) -> dict[int, Exception]:
    """The writes (by ``id``) a /refresh or a /forget-me made after their turn started
    refuses, whichever process made it (see ``stm_repo.writes_refused``)."""
    refused = await stm_repo.writes_refused(
        session, [(item.entries, item.started_at) for item in batch]
    )
    return {id(batch[index]): ClearedElsewhere() for index in refused}
