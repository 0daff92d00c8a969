"""Fact embeddings (``long_term_embeddings``, made by migration 0007 only where pgvector
is installed): stored beside the facts, searched by cosine distance within a scope.

Vectors travel as pgvector's text form (``[0.1,0.2]``) cast in SQL, so the driver needs
no codec for the type.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    Integer,
    Text,
    any_,
    bindparam,
    column,
    literal,
    not_,
    select,
    table,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from bot.db.models import LongTermMemory
from bot.db.repositories.longterm import CHANNEL_SCOPE, USER_SCOPE, scope_filter

_EMBEDDINGS = table(
    "long_term_embeddings",
    column("fact_id", BigInteger),
    column("model", Text),
    column("dims", Integer),
    column("embedding"),
)

_STORE = text(
    "INSERT INTO long_term_embeddings (fact_id, model, dims, embedding) "
    "SELECT :fact_id, :model, :dims, CAST(:embedding AS vector) "
    "WHERE EXISTS (SELECT 1 FROM long_term_memories WHERE id = :fact_id) "
    "ON CONFLICT (fact_id) DO UPDATE SET model = excluded.model, dims = excluded.dims, "
    "embedding = excluded.embedding"
)


def as_text(vector: Sequence[float]) -> str:
    """pgvector's text form of ``vector``."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


async def available(session: AsyncSession) -> bool:
    """Whether the table exists (pgvector was installed when the schema was migrated)."""
    found = await session.scalar(text("SELECT to_regclass('long_term_embeddings') IS NOT NULL"))
    return bool(found)


async def store(
    session: AsyncSession, model: str, vectors: Sequence[tuple[int, Sequence[float]]]
) -> None:
    """Store ``(fact_id, vector)`` pairs (a fact deleted meanwhile is skipped)."""
    if not vectors:
        return
    await session.execute(
        _STORE,
        [
            {"fact_id": fact_id, "model": model, "dims": len(vector), "embedding": as_text(vector)}
            for fact_id, vector in vectors
        ],
    )


def _distance(vector: Sequence[float]) -> ColumnElement[float]:
    query = text("CAST(:query AS vector)").bindparams(bindparam("query", as_text(vector)))
    return _EMBEDDINGS.c.embedding.op("<=>", return_type=Float)(query)  # cosine distance


async def _nearest(
    session: AsyncSession,
    where: Sequence[ColumnElement[bool]],
    model: str,
    vector: Sequence[float],
    limit: int,
    max_distance: float,
) -> list[int]:
    distance = _distance(vector)
    rows = await session.execute(
        select(LongTermMemory.id)
        .join(_EMBEDDINGS, _EMBEDDINGS.c.fact_id == LongTermMemory.id)
        .where(
            *where,
            _EMBEDDINGS.c.model == model,
            _EMBEDDINGS.c.dims == len(vector),
            distance <= max_distance,
        )
        .order_by(distance, LongTermMemory.id.desc())
        .limit(limit)
    )
    return [int(fact_id) for fact_id in rows.scalars()]


async def nearest_own(
    session: AsyncSession,
    *,
    user_id: int,
    guild_id: int | None,
    opted_in: bool,
    hidden: Collection[int],
    model: str,
    vector: Sequence[float],
    limit: int,
    max_distance: float,
) -> list[int]:
    """Ids of the user's own facts visible here within ``max_distance`` of ``vector``,
    nearest first."""
    shown = not_(LongTermMemory.id == any_(literal(sorted(hidden), ARRAY(BigInteger))))
    where = [
        LongTermMemory.user_id == user_id,
        LongTermMemory.scope == USER_SCOPE,
        scope_filter(guild_id, opted_in=opted_in),
        shown,
    ]
    return await _nearest(session, where, model, vector, limit, max_distance)


async def nearest_captured(
    session: AsyncSession,
    channel_ids: Collection[int],
    *,
    model: str,
    vector: Sequence[float],
    limit: int,
    max_distance: float,
) -> list[int]:
    """Ids of the captured facts of ``channel_ids`` within ``max_distance`` of
    ``vector``, nearest first."""
    if not channel_ids:
        return []
    where = [
        LongTermMemory.scope == CHANNEL_SCOPE,
        LongTermMemory.channel_id == any_(literal(sorted(channel_ids), ARRAY(BigInteger))),
    ]
    return await _nearest(session, where, model, vector, limit, max_distance)
