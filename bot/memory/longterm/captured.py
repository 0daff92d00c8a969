"""Facts capture distilled from a channel's conversation (SPEC §6): scoped to the
channel, dated, attributed to the members whose messages they came from.

A restatement merges into the fact it restates; a fact that gives a subject a new value,
or that the model marked as replacing a known one, supersedes it (the old row goes, the
audit log keeps an ``ltm_supersede`` event without text). Nothing is stored when the
channel was wiped (``/refresh``) or one of the source members forgotten (``/forget-me``)
since the run began.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime

from cachetools import LRUCache
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.config import Settings
from bot.db import memory_session
from bot.db.repositories import captured as repo
from bot.db.repositories import longterm as longterm_repo
from bot.db.repositories import stm as stm_repo
from bot.memory.longterm.near_duplicates import replacement
from bot.memory.longterm.ranking import FactVectors
from bot.memory.spool import DurableSpool
from bot.vocabulary import Clock, Fact, FactEvent, Place, Provenance, sanitize_value

__all__ = ["CaptureStored", "CapturedFacts", "Distilled"]

log = logging.getLogger(__name__)

EVENT_CAPTURE = "ltm_capture"
EVENT_MERGE = "ltm_merge"
EVENT_SUPERSEDE = "ltm_supersede"
EVENT_EVICT = "ltm_evict"
# A new fact is compared with this many of the channel's newest for restatements.
COMPARED = 500
# Channels whose last capture this process remembers.
CAPTURE_COUNTERS = 100_000

CLEARED = "the channel's memory was cleared (/refresh) while the facts were being made"
FORGOTTEN = "a member whose messages they came from was forgotten (/forget-me) meanwhile"
FORGET_PENDING = "a /forget-me of a member whose messages they came from is still being applied"


@dataclass(frozen=True, slots=True)
class Distilled:
    """One durable fact the model distilled: its text, the day it is about, the member it
    is about (when the model named one of the speakers) and known facts it replaces."""

    content: str
    refers_to: date | None = None
    about_user_id: int | None = None
    replaces: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class CaptureStored:
    """What one capture stored: new, merged and superseded facts (ids), or why nothing."""

    created: tuple[Fact, ...] = ()
    merged: tuple[Fact, ...] = ()
    superseded: tuple[int, ...] = ()
    evicted: tuple[int, ...] = ()
    refused: str | None = None

    @property
    def stored(self) -> tuple[Fact, ...]:
        return (*self.created, *self.merged)


@dataclass
class _Writing:
    """One capture's transaction: the channel's facts as they change, and the audit."""

    existing: list[Fact]
    events: list[FactEvent]
    created: list[Fact]
    merged: list[Fact]
    superseded: list[int]


class CapturedFacts:
    """Stores and reads the facts captured in channels."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        settings: Settings,
        clock: Clock,
        *,
        spool: DurableSpool | None = None,
        vectors: FactVectors | None = None,
    ) -> None:
        self._sessions = sessions
        self.limits = settings.longterm
        self.clock = clock
        self._spool = spool
        self._vectors = vectors
        # Per channel, the number of its last capture here (see captures); one sequence.
        self._capture_seq = itertools.count(1)
        self._last_capture: LRUCache[int, int] = LRUCache(maxsize=CAPTURE_COUNTERS)

    def captures(self, channel_id: int) -> int:
        """A number that changes whenever this process stores facts captured in the channel
        (a recall that found none there before may not be trusted after)."""
        return self._last_capture.get(channel_id, 0)

    def _storage(self, what: str) -> contextlib.AbstractAsyncContextManager[AsyncSession]:
        return memory_session(self._sessions, f"captured facts: {what}")

    async def known(self, channel_id: int, limit: int) -> list[Fact]:
        """The channel's newest captured facts (shown to the model, which may replace one)."""
        async with self._storage("reading a channel's facts") as session:
            return await repo.channel_facts(session, channel_id, limit)

    def clean(self, text: str) -> str:
        return sanitize_value(text, limit=self.limits.max_fact_chars).strip()

    async def store(
        self,
        facts: Sequence[Distilled],
        *,
        guild_id: int,
        place: Place,
        sources: Sequence[int],
        provenance: Provenance,
        started_at: datetime,
    ) -> CaptureStored:
        """Store ``facts`` distilled from the messages of ``sources`` at ``place``, unless
        the channel or one of them was wiped since ``started_at``; then their embeddings,
        when an endpoint is set."""
        try:
            stored = await self._store(facts, guild_id, place, sources, provenance, started_at)
        finally:
            self._last_capture[place.channel_id] = next(self._capture_seq)
        if self._vectors is not None:
            await self._vectors.index(stored.stored)
        return stored

    async def _store(
        self,
        facts: Sequence[Distilled],
        guild_id: int,
        place: Place,
        sources: Sequence[int],
        provenance: Provenance,
        started_at: datetime,
    ) -> CaptureStored:
        if self._spool is not None and any(self._spool.forgetting(user) for user in sources):
            return CaptureStored(refused=FORGET_PENDING)
        cleaned = [(fact, self.clean(fact.content)) for fact in facts]
        cleaned = [(fact, text) for fact, text in cleaned if text]
        if not cleaned:
            return CaptureStored()
        now = self.clock.now()
        channel_id = place.channel_id
        async with self._storage("storing captured facts") as session, session.begin():
            # Shared with STM writes: a /refresh or /forget-me waits for this, or this for it.
            await stm_repo.lock_for_write(session, [channel_id])
            await repo.lock_channel(session, channel_id)
            refused = await _wiped(session, channel_id, sources, started_at)
            if refused is not None:
                return CaptureStored(refused=refused)
            writing = _Writing(
                await repo.channel_facts(session, channel_id, COMPARED), [], [], [], []
            )
            for fact, content in cleaned:
                await self._store_one(
                    session,
                    writing,
                    fact,
                    content,
                    guild_id=guild_id,
                    place=place,
                    sources=sources,
                    provenance=provenance,
                    now=now,
                )
            evicted = await self._make_room(session, channel_id, writing.events)
            await longterm_repo.add_events(session, writing.events, now)
        kept = {fact.id for fact in writing.created} - set(evicted)
        return CaptureStored(
            tuple(fact for fact in writing.created if fact.id in kept),
            tuple(writing.merged),
            tuple(writing.superseded),
            tuple(evicted),
        )

    async def _store_one(
        self,
        session: AsyncSession,
        writing: _Writing,
        fact: Distilled,
        content: str,
        *,
        guild_id: int,
        place: Place,
        sources: Sequence[int],
        provenance: Provenance,
        now: datetime,
    ) -> None:
        about = fact.about_user_id if fact.about_user_id is not None else min(sources)
        replaced = [old for old in writing.existing if old.id in fact.replaces]
        kinds = {old.id: replacement(content, old.content) for old in writing.existing}
        restated = next((old for old in writing.existing if kinds[old.id] == "restates"), None)
        if restated is not None and not replaced:
            merged = await repo.merge_captured(
                session,
                restated,
                content=content,
                sources=[*restated.source_user_ids, *sources],
                refers_to=fact.refers_to or restated.refers_to,
                provenance=provenance,
                now=now,
            )
            writing.existing = [merged if f.id == restated.id else f for f in writing.existing]
            writing.merged.append(merged)
            writing.events.append(_event(EVENT_MERGE, merged, len(restated.content), provenance))
            return
        replaced += [
            old for old in writing.existing if kinds[old.id] == "supersedes" and old not in replaced
        ]
        gone = await repo.delete_facts(session, place.channel_id, [old.id for old in replaced])
        created = await repo.insert_captured(
            session,
            guild_id=guild_id,
            place=place,
            content=content,
            user_id=about,
            sources=sources,
            refers_to=fact.refers_to,
            provenance=provenance,
            now=now,
        )
        gone_ids = {old.id for old in gone}
        writing.existing = [created, *(f for f in writing.existing if f.id not in gone_ids)]
        writing.created = [f for f in writing.created if f.id not in gone_ids] + [created]
        writing.superseded += sorted(gone_ids)
        writing.events += [
            _event(EVENT_SUPERSEDE, old, len(old.content), provenance) for old in gone
        ]
        writing.events.append(_event(EVENT_CAPTURE, created, None, provenance))

    async def _make_room(
        self, session: AsyncSession, channel_id: int, events: list[FactEvent]
    ) -> list[int]:
        overflow = (
            await repo.count_channel_facts(session, channel_id) - self.limits.max_facts_per_channel
        )
        evicted = await repo.evict_channel(session, channel_id, overflow)
        events += [
            FactEvent(EVENT_EVICT, gone.user_id, chars_before=len(gone.content), chars_after=0)
            for gone in evicted
        ]
        if evicted:
            log.info("captured facts of channel %s are full: evicted %d", channel_id, len(evicted))
        return [gone.id for gone in evicted]


async def _wiped(
    session: AsyncSession, channel_id: int, sources: Sequence[int], started_at: datetime
) -> str | None:
    """Why the facts may not be stored: the channel cleared, or a source forgotten since
    ``started_at`` (a forget at that very instant counts as after it, as for STM)."""
    cleared, forgotten = await stm_repo.wipe_times(session, {channel_id}, set(sources))
    at = cleared.get(channel_id)
    if at is not None and at > started_at:
        return CLEARED
    if any(at >= started_at for at in forgotten.values()):
        return FORGOTTEN
    return None


def _event(kind: str, fact: Fact, chars_before: int | None, provenance: Provenance) -> FactEvent:
    return FactEvent(
        kind,
        fact.user_id,
        origin=provenance.origin,
        actor_user_id=provenance.actor_user_id,
        message_id=provenance.source_message_id,
        chars_before=chars_before,
        chars_after=0 if kind == EVENT_SUPERSEDE else len(fact.content),
    )
