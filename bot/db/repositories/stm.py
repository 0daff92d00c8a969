"""Short-term memory rows and their audit events.

Every function takes an ``AsyncSession`` and leaves transaction control to the caller,
so "both keys and their events in one transaction" is the caller's ``session.begin()``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    Integer,
    LargeBinary,
    Text,
    and_,
    any_,
    bindparam,
    cast,
    delete,
    false,
    func,
    literal,
    literal_column,
    not_,
    null,
    or_,
    select,
    text,
    tuple_,
    union,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from bot.db import driver
from bot.db.driver import DriverStatement
from bot.db.models import ShortTermMemory, StmClear, StmEvent, StmForget
from bot.vocabulary.model import AuditEvent, Marker, Provenance, ScopeKey, StmEntry

ZERO: ColumnElement[int] = literal_column("0")
# The conflict target must repeat the unique index's expressions exactly.
SCOPE_KEY_ELEMENTS: list[Any] = [
    ShortTermMemory.scope_kind,
    func.coalesce(ShortTermMemory.guild_id, ZERO),
    func.coalesce(ShortTermMemory.user_id, ZERO),
    ShortTermMemory.channel_id,
]


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One ``stm_events`` row: what happened, never the memory text."""

    event: str
    key: ScopeKey | None = None
    origin: str | None = None
    actor_user_id: int | None = None
    message_id: int | None = None
    chars_before: int | None = None
    chars_after: int | None = None
    guild_id: int | None = None
    channel_id: int | None = None


# Built once, with the key as parameters: every cache miss runs it.
_LOAD_ENTRY = select(ShortTermMemory).where(
    ShortTermMemory.scope_kind == bindparam("kind"),
    func.coalesce(ShortTermMemory.guild_id, ZERO) == bindparam("guild", type_=BigInteger),
    func.coalesce(ShortTermMemory.user_id, ZERO) == bindparam("user", type_=BigInteger),
    ShortTermMemory.channel_id == bindparam("channel", type_=BigInteger),
)


def _row_values(entry: StmEntry) -> dict[str, Any]:
    key, provenance, marker = entry.key, entry.provenance, entry.marker
    return {
        "scope_kind": key.kind,
        "guild_id": key.guild_id,
        "user_id": key.user_id,
        "channel_id": key.channel_id,
        "parent_channel_id": entry.parent_channel_id,
        "summary": entry.summary,
        "categories": dict(entry.categories),
        "turns_since_refresh": entry.turns_since_refresh,
        "last_refreshed_turn": entry.last_refreshed_turn,
        "covered_through_message_id": marker.message_id if marker else None,
        "covered_through_hash": marker.content_hash if marker else None,
        "contributor_ids": list(entry.contributor_ids),
        "origin": provenance.origin if provenance else "model_tool",
        "origin_detail": provenance.detail if provenance else None,
        "actor_user_id": provenance.actor_user_id if provenance else None,
        "source_message_id": provenance.source_message_id if provenance else None,
        "version": entry.version,
        "updated_at": entry.updated_at,
        "created_at": entry.created_at or entry.updated_at,
    }


def entry_from_row(row: ShortTermMemory) -> StmEntry:
    marker = (
        Marker(row.covered_through_message_id, row.covered_through_hash or "")
        if row.covered_through_message_id is not None
        else None
    )
    return StmEntry(
        key=ScopeKey(
            "server" if row.scope_kind == "server" else "user",
            row.channel_id,
            row.guild_id,
            row.user_id,
        ),
        updated_at=row.updated_at,
        parent_channel_id=row.parent_channel_id,
        summary=row.summary,
        categories={str(k): str(v) for k, v in (row.categories or {}).items()},
        turns_since_refresh=row.turns_since_refresh,
        last_refreshed_turn=row.last_refreshed_turn,
        marker=marker,
        contributor_ids=list(row.contributor_ids or ()),
        provenance=Provenance(
            row.origin,  # type: ignore[arg-type]  # constrained by the writers
            row.origin_detail,
            row.actor_user_id,
            row.source_message_id,
        ),
        version=row.version,
        created_at=row.created_at,
    )


