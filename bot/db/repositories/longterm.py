"""Long-term memory rows (``long_term_memories``) and their audit events.

Functions take an ``AsyncSession``; the caller controls the transaction. User text only
ever reaches SQL as bound parameters. Scope (:func:`scope_filter`): in a server, that
server's facts; in a DM, DM facts plus every server's when the user opted in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    and_,
    any_,
    bindparam,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.selectable import CompoundSelect

from bot.db.models import LongTermMemory, StmEvent
from bot.vocabulary import Fact, FactEvent, Place, Provenance

_EVENT_SCOPE = "long_term"
# Two-key advisory locks live in their own key space (they never meet the migration's
# single-key lock); the first key says "long-term memory of one user".
_LOCK_NAMESPACE = 0x4C544D  # "LTM"
USER_SCOPE = "user"
CHANNEL_SCOPE = "channel"


COLUMNS = (
    LongTermMemory.id,
    LongTermMemory.user_id,
    LongTermMemory.guild_id,
    LongTermMemory.content,
    LongTermMemory.origin,
    LongTermMemory.origin_detail,
    LongTermMemory.source_message_id,
    LongTermMemory.recall_count,
    LongTermMemory.last_recalled_at,
    LongTermMemory.created_at,
    LongTermMemory.updated_at,
    LongTermMemory.channel_id,
    LongTermMemory.parent_channel_id,
    LongTermMemory.private_thread,
    LongTermMemory.readable_by_everyone,
    LongTermMemory.scope,
    LongTermMemory.refers_to,
    LongTermMemory.source_user_ids,  # last: fact_of makes it a tuple
)


def fact_of(row: Sequence[Any]) -> Fact:
    """The :class:`Fact` of a row selected with :data:`COLUMNS` first."""
    *head, sources = row[: len(COLUMNS)]
    return Fact(*head, tuple(sources or ()))  # type: ignore[call-arg]


def own(user_id: int) -> ColumnElement[bool]:
    """The facts ``user_id`` asked for (not those capture made of their words)."""
    return and_(LongTermMemory.user_id == user_id, LongTermMemory.scope == USER_SCOPE)


def scope_filter(guild_id: int | None, *, opted_in: bool) -> ColumnElement[bool]:
    """Which of a user's facts may be recalled in ``guild_id`` (``None``: a DM)."""
    if guild_id is not None:
        return LongTermMemory.guild_id == guild_id
    if opted_in:
        return literal(True)
    return LongTermMemory.guild_id.is_(None)


def _same_scope(guild_id: int | None) -> ColumnElement[bool]:
    if guild_id is None:
        return LongTermMemory.guild_id.is_(None)
    return LongTermMemory.guild_id == guild_id


# Built once, with arrays for parameters: one statement text for any number of users
# and channels, each half on its own index (user and scope; the channels' partial one).
_HOLDERS: CompoundSelect[Any] = union_all(
    select(literal(USER_SCOPE).label("scope"), LongTermMemory.user_id.label("id"))
    .where(
        LongTermMemory.user_id == any_(bindparam("users", type_=ARRAY(BigInteger))),
        LongTermMemory.scope == USER_SCOPE,
    )
    .distinct(),
    select(literal(CHANNEL_SCOPE).label("scope"), LongTermMemory.channel_id.label("id"))
    .where(
        LongTermMemory.channel_id == any_(bindparam("channels", type_=ARRAY(BigInteger))),
        LongTermMemory.scope == CHANNEL_SCOPE,
    )
    .distinct(),
)


async def holders_of_facts(
    session: AsyncSession, user_ids: Iterable[int], channel_ids: Iterable[int]
) -> tuple[set[int], set[int]]:
    """Which of ``user_ids`` have facts of their own, and which of ``channel_ids`` hold
    captured facts, at all (one round trip)."""
    rows = await session.execute(
        _HOLDERS, {"users": sorted(set(user_ids)), "channels": sorted(set(channel_ids))}
    )
    users: set[int] = set()
    channels: set[int] = set()
    for scope, id_ in rows.all():
        (users if scope == USER_SCOPE else channels).add(int(id_))
    return users, channels


async def lock_user(session: AsyncSession, user_id: int) -> None:
    """Serialise writes to one user's facts until the transaction ends (every process)."""
    folded = (user_id ^ (user_id >> 32)) & 0xFFFFFFFF
    key = folded - (1 << 32) if folded >= (1 << 31) else folded
    await session.execute(
        text("SELECT pg_advisory_xact_lock(:namespace, :key)"),
        {"namespace": _LOCK_NAMESPACE, "key": key},
    )


async def facts_in_scope(session: AsyncSession, user_id: int, guild_id: int | None) -> list[Fact]:
    """The user's facts made in exactly this place (a server, or DMs)."""
    rows = await session.execute(
        select(*COLUMNS).where(own(user_id), _same_scope(guild_id)).order_by(LongTermMemory.id)
    )
    return [fact_of(row) for row in rows]


async def count_facts(session: AsyncSession, user_id: int) -> int:
    count = await session.scalar(
        select(func.count()).select_from(LongTermMemory).where(own(user_id))
    )
    return int(count or 0)


