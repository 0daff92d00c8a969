"""Captured facts: rows of ``long_term_memories`` with scope ``channel``, distilled by
capture from a channel's conversation, dated and attributed to their source members.

Functions take an ``AsyncSession``; the caller controls the transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import date, datetime

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    any_,
    delete,
    func,
    literal,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from bot.db.models import LongTermMemory
from bot.db.repositories.fact_search import UNINDEXED_TSV, recency, word_matches
from bot.db.repositories.longterm import (
    CHANNEL_SCOPE,
    COLUMNS,
    fact_of,
    insert_fact,
    update_fact,
)
from bot.vocabulary import Fact, Place, Provenance, ScoredFact, SearchWords

# Its own advisory-lock key space: "long-term facts of one channel".
_LOCK_NAMESPACE = 0x4C5443  # "LTC"


def _of_channels(channel_ids: Collection[int]) -> tuple[ColumnElement[bool], ...]:
    # One array parameter, however many channels (a thread's parent too).
    return (
        LongTermMemory.scope == CHANNEL_SCOPE,
        LongTermMemory.channel_id == any_(literal(sorted(channel_ids), ARRAY(BigInteger))),
    )


async def lock_channel(session: AsyncSession, channel_id: int) -> None:
    """Serialise captures into one channel's facts until the transaction ends."""
    folded = (channel_id ^ (channel_id >> 32)) & 0xFFFFFFFF
    key = folded - (1 << 32) if folded >= (1 << 31) else folded
    await session.execute(
        text("SELECT pg_advisory_xact_lock(:namespace, :key)"),
        {"namespace": _LOCK_NAMESPACE, "key": key},
    )


async def channel_facts(session: AsyncSession, channel_id: int, limit: int) -> list[Fact]:
    """The channel's ``limit`` newest captured facts, newest first."""
    rows = await session.execute(
        select(*COLUMNS)
        .where(*_of_channels([channel_id]))
        .order_by(LongTermMemory.updated_at.desc(), LongTermMemory.id.desc())
        .limit(limit)
    )
    return [fact_of(row) for row in rows]


async def count_channel_facts(session: AsyncSession, channel_id: int) -> int:
    count = await session.scalar(
        select(func.count()).select_from(LongTermMemory).where(*_of_channels([channel_id]))
    )
    return int(count or 0)


async def insert_captured(
    session: AsyncSession,
    *,
    guild_id: int,
    place: Place,
    content: str,
    user_id: int,
    sources: Sequence[int],
    refers_to: date | None,
    provenance: Provenance,
    now: datetime,
) -> Fact:
    """Store one captured fact (``user_id``: the member it is mostly about, or said it)."""
    return await insert_fact(
        session,
        user_id=user_id,
        guild_id=guild_id,
        content=content,
        provenance=provenance,
        now=now,
        place=place,
        captured=_captured(sources, refers_to),
    )


async def merge_captured(
    session: AsyncSession,
    fact: Fact,
    *,
    content: str,
    sources: Sequence[int],
    refers_to: date | None,
    provenance: Provenance,
    now: datetime,
) -> Fact:
    """Restate a captured fact: its newer text and date; ``sources``: of both."""
    return await update_fact(
        session,
        fact.id,
        content=content,
        provenance=provenance,
        now=now,
        place=fact.place,
        captured=_captured(sources, refers_to),
    )


def _captured(sources: Sequence[int], refers_to: date | None) -> dict[str, object]:
    return {
        "scope": CHANNEL_SCOPE,
        "refers_to": refers_to,
        "source_user_ids": sorted(set(sources)),
    }


async def delete_facts(
    session: AsyncSession, channel_id: int, fact_ids: Sequence[int]
) -> list[Fact]:
    """Delete the channel's captured facts ``fact_ids`` (superseded); those deleted."""
    if not fact_ids:
        return []
    rows = await session.execute(
        delete(LongTermMemory)
        .where(*_of_channels([channel_id]), LongTermMemory.id.in_(sorted(set(fact_ids))))
        .returning(*COLUMNS)
    )
    return [fact_of(row) for row in rows]


async def evict_channel(session: AsyncSession, channel_id: int, count: int) -> list[Fact]:
    """Delete the channel's ``count`` least-recalled captured facts, oldest first."""
    if count <= 0:
        return []
    last_use = func.coalesce(LongTermMemory.last_recalled_at, LongTermMemory.updated_at)
    victims = (
        select(LongTermMemory.id)
        .where(*_of_channels([channel_id]))
        .order_by(LongTermMemory.recall_count, last_use, LongTermMemory.id)
        .limit(count)
        .scalar_subquery()
    )
    rows = await session.execute(
        delete(LongTermMemory).where(LongTermMemory.id.in_(victims)).returning(*COLUMNS)
    )
    return [fact_of(row) for row in rows]


async def delete_channel_facts(session: AsyncSession, channel_id: int) -> int:
    """``/refresh``: every fact captured in the channel."""
    rows = await session.execute(
        delete(LongTermMemory).where(*_of_channels([channel_id])).returning(LongTermMemory.id)
    )
    return len(rows.all())


async def search_channels(
    session: AsyncSession,
    channel_ids: Collection[int],
    words: SearchWords,
    now: datetime,
    limit: int,
) -> list[ScoredFact]:
    """The captured facts of ``channel_ids`` matching ``words``, most relevant first."""
    if not words.words or not channel_ids:
        return []
    matched, rank, held = word_matches(words, whole_words=False, tsv=UNINDEXED_TSV)
    score = (rank + recency(now)).label("score")
    rows = await session.execute(
        select(*COLUMNS, held, score)
        .where(*_of_channels(channel_ids), matched)
        .order_by(held.desc(), score.desc(), LongTermMemory.id.desc())
        .limit(limit)
    )
    return [ScoredFact(fact_of(row), True, float(row.score), int(row.held)) for row in rows]


async def channels_with_facts(
    session: AsyncSession, channel_ids: Collection[int]
) -> frozenset[int]:
    """Which of ``channel_ids`` hold captured facts at all."""
    if not channel_ids:
        return frozenset()
    found = await session.scalars(
        select(LongTermMemory.channel_id).where(*_of_channels(channel_ids)).distinct()
    )
    return frozenset(int(channel) for channel in found if channel is not None)