_NOT_UPDATED = {"scope_kind", "guild_id", "user_id", "channel_id", "id", "created_at"}


def _build_upsert(*, replay: bool) -> Any:
    """Insert or update rows by scope key, returning the keys written, their versions and
    whether the row was new. A live write (``replay=False``) lands only over the version it
    was built on (its own minus one): a row deleted (/refresh, /forget-me, the janitor) and
    written again starts over at version 1, so "any older version" would let a process
    that has not heard of the deletion yet overwrite the new memory with one built on the
    old. A spool replay lands only over a row updated earlier (two processes' version
    counts cannot be compared, their times can), and then past every version the row had."""
    base = insert(ShortTermMemory)
    excluded = base.excluded
    values: dict[str, Any] = {
        c.name: excluded[c.name]
        for c in ShortTermMemory.__table__.columns
        if c.name not in _NOT_UPDATED
    }
    if replay:
        values["version"] = func.greatest(ShortTermMemory.version + 1, excluded.version)
        # Later wins; at the same instant, the higher version (one process's sequence).
        newer = tuple_(ShortTermMemory.updated_at, ShortTermMemory.version) < tuple_(
            excluded.updated_at, excluded.version
        )
    else:
        # The same row, too: one deleted and created anew counts its versions from 1
        # again, and its creation time tells it from the one the write was built on.
        newer = and_(
            ShortTermMemory.version == excluded.version - 1,
            ShortTermMemory.created_at == excluded.created_at,
        )
    return base.on_conflict_do_update(
        index_elements=SCOPE_KEY_ELEMENTS, set_=values, where=newer
    ).returning(
        ShortTermMemory.scope_kind,
        ShortTermMemory.guild_id,
        ShortTermMemory.user_id,
        ShortTermMemory.channel_id,
        ShortTermMemory.version,
        # PostgreSQL: a row this statement inserted (not updated) has no xmax yet.
        literal_column("xmax = 0").label("inserted"),
    )


# Built once: the write path runs on every STM update, and re-building (and re-compiling)
# an ON CONFLICT statement per call costs more than the database round trip.
_UPSERT = _build_upsert(replay=False)
_REPLAY_UPSERT = _build_upsert(replay=True)
_ROW_COLUMNS = tuple(c.name for c in ShortTermMemory.__table__.columns if c.name not in ("id",))
# The live write, on every STM update, goes to asyncpg directly (see bot.db.driver).
_UPSERT_FOR_DRIVER = DriverStatement.compile(_UPSERT, _ROW_COLUMNS)


def _written(rows: Iterable[Any]) -> dict[ScopeKey, tuple[int, bool]]:
    """The keys an upsert's RETURNING rows name, with their version and whether new."""
    return {
        ScopeKey("server" if kind == "server" else "user", channel_id, guild_id, user_id): (
            version,
            inserted,
        )
        for kind, guild_id, user_id, channel_id, version, inserted in rows
    }


async def _upsert(
    statement: Any, session: AsyncSession, entries: Sequence[StmEntry]
) -> dict[ScopeKey, tuple[int, bool]]:
    """Run an upsert for ``entries`` (distinct keys) in one statement; the keys it wrote,
    with the version their row now has and whether the row was new."""
    if not entries:
        return {}
    # Core execution on the session's connection: the ORM's bulk path adds ~1 ms a call.
    connection = await session.connection()
    result = await connection.execute(statement, [_row_values(e) for e in entries])
    return _written(result.all())


async def upsert_entries_returning_keys(
    session: AsyncSession, entries: Sequence[StmEntry]
) -> set[ScopeKey]:
    """Write each entry's row if the row is still the version the entry was built on;
    returns the keys actually written. Left out: a key whose row changed since, and one
    whose row is gone although the entry was built on one (deleted meanwhile: the entry
    holds what was deleted). The caller rolls back a write with a key left out."""
    rows = await driver.fetch_each(
        session,
        _UPSERT_FOR_DRIVER,
        # asyncpg's JSONB codec (SQLAlchemy's) takes the document serialized.
        [{**_row_values(e), "categories": json.dumps(e.categories)} for e in entries],
    )
    written = _written(rows)
    built_on_a_row = {e.key for e in entries if e.version > 1}
    return {
        key for key, (_, inserted) in written.items() if not (inserted and key in built_on_a_row)
    }


