"""Long-term memory: per-user facts the user explicitly asked the bot to remember.

The one path through which facts are stored, recalled and deleted (SPEC §6):

* **Storing** (:meth:`LongTermService.remember`): the text is sanitized first
  (``sanitize_value`` with ``max_fact_chars``: secrets redacted, control characters
  dropped, cut to 500 characters); empty after that means refused. A near-duplicate of
  a fact the user made in the same place replaces that fact instead of adding a row
  (:func:`is_near_duplicate`). At most ``max_facts_per_user`` facts are kept: adding
  one more evicts the least-recalled, oldest first. Every change writes an audit event
  (``ltm_remember``, ``ltm_forget``, ``ltm_evict``, ``ltm_clear``) without the text.
* **Recalling** (:meth:`LongTermService.recall_notes`): the user's facts visible here,
  ranked by how many of the message's words they hold, then PostgreSQL full-text rank
  (words of other scripts than Latin also as substrings, for languages written without
  spaces) plus recency, within ``recall_char_budget`` characters. Facts made in a server
  are recalled in that server only; in DMs, DM facts always and server facts only if
  the user opted in to cross-context memory; never in a channel more public than where
  they were said (:class:`ChannelView`). Every recalled fact has its recall counter
  bumped.
* **Forgetting** by words (:meth:`LongTermService.forget`) deletes the one visible fact
  holding every word of the query; several such facts are returned, not guessed at.

Database failures surface as :class:`~bot.memory.storage.MemoryUnavailable`. This module
imports nothing from Discord.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from cachetools import LRUCache
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.config import Settings
from bot.db.repositories import longterm as repo
from bot.db.repositories import stm as stm_repo
from bot.db.repositories.longterm import FactCursor
from bot.memory.clock import Clock, SystemClock
from bot.memory.model import Fact, FactEvent, Place, Provenance, ScoredFact
from bot.memory.sanitize import sanitize_value
from bot.memory.search_words import STOP_WORDS, SearchWords
from bot.memory.spool import DurableSpool
from bot.memory.storage import storage

__all__ = [
    "ChannelFilter",
    "ChannelView",
    "Fact",
    "FactCursor",
    "FactPage",
    "FactRefused",
    "ForgetResult",
    "LongTermService",
    "Place",
    "RememberResult",
    "is_near_duplicate",
    "normalized_tokens",
]

log = logging.getLogger(__name__)

EVENT_REMEMBER = "ltm_remember"
EVENT_FORGET = "ltm_forget"
EVENT_EVICT = "ltm_evict"
EVENT_CLEAR = "ltm_clear"

JACCARD_THRESHOLD = 0.8
SUBJECT_MAX_VALUE_WORDS = 6
RECALL_CANDIDATES = 50
SEARCH_LIMIT = 10
# Users whose last save this process remembers (see LongTermService.saves).
SAVE_COUNTERS = 100_000

_TOKEN = re.compile(r"\w+", re.UNICODE)
# Spelling variants that should not make two statements of one fact look different.
_CANONICAL = {"named": "called", "favourite": "favorite", "colour": "color"}
_CONTRACTIONS = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"\bcan't\b", "can not"),
        (r"\bwon't\b", "will not"),
        (r"n't\b", " not"),
        (r"\bi'm\b", "i am"),
        (r"'re\b", " are"),
        (r"'ve\b", " have"),
        (r"'ll\b", " will"),
        (r"'d\b", " would"),
    )
)
# Words whose presence or absence alone does not make another fact ("The user's cat…"
# is "User's cat…"); anything else that differs does, pronouns and directions included
# ("she works at…" and "he works at…" are about two people).
_NOT_FILLER_TEXT = """
    i me my myself we our ours you your yours yourself he him his she her hers it its
    they them their theirs this that these those who whom
    before after on off over under in out up down
