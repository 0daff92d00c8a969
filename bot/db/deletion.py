"""The deletion transactions of ``/refresh`` and ``/forget-me``: what each deletes, records
and announces, written once for the memory service (live) and the spool (replay).

Both run inside the caller's transaction (it owns the session, the timeout and the
commit), so the deletion, its record in ``stm_clears``/``stm_forgets``, its audit event
and its notice commit together or not at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from bot.db.notify import Notice, send_notice
from bot.db.repositories import EventRecord, UserRowsDeleted
from bot.db.repositories import captured as captured_repo
from bot.db.repositories import guilds as guild_repo
from bot.db.repositories import longterm as longterm_repo
from bot.db.repositories import stm as stm_repo


@dataclass(frozen=True, slots=True)
class UserDeleted:
    """What a ``/forget-me`` deleted (for its receipt)."""

    stm: UserRowsDeleted
    long_term: int
    events: int  # audit events that named them, and name nobody now


@dataclass(frozen=True, slots=True)
class ClearReceipt:
    """What a ``/refresh`` wiped (its receipt)."""

    rows: int
    cache_entries: int
    # True when the database was down: the deletion is spooled and happens on replay.
    pending_sync: bool = False


@dataclass(frozen=True, slots=True)
class ForgetReceipt:
    """What a ``/forget-me`` deleted (audit events: took the user out of), by kind (its
    receipt)."""

    user_rows: int
    contributed_rows: int
    long_term: int
    events: int
    cache_entries: int
    raw_messages: int
    pending_sync: bool = False


# When a deletion happened: a time, or the clock to read once its locks are held (so a
# turn that started while the deletion waited for them counts as before it: it may have
# read what is deleted), or None (a spool record of an older version, which did not say).
When = datetime | Callable[[], datetime] | None


def _time(at: When) -> datetime | None:
    return at() if callable(at) else at


async def delete_channel_rows(
    session: AsyncSession,
    channel_id: int,
    at: When,
    *,
    guild_id: int | None,
    actor_user_id: int | None,
    origin: str,
    notify: bool = True,
) -> int:
    """``/refresh`` of a channel: every scope's row of it, whenever written; return how
    many. Recorded as cleared at ``at`` (a turn that started before it is refused its
    write, in every process); ``at`` is None only for a spool record of an older version,
    which did not say. ``origin`` names the process in the notice (it ignores its own);
    ``notify=False`` sends none (a service built without notices)."""
    await stm_repo.lock_channels(session, [channel_id], shared=False)
    when = _time(at)
    if when is not None:
        await stm_repo.record_clear(session, channel_id, when)
    # Every row of the channel, not only those written before the /refresh: a turn of
    # another process that began before it may have written since (the database had no
    # record of the refresh yet); a spool replays this process's later writes after it.
    rows = await stm_repo.delete_channel(session, channel_id)
    # What capture distilled from the channel's conversation goes with it.
    rows += await captured_repo.delete_channel_facts(session, channel_id)
    if notify:
        await send_notice(session, {"o": origin, "t": "clear", "c": channel_id})
    await stm_repo.add_events(
        session,
        [
            EventRecord(
                "refresh", guild_id=guild_id, channel_id=channel_id, actor_user_id=actor_user_id
            )
        ],
    )
    return rows


async def stored_user_ids(session: AsyncSession) -> set[int]:
    """Every user id a stored memory, setting or audit event names (what a /forget-me
    of theirs would delete)."""
    return (
        await stm_repo.user_ids(session)
        | await longterm_repo.user_ids(session)
        | await guild_repo.settings_user_ids(session)
    )


async def delete_user_rows(
    session: AsyncSession,
    user_id: int,
    at: When,
    *,
    origin: str,
    notify: bool = True,
) -> UserDeleted:
    """``/forget-me``: every memory derived from the user up to now (short-term rows,
    also other users' copies of a conversation they took part in), their long-term facts,
    their settings, and their name in the audit events (which stay). Recorded as
    forgotten at ``at`` (see :func:`delete_channel_rows` for ``at``, ``origin`` and
    ``notify``)."""
    # Writes in flight (any process) commit before this, or see its record and are
    # refused; so is a long-term fact a turn still means to save.
    await stm_repo.lock_forgets(session)
    await longterm_repo.lock_user(session, user_id)
    when = _time(at)
    if when is not None:
        await stm_repo.record_forget(session, user_id, when)
    # Up to now, not only up to the /forget-me: other processes, which could not know of
    # it, may have written their words since.
    rows = await stm_repo.delete_user(session, user_id)
    long_term = await longterm_repo.delete_derived(session, user_id)
    await guild_repo.delete_user_settings(session, user_id)
    events = await stm_repo.anonymize_events_of_user(session, user_id)
    # The audit trail keeps that a deletion happened, not who asked.
    await stm_repo.add_events(session, [EventRecord("forget")])
    if notify:
        notice: Notice = {"o": origin, "t": "forget", "u": user_id}
        if when is not None:
            notice["at"] = when.isoformat()
        await send_notice(session, notice)
    return UserDeleted(rows, long_term, events)