async def replay_entries(session: AsyncSession, entries: Sequence[StmEntry]) -> list[StmEntry]:
    """Write spooled entries, each unless its row was updated since (by any process): a
    replayed write must never overwrite a newer one. Returns the entries written, with
    the version their row now has."""
    written = await _upsert(_REPLAY_UPSERT, session, entries)
    return [replace(e, version=written[e.key][0]) for e in entries if e.key in written]


async def load_entry(session: AsyncSession, key: ScopeKey) -> StmEntry | None:
    row = await session.scalar(
        _LOAD_ENTRY,
        {
            "kind": key.kind,
            "guild": key.guild_id or 0,
            "user": key.user_id or 0,
            "channel": key.channel_id,
        },
    )
    return entry_from_row(row) if row is not None else None


async def recent_server_entries(
    session: AsyncSession, guild_id: int, *, since: datetime, limit: int
) -> list[StmEntry]:
    """The guild's most recently updated channel memories (hydrating "other channels")."""
    rows = await session.scalars(
        select(ShortTermMemory)
        .where(
            ShortTermMemory.scope_kind == "server",
            ShortTermMemory.guild_id == guild_id,
            ShortTermMemory.updated_at >= since,
        )
        .order_by(ShortTermMemory.updated_at.desc())
        .limit(limit)
    )
    return [entry_from_row(row) for row in rows]


async def recent_user_entries(
    session: AsyncSession, user_id: int, *, since: datetime, limit: int
) -> list[StmEntry]:
    """A user's most recent memories made in servers (for opted-in DM recall)."""
    rows = await session.scalars(
        select(ShortTermMemory)
        .where(
            ShortTermMemory.scope_kind == "user",
            ShortTermMemory.user_id == user_id,
            ShortTermMemory.guild_id.is_not(None),
            ShortTermMemory.updated_at >= since,
        )
        .order_by(ShortTermMemory.updated_at.desc())
        .limit(limit)
    )
    return [entry_from_row(row) for row in rows]


def _not_after(not_after: datetime | None) -> list[ColumnElement[bool]]:
    # A replayed deletion reaches only rows written before it was asked for: replaying it
    # twice (a crash between commit and spool rewrite) must not delete a newer write.
    return [] if not_after is None else [ShortTermMemory.updated_at <= not_after]


async def delete_channel(
    session: AsyncSession, channel_id: int, *, not_after: datetime | None = None
) -> int:
    """Delete every scope's row of a channel; return how many."""
    result = await session.execute(
        delete(ShortTermMemory)
        .where(ShortTermMemory.channel_id == channel_id, *_not_after(not_after))
        .returning(ShortTermMemory.id)
    )
    return len(result.all())


@dataclass(frozen=True, slots=True)
class UserRowsDeleted:
    user_rows: int
    contributed_rows: int


# A row's size, as ``StmEntry.chars`` counts it (the summary and every category value).
_ROW_CHARS: ColumnElement[int] = literal_column(
    "char_length(short_term_memories.summary) + (SELECT coalesce(sum(char_length(value)), 0)"
    " FROM jsonb_each_text(short_term_memories.categories))"
)


async def _delete_logged(
    session: AsyncSession,
    event: str,
    where: ColumnElement[bool],
    marked: ColumnElement[bool] | None = None,
) -> tuple[int, int]:
    """Delete the rows ``where`` says; return how many of them ``marked`` says, and how
    many others. In the same statement, record one ``event`` per server channel they
    were of, with the size of what went (for that server's ``/stm history``): never the
    text, nor whose it was (nor a DM's channel, which would say whose)."""
    gone = (
        delete(ShortTermMemory)
        .where(where)
        .returning(
            ShortTermMemory.guild_id,
            ShortTermMemory.channel_id,
            _ROW_CHARS.label("chars"),
            (marked if marked is not None else false()).label("marked"),
        )
        .cte("gone")
    )
    per_channel = (
        select(
            literal(event, Text),
            gone.c.guild_id,
            gone.c.channel_id,
            func.sum(gone.c.chars),
            ZERO,
        )
        .where(gone.c.guild_id.is_not(None))
        .group_by(gone.c.guild_id, gone.c.channel_id)
    )
    logged = (
        insert(StmEvent)
        .from_select(
            ["event", "guild_id", "channel_id", "chars_before", "chars_after"], per_channel
        )
        .cte("logged")
    )
    counts = (
        await session.execute(
            select(
                func.count().filter(gone.c.marked),
                func.count().filter(not_(gone.c.marked)),
            )
            .select_from(gone)
            .add_cte(logged)
        )
    ).one()
    return int(counts[0]), int(counts[1])


