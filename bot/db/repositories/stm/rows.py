"""Short-term memory rows: reads, upserts and the saved turn counts."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    Integer,
    Text,
    and_,
    bindparam,
    func,
    literal_column,
    select,
    text,
    tuple_,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

import bot.db.driver as driver
from bot.db.driver import DriverStatement
from bot.db.models import ShortTermMemory
from bot.vocabulary import Marker, Provenance, ScopeKey, StmEntry

ZERO: ColumnElement[int] = literal_column("0")
# The conflict target must repeat the unique index's expressions exactly.
SCOPE_KEY_ELEMENTS: list[Any] = [
    ShortTermMemory.scope_kind,
    func.coalesce(ShortTermMemory.guild_id, ZERO),
    func.coalesce(ShortTermMemory.user_id, ZERO),
    ShortTermMemory.channel_id,
]


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
    """Insert or update rows by scope key, returning each key's version and whether it is new."""
    base = insert(ShortTermMemory)
    excluded = base.excluded
    values: dict[str, Any] = {
        c.name: excluded[c.name]
        for c in ShortTermMemory.__table__.columns
        if c.name not in _NOT_UPDATED
    }
    if replay:
        # Two processes' version counts cannot be compared, their times can: later wins;
        # at the same instant, the higher version (one process's sequence).
        values["version"] = func.greatest(ShortTermMemory.version + 1, excluded.version)
        newer = tuple_(ShortTermMemory.updated_at, ShortTermMemory.version) < tuple_(
            excluded.updated_at, excluded.version
        )
    else:
        # Only over the version the write was built on, of the same row: one deleted and
        # created anew counts from 1 again, and its creation time tells it apart.
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
    """Run an upsert of ``entries`` (distinct keys) in one statement; what it wrote."""
    if not entries:
        return {}
    # Core execution on the session's connection: the ORM's bulk path adds ~1 ms a call.
    connection = await session.connection()
    result = await connection.execute(statement, [_row_values(e) for e in entries])
    return _written(result.all())


async def upsert_entries_returning_keys(
    session: AsyncSession, entries: Sequence[StmEntry]
) -> set[ScopeKey]:
    """Write each entry whose row is still the version it was built on; the keys written."""
    rows = await driver.fetch_each(
        session,
        _UPSERT_FOR_DRIVER,
        # asyncpg's JSONB codec (SQLAlchemy's) takes the document serialized.
        [{**_row_values(e), "categories": json.dumps(e.categories)} for e in entries],
    )
    written = _written(rows)
    # A row inserted for an entry built on one was deleted meanwhile: the entry holds
    # what was deleted, so the key counts as not written (the caller rolls back).
    built_on_a_row = {e.key for e in entries if e.version > 1}
    return {
        key for key, (_, inserted) in written.items() if not (inserted and key in built_on_a_row)
    }


async def replay_entries(session: AsyncSession, entries: Sequence[StmEntry]) -> list[StmEntry]:
    """Write spooled entries whose rows were not updated since; those written, re-versioned."""
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


# Built once, with arrays for parameters: one statement text for any number of keys
# (prepared once per connection), matched on the unique index's expressions.
_KEYS = (
    func.unnest(
        bindparam("kinds", type_=ARRAY(Text)),
        bindparam("guilds", type_=ARRAY(BigInteger)),
        bindparam("users", type_=ARRAY(BigInteger)),
        bindparam("channels", type_=ARRAY(BigInteger)),
    )
    .table_valued("kind", "guild", "member", "channel")
    .render_derived(name="wanted")
)
_LOAD_ENTRIES = select(ShortTermMemory).join(
    _KEYS,
    and_(
        ShortTermMemory.scope_kind == _KEYS.c.kind,
        func.coalesce(ShortTermMemory.guild_id, ZERO) == _KEYS.c.guild,
        func.coalesce(ShortTermMemory.user_id, ZERO) == _KEYS.c.member,
        ShortTermMemory.channel_id == _KEYS.c.channel,
    ),
)


def _key_values(key: ScopeKey) -> tuple[str, int, int, int]:
    return (key.kind, key.guild_id or 0, key.user_id or 0, key.channel_id)


async def load_entries(session: AsyncSession, keys: Sequence[ScopeKey]) -> dict[ScopeKey, StmEntry]:
    """The rows of ``keys`` (one round trip for all); a key without a row is left out."""
    wanted = {_key_values(key): key for key in keys}
    if not wanted:
        return {}
    kinds, guilds, users, channels = (list(column) for column in zip(*wanted, strict=True))
    rows = await session.scalars(
        _LOAD_ENTRIES, {"kinds": kinds, "guilds": guilds, "users": users, "channels": channels}
    )
    found: dict[ScopeKey, StmEntry] = {}
    for row in rows:
        entry = entry_from_row(row)
        found[wanted[_key_values(entry.key)]] = entry
    return found


async def recent_server_entries(
    session: AsyncSession, guild_id: int, *, since: datetime, limit: int
) -> list[StmEntry]:
    """The guild's most recently updated channel memories (hydrating "other channels")."""
    return await _recent_entries(
        session,
        since,
        limit,
        ShortTermMemory.scope_kind == "server",
        ShortTermMemory.guild_id == guild_id,
    )


async def recent_user_entries(
    session: AsyncSession, user_id: int, *, since: datetime, limit: int
) -> list[StmEntry]:
    """A user's most recent memories made in servers (for opted-in DM recall)."""
    return await _recent_entries(
        session,
        since,
        limit,
        ShortTermMemory.scope_kind == "user",
        ShortTermMemory.user_id == user_id,
        ShortTermMemory.guild_id.is_not(None),
    )


async def _recent_entries(
    session: AsyncSession, since: datetime, limit: int, *where: ColumnElement[bool]
) -> list[StmEntry]:
    """The ``limit`` most recently updated memories ``where`` holds, updated since ``since``."""
    rows = await session.scalars(
        select(ShortTermMemory)
        .where(*where, ShortTermMemory.updated_at >= since)
        .order_by(ShortTermMemory.updated_at.desc())
        .limit(limit)
    )
    return [entry_from_row(row) for row in rows]


# Built once: the saver sends every count it holds in one statement. Only a row still at
# the version counted on is touched (a write since stored its own count), and neither its
# version nor ``updated_at`` moves (the TTL and retention count from the last update).
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
    """Store each entry's ``turns_since_refresh`` if its row is at its version; how many did."""
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
