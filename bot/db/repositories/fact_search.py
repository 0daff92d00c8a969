"""Full-text search over ``long_term_memories``: what a query matches, how it ranks.

Functions take an ``AsyncSession``; user text only ever reaches SQL as bound parameters.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    Float,
    Integer,
    Label,
    and_,
    any_,
    case,
    cast,
    func,
    literal,
    literal_column,
    not_,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from bot.db.models import LongTermMemory
from bot.db.repositories.longterm import COLUMNS, fact_of, own, scope_filter
from bot.vocabulary import ScoredFact, SearchWords, WordGroup

# The ``simple`` configuration: no stemming and no stop words, so every language is
# indexed the same way (it is also what the generated ``content_tsv`` column uses).
_SIMPLE: ColumnElement[str] = literal_column("'simple'::regconfig")

# A fact's score is its full-text rank plus this much for being recent; the recency
# part halves after RECENCY_HALF_DAYS days without an update. A rank of one matching
# word in a short fact is about 0.06, so recency only orders facts of similar relevance.
RECENCY_WEIGHT = 0.05
RECENCY_HALF_DAYS = 30.0

# What a fact's substring match of the query is worth next to a full-text rank (about
# 0.06 for one word matched in a short fact), when every query word is found in it.
SUBSTRING_RANK = 0.06
_LIKE_ESCAPE = "\\"


def _like_pattern(word: str) -> str:
    escaped = (
        word.replace(_LIKE_ESCAPE, _LIKE_ESCAPE * 2)
        .replace("%", _LIKE_ESCAPE + "%")
        .replace("_", _LIKE_ESCAPE + "_")
    )
    return f"%{escaped}%"


def _contains(word: str) -> ColumnElement[bool]:
    return LongTermMemory.content.ilike(_like_pattern(word), escape=_LIKE_ESCAPE)


def _whole_word(forms: Sequence[str]) -> ColumnElement[bool]:
    """Whether a fact's text holds one of ``forms`` as a whole word (case-insensitive).

    The parser keeps an email, a host name, a decimal, a version or a date as one token
    ("ann@example.com", "10.5", "3.11.4", "12/05/1990"), so full-text search never finds
    "ann" or "10" in them; a regular expression between word boundaries (``\\m…\\M``)
    does. The pattern is a bound parameter and the forms are escaped."""
    alternatives = "|".join(re.escape(form) for form in forms)
    return LongTermMemory.content.regexp_match(rf"\m(?:{alternatives})\M", flags="i")


def _found(group: WordGroup, *, whole_words: bool) -> ColumnElement[bool] | None:
    """Whether a fact holds one of ``group``'s forms outside full-text search: as a
    substring for a form in another script than Latin (:attr:`WordGroup.substrings`),
    and, with ``whole_words``, a Latin form as a whole word of the text
    (:func:`_whole_word`, behind a cheaper ``ILIKE`` that spares most facts the regular
    expression). ``None`` when there is nothing to look for."""
    inside = [_contains(form) for form in group.substrings]
    latin = group.latin
    if whole_words and latin:
        inside.append(and_(or_(*(_contains(form) for form in latin)), _whole_word(latin)))
    return or_(*inside) if inside else None


def _substring_rank(found: Sequence[ColumnElement[bool]], words: int) -> ColumnElement[float]:
    """:data:`SUBSTRING_RANK` scaled by the share of the query's words found."""
    hits = sum((case((each, 1.0), else_=0.0) for each in found), literal(0.0, Float))
    return cast(hits, Float) * (SUBSTRING_RANK / words)