async def guild_ids_of_user(session: AsyncSession, user_id: int) -> set[int]:
    """The servers the user's facts were said in."""
    rows = await session.scalars(
        select(LongTermMemory.guild_id)
        .where(own(user_id), LongTermMemory.guild_id.is_not(None))
        .distinct()
    )
    return {int(guild_id) for guild_id in rows if guild_id is not None}


async def get_fact(session: AsyncSession, user_id: int, fact_id: int) -> Fact | None:
    row = (
        await session.execute(select(*COLUMNS).where(LongTermMemory.id == fact_id, own(user_id)))
    ).first()
    return fact_of(row) if row is not None else None


# A fact's place in the newest-first order of a user's facts: (updated_at, id).
FactCursor = tuple[datetime, int]


def _position() -> ColumnElement[Any]:
    return tuple_(LongTermMemory.updated_at, LongTermMemory.id)


def _at(cursor: FactCursor) -> ColumnElement[Any]:
    updated_at, fact_id = cursor
    return tuple_(literal(updated_at, DateTime(timezone=True)), literal(fact_id, BigInteger))


async def list_facts(
    session: AsyncSession,
    user_id: int,
    *,
    offset: int = 0,
    limit: int,
    older_than: FactCursor | None = None,
    newer_than: FactCursor | None = None,
) -> list[Fact]:
    """The user's facts, newest first (every place): from ``offset``, or those just
    older than ``older_than`` or just newer than ``newer_than`` (the ``limit`` nearest
    to it, still newest first). A cursor keeps its place when facts before it are
    deleted meanwhile; an offset would skip one."""
    query = select(*COLUMNS).where(own(user_id))
    if newer_than is not None:
        query = query.where(_position() > _at(newer_than))
        query = query.order_by(LongTermMemory.updated_at, LongTermMemory.id)
    else:
        if older_than is not None:
            query = query.where(_position() < _at(older_than))
        query = query.order_by(LongTermMemory.updated_at.desc(), LongTermMemory.id.desc())
    rows = await session.execute(query.offset(offset).limit(limit))
    facts = [fact_of(row) for row in rows]
    return facts[::-1] if newer_than is not None else facts


async def count_newer(session: AsyncSession, user_id: int, than: FactCursor) -> int:
    """How many of the user's facts come before ``than`` in the newest-first order."""
    count = await session.scalar(
        select(func.count())
        .select_from(LongTermMemory)
        .where(own(user_id), _position() > _at(than))
    )
    return int(count or 0)


def _place_values(place: Place | None) -> dict[str, object]:
    if place is None:  # no channel known: judged by nothing but its server (or DMs)
        return {
            "channel_id": None,
            "parent_channel_id": None,
            "private_thread": False,
            "readable_by_everyone": False,
        }
    return {
        "channel_id": place.channel_id,
        "parent_channel_id": place.parent_channel_id,
        "private_thread": place.private_thread,
        "readable_by_everyone": place.readable_by_everyone,
    }


def _provenance_values(provenance: Provenance, now: datetime) -> dict[str, object]:
    return {
        "origin": provenance.origin,
        "origin_detail": provenance.detail,
        "source_message_id": provenance.source_message_id,
        "updated_at": now,
    }


async def insert_fact(
    session: AsyncSession,
    *,
    user_id: int,
    guild_id: int | None,
    content: str,
    provenance: Provenance,
    now: datetime,
    place: Place | None = None,
    captured: Mapping[str, object] | None = None,
) -> Fact:
    """Store a fact; ``captured``: a captured fact's columns (scope, date, sources)."""
    row = (
        await session.execute(
            insert(LongTermMemory)
            .values(
                user_id=user_id,
                guild_id=guild_id,
                **_place_values(place),
                content=content,
                **_provenance_values(provenance, now),
                created_at=now,
                **(captured or {}),
            )
            .returning(*COLUMNS)
        )
    ).one()
    return fact_of(row)


async def update_fact(
    session: AsyncSession,
    fact_id: int,
    *,
    content: str,
    provenance: Provenance,
    now: datetime,
    place: Place | None = None,
    captured: Mapping[str, object] | None = None,
) -> Fact:
    """Replace a fact's text, place and provenance (a near-duplicate was remembered
    again); ``captured``: a captured fact's new date and sources."""
    row = (
        await session.execute(
            update(LongTermMemory)
            .where(LongTermMemory.id == fact_id)
            .values(
                content=content,
                **_place_values(place),
                **_provenance_values(provenance, now),
                **(captured or {}),
            )
            .returning(*COLUMNS)
        )
    ).one()
    return fact_of(row)


