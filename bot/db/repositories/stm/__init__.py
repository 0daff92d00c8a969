"""Short-term memory repository: the cross-process write guard, and the rest re-exported.

Rows live in ``rows``, wipe records in ``wipes``, deletions in ``deletions``
and audit events in ``events``; every function takes an ``AsyncSession`` and leaves
transaction control to the caller. Callers (and tests that monkeypatch) use
``stm.<name>``: the guard lives here so its own calls go through those names too.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from bot.db.repositories.stm.deletions import (
    UserRowsDeleted,
    delete_channel,
    delete_older_than,
    delete_user,
    user_ids,
)
from bot.db.repositories.stm.events import (
    EventRecord,
    add_events,
    anonymize_events_of_user,
    recent_events,
)
from bot.db.repositories.stm.rows import (
    SCOPE_KEY_ELEMENTS,
    ZERO,
    entry_from_row,
    load_entries,
    load_entry,
    recent_server_entries,
    recent_user_entries,
    replay_entries,
    save_turn_counts,
    upsert_entries_returning_keys,
)
from bot.db.repositories.stm.wipes import (
    clear_times,
    forget_records,
    forget_times,
    purge_clears,
    purge_forgets,
    record_clear,
    record_forget,
    record_forget_digest,
    user_hash,
    wipe_times,
)
from bot.vocabulary import StmEntry

__all__ = [
    "FORGET_LOCK",
    "SCOPE_KEY_ELEMENTS",
    "ZERO",
    "EventRecord",
    "UserRowsDeleted",
    "add_events",
    "anonymize_events_of_user",
    "clear_times",
    "delete_channel",
    "delete_older_than",
    "delete_user",
    "entry_from_row",
    "forget_records",
    "forget_times",
    "load_entries",
    "load_entry",
    "lock_channels",
    "lock_for_write",
    "lock_forgets",
    "purge_clears",
    "purge_forgets",
    "recent_events",
    "recent_server_entries",
    "recent_user_entries",
    "record_clear",
    "record_forget",
    "record_forget_digest",
    "replay_entries",
    "save_turn_counts",
    "upsert_entries_returning_keys",
    "user_hash",
    "user_ids",
    "wipe_times",
    "writes_refused",
]


# A clear takes its channel's advisory lock exclusively, a /forget-me the forget lock; a
# write takes both shared, then reads the wipe times. So a write either commits before
# the wipe starts (and is deleted by it) or sees its record and is refused, whichever
# processes run the two.

# Outside the channel locks' key space (channel ids are positive snowflakes).
FORGET_LOCK = -0x6B696F6B75


def _lock_statement(function: str) -> Any:
    # One statement for any number of channels, taken in id order (no deadlock between
    # writers of overlapping channel sets).
    return text(
        f"SELECT {function}(id) FROM "
        "(SELECT DISTINCT unnest(CAST(:ids AS bigint[])) AS id ORDER BY id) AS ordered"
    )


_LOCK_SHARED = _lock_statement("pg_advisory_xact_lock_shared")
_LOCK_EXCLUSIVE = _lock_statement("pg_advisory_xact_lock")


async def lock_channels(session: AsyncSession, channel_ids: Sequence[int], *, shared: bool) -> None:
    """Take the channels' transaction-scoped advisory locks."""
    # Core on the session's connection: every STM write takes these, and the ORM's
    # execute path costs more than the statement.
    connection = await session.connection()
    await connection.execute(
        _LOCK_SHARED if shared else _LOCK_EXCLUSIVE, {"ids": list(channel_ids)}
    )


async def lock_for_write(session: AsyncSession, channel_ids: Sequence[int]) -> None:
    """The locks an STM write takes: the forget lock, then its channels', all shared."""
    await lock_channels(session, [FORGET_LOCK, *channel_ids], shared=True)


async def lock_forgets(session: AsyncSession, *, shared: bool = False) -> None:
    await lock_channels(session, [FORGET_LOCK], shared=shared)


async def writes_refused(
    session: AsyncSession, writes: Sequence[tuple[Sequence[StmEntry], datetime | None]]
) -> set[int]:
    """Indexes of ``writes`` (entries, turn start) a later /refresh or /forget-me refuses."""
    # The write locks first: a concurrent clear or forget waits for this transaction, or
    # this one for it (then the time read here is committed).
    await lock_for_write(session, [e.key.channel_id for entries, _ in writes for e in entries])
    started = [(i, entries, at) for i, (entries, at) in enumerate(writes) if at is not None]
    if not started:
        return set()
    cleared, forgotten = await wipe_times(
        session,
        {e.key.channel_id for _, es, _ in started for e in es},
        {user for _, es, _ in started for e in es for user in e.derived_from_users()},
    )
    # A forget at the very instant a turn started counts as after it: for privacy, the
    # doubt goes to the forget.
    return {
        index
        for index, entries, started_at in started
        for entry in entries
        if started_at is not None
        and (
            ((at := cleared.get(entry.key.channel_id)) is not None and at > started_at)
            or any(
                (at := forgotten.get(user)) is not None and at >= started_at
                for user in entry.derived_from_users()
            )
        )
    }