async def delete_user(
    session: AsyncSession, user_id: int, *, not_after: datetime | None = None
) -> UserRowsDeleted:
    """Delete the user's own rows and every other row derived from their messages
    (server rows, and other users' rows of the same conversation); each server channel
    they were of gets one ``forget`` event."""
    own = and_(ShortTermMemory.scope_kind == "user", ShortTermMemory.user_id == user_id)
    contributed = or_(
        ShortTermMemory.contributor_ids.contains([user_id]),
        ShortTermMemory.actor_user_id == user_id,
    )
    user_rows, contributed_rows = await _delete_logged(
        session, "forget", and_(or_(own, contributed), *_not_after(not_after)), own
    )
    return UserRowsDeleted(user_rows, contributed_rows)


async def delete_older_than(session: AsyncSession, cutoff: datetime) -> int:
    """The janitor's deletion; each server channel it emptied rows of gets one
    ``expire`` event."""
    _, deleted = await _delete_logged(session, "expire", ShortTermMemory.updated_at < cutoff)
    return deleted


# Built once: the saver sends every count it holds in one statement, whatever their
# number. Only a row still at the version counted on is touched (a write since stored
# its own count, 0), and neither its version nor ``updated_at`` moves (the TTL and the
# retention count from the last update, not from the last turn).
_SAVE_TURN_COUNTS = text(
    """
    UPDATE short_term_memories AS row SET turns_since_refresh = counted.turns
    FROM unnest(:kinds, :guilds, :users, :channels, :versions, :turns)
        AS counted(kind, guild, member, channel, version, turns)
    WHERE row.scope_kind = counted.kind
      AND coalesce(row.guild_id, 0) = counted.guild
      AND coalesce(row.user_id, 0) = counted.member
      AND row.channel_id = counted.channel
      AND row.version = counted.version
    """
).bindparams(
    bindparam("kinds", type_=ARRAY(Text)),
    bindparam("guilds", type_=ARRAY(BigInteger)),
    bindparam("users", type_=ARRAY(BigInteger)),
    bindparam("channels", type_=ARRAY(BigInteger)),
    bindparam("versions", type_=ARRAY(BigInteger)),
    bindparam("turns", type_=ARRAY(Integer)),
)


async def save_turn_counts(session: AsyncSession, entries: Sequence[StmEntry]) -> int:
    """Store each entry's ``turns_since_refresh`` in its row, if the row is still at
    the entry's version; return how many rows took theirs."""
    if not entries:
        return 0
    result = await session.execute(
        _SAVE_TURN_COUNTS,
        {
            "kinds": [entry.key.kind for entry in entries],
            "guilds": [entry.key.guild_id or 0 for entry in entries],
            "users": [entry.key.user_id or 0 for entry in entries],
            "channels": [entry.key.channel_id for entry in entries],
            "versions": [entry.version for entry in entries],
            "turns": [entry.turns_since_refresh for entry in entries],
        },
    )
    return int(getattr(result, "rowcount", 0) or 0)


# ------------------------------------------------------------ cross-process clears
#
# A clear takes its channel's advisory lock exclusively; a write takes the locks of its
# channels shared, then reads the clear times. So a write either commits before a clear
# starts (and is deleted by it) or sees the clear and is refused: never a row written
# back after a /refresh, whichever processes run the two.


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


async def record_clear(session: AsyncSession, channel_id: int, at: datetime) -> None:
    statement = insert(StmClear).values(channel_id=channel_id, cleared_at=at)
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=[StmClear.channel_id],
            set_={"cleared_at": func.greatest(StmClear.cleared_at, statement.excluded.cleared_at)},
        )
    )


