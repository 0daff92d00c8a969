"""Long-term memory (SPEC §6): the facts users asked the bot to remember, and those
capture distilled from channels (:mod:`.captured`), recalled together (:mod:`.ranking`)."""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from cachetools import LRUCache
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.config import Settings
from bot.db import FactCursor, memory_session
from bot.db.repositories import captured as captured_repo
from bot.db.repositories import fact_search
from bot.db.repositories import longterm as repo
from bot.db.repositories import stm as stm_repo
from bot.llm import Embedder
from bot.memory.longterm.captured import CapturedFacts
from bot.memory.longterm.holders import FactHolders
from bot.memory.longterm.near_duplicates import is_near_duplicate
from bot.memory.longterm.ranking import (
    RECALL_CANDIDATES,
    Candidates,
    FactVectors,
    Recalled,
    Where,
    ranked,
    search_own,
    with_nearest,
    within_budget,
)
from bot.memory.longterm.results import FactPage, FactRefused, ForgetResult, RememberResult
from bot.memory.longterm.visibility import ChannelFilter, hidden_fact_ids
from bot.memory.spool import DurableSpool
from bot.vocabulary import (
    Clock,
    Fact,
    FactEvent,
    Place,
    Provenance,
    ScoredFact,
    SearchWords,
    SystemClock,
    sanitize_value,
)

__all__ = [
    "FactCursor",
    "FactPage",
    "FactRefused",
    "ForgetResult",
    "LongTermService",
    "RememberResult",
]

log = logging.getLogger(__name__)

EVENT_REMEMBER = "ltm_remember"
EVENT_FORGET = "ltm_forget"
EVENT_EVICT = "ltm_evict"
EVENT_CLEAR = "ltm_clear"

SEARCH_LIMIT = 10
# Users whose last save this process remembers (see LongTermService.saves).
SAVE_COUNTERS = 100_000


FORGOTTEN_MEANWHILE = (
    "the user had everything about them forgotten (/forget-me) while this turn ran; "
    "nothing was saved"
)


CLEARED_MEANWHILE = (
    "the user cleared their long-term memories (/memories clear) while this turn ran; "
    "nothing was saved"
)


FORGET_PENDING = (
    "the user's /forget-me is still being applied (the database was unavailable); "
    "nothing was saved, ask them to try again in a minute"
)


@dataclass(frozen=True, slots=True)
class _Finding:
    """How one use finds facts (the options of :func:`repo.search`)."""

    limit: int
    matched_only: bool = False
    all_words: bool = False
    whole_words: bool = False


# forget_memory's query: only a fact holding every word, also as a whole word of its text.
_FORGET = _Finding(SEARCH_LIMIT, all_words=True, whole_words=True)


def _found_words(limit: int) -> _Finding:
    """The recall tool's search: only facts holding a word, also as a whole word."""
    return _Finding(limit, matched_only=True, whole_words=True)