"""
_NOT_FILLER = frozenset(_NOT_FILLER_TEXT.split())
_FILLER = (STOP_WORDS | {"user", "users", "s", "also", "really", "still"}) - _NOT_FILLER
# Words that bind a subject to its value: "<subject> is/are/called <value>".
_BINDERS = frozenset({"is", "are", "am", "was", "were", "called"})
# Subjects that name one value at a time: a new value replaces the old one. Only words
# whose value is one name, number or date; "my job is boring" / "my job is remote" or
# "my address is long" / "my address is in Lyon" describe one thing twice and are two
# facts, so job and address are not here.
_SINGLE_VALUED = frozenset(
    {
        "name",
        "names",
        "nickname",
        "username",
        "handle",
        "pronouns",
        "birthday",
        "birthdate",
        "age",
        "favorite",
        "timezone",
        "tz",
        "email",
        "phone",
    }
)
# Words that start another statement: an extension holding one is more than a longer
# value ("my name is Ann" / "my name is Ann and I like cats").
_CLAUSE_WORDS = _BINDERS | _NOT_FILLER | {"and", "but", "or", "because", "so", "with"}
# What separates two statements in the text between two words ("my age is 34, vegan
# since 2019"): an extension after one is another statement, not a longer value. A dot
# or colon only before a space ("ann@x.com" and "10:30" are one value), a hyphen only
# between spaces ("Ann-Marie" is one name); "UTC+2" and "she/her" are one value.
_STATEMENT_SEPARATOR = re.compile(r"[,;!?()\[\]{}|&\u2014\u2013\u2026\n]|[.:]\s|\s-\s")


FORGOTTEN_MEANWHILE = (
    "the user had everything about them forgotten (/forget-me) while this turn ran; "
    "nothing was saved"
)


FORGET_PENDING = (
    "the user's /forget-me is still being applied (the database was unavailable); "
    "nothing was saved, ask them to try again in a minute"
)


class FactRefused(ValueError):
    """Nothing was stored; ``str()`` says why (safe to show the model or the user)."""


@dataclass(frozen=True, slots=True)
class RememberResult:
    """What :meth:`LongTermService.remember` did: the fact's id, whether it was created
    or replaced a near-duplicate, what was evicted to make room, and whether the text
    had to be shortened."""

    id: int
    status: Literal["created", "updated"]
    evicted_ids: tuple[int, ...] = ()
    truncated: bool = False
    fact: Fact | None = None

    @property
    def created(self) -> bool:
        return self.status == "created"

    @property
    def evicted_id(self) -> int | None:
        return self.evicted_ids[0] if self.evicted_ids else None


@dataclass(frozen=True, slots=True)
class ForgetResult:
    """The facts :meth:`LongTermService.forget` deleted (empty: nothing matched), or,
    when a query fits several facts, those facts (``candidates``; none deleted)."""

    deleted: tuple[Fact, ...] = ()
    candidates: tuple[Fact, ...] = ()

    @property
    def ids(self) -> list[int]:
        return [fact.id for fact in self.deleted]


@dataclass(frozen=True, slots=True)
class FactPage:
    """One page of a user's facts, newest first. ``page`` is 1-based and clamped;
    ``newer`` is how many of the user's facts come before the page."""

    facts: tuple[Fact, ...]
    page: int
    pages: int
    total: int
    page_size: int
    newer: int = 0

    @property
    def has_previous(self) -> bool:
        return self.newer > 0

    @property
    def has_next(self) -> bool:
        return self.newer + len(self.facts) < self.total

    @property
    def first(self) -> FactCursor | None:
        """Where the page starts (for the page before it), None when empty."""
        return (self.facts[0].updated_at, self.facts[0].id) if self.facts else None

    @property
    def last(self) -> FactCursor | None:
        """Where the page ends (for the page after it), None when empty."""
        return (self.facts[-1].updated_at, self.facts[-1].id) if self.facts else None


# ------------------------------------------------------------------ near-duplicates


def normalized_tokens(text: str) -> list[str]:
    """``text`` case-folded, without punctuation or extra whitespace, as words (a few
    spelling variants made canonical: ``named`` → ``called``, ``colour`` → ``color``;
    contractions spelt out: ``I'm`` → ``i am``, ``don't`` → ``do not``)."""
    return _words(text)[0]