async def clear_times(session: AsyncSession, channel_ids: Sequence[int]) -> dict[int, datetime]:
    rows = await session.execute(
        select(StmClear.channel_id, StmClear.cleared_at).where(
            StmClear.channel_id.in_(sorted(set(channel_ids)))
        )
    )
    return {channel_id: cleared_at for channel_id, cleared_at in rows.all()}


async def purge_clears(session: AsyncSession, before: datetime) -> int:
    result = await session.execute(
        delete(StmClear).where(StmClear.cleared_at < before).returning(StmClear.channel_id)
    )
    return len(result.all())


# ----------------------------------------------------------- cross-process forgets
#
# A /forget-me takes the forget lock exclusively; a write takes it shared, before its
# channels' locks (so in the same order as a spool replay). So a write either commits
# before the forget starts (and is deleted by it) or sees its record and is refused when
# its turn started before it: never a memory of a forgotten user's words written back.

# Outside the channel locks' key space (channel ids are positive snowflakes).
FORGET_LOCK = -0x6B696F6B75


def user_hash(user_id: int) -> bytes:
    """What ``stm_forgets`` keeps of a forgotten user: a hash, not their id."""
    return hashlib.sha256(f"kioku-forget:{user_id}".encode()).digest()


async def lock_for_write(session: AsyncSession, channel_ids: Sequence[int]) -> None:
    """The locks an STM write takes: the forget lock and its channels', all shared."""
    await lock_channels(session, [FORGET_LOCK, *channel_ids], shared=True)


async def lock_forgets(session: AsyncSession, *, shared: bool = False) -> None:
    await lock_channels(session, [FORGET_LOCK], shared=shared)


async def record_forget(session: AsyncSession, user_id: int, at: datetime) -> None:
    await record_forget_digest(session, user_hash(user_id), at)


async def record_forget_digest(session: AsyncSession, digest: bytes, at: datetime) -> None:
    """Keep that the user of ``digest`` (see :func:`user_hash`) was forgotten at ``at``
    (the later time wins)."""
    statement = insert(StmForget).values(user_hash=digest, forgotten_at=at)
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=[StmForget.user_hash],
            set_={
                "forgotten_at": func.greatest(
                    StmForget.forgotten_at, statement.excluded.forgotten_at
                )
            },
        )
    )


async def user_ids(session: AsyncSession) -> set[int]:
    """Every user id short-term memories (owners, contributors, actors) and audit
    events name."""
    ids = union(
        select(ShortTermMemory.user_id),
        select(func.unnest(ShortTermMemory.contributor_ids)),
        select(ShortTermMemory.actor_user_id),
        select(StmEvent.user_id),
        select(StmEvent.actor_user_id),
    )
    return {user_id for user_id in await session.scalars(ids) if user_id is not None}


async def forget_records(session: AsyncSession) -> list[tuple[bytes, datetime]]:
    """Every forgotten user's hash, with when they were forgotten."""
    rows = await session.execute(select(StmForget.user_hash, StmForget.forgotten_at))
    return [(bytes(digest), at) for digest, at in rows.all()]


async def forget_times(session: AsyncSession, user_ids: Iterable[int]) -> dict[int, datetime]:
    """When each of ``user_ids`` was last forgotten (those never forgotten are absent)."""
    by_hash = {user_hash(user_id): user_id for user_id in set(user_ids)}
    if not by_hash:
        return {}
    rows = await session.execute(
        select(StmForget.user_hash, StmForget.forgotten_at).where(
            StmForget.user_hash.in_(sorted(by_hash))
        )
    )
    return {by_hash[bytes(digest)]: at for digest, at in rows.all()}