class LongTermService:
    """Stores, recalls, lists and deletes one user's long-term facts."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        settings: Settings,
        clock: Clock | None = None,
        *,
        spool: DurableSpool | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self._sessions = sessions
        self.settings = settings
        # A /forget-me waiting there deletes every fact of the user when it is replayed.
        self._spool = spool
        self.limits = settings.longterm
        self.clock: Clock = clock or SystemClock()
        # Per user, the number of their last save attempted here. One sequence for all users,
        # so a value read before a save never equals one read after, even across an eviction.
        self._save_seq = itertools.count(1)
        self._last_save: LRUCache[int, int] = LRUCache(maxsize=SAVE_COUNTERS)
        self.vectors = FactVectors(sessions, embedder)
        self.holders = FactHolders(sessions, settings)
        self.captured = CapturedFacts(
            sessions, settings, self.clock, spool=spool, vectors=self.vectors
        )

    def saves(self, user_id: int) -> int:
        """A number that changes whenever this process tries to save a fact of ``user_id``.

        Unchanged across a recall, it means no save finished meanwhile."""
        return self._last_save.get(user_id, 0)

    def _storage(self, what: str) -> contextlib.AbstractAsyncContextManager[AsyncSession]:
        return memory_session(self._sessions, f"long-term memory: {what}")

    def _forget_pending(self, user_id: int) -> bool:
        """Whether a /forget-me of the user waits in the spool (their facts count as deleted)."""
        return self._spool is not None and self._spool.forgetting(user_id)

    # ------------------------------------------------------------------ writing

    def clean(self, text: str) -> tuple[str, bool]:
        """``text`` as it would be stored, and whether it was shortened to fit."""
        limit = self.limits.max_fact_chars
        clean = sanitize_value(text, limit=limit).strip()
        # Not len(text): redaction markers can be longer than their secret, and a cut on a
        # grapheme boundary can drop several code points at once.
        whole = sanitize_value(text, limit=sys.maxsize).strip()
        return clean, len(whole) > len(clean)

    async def remember(
        self,
        user_id: int,
        guild_id: int | None,
        text: str,
        provenance: Provenance,
        *,
        channel_id: int | None = None,
        place: Place | None = None,
        started_at: datetime | None = None,
    ) -> RememberResult:
        """Store ``text`` as a fact of ``user_id`` said in ``guild_id`` (None: a DM) at ``place``.

        Raises :class:`FactRefused` if sanitizing empties it, or if the user was forgotten or
        cleared since ``started_at`` (when the asking turn began).
        """
        content, truncated = self.clean(text)
        if not content:
            raise FactRefused("the fact is empty after removing unsafe content")
        if place is None and channel_id is not None:
            place = Place(channel_id)
        try:
            result = await self._remember(
                user_id, guild_id, content, truncated, provenance, place, started_at
            )
        finally:
            # After the commit (or failure): a recall that ran meanwhile and found nothing
            # must not be cached as "no facts here".
            self._last_save[user_id] = next(self._save_seq)
        if result.fact is not None:
            await self.vectors.index([result.fact])
        return result

    async def _remember(
        self,
        user_id: int,
        guild_id: int | None,
        content: str,
        truncated: bool,
        provenance: Provenance,
        place: Place | None,
        started_at: datetime | None,
    ) -> RememberResult:
        now = self.clock.now()
        async with self._storage("remembering a fact") as session, session.begin():
            await repo.lock_user(session, user_id)  # a /forget-me takes it too
            await self._refuse_if_wiped(session, user_id, started_at)
            existing = await repo.facts_in_scope(session, user_id, guild_id)
            near_duplicate = next(
                (f for f in reversed(existing) if is_near_duplicate(content, f.content)), None
            )
            events: list[FactEvent] = []
            evicted: list[Fact] = []
            status: Literal["created", "updated"]
            if near_duplicate is not None:
                fact = await repo.update_fact(
                    session,
                    near_duplicate.id,
                    content=content,
                    provenance=provenance,
                    now=now,
                    place=place,
                )
                status, chars_before = "updated", len(near_duplicate.content)
            else:
                evicted = await self._make_room(session, user_id, events)
                fact = await repo.insert_fact(
                    session,
                    user_id=user_id,
                    guild_id=guild_id,
                    content=content,
                    provenance=provenance,
                    now=now,
                    place=place,
                )
                status, chars_before = "created", None
            events.append(_remember_event(user_id, provenance, chars_before, len(content)))
            await repo.add_events(session, events, now)
        if evicted:
            log.info(
                "long-term memory of user %s is full: evicted %s",
                user_id,
                ", ".join(f"#{gone.id}" for gone in evicted),
            )
        return RememberResult(fact.id, status, tuple(gone.id for gone in evicted), truncated, fact)

    async def _refuse_if_wiped(
        self, session: AsyncSession, user_id: int, started_at: datetime | None
    ) -> None:
        """Raise :class:`FactRefused` if the user's facts count as deleted, or were deleted
        since ``started_at`` (a /forget-me or a /memories clear after the turn began)."""
        if self._forget_pending(user_id):
            raise FactRefused(FORGET_PENDING)
        if started_at is None:
            return
        forgotten = (await stm_repo.forget_times(session, [user_id])).get(user_id)
        if forgotten is not None and forgotten >= started_at:  # see writes_refused
            raise FactRefused(FORGOTTEN_MEANWHILE)
        cleared = await repo.last_event_at(session, user_id, EVENT_CLEAR)
        if cleared is not None and cleared >= started_at:
            raise FactRefused(CLEARED_MEANWHILE)

    async def _make_room(
        self, session: AsyncSession, user_id: int, events: list[FactEvent]
    ) -> list[Fact]:
        """Evict the user's least-recalled facts so one more fits; their events go to
        ``events``."""
        total = await repo.count_facts(session, user_id)
        overflow = total - self.limits.max_facts_per_user + 1
        evicted = await repo.evict_least_recalled(session, user_id, overflow)
        events += [
            FactEvent(EVENT_EVICT, user_id, chars_before=len(gone.content), chars_after=0)
            for gone in evicted
        ]
        return evicted

    async def forget(
        self,
        user_id: int,
        *,
        fact_id: int | None = None,
        query: str | None = None,
        guild_id: int | None = None,
        opted_in: bool = False,
        may_show: ChannelFilter | None = None,
        actor_user_id: int | None = None,
        source_message_id: int | None = None,
        origin: str = "model_tool",
    ) -> ForgetResult:
        """Delete the user's fact ``fact_id``, or the visible fact holding every word of ``query``.

        When several facts do, none is deleted: they come back as candidates."""
        if (fact_id is None) == (query is None):
            raise ValueError("give exactly one of fact_id and query")
        now = self.clock.now()
        async with self._storage("forgetting a fact") as session, session.begin():
            target = fact_id
            if target is None:
                # Only facts this channel may see: one said somewhere more private is
                # neither found nor deleted (nor named) from here.
                hits = await _search_visible(
                    session, user_id, guild_id, opted_in, may_show, query or "", now, _FORGET
                )
                if len(hits) != 1:
                    return ForgetResult(candidates=tuple(hit.fact for hit in hits))
                target = hits[0].fact.id
            deleted = await repo.delete_fact(session, user_id, target)
            if deleted is None:
                return ForgetResult()
            await repo.add_events(
                session,
                [
                    FactEvent(
                        EVENT_FORGET,
                        user_id,
                        origin=origin,
                        actor_user_id=actor_user_id if actor_user_id is not None else user_id,
                        message_id=source_message_id,
                        chars_before=len(deleted.content),
                        chars_after=0,
                    )
                ],
                now,
            )
        return ForgetResult((deleted,))

    async def delete(self, user_id: int, fact_id: int) -> bool:
        """``/memories forget``: delete the fact if it is ``user_id``'s own."""
        result = await self.forget(user_id, fact_id=fact_id, origin="user_command")
        return bool(result.deleted)

    async def clear(self, user_id: int) -> int:
        """``/memories clear``: delete every fact of the user; returns how many."""
        now = self.clock.now()
        async with self._storage("clearing long-term memory") as session, session.begin():
            await repo.lock_user(session, user_id)
            deleted = await repo.delete_all(session, user_id)
            # Even when nothing was deleted: its time refuses facts from turns begun before.
            await repo.add_events(
                session,
                [FactEvent(EVENT_CLEAR, user_id, origin="user_command", actor_user_id=user_id)],
                now,
            )
        return deleted

    # ------------------------------------------------------------------ reading

    async def recall(
        self,
        user_id: int,
        guild_id: int | None,
        query_text: str,
        opted_in: bool,
        *,
        may_show: ChannelFilter | None = None,
        channel_ids: Sequence[int] = (),
        own: bool = True,
    ) -> Recalled:
        """The user's own facts visible here and the facts captured in ``channel_ids``
        (in a server) most relevant to ``query_text``, ranked together within the recall
        budget; ``own=False`` skips the user's own (known to have none here)."""
        budget = self.limits.recall_char_budget
        channels = tuple(channel_ids) if guild_id is not None else ()
        if budget <= 0 or (not own and not channels):
            return Recalled([])
        own = own and not self._forget_pending(user_id)
        vector = await self.vectors.of_message(query_text)
        now = self.clock.now()
        words = SearchWords.of(query_text)
        async with self._storage("recalling facts") as session, session.begin():
            hidden = await hidden_fact_ids(session, user_id, guild_id, opted_in, may_show)
            where = Where(user_id, guild_id, opted_in, tuple(hidden), channels, own)
            candidates = Candidates(
                await search_own(session, where, words, now) if own else [],
                await captured_repo.search_channels(
                    session, channels, words, now, RECALL_CANDIDATES
                ),
            )
            if vector is not None and await self.vectors.usable(session):
                candidates = await with_nearest(session, candidates, where, vector, self.vectors)
            known = {hit.fact.id: hit.fact for hit in (*candidates.own, *candidates.captured)}
            missing = [
                i for i in (*candidates.near_own, *candidates.near_captured) if i not in known
            ]
            known |= {fact.id: fact for fact in await repo.facts_by_ids(session, missing)}
            # A captured fact made from the words of someone whose /forget-me waits in the
            # spool counts as deleted already.
            shown = [
                fact
                for fact in ranked(candidates, known)
                if not any(self._forget_pending(user) for user in fact.source_user_ids)
            ]
            chosen = within_budget(shown, budget)
            await repo.bump_recall(session, (fact.id for fact in chosen), now)
            with_facts = await captured_repo.channels_with_facts(session, channels)
        return Recalled(
            [fact.note for fact in chosen],
            tuple(chosen),
            own_facts=bool(candidates.own),
            channels_with_facts=with_facts,
        )

    async def search(
        self,
        user_id: int,
        guild_id: int | None,
        query: str,
        *,
        opted_in: bool,
        limit: int = SEARCH_LIMIT,
        may_show: ChannelFilter | None = None,
    ) -> list[Fact]:
        """The facts visible here holding ``query``'s words, those holding most first."""
        if self._forget_pending(user_id):
            return []
        now = self.clock.now()
        async with self._storage("searching facts") as session, session.begin():
            hits = await _search_visible(
                session, user_id, guild_id, opted_in, may_show, query, now, _found_words(limit)
            )
            await repo.bump_recall(session, (hit.fact.id for hit in hits), now)
        return [hit.fact for hit in hits]

    async def list_facts(
        self,
        user_id: int,
        page: int = 1,
        page_size: int = 5,
        *,
        older_than: FactCursor | None = None,
        newer_than: FactCursor | None = None,
    ) -> FactPage:
        """Page ``page`` of the user's facts, or the page past a cursor (``/memories list``).

        Cursors (:attr:`FactPage.last` / :attr:`FactPage.first`) skip no fact when some were
        deleted meanwhile."""
        page_size = max(1, page_size)
        if self._forget_pending(user_id):  # deleted, as far as the user was told
            return FactPage((), 1, 1, 0, page_size)
        async with self._storage("listing facts") as session:
            total = await repo.count_facts(session, user_id)
            facts: list[Fact] = []
            if older_than is not None:
                facts = await repo.list_facts(
                    session, user_id, limit=page_size, older_than=older_than
                )
                page = sys.maxsize  # nothing older any more: the last page
            elif newer_than is not None:
                facts = await repo.list_facts(
                    session, user_id, limit=page_size, newer_than=newer_than
                )
                if len(facts) < page_size:
                    facts, page = [], 1
            if facts:
                newer = await repo.count_newer(session, user_id, (facts[0].updated_at, facts[0].id))
            else:
                pages = max(1, math.ceil(total / page_size))
                page = min(max(1, page), pages)
                newer = (page - 1) * page_size
                facts = await repo.list_facts(session, user_id, offset=newer, limit=page_size)
        # Numbered by the facts before and after the page, which need not be a multiple
        # of the page size once facts were deleted between two clicks.
        older = max(0, total - newer - len(facts))
        number = math.ceil(newer / page_size) + 1
        pages = number + math.ceil(older / page_size)
        return FactPage(tuple(facts), number, pages, total, page_size, newer)

    async def get(self, user_id: int, fact_id: int) -> Fact | None:
        if self._forget_pending(user_id):
            return None
        async with self._storage("reading a fact") as session:
            return await repo.get_fact(session, user_id, fact_id)

    async def guild_ids(self, user_id: int) -> set[int]:
        """The servers the user's facts were said in (to check their access from a DM)."""
        if self._forget_pending(user_id):
            return set()
        async with self._storage("reading a user's servers") as session:
            return await repo.guild_ids_of_user(session, user_id)

    async def count(self, user_id: int) -> int:
        if self._forget_pending(user_id):
            return 0
        async with self._storage("counting facts") as session:
            return await repo.count_facts(session, user_id)

    async def suggest(self, user_id: int, typed: str, limit: int = 25) -> list[Fact]:
        """Facts whose id starts with ``typed`` (``#`` optional) or whose text holds it."""
        needle = typed.strip().casefold()
        if self._forget_pending(user_id):
            return []
        async with self._storage("suggesting facts") as session:
            facts = await repo.list_facts(
                session, user_id, offset=0, limit=self.limits.max_facts_per_user
            )
        if needle:
            digits = needle.removeprefix("#")
            facts = [
                fact
                for fact in facts
                if (digits.isdigit() and str(fact.id).startswith(digits))
                or needle in fact.content.casefold()
            ]
        return facts[:limit]