def _words(text: str) -> tuple[list[str], list[bool]]:
    """:func:`normalized_tokens`, and for each word whether a statement separator
    (``,`` ``;`` ``. `` ``—``…) stands between it and the word before."""
    folded = text.casefold().replace("\u2019", "'")
    for pattern, replacement in _CONTRACTIONS:
        folded = pattern.sub(replacement, folded)
    words: list[str] = []
    separated: list[bool] = []
    end = 0
    for match in _TOKEN.finditer(folded):
        words.append(_CANONICAL.get(match.group(), match.group()))
        gap = folded[end : match.start()] if end else ""  # none before the first word
        separated.append(_STATEMENT_SEPARATOR.search(gap) is not None)
        end = match.end()
    return words, separated


def _jaccard(a: Sequence[str], b: Sequence[str]) -> float:
    left, right = set(a), set(b)
    return len(left & right) / len(left | right)


def _same_subject_new_value(
    a: Sequence[str], b: Sequence[str], separated_a: Sequence[bool], separated_b: Sequence[bool]
) -> bool:
    prefix = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        prefix += 1
    rest_a, rest_b = a[prefix:], b[prefix:]
    if prefix < 2 or (not rest_a and not rest_b):
        return False
    if max(len(rest_a), len(rest_b)) > SUBJECT_MAX_VALUE_WORDS:
        return False
    shared = a[:prefix]
    binder = next((i for i, word in enumerate(shared) if i > 0 and word in _BINDERS), None)
    if binder is None:
        return False
    subject = shared[:binder]
    names_a_value = "called" in shared[binder:] or any(word in _SINGLE_VALUED for word in subject)
    if rest_a and rest_b:
        return names_a_value
    # One value extends the other ("my timezone is UTC" / "my timezone is UTC+2"): the
    # same single value restated, as long as the shorter one has a value at all and the
    # extra words continue it rather than start another statement - by a clause word
    # ("…and I like cats") or after a separator ("my age is 34, vegan since 2019": the
    # shorter fact would overwrite the diet).
    extra = rest_a or rest_b
    separated = (separated_a if rest_a else separated_b)[prefix:]
    has_value = binder + 1 < prefix
    return (
        names_a_value
        and has_value
        and not any(word in _CLAUSE_WORDS for word in extra)
        and not any(separated)
    )


def is_near_duplicate(new: str, old: str) -> bool:
    """Whether remembering ``new`` should replace ``old`` rather than add a fact.

    Two rules, on :func:`normalized_tokens`:

    1. **Same words:** the word sets overlap by a Jaccard index of at least 0.8 and
       the words that differ are all function words ("My cat is called Miso." / "my
       cat is called miso!", "I am vegan" / "I'm not vegan"). One differing word that
       carries meaning (cat / dog, sister / brother, Tom / Ben, 2 / 3) makes two facts.
    2. **Same subject, new value:** both say "<subject> <is/are/called…> <value>" with
       the same words up to a short value (at most six words each), where the value
       is a name ("my cat is called Miso" / "my cat is named Tofu") or the subject is
       single-valued ("my favourite colour is blue" / "my favorite color is green";
       name, email, timezone, birthday, age, phone, favourite X…). One value may extend
       the other ("my timezone is UTC" / "my timezone is UTC+2") unless the extra words
       start another statement ("…and I like cats", "…, allergic to peanuts"): restating
       part of a fact must not overwrite the rest. "my cat is black" and "my cat is
       fat" are two facts, and so are "my job is boring" and "my job is remote".
    """
    (a, separated_a), (b, separated_b) = _words(new), _words(old)
    if not a or not b:  # no words at all (emoji only): only the same text is a duplicate
        return " ".join(new.casefold().split()) == " ".join(old.casefold().split())
    if _jaccard(a, b) >= JACCARD_THRESHOLD and set(a) ^ set(b) <= _FILLER:
        return True
    return _same_subject_new_value(a, b, separated_a, separated_b)


