"""Recall's two rankings, fused: full-text hits and, with an embeddings endpoint and
pgvector, the facts nearest to the message's vector (reciprocal rank fusion).

Without embeddings, or while the endpoint is down, recall is full-text search alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.db import memory_session
from bot.db.repositories import embeddings as repo
from bot.db.repositories import fact_search
from bot.llm import Embedder, Vector
from bot.vocabulary import Fact, MemoryUnavailable, ScoredFact, SearchWords

__all__ = [
    "RECALL_CANDIDATES",
    "RRF_K",
    "Candidates",
    "FactVectors",
    "Recalled",
    "Where",
    "fused",
    "ranked",
    "search_own",
    "with_nearest",
    "within_budget",
]

log = logging.getLogger(__name__)

# Reciprocal rank fusion's constant: a hit's weight is 1 / (RRF_K + rank), so the top
# ranks of either list count about the same and neither list's scores need scaling.
RRF_K = 60
# Each ranking brings at most this many candidates to the fusion.
RECALL_CANDIDATES = 50


def fused(rankings: Iterable[Sequence[int]]) -> dict[int, float]:
    """Each fact id's fused score over ``rankings`` (ids, best first)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, fact_id in enumerate(ranking, start=1):
            scores[fact_id] = scores.get(fact_id, 0.0) + 1.0 / (RRF_K + rank)
    return scores


class FactVectors:
    """Facts' embeddings: made when facts are stored, and a message's for recall."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], embedder: Embedder | None
    ) -> None:
        self._sessions = sessions
        self.embedder = embedder
        self._table: bool | None = None  # whether long_term_embeddings exists

    async def usable(self, session: AsyncSession) -> bool:
        """Embeddings configured, the endpoint not resting, and the table there."""
        if self.embedder is None or not self.embedder.enabled:
            return False
        if self._table is None:
            self._table = await repo.available(session)
            if not self._table:
                log.warning(
                    "an embeddings endpoint is set but the database has no pgvector "
                    "(long_term_embeddings): recall uses full-text search only"
                )
        return self._table

    async def of_message(self, text: str) -> Vector | None:
        """The vector of a turn's message (None: full-text recall only)."""
        if self.embedder is None or not self.embedder.enabled or not text.strip():
            return None
        vectors = await self.embedder.embed([text])
        return vectors[0] if vectors else None

    async def index(self, facts: Sequence[Fact]) -> int:
        """Store the embeddings of ``facts`` (best effort: a fact without one is still
        found by full-text search); how many were stored."""
        if self.embedder is None or not facts:
            return 0
        try:
            async with memory_session(self._sessions, "checking for pgvector") as session:
                if not await self.usable(session):
                    return 0
            vectors = await self.embedder.embed([fact.note for fact in facts])
            if vectors is None:
                return 0
            async with (
                memory_session(self._sessions, "storing embeddings") as session,
                session.begin(),
            ):
                await repo.store(
                    session,
                    self.embedder.model,
                    [(fact.id, vector) for fact, vector in zip(facts, vectors, strict=True)],
                )
        except MemoryUnavailable as exc:
            log.warning("embeddings of %d fact(s) not stored: %s", len(facts), exc)
            return 0
        return len(facts)


@dataclass(frozen=True, slots=True)
class Recalled:
    """A turn's recall: the notes shown, whether the user has facts of their own here,
    and which of the channels asked about hold captured facts at all."""

    notes: list[str]
    facts: tuple[Fact, ...] = ()
    own_facts: bool = False
    channels_with_facts: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Candidates:
    """One recall's hits: full-text (own facts, unmatched ones last; captured facts) and
    nearest by vector (own, captured), each best first."""

    own: Sequence[ScoredFact]
    captured: Sequence[ScoredFact]
    near_own: Sequence[int] = ()
    near_captured: Sequence[int] = ()


def ranked(candidates: Candidates, facts: dict[int, Fact]) -> list[Fact]:
    """Every candidate, best first: those any ranking matched by their fused score
    (full-text score breaking ties), then the user's unmatched facts, as found."""
    matched_own = [hit.fact.id for hit in candidates.own if hit.matched]
    scores = fused(
        [
            matched_own,
            [hit.fact.id for hit in candidates.captured],
            candidates.near_own,
            candidates.near_captured,
        ]
    )
    text_scores = {hit.fact.id: hit.score for hit in (*candidates.own, *candidates.captured)}
    best = sorted(
        (fact_id for fact_id in scores if fact_id in facts),
        key=lambda fact_id: (scores[fact_id], text_scores.get(fact_id, 0.0), fact_id),
        reverse=True,
    )
    rest = [hit.fact.id for hit in candidates.own if hit.fact.id not in scores]
    return [facts[fact_id] for fact_id in (*best, *rest)]


def within_budget(facts: Sequence[Fact], budget: int) -> list[Fact]:
    """The first facts whose notes fit in ``budget`` characters; one too long is skipped,
    not a stop."""
    chosen: list[Fact] = []
    used = 0
    for fact in facts:
        size = len(fact.note)
        if used + size > budget:
            continue
        chosen.append(fact)
        used += size
    return chosen


@dataclass(frozen=True, slots=True)
class Where:
    """Where one recall looks: the user's own facts visible here (unless not ``own``)
    and the facts captured in ``channels``."""

    user_id: int
    guild_id: int | None
    opted_in: bool
    hidden: tuple[int, ...]
    channels: tuple[int, ...]
    own: bool


async def search_own(
    session: AsyncSession, where: Where, words: SearchWords, now: datetime
) -> list[ScoredFact]:
    """A turn's full-text recall among the user's own facts visible here: the most
    relevant, those matching no word after the others."""
    return await fact_search.search(
        session,
        user_id=where.user_id,
        guild_id=where.guild_id,
        opted_in=where.opted_in,
        words=words,
        now=now,
        limit=RECALL_CANDIDATES,
        hidden=where.hidden,
    )


async def with_nearest(
    session: AsyncSession,
    candidates: Candidates,
    where: Where,
    vector: Vector,
    vectors: FactVectors,
) -> Candidates:
    """``candidates`` with the facts nearest to ``vector`` (own and captured)."""
    if vectors.embedder is None:
        return candidates
    model, farthest = vectors.embedder.model, vectors.embedder.settings.max_distance
    near_own = (
        await repo.nearest_own(
            session,
            user_id=where.user_id,
            guild_id=where.guild_id,
            opted_in=where.opted_in,
            hidden=where.hidden,
            model=model,
            vector=vector,
            limit=RECALL_CANDIDATES,
            max_distance=farthest,
        )
        if where.own
        else []
    )
    near_captured = await repo.nearest_captured(
        session,
        where.channels,
        model=model,
        vector=vector,
        limit=RECALL_CANDIDATES,
        max_distance=farthest,
    )
    return Candidates(candidates.own, candidates.captured, near_own, near_captured)