async def _search_visible(
    session: AsyncSession,
    user_id: int,
    guild_id: int | None,
    opted_in: bool,
    may_show: ChannelFilter | None,
    query: str,
    now: datetime,
    finding: _Finding,
) -> list[ScoredFact]:
    """:func:`repo.search` for ``query`` among the user's facts in scope that this channel
    may see (one said somewhere more private is hidden: :func:`hidden_fact_ids`)."""
    return await fact_search.search(
        session,
        user_id=user_id,
        guild_id=guild_id,
        opted_in=opted_in,
        words=SearchWords.of(query),
        now=now,
        limit=finding.limit,
        matched_only=finding.matched_only,
        all_words=finding.all_words,
        whole_words=finding.whole_words,
        hidden=await hidden_fact_ids(session, user_id, guild_id, opted_in, may_show),
    )


def _remember_event(
    user_id: int, provenance: Provenance, chars_before: int | None, chars_after: int
) -> FactEvent:
    """The audit event of a fact remembered (``chars_before``: the fact it replaced)."""
    return FactEvent(
        EVENT_REMEMBER,
        user_id,
        origin=provenance.origin,
        actor_user_id=provenance.actor_user_id,
        message_id=provenance.source_message_id,
        chars_before=chars_before,
        chars_after=chars_after,
    )