async def search(
    session: AsyncSession,
    *,
    user_id: int,
    guild_id: int | None,
    opted_in: bool,
    words: SearchWords,
    now: datetime,
    limit: int,
    matched_only: bool = False,
    all_words: bool = False,
    whole_words: bool = False,
    hidden: Collection[int] = (),
) -> list[ScoredFact]:
    """The user's facts visible here, most relevant first (not ``hidden``).

    Ranking: facts holding more of the query's word groups first; then ``ts_rank`` of
    the OR-ed ``websearch_to_tsquery`` with a recency term (halving every
    :data:`RECENCY_HALF_DAYS`). Non-Latin words also match as substrings (such scripts
    have no word boundaries); ``whole_words`` adds a per-word regex so "ann" finds
    "ann@example.com" (too slow for every turn's recall). Non-matching facts follow,
    newest first, unless ``matched_only``; ``all_words`` keeps only full matches.
    """
    recent = recency(now)
    # One array parameter, however many facts are hidden.
    shown = not_(LongTermMemory.id == any_(literal(sorted(hidden), ARRAY(BigInteger))))
    where = (own(user_id), scope_filter(guild_id, opted_in=opted_in), shown)
    if not words.words:
        if matched_only or all_words:
            return []
        return await _newest(session, where, recent, limit)
    matched, rank, held = word_matches(words, whole_words=whole_words)
    score = (rank + recent).label("score")
    query = (
        select(*COLUMNS, matched.label("matched"), held, score)
        .where(*where)
        .order_by(held.desc(), score.desc(), LongTermMemory.id.desc())
        .limit(limit)
    )
    if matched_only:
        query = query.where(matched)
    if all_words:
        query = query.where(held == len(words.groups))
    rows = await session.execute(query)
    return [
        ScoredFact(fact_of(row), bool(row.matched), float(row.score), int(row.held)) for row in rows
    ]


async def _newest(
    session: AsyncSession,
    where: tuple[ColumnElement[bool], ...],
    recent: ColumnElement[float | Decimal],
    limit: int,
) -> list[ScoredFact]:
    """The ``limit`` most recent facts ``where`` holds (a query without words)."""
    newest = recent.label("score")
    rows = await session.execute(
        select(*COLUMNS, newest)
        .where(*where)
        .order_by(newest.desc(), LongTermMemory.id.desc())
        .limit(limit)
    )
    return [ScoredFact(fact_of(row), False, float(row.score)) for row in rows]


def recency(now: datetime) -> ColumnElement[float | Decimal]:
    """A fact's score for being recent: :data:`RECENCY_WEIGHT`, halving every
    :data:`RECENCY_HALF_DAYS` days since its last update."""
    age_days = func.greatest(
        func.extract("epoch", literal(now, DateTime(timezone=True)) - LongTermMemory.updated_at)
        / 86400.0,
        0.0,
    )
    return RECENCY_WEIGHT / (1.0 + age_days / RECENCY_HALF_DAYS)


# The text index through an expression the planner cannot match to the full-text index:
# among one channel's facts (a few thousand at most) a scan of the channel's rows beats
# collecting a common word's matches over the whole table.
UNINDEXED_TSV: ColumnElement[Any] = LongTermMemory.content_tsv.op("||")(
    literal_column("''::tsvector")
)


def word_matches(
    words: SearchWords,
    *,
    whole_words: bool,
    tsv: ColumnElement[Any] = LongTermMemory.content_tsv,  # type: ignore[assignment]
) -> tuple[ColumnElement[bool], ColumnElement[float], Label[int]]:
    """For a query with words: whether a fact matches any of them, its rank by them, and
    how many of the query's word groups it holds (labelled ``held``); ``tsv``: the text
    vector searched (:data:`UNINDEXED_TSV` to keep off the full-text index)."""
    terms = words.terms
    tsquery = func.websearch_to_tsquery(_SIMPLE, " or ".join(terms))
    full_text = tsv.bool_op("@@")(tsquery)
    # ts_rank averages over the query's terms: scale the added forms' dilution back out,
    # so a rank keeps its size next to RECENCY_WEIGHT.
    dilution = len(terms) / len(words.words)
    ts_rank = cast(func.ts_rank(tsv, tsquery), Float) * dilution
    groups = words.groups
    # One pattern per query word, the same in every expression: PostgreSQL caches only
    # a few compiled regular expressions per session.
    found = [_found(group, whole_words=whole_words) for group in groups]
    inside = [each for each in found if each is not None]
    matched = or_(full_text, *inside)
    rank = case(
        (full_text, ts_rank),
        (matched, _substring_rank(inside, len(groups))),
        else_=0.0,
    )
    holds = (_holds(group, each, tsv) for group, each in zip(groups, found, strict=True))
    held = sum((case((each, 1), else_=0) for each in holds), literal(0, Integer)).label("held")
    return matched, rank, held


def _holds(
    group: WordGroup, found: ColumnElement[bool] | None, tsv: ColumnElement[Any]
) -> ColumnElement[bool]:
    """Whether a fact holds one of ``group``'s forms (one query word), by full-text
    search or else by ``found`` (:func:`_found`)."""
    words = func.websearch_to_tsquery(_SIMPLE, " or ".join(group.forms))
    full_text = tsv.bool_op("@@")(words)
    return full_text if found is None else or_(full_text, found)