# Built once, with arrays for parameters: one statement text whatever the number of
# channels and users, so it is compiled once and prepared once per connection (an
# expanding IN would be neither), and it runs on every STM write.
_WIPE_TIMES = union_all(
    select(
        StmClear.channel_id.label("channel"),
        cast(null(), LargeBinary).label("digest"),
        StmClear.cleared_at.label("at"),
    ).where(StmClear.channel_id == any_(bindparam("channels", type_=ARRAY(BigInteger)))),
    select(
        cast(null(), BigInteger).label("channel"),
        StmForget.user_hash.label("digest"),
        StmForget.forgotten_at.label("at"),
    ).where(StmForget.user_hash == any_(bindparam("digests", type_=ARRAY(LargeBinary)))),
)


_WIPE_TIMES_FOR_DRIVER = DriverStatement.compile(_WIPE_TIMES)


async def wipe_times(
    session: AsyncSession, channel_ids: set[int], user_ids: set[int]
) -> tuple[dict[int, datetime], dict[int, datetime]]:
    """:func:`clear_times` and :func:`forget_times` in one round trip."""
    by_hash = {user_hash(user_id): user_id for user_id in user_ids}
    rows = await driver.fetch(
        session,
        _WIPE_TIMES_FOR_DRIVER,
        {"channels": sorted(channel_ids), "digests": sorted(by_hash)},
    )
    cleared: dict[int, datetime] = {}
    forgotten: dict[int, datetime] = {}
    for channel, digest, at in rows:
        if digest is None:
            cleared[channel] = at
        else:
            forgotten[by_hash[bytes(digest)]] = at
    return cleared, forgotten


async def purge_forgets(session: AsyncSession, before: datetime) -> int:
    result = await session.execute(
        delete(StmForget).where(StmForget.forgotten_at < before).returning(StmForget.user_hash)
    )
    return len(result.all())


async def writes_refused(
    session: AsyncSession, writes: Sequence[tuple[Sequence[StmEntry], datetime | None]]
) -> set[int]:
    """Which of ``writes`` (entries, when the writing turn started; by index) a /refresh
    of one of their channels, or a /forget-me of a user they are derived from, made after
    the turn started refuses. Takes the write locks first: a concurrent clear or forget
    waits for this transaction, or this one for it (then its time read here is
    committed)."""
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


_EVENT_COLUMNS = tuple(
    c.name for c in StmEvent.__table__.columns if c.name not in ("id", "created_at")
)
# Inline: no RETURNING of the new ids, which nothing reads.
_ADD_EVENT = DriverStatement.compile(insert(StmEvent).inline(), _EVENT_COLUMNS)


async def add_events(session: AsyncSession, events: Sequence[EventRecord]) -> None:
    rows = []
    for record in events:
        key = record.key
        rows.append(
            {
                "event": record.event,
                "scope_kind": key.kind if key else None,
                "guild_id": key.guild_id if key else record.guild_id,
                "user_id": key.user_id if key else None,
                "channel_id": key.channel_id if key else record.channel_id,
                "origin": record.origin,
                "actor_user_id": record.actor_user_id,
                "message_id": record.message_id,
                "chars_before": record.chars_before,
                "chars_after": record.chars_after,
            }
        )
    await driver.execute_each(session, _ADD_EVENT, rows)


async def anonymize_events_of_user(session: AsyncSession, user_id: int) -> int:
    """Take the user out of every audit event naming them (as the member concerned or
    the one who acted) and the message of theirs it points at; return how many. The log
    stays append-only: what happened stays, not who it was."""
    result = await session.execute(
        update(StmEvent)
        .where(or_(StmEvent.user_id == user_id, StmEvent.actor_user_id == user_id))
        .values(user_id=None, actor_user_id=None, message_id=None)
        .returning(StmEvent.id)
    )
    return len(result.all())


async def recent_events(session: AsyncSession, guild_id: int, limit: int = 20) -> list[AuditEvent]:
    rows = await session.scalars(
        select(StmEvent)
        .where(StmEvent.guild_id == guild_id)
        .order_by(StmEvent.id.desc())
        .limit(limit)
    )
    return [
        AuditEvent(
            event=row.event,
            created_at=row.created_at,
            scope_kind=row.scope_kind,
            user_id=row.user_id,
            channel_id=row.channel_id,
            origin=row.origin,
            actor_user_id=row.actor_user_id,
            message_id=row.message_id,
            chars_before=row.chars_before,
            chars_after=row.chars_after,
        )
        for row in rows
    ]