async def evict_least_recalled(session: AsyncSession, user_id: int, count: int) -> list[Fact]:
    """Delete the user's ``count`` least-recalled facts, oldest first among equals."""
    if count <= 0:
        return []
    last_use = func.coalesce(LongTermMemory.last_recalled_at, LongTermMemory.updated_at)
    victims = (
        select(LongTermMemory.id)
        .where(own(user_id))
        .order_by(LongTermMemory.recall_count, last_use, LongTermMemory.id)
        .limit(count)
        .scalar_subquery()
    )
    rows = await session.execute(
        delete(LongTermMemory).where(LongTermMemory.id.in_(victims)).returning(*COLUMNS)
    )
    return sorted((fact_of(row) for row in rows), key=lambda fact: fact.id)


async def delete_fact(session: AsyncSession, user_id: int, fact_id: int) -> Fact | None:
    """Delete one fact if (and only if) it belongs to ``user_id``."""
    row = (
        await session.execute(
            delete(LongTermMemory)
            .where(LongTermMemory.id == fact_id, own(user_id))
            .returning(*COLUMNS)
        )
    ).first()
    return fact_of(row) if row is not None else None


async def delete_all(session: AsyncSession, user_id: int) -> int:
    rows = await session.execute(
        delete(LongTermMemory).where(own(user_id)).returning(LongTermMemory.id)
    )
    return len(rows.all())


async def fact_places(
    session: AsyncSession, user_id: int, guild_id: int | None, *, opted_in: bool
) -> list[tuple[int, int | None, Place]]:
    """``(id, guild_id, place)`` of the user's facts in scope here that were said in a
    known channel (to decide which of them may be shown before searching)."""
    rows = await session.execute(
        select(
            LongTermMemory.id,
            LongTermMemory.guild_id,
            LongTermMemory.channel_id,
            LongTermMemory.parent_channel_id,
            LongTermMemory.private_thread,
            LongTermMemory.readable_by_everyone,
        ).where(
            own(user_id),
            scope_filter(guild_id, opted_in=opted_in),
            LongTermMemory.channel_id.is_not(None),
        )
    )
    return [
        (fact_id, fact_guild, Place(channel, parent, private, everyone))
        for fact_id, fact_guild, channel, parent, private, everyone in rows
        if channel is not None
    ]


async def bump_recall(session: AsyncSession, fact_ids: Iterable[int], now: datetime) -> None:
    """Count one recall of each fact (what eviction spares first)."""
    ids = sorted(set(fact_ids))
    if not ids:
        return
    await session.execute(
        update(LongTermMemory)
        .where(LongTermMemory.id.in_(ids))
        .values(
            recall_count=LongTermMemory.recall_count + 1,
            last_recalled_at=now,
            # A recall is no change of the fact: without this the column's onupdate
            # (now()) would move its saved date and its recency on every recall.
            updated_at=LongTermMemory.updated_at,
        )
        .execution_options(synchronize_session=False)
    )


async def add_events(session: AsyncSession, events: Sequence[FactEvent], now: datetime) -> None:
    """Audit rows for long-term memory changes. They carry the user (so ``/forget-me``
    deletes them) but no guild: a server's ``/stm history`` is not told who keeps
    personal memories there."""
    if not events:
        return
    await session.execute(
        insert(StmEvent),
        [
            {
                "event": record.event,
                "scope_kind": _EVENT_SCOPE,
                "guild_id": None,
                "user_id": record.user_id,
                "channel_id": None,
                "origin": record.origin,
                "actor_user_id": record.actor_user_id,
                "message_id": record.message_id,
                "chars_before": record.chars_before,
                "chars_after": record.chars_after,
                "created_at": now,
            }
            for record in events
        ],
    )


async def last_event_at(session: AsyncSession, user_id: int, event: str) -> datetime | None:
    """When ``user_id``'s latest long-term audit event of kind ``event`` was recorded
    (``None``: never). The audit log is kept, so this is how a ``/memories clear`` is
    remembered for a turn that began before it."""
    return await session.scalar(
        select(func.max(StmEvent.created_at)).where(
            StmEvent.user_id == user_id,
            StmEvent.scope_kind == _EVENT_SCOPE,
            StmEvent.event == event,
        )
    )


async def user_ids(session: AsyncSession) -> set[int]:
    """Every user who has long-term facts, or whose words a captured fact came from."""
    owners = set(await session.scalars(select(LongTermMemory.user_id).distinct()))
    sources = await session.scalars(select(func.unnest(LongTermMemory.source_user_ids)).distinct())
    return owners | {int(user) for user in sources}


async def delete_derived(session: AsyncSession, user_id: int) -> int:
    """``/forget-me``: the user's facts and every captured fact made from their words."""
    rows = await session.execute(
        delete(LongTermMemory)
        .where(
            or_(
                LongTermMemory.user_id == user_id,
                LongTermMemory.source_user_ids.contains(literal([user_id], ARRAY(BigInteger))),
            )
        )
        .returning(LongTermMemory.id)
    )
    return len(rows.all())


async def facts_by_ids(session: AsyncSession, fact_ids: Sequence[int]) -> list[Fact]:
    """The facts ``fact_ids`` (already judged visible by the query that found them)."""
    if not fact_ids:
        return []
    rows = await session.execute(
        select(*COLUMNS).where(LongTermMemory.id.in_(sorted(set(fact_ids))))
    )
    return [fact_of(row) for row in rows]