# ------------------------------------------------------------------ the service


class LongTermService:
    """Stores, recalls, lists and deletes one user's long-term facts."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        settings: Settings,
        clock: Clock | None = None,
        *,
        spool: DurableSpool | None = None,
    ) -> None:
        self._sessions = sessions
        self.settings = settings
        # A /forget-me waiting there deletes every fact of the user when it is replayed.
        self._spool = spool
        self.limits = settings.longterm
        self.clock: Clock = clock or SystemClock()
        # Per user, the number of the last save attempted in this process. One rising
        # sequence for all users: a value read before a save never equals one read after
        # it, even if the user's entry was evicted in between (it reads 0 then).
        self._save_seq = itertools.count(1)
        self._last_save: LRUCache[int, int] = LRUCache(maxsize=SAVE_COUNTERS)

    def saves(self, user_id: int) -> int:
        """A number that changes whenever this process saves (or tries to save) a fact of
        ``user_id``: a caller that read it before a recall and finds it unchanged after
        knows no save in this process finished meanwhile."""
        return self._last_save.get(user_id, 0)

    def _storage(self, what: str) -> contextlib.AbstractAsyncContextManager[AsyncSession]:
        return storage(self._sessions, f"long-term memory: {what}")

    def _forget_pending(self, user_id: int) -> bool:
        """A /forget-me of the user waits in the spool: their facts are still stored
        (the database may answer again before the replayer runs) but, as far as the user
        was told, deleted; they are not recalled, nor saved anew (see _remember)."""
        return self._spool is not None and self._spool.forgetting(user_id)

    # ------------------------------------------------------------------ writing

    def clean(self, text: str) -> tuple[str, bool]:
        """``text`` as it would be stored, and whether it was shortened to fit."""
        limit = self.limits.max_fact_chars
        clean = sanitize_value(text, limit=limit).strip()
        # Compared with the text sanitized without a limit: the cut ends on a grapheme
        # boundary, so one more code point allowed would not show a dropped emoji of
        # several code points (a ZWJ family, a flag) at the limit.
        # (Not len(text): a redaction marker can be longer than the secret it hides.)
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
        """Store ``text`` as a fact of ``user_id`` made in ``guild_id`` (``None``: a DM),
        said in ``channel_id`` (or at ``place``, which also records a thread's parent and
        what else decides who may read it later; see :class:`Place`).
        ``started_at``: when the asking turn started; a /forget-me of the user since then
        (in any process) refuses the fact, which comes from before it.

        Raises :class:`FactRefused` when nothing is left after sanitizing or the user was
        forgotten meanwhile, and :class:`MemoryUnavailable` when the database fails
        (nothing is stored then).
        """
        content, truncated = self.clean(text)
        if not content:
            raise FactRefused("the fact is empty after removing unsafe content")
        if place is None and channel_id is not None:
            place = Place(channel_id)
        try:
            return await self._remember(
                user_id, guild_id, content, truncated, provenance, place, started_at
            )
        finally:
            # After the commit (or failure): a recall that ran meanwhile and found
            # nothing must not be remembered as "no facts here".
            self._last_save[user_id] = next(self._save_seq)

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
            if self._forget_pending(user_id):
                raise FactRefused(FORGET_PENDING)
            if started_at is not None:
                forgotten = (await stm_repo.forget_times(session, [user_id])).get(user_id)
                if forgotten is not None and forgotten >= started_at:  # see writes_refused
                    raise FactRefused(FORGOTTEN_MEANWHILE)
            existing = await repo.facts_in_scope(session, user_id, guild_id)
            twin = next(
                (f for f in reversed(existing) if is_near_duplicate(content, f.content)), None
            )
            events: list[FactEvent] = []
            evicted: list[Fact] = []
            if twin is not None:
                fact = await repo.update_fact(
                    session,
                    twin.id,
                    content=content,
                    provenance=provenance,
                    now=now,
                    place=place,
                )
                status: Literal["created", "updated"] = "updated"
                chars_before: int | None = len(twin.content)
            else:
                total = await repo.count_facts(session, user_id)
                overflow = total - self.limits.max_facts_per_user + 1
                evicted = await repo.evict_least_recalled(session, user_id, overflow)
                events += [
                    FactEvent(EVENT_EVICT, user_id, chars_before=len(gone.content), chars_after=0)
                    for gone in evicted
                ]
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
            events.append(
                FactEvent(
                    EVENT_REMEMBER,
                    user_id,
                    origin=provenance.origin,
                    actor_user_id=provenance.actor_user_id,
                    message_id=provenance.source_message_id,
                    chars_before=chars_before,
                    chars_after=len(content),
                )
            )
            await repo.add_events(session, events, now)
        if evicted:
            log.info(
                "long-term memory of user %s is full: evicted %s",
                user_id,
                ", ".join(f"#{gone.id}" for gone in evicted),
            )
        return RememberResult(fact.id, status, tuple(gone.id for gone in evicted), truncated, fact)

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
        """Delete one of the user's facts: by id (any of theirs), or by ``query``: the
        fact that holds every word of it, among the facts that may be shown here
        (``guild_id`` and ``may_show``, as for recall). Deletes nothing when the id is not
        theirs or no fact holds every word; when several do, deletes none of them and
        returns them as ``candidates`` (at most :data:`SEARCH_LIMIT`), to be told apart
        by id: a query like "sister Anna" must never delete "My sister is called Maria",
        nor guess between two sisters."""
        if (fact_id is None) == (query is None):
            raise ValueError("give exactly one of fact_id and query")
        now = self.clock.now()
        async with self._storage("forgetting a fact") as session, session.begin():
            target = fact_id
            if target is None:
                # Only facts this channel may see: one said somewhere more private is
                # neither found nor deleted (nor named) from here.
                hits = await repo.search(
                    session,
                    user_id=user_id,
                    guild_id=guild_id,
                    opted_in=opted_in,
                    words=SearchWords.of(query or ""),
                    now=now,
                    limit=SEARCH_LIMIT,
                    all_words=True,
                    whole_words=True,
                    hidden=await _hidden(session, user_id, guild_id, opted_in, may_show),
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
            if deleted:
                await repo.add_events(
                    session,
                    [FactEvent(EVENT_CLEAR, user_id, origin="user_command", actor_user_id=user_id)],
                    now,
                )
        return deleted

    # ------------------------------------------------------------------ reading

    async def recall_notes(
        self,
        user_id: int,
        guild_id: int | None,
        query_text: str,
        opted_in: bool,
        *,
        may_show: ChannelFilter | None = None,
    ) -> list[str]:
        """The facts to put in this turn's prompt, most relevant first.

        Facts visible here are ranked by how many words of ``query_text`` (the user's
        message) they hold, then full-text relevance and recency; they are taken in that
        order until the next one would take the total past ``recall_char_budget``
        characters. The recalled facts have their recall counter bumped.
        """
        budget = self.limits.recall_char_budget
        if budget <= 0 or self._forget_pending(user_id):
            return []
        now = self.clock.now()
        async with self._storage("recalling facts") as session, session.begin():
            hits = await repo.search(
                session,
                user_id=user_id,
                guild_id=guild_id,
                opted_in=opted_in,
                words=SearchWords.of(query_text),
                now=now,
                limit=RECALL_CANDIDATES,
                hidden=await _hidden(session, user_id, guild_id, opted_in, may_show),
            )
            chosen = _within_budget(hits, budget)
            await repo.bump_recall(session, (fact.id for fact in chosen), now)
        return [fact.content for fact in chosen]

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
        """The facts visible here that match ``query``'s words, best first (those
        holding the most of its words; the ``recall`` tool). The returned facts have
        their recall counter bumped."""
        if self._forget_pending(user_id):
            return []
        now = self.clock.now()
        async with self._storage("searching facts") as session, session.begin():
            hits = await repo.search(
                session,
                user_id=user_id,
                guild_id=guild_id,
                opted_in=opted_in,
                words=SearchWords.of(query),
                now=now,
                limit=limit,
                matched_only=True,
                whole_words=True,
                hidden=await _hidden(session, user_id, guild_id, opted_in, may_show),
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
        """One page of the user's facts from every place, newest first (``/memories
        list``): page number ``page`` (past the end: the last page), or the page after
        the fact at ``older_than`` / before the one at ``newer_than`` (a page's
        :attr:`FactPage.last` / :attr:`FactPage.first`). Paging by those cursors skips
        no fact when some were deleted meanwhile. Past the end, the last page; short of
        a whole page before the first shown, the first page."""
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
        """Facts for an autocomplete: those whose id starts with ``typed`` (digits, an
        optional ``#``) or whose text contains it, newest first."""
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


# Whether what was said in a given channel may be shown where the turn happens: never in
# a channel more public than where it was said (the same rule as other channels' STM).
ChannelFilter = Callable[[int], bool]


class ChannelView(ABC):
    """A :data:`ChannelFilter` from a caller that knows the places (the chat cog knows
    Discord's channels and permissions), which can also judge a long-term fact by all
    its :class:`Place` recorded: a fact said in a thread Discord no longer shows (an
    archived thread is not cached) or in a channel since deleted.

    ``here`` is where the turn happens, recorded with the facts saved in it."""

    here: Place | None = None

    @abstractmethod
    def __call__(self, channel_id: int, /) -> bool:
        """Whether what was said in ``channel_id`` may be shown here."""

    def shows(self, guild_id: int | None, place: Place) -> bool:
        """Whether a fact said at ``place`` in ``guild_id`` may be shown here (by
        default, as its channel)."""
        return self(place.channel_id)


def may_show_place(may_show: ChannelFilter | None, guild_id: int | None, place: Place) -> bool:
    """``may_show``'s verdict on a fact said at ``place`` (anything, without a filter)."""
    if may_show is None:
        return True
    if isinstance(may_show, ChannelView):
        return may_show.shows(guild_id, place)
    return may_show(place.channel_id)


def visible_here(
    fact: Fact, guild_id: int | None, *, opted_in: bool, may_show: ChannelFilter | None
) -> bool:
    """Whether ``fact`` may be shown where a turn happens (the recall rules: a server's
    facts in that server, DM facts in DMs, a server's in DMs only when opted in; never
    from a channel more private than this one)."""
    if guild_id is not None and fact.guild_id != guild_id:
        return False
    if guild_id is None and fact.guild_id is not None and not opted_in:
        return False
    place = fact.place
    return place is None or may_show_place(may_show, fact.guild_id, place)


async def _hidden(
    session: AsyncSession,
    user_id: int,
    guild_id: int | None,
    opted_in: bool,
    may_show: ChannelFilter | None,
) -> list[int]:
    """The ids of the user's facts in scope that ``may_show`` keeps from this channel.
    Found before searching, so the search's limit counts only facts that may be shown
    (ten private matches must not hide a visible one); each place is judged once."""
    if may_show is None:
        return []
    verdicts: dict[tuple[int | None, Place], bool] = {}
    hidden: list[int] = []
    for fact_id, fact_guild, place in await repo.fact_places(
        session, user_id, guild_id, opted_in=opted_in
    ):
        shown = verdicts.get((fact_guild, place))
        if shown is None:
            shown = verdicts[(fact_guild, place)] = may_show_place(may_show, fact_guild, place)
        if not shown:
            hidden.append(fact_id)
    return hidden


def _within_budget(hits: Sequence[ScoredFact], budget: int) -> list[Fact]:
    """The most relevant facts that fit: one too long for what is left is passed over,
    and a shorter, less relevant one may still fit after it."""
    chosen: list[Fact] = []
    used = 0
    for hit in hits:
        size = len(hit.fact.content)
        if used + size > budget:
            continue
        chosen.append(hit.fact)
        used += size
    return chosen
