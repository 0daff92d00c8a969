"""The memory service: the one path through which STM is read, written and deleted.

Write order (SPEC §3): sanitize → mutate the live cache entries (server and user keys)
→ persist both rows and their audit events in one transaction → the turn is marked so
at most one update succeeds per turn. A write that cannot be persisted is never
reported as saved: with a spool it is queued durably ("saved, pending sync"), without
one the cache is rolled back and the write is rejected.

Deletion cannot be undone by a turn that was already running: every channel has an
epoch, bumped by a clear, and a write whose turn started in an older epoch is refused.
Writes and clears of one channel are serialised by a per-channel lock, so a clear never
interleaves with a write's database round trip.

What a write may hold and how it changes an entry is ``change``; writes share
transactions through ``commit``; what the database refuses waits in ``spool``; the
deletions themselves are ``deletion``; guild settings and opt-ins are ``guild_settings``;
what other processes changed meanwhile is tracked by ``coherence``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any, ClassVar, Literal, TypeVar

from cachetools import LRUCache, TTLCache
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.config import Settings
from bot.db.notify import Notice, send_notice, stm_notice
from bot.db.repositories import stm as stm_repo
from bot.db.repositories.stm import EventRecord
from bot.db.storage import (
    DB_TIMEOUT_SECONDS,
    MemoryUnavailable,
    database_answered,
    database_failed,
    open_session,
    outage_number,
    storage,
)
from bot.memory.cache import StmCache
from bot.memory.change import (
    REASON_ALL_EMPTY,
    REASON_CATEGORIES_CHANGED,
    WriteResult,
    apply_change,
    keeps_a_value,
    rejected,
    sanitized_change,
    write_shape,
)
from bot.memory.coherence import FORGET_NOTICED, STALE_READ_RETRIES, NoticeLedger
from bot.memory.commit import ClearedElsewhere, GroupCommit, StaleWrite
from bot.memory.deletion import (
    ClearReceipt,
    ForgetReceipt,
    delete_channel_rows,
    delete_user_rows,
)
from bot.memory.gather import count_new_messages, messages_after_marker
from bot.memory.guild_settings import GuildSettings
from bot.memory.prompt import OtherChannel, PromptInput
from bot.memory.singleflight import KeyedLocks, SingleFlight
from bot.memory.spool import DurableSpool, PendingChanges
from bot.memory.spool_replay import carried_row_wiped
from bot.memory.turn import (
    REASON_ALREADY_UPDATED,
    REASON_CHANGED,
    REASON_CLEARED,
    REASON_DISABLED,
    REASON_STORAGE,
    TurnState,
)
from bot.memory.window import WindowCache, answering
from bot.vocabulary.clock import Clock, SystemClock
from bot.vocabulary.model import (
    AuditEvent,
    Category,
    GuildConfig,
    Marker,
    Provenance,
    RawMessage,
    ScopeKey,
    StmEntry,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# "Other channels" (and opted-in DM recall) after a restart: a guild's (a user's) memories
# updated within the TTL are loaded once, the most recent first, up to this many. Which
# of them may be shown is judged after (it depends on the channel asking), so the limit
# is generous: the rows of channels more private than the one asking (tickets, staff
# channels, private threads) must not crowd out the ones it may show.
OTHER_CHANNEL_HYDRATE_LIMIT = 200
# Deaf with the database down: failed reads of the wipe times further apart than this
# are not taken for one outage (the database may have answered others in between).
WIPES_UNREAD_GAP_SECONDS = 30.0
# How long a /forget-me heard from another process is remembered for writes in flight
# (they end within DB_TIMEOUT_SECONDS, queued ones a little later).
FORGOTTEN_ELSEWHERE_SECONDS = 300.0
# How long a channel's clear time is kept (``stm_clears``): longer than any turn, and
# long enough to bound a back-fill whose /refresh marker was deleted.
CLEAR_RECORD_KEPT = timedelta(days=30)
# How long a /forget-me is kept (``stm_forgets``, a hash of the id): longer than any turn,
# and as long as a spool may wait for its replay (a process down for weeks is not).
FORGET_RECORD_KEPT = CLEAR_RECORD_KEPT


class _NotTried(Exception):
    """Not tried: earlier operations wait in the spool and this one must follow them, or
    the database is known to be down (see :meth:`MemoryService._spool_at_once`)."""


@dataclass(frozen=True, slots=True)
class PreparedTurn:
    turn: TurnState
    prompt: PromptInput
    entry: StmEntry


# Returns the label to show for another channel's memory, or None when it may not be
# shown here (more private than the current channel, or no longer visible).
LabelFor = Callable[[StmEntry], str | None]


class MemoryService:
    """Owns the STM cache, raw windows, guild configuration cache and the write path."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        settings: Settings,
        *,
        clock: Clock | None = None,
        spool: DurableSpool | None = None,
        notify: bool = True,
    ) -> None:
        stm = settings.stm
        # Identifies this process's notices, so it ignores its own echoes.
        self.instance_id = uuid.uuid4().hex[:12]
        self._notify = notify
        self._sessions = sessions
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.spool = spool
        if spool is not None:
            spool.notice_origin = self.instance_id  # its replays are this process's own
        self.cache = StmCache(
            maxsize=stm.cache_max_entries,
            ttl_summary_s=stm.ttl_summary_hours * 3600,
            ttl_empty_s=stm.ttl_empty_hours * 3600,
            clock=self.clock,
        )
        self.windows = WindowCache(per_channel=stm.raw_window)
        self.defaults = GuildConfig(
            guild_id=None,
            stm_enabled=stm.enabled,
            refresh_cadence=stm.refresh_cadence,
            render_mode=stm.render_mode,
            crude_message_count=stm.crude_message_count,
        )
        self._guilds_hydrated: LRUCache[int, bool] = LRUCache(10_000)
        self._users_hydrated: LRUCache[int, bool] = LRUCache(50_000)
        self._entry_flight: SingleFlight[ScopeKey, StmEntry] = SingleFlight()
        self._misc_flight: SingleFlight[tuple[str, int], None] = SingleFlight()
        self._epochs: dict[int, int] = {}
        # What changed since a read began (a read overtaken by a change is used once,
        # never cached), and whether notices are heard at all (see listener_lost).
        self._ledger = NoticeLedger(lambda: self._sessions)
        self._guilds = GuildSettings(
            lambda: self._sessions, self.defaults, self._ledger, self._announce, self.instance_id
        )
        # Deaf, and the wipe records could not be read since (see recent_messages): when
        # the first read failed.
        self._wipes_unread_since: datetime | None = None
        self._wipes_unread_outage: int | None = None
        self._wipes_unread_last: datetime | None = None
        # Keys whose write is on its way to the database (held under the channel lock, or
        # the write of a cancelled turn, until it is settled): how many writes each.
        self._writing: Counter[ScopeKey] = Counter()
        # Channels whose clear is on its way to the database: never hydrate them back.
        self._tombstones: set[int] = set()
        # Users another process forgot (by notice), and when: for writes still in flight.
        self._forgotten_elsewhere: TTLCache[int, datetime] = TTLCache(
            maxsize=10_000, ttl=FORGOTTEN_ELSEWHERE_SECONDS
        )
        self._locks: KeyedLocks[int] = KeyedLocks()
        # Entries whose turn count changed since save_turn_counts last stored them.
        self._counts_unsaved: dict[ScopeKey, StmEntry] = {}
        self._commits = GroupCommit(
            lambda: self._sessions,
            lambda session, entries: self._announce(session, stm_notice(self.instance_id, entries)),
        )

    # ----------------------------------------------------------------- reading

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]:
        """The session factory (for services that share this database, e.g. long-term)."""
        return self._sessions

    def epoch(self, channel_id: int) -> int:
        return self._epochs.get(channel_id, 0)

    def _storage(self, what: str) -> contextlib.AbstractAsyncContextManager[AsyncSession]:
        return storage(self._sessions, what)

    def _lock(self, channel_id: int) -> asyncio.Lock:
        return self._locks(channel_id)

    async def guild_config(self, guild_id: int | None) -> GuildConfig:
        """The guild's STM configuration (cached; DMs use the operator's defaults)."""
        return await self._guilds.config(guild_id)

    def cached_guild_config(self, guild_id: int) -> GuildConfig | None:
        """The guild's configuration if it is cached (no database access)."""
        return self._guilds.cached(guild_id)

    def invalidate_guild(self, guild_id: int) -> None:
        """Drop the guild's cached configuration: the next use reads it."""
        self._guilds.invalidate(guild_id)

    async def entry(self, key: ScopeKey, *, parent_channel_id: int | None = None) -> StmEntry:
        """The live entry for ``key``: from the cache, else hydrated from its row
        (single-flight), else a new empty one. Never returns an expired memory."""
        cached = self.cache.get(key)
        if cached is not None and not self._ledger.deaf:
            return cached  # the warm path, several times a turn: as in guild_config
        return await self._ledger.cached_or_read(
            cached,
            lambda: self._entry_flight.run(key, lambda: self._hydrate(key, parent_channel_id)),
        )

    async def _hydrate(self, key: ScopeKey, parent_channel_id: int | None) -> StmEntry:
        epoch = self.epoch(key.channel_id)
        writing_at_start = key in self._writing
        row: StmEntry | None = None
        # False while the last read was overtaken by a notice (or a /forget-me) about it:
        # then the result is used once and not cached, so the next use reads again.
        settled = True
        unavailable: MemoryUnavailable | None = None
        wiped_copy: datetime | None = None
        if (
            self.spool is not None
            and self.spool.latest(key) is not None
            and self._ledger.database_down()
        ):
            # What waits in the spool is what a read would fall back on: no need to wait.
            unavailable = MemoryUnavailable("memory storage is unavailable right now")
        elif not self._wiped(key.channel_id):
            try:
                for _ in range(STALE_READ_RETRIES):
                    seq = self._ledger.seq
                    async with self._storage("hydrating an STM entry") as session:
                        row = await stm_repo.load_entry(session, key)
                        wiped_copy = await self._spooled_copy_wiped(session, key, row)
                    settled = not self._ledger.since(seq, key)
                    if settled:
                        break
            except MemoryUnavailable as exc:
                unavailable = exc
            else:
                if wiped_copy is not None and self.spool is not None:
                    # As a notice of that wipe would (see _on_clear): shown empty from now
                    # on, so the next write is built on an empty memory, not on the copy.
                    self.spool.blank_copy(key, wiped_copy)
                    if key not in self._writing:
                        self.cache.pop(key)
        # Looked up after the read: a spooled write or deletion may have landed meanwhile.
        spooled = self.spool.latest(key) if self.spool is not None else None
        if unavailable is not None and spooled is None:
            raise unavailable
        if spooled is not None and (row is None or spooled.version >= row.version):
            # Not replayed yet and newer than its row (unless another process has written
            # since): hydrating the row would let the next write reuse a version number
            # and the replay lose to it.
            row = replace(spooled, categories=dict(spooled.categories))
        if self.epoch(key.channel_id) != epoch:
            # Cleared (or a /forget-me of someone here) while we were reading: what we
            # read may be gone. Shown empty this once, not cached: a forget may have left
            # the row (not theirs), and the next use reads what is there now.
            row = None
            settled = False
        entry = self._fresh(key, parent_channel_id)
        if row is not None:
            if self.cache.is_expired(row) or self._withheld(row):
                # Keep only the version (and which row) so the next write still
                # supersedes the row.
                entry.version, entry.created_at = row.version, row.created_at
            else:
                entry = row
        existing = self.cache.get(key)
        if existing is not None and (
            not self._ledger.deaf
            or key in self._writing
            or (
                row is not None
                and existing.version == entry.version
                and existing.updated_at == entry.updated_at
            )
        ):  # a write landed while we were loading (or, deaf, the row is what we hold)
            return existing
        # A write of this process to the key is on its way (its entry was evicted
        # meanwhile): the row read may predate it, so it is used once, not cached.
        if settled and key not in self._writing and not writing_at_start:
            self.cache.put(entry)
        return entry

    async def _spooled_copy_wiped(
        self, session: AsyncSession, key: ScopeKey, row: StmEntry | None
    ) -> datetime | None:
        """When the spooled state of ``key`` carries the text of a stored row that a
        /refresh or /forget-me wiped since (``row``: what the database holds now), that
        row's creation time. A process that missed the wipe's notice (its listener lost,
        or the notice late) learns of it here, as the spool's replay would (it skips
        every write built on that state): reading only when such a copy waits there and
        its row is gone, never on the warm path."""
        carried = self.spool.carried_row(key) if self.spool is not None else None
        if carried is None:
            return None
        created_at, users = carried
        if await carried_row_wiped(session, key, row, created_at, users):
            return created_at
        return None

    def _wiped(self, channel_id: int) -> bool:
        """A clear of the channel has not reached the database yet (it is being sent, or
        waits in the spool, also from before a restart): its rows are as good as gone."""
        return channel_id in self._tombstones or (
            self.spool is not None and self.spool.clearing(channel_id)
        )

    def _withheld(self, row: StmEntry) -> bool:
        """The row holds something of a user whose /forget-me waits in the spool."""
        return self.spool is not None and self.spool.withholds(row)

    def _fresh(self, key: ScopeKey, parent_channel_id: int | None) -> StmEntry:
        return StmEntry(key=key, updated_at=self.clock.now(), parent_channel_id=parent_channel_id)

    async def _hydrate_guild_once(self, guild_id: int) -> None:
        """Load a guild's recent channel memories once, for "other channels" after a
        restart (no bulk pre-load at start-up; one query per guild, on first use)."""
        await self._hydrate_once(
            "guild", guild_id, self._guilds_hydrated, stm_repo.recent_server_entries
        )

    async def load_user_memories(self, user_id: int) -> list[StmEntry]:
        """The user's recent server memories (loaded once, then from the cache), for
        their opted-in DMs."""
        await self._hydrate_user_once(user_id)
        return [e for e in self.cache.entries_of_user(user_id) if e.key.guild_id]

    async def _hydrate_user_once(self, user_id: int) -> None:
        """Likewise a user's recent server memories, for their opted-in DMs."""
        await self._hydrate_once(
            "user", user_id, self._users_hydrated, stm_repo.recent_user_entries
        )

    async def _hydrate_once(
        self,
        what: str,
        owner_id: int,
        done: LRUCache[int, bool],
        query: Callable[..., Awaitable[list[StmEntry]]],
    ) -> None:
        if owner_id in done:
            return

        async def load() -> None:
            since = self.clock.now() - timedelta(hours=self.settings.stm.ttl_summary_hours)
            epochs, seq = dict(self._epochs), self._ledger.seq
            async with self._storage(f"loading a {what}'s memories") as session:
                rows = await query(
                    session, owner_id, since=since, limit=OTHER_CHANNEL_HYDRATE_LIMIT
                )
            # A channel cleared while we were reading: what we read of it is gone; a row
            # changed meanwhile is stale (the next use loads the guild or user again).
            fresh = [
                r
                for r in rows
                if self.epoch(r.key.channel_id) == epochs.get(r.key.channel_id, 0)
                and not self._ledger.since(seq, r.key)
            ]
            self._adopt(fresh)
            if len(fresh) == len(rows) and not self._ledger.since(seq):
                done[owner_id] = True

        await self._misc_flight.run((what, owner_id), load)

    def _adopt(self, rows: Sequence[StmEntry]) -> None:
        for row in sorted(rows, key=lambda r: r.updated_at):
            if (
                row.key in self.cache
                or row.key in self._writing  # may predate the write on its way
                or self._wiped(row.key.channel_id)
                or self._withheld(row)
            ):
                continue
            spooled = self.spool.latest(row.key) if self.spool is not None else None
            if spooled is not None and spooled.version >= row.version:
                # As in _hydrate: the row is older than what waits in the spool, and a
                # write built on it would lose to the replay.
                row = replace(spooled, categories=dict(spooled.categories))
            if not self.cache.is_expired(row):
                self.cache.put(row)

    async def cross_context_opt_in(self, user_id: int) -> bool:
        """Whether the user lets their DMs show their server memories (cached)."""
        return await self._guilds.opt_in(user_id)

    async def set_cross_context_opt_in(self, user_id: int, enabled: bool) -> None:
        await self._guilds.set_opt_in(user_id, enabled)

    # ------------------------------------------------------------------- turns

    async def prepare_turn(
        self,
        *,
        channel_id: int,
        user_id: int,
        guild_id: int | None,
        bot_user_id: int,
        parent_channel_id: int | None = None,
        source_message_id: int | None = None,
        explicit_long_term_intent: bool = False,
        provider_allows_stm: bool = True,
        model: str | None = None,
        label_for: LabelFor | None = None,
        long_term_notes: Sequence[str] = (),
        started_at: datetime | None = None,
    ) -> PreparedTurn:
        """Everything a turn needs before calling the model. On a warm cache this makes
        no database query. ``started_at``: when the turn began reading what its prompt
        shows, if before this call (its long-term facts): a /forget-me since then refuses
        its writes."""
        # With the database down the bot still answers, from whatever is cached, and
        # refuses STM writes this turn: it could not know the stored version to supersede.
        storage_ok = True
        try:
            config = await self.guild_config(guild_id)
        except MemoryUnavailable:
            config, storage_ok = replace(self.defaults, guild_id=guild_id), False
        turn = TurnState(
            channel_id=channel_id,
            user_id=user_id,
            guild_id=guild_id,
            config=config,
            epoch=self.epoch(channel_id),
            started_at=started_at or self.clock.now(),
            parent_channel_id=parent_channel_id,
            source_message_id=source_message_id,
            explicit_long_term_intent=explicit_long_term_intent,
            provider_allows_stm=provider_allows_stm,
            model=model,
        )
        try:
            channel_key = turn.channel_key
            entry = await self.entry(channel_key, parent_channel_id=parent_channel_id)
            # Warm every key a write would touch now, so an outage later in the turn
            # cannot leave a write without its current version.
            for key in turn.write_keys:
                if key != channel_key:
                    await self.entry(key, parent_channel_id=parent_channel_id)
        except MemoryUnavailable:
            entry, storage_ok = self._fresh(turn.channel_key, parent_channel_id), False
        turn.storage_available = storage_ok
        window = answering(
            await self.recent_messages(
                channel_id, source_message_id=source_message_id, database_up=storage_ok
            ),
            source_message_id,
            bot_user_id,
        )
        if window:
            turn.marker = Marker.of(window[-1])
        turn.marker_at_start = entry.marker
        turn.read_authors.update({m.author_id for m in window if not m.is_bot})
        turn.memory_contributors.update(entry.contributor_ids)
        try:
            others = await self._other_channels(turn, label_for) if label_for else []
        except MemoryUnavailable:
            others = []
        stm = self.settings.stm
        nudge = None
        if turn.stm_block_reason() is None and entry.turns_since_refresh >= config.refresh_cadence:
            nudge = count_new_messages(window, entry.marker)
        prompt = PromptInput(
            now=self.clock.now(),
            config=config,
            bot_user_id=bot_user_id,
            entry=entry,
            window=window,
            others=others,
            raw_window=stm.raw_window,
            min_raw_tail=stm.min_raw_tail,
            max_others=stm.other_channels,
            nudge_new_messages=nudge,
            long_term_notes=long_term_notes,
            is_dm=guild_id is None,
            stm_tool_offered=turn.stm_block_reason() is None,
        )
        return PreparedTurn(turn, prompt, entry)

    async def _other_channels(self, turn: TurnState, label_for: LabelFor) -> list[OtherChannel]:
        limit = self.settings.stm.other_channels
        if limit == 0 or self._ledger.deaf:
            # Deaf, a memory wiped or forgotten elsewhere could still be cached here: other
            # channels are not shown until the listener is back.
            return []
        candidates: Iterable[StmEntry]
        if turn.guild_id is not None:
            await self._hydrate_guild_once(turn.guild_id)
            candidates = self.cache.server_entries_of_guild(turn.guild_id)
        else:
            if not await self.cross_context_opt_in(turn.user_id):
                return []
            await self._hydrate_user_once(turn.user_id)
            candidates = sorted(
                (e for e in self.cache.entries_of_user(turn.user_id) if e.key.guild_id),
                key=lambda e: e.updated_at,
                reverse=True,
            )
        others: list[OtherChannel] = []
        for candidate in candidates:
            if candidate.key.channel_id == turn.channel_id or not candidate.has_content:
                continue
            label = label_for(candidate)
            if label is None:
                continue
            config = turn.config
            if candidate.key.guild_id != turn.guild_id:  # a DM shows servers' memories
                config = await self.guild_config(candidate.key.guild_id)
            other = OtherChannel(
                label, candidate, self.windows.get(candidate.key.channel_id), config
            )
            others.append(other)
            # Whose words the prompt shows (gathered on a write only: turns are many).
            turn.shown.append((candidate, other.shown_raw(config, distilled=True)))
            if len(others) == limit:
                break
        others.sort(key=lambda o: o.entry.updated_at if o.entry else self.clock.now(), reverse=True)
        return others

    def record_bot_turn(self, turn: TurnState) -> None:
        """Count a finished bot turn toward the cadence: in the cache now, in the row at
        the next :meth:`save_turn_counts` (so a restart, or the entry's eviction, forgets
        at most the turns since that save)."""
        if turn.stm_updated:
            return
        entry = self.cache.get(turn.channel_key)
        if entry is not None and self.epoch(turn.channel_id) == turn.epoch:
            entry.turns_since_refresh += 1
            if entry.version > 0:  # a row exists to keep it (a new entry has none yet)
                self._counts_unsaved[entry.key] = entry

    async def save_turn_counts(self) -> int:
        """Store the turn counts changed since the last call in their rows (one
        statement); return how many rows took theirs. A row written since keeps its own
        count (see ``stm_repo.save_turn_counts``). If the database fails, the counts are
        kept for the next call."""
        entries = list(self._counts_unsaved.values())
        if not entries:
            return 0
        self._counts_unsaved.clear()
        try:
            async with self._storage("saving turn counts") as session, session.begin():
                return await stm_repo.save_turn_counts(session, entries)
        except MemoryUnavailable:
            for entry in entries:  # unless counted again meanwhile (the same object)
                self._counts_unsaved.setdefault(entry.key, entry)
            raise

    def observe_message(self, channel_id: int, message: RawMessage) -> None:
        self.windows.append(channel_id, message)

    async def recent_messages(
        self,
        channel_id: int,
        *,
        source_message_id: int | None = None,
        database_up: bool = True,
    ) -> Sequence[RawMessage]:
        """The channel's raw window, as a prompt or a summary may use it.

        Notices keep it current. Deaf (see :meth:`listener_lost`), a ``/refresh`` or a
        ``/forget-me`` made in another process went unheard: the window is checked
        against the stored clear and forget times (one query) and what they wiped leaves
        it. If they cannot be read (the database is down too; ``database_up=False``: the
        caller already found it down), only the messages sent since the first failed
        read are used (a wipe must reach the database, so none can cover them) and the
        message being answered (``source_message_id``; without it there is no turn)."""
        window = self.windows.get(channel_id)
        if not self._ledger.deaf or not window:
            return window
        began = self.clock.now()
        try:
            if not database_up or self._ledger.database_down():
                raise MemoryUnavailable("memory storage is unavailable right now")
            wiped = await self.wiped_history(channel_id, window)
        except MemoryUnavailable:
            # Since when the wipe times could not be read: the start of this outage, as
            # far as this process saw it. Only one outage seen without a break counts:
            # the database answering in between (a new outage since), or a long silence
            # in which it may have, could have taken a wipe of older messages.
            outage = outage_number(self._sessions)
            last = self._wipes_unread_last
            if (
                outage is None
                or self._wipes_unread_since is None
                or self._wipes_unread_outage != outage
                or last is None
                or (began - last).total_seconds() > WIPES_UNREAD_GAP_SECONDS
            ):
                self._wipes_unread_since, self._wipes_unread_outage = began, outage
            self._wipes_unread_last = began
            since = self._wipes_unread_since
            return tuple(
                m for m in window if m.created_at > since or m.message_id == source_message_id
            )
        self._wipes_unread_since = None
        for message in window:
            if wiped(message):
                self.windows.delete(channel_id, message.message_id)
        # Messages that arrived during the query are checked too (by the clear time).
        return tuple(m for m in self.windows.get(channel_id) if not wiped(m))

    # ------------------------------------------------------------------ writing

    async def update_stm(
        self,
        turn: TurnState,
        *,
        summary: str | None = None,
        categories: Mapping[str, str] | None = None,
        origin: Literal["model_tool", "summarizer", "admin", "user_command", "import"] = (
            "model_tool"
        ),
        marker: Marker | None = None,
        expected_version: int | None = None,
        detail: str | None = None,
    ) -> WriteResult:
        """Apply one STM update for ``turn`` (guards, sanitize, merge, write through).
        ``expected_version``: refuse unless the memory is still at that version (what the
        caller built the update on, e.g. the summarizer, or an admin's edit form).
        ``detail``: the provenance's detail (the command; by default the model's name for
        the model's and the summarizer's writes)."""
        if origin == "model_tool":
            reason = turn.stm_block_reason()
            if reason is not None:
                return rejected(reason)
        config = await self._current_config(turn, origin)
        if isinstance(config, WriteResult):
            return config
        change = sanitized_change(config, summary, categories)
        if isinstance(change, WriteResult):
            return change
        new_summary, new_categories = change
        if detail is None and origin in ("model_tool", "summarizer"):
            detail = turn.model
        provenance = Provenance(
            origin,
            detail,
            turn.user_id,
            turn.source_message_id,
        )
        async with self._lock(turn.channel_id):
            try:
                entries = [
                    await self.entry(key, parent_channel_id=turn.parent_channel_id)
                    for key in turn.write_keys
                ]
            except MemoryUnavailable:
                return rejected(REASON_STORAGE)
            # Again: the settings may have changed while this write waited for the lock.
            config = await self._current_config(turn, origin)
            if isinstance(config, WriteResult):
                return config
            # Checked after the awaits above, with no await until the cache is mutated.
            if self.epoch(turn.channel_id) != turn.epoch:
                return rejected(REASON_CLEARED)
            if (
                turn.history_trimmed
                and marker is None
                and entries[0].marker != turn.marker_at_start
            ):
                # Built on part of what the marker, moved meanwhile, now claims is covered.
                return rejected(REASON_CHANGED)
            if origin == "model_tool" and turn.stm_updated:
                return rejected(REASON_ALREADY_UPDATED)
            if expected_version is not None and entries[0].version != expected_version:
                return rejected(REASON_CHANGED)
            if new_categories is not None and not keeps_a_value(entries[0], new_categories, config):
                return rejected(REASON_ALL_EMPTY)
            # Every key of one write holds the same text, so every row carries the whole
            # conversation's contributors: /forget-me must find the user's words in other
            # users' copies too, not only in the channel's row.
            contributors = self._contributors(turn, entries[0], marker or turn.marker)
            contributors |= turn.shown_contributors() | turn.read_authors
            contributors |= turn.memory_contributors
            for entry in entries:
                contributors |= set(entry.contributor_ids)
            before = [replace(e, categories=dict(e.categories)) for e in entries]
            now = self.clock.now()
            for entry in entries:
                apply_change(
                    entry,
                    summary=new_summary,
                    categories=new_categories,
                    config=config,
                    marker=marker or turn.marker,
                    contributors=contributors,
                    provenance=provenance,
                    now=now,
                )
                self.cache.put(entry)  # re-insert: the TTL restarts from this update
            events = [
                EventRecord(
                    "update",
                    key=after.key,
                    origin=origin,
                    actor_user_id=turn.user_id,
                    message_id=turn.source_message_id,
                    chars_before=old.chars(),
                    chars_after=after.chars(),
                )
                for old, after in zip(before, entries, strict=True)
            ]
            keys = [e.key for e in entries]
            self._writing.update(keys)
            try:
                result = await self._persist(entries, events, before, turn)
            finally:
                self._writing -= Counter(keys)
            if result.ok and origin == "model_tool":
                turn.stm_updated = True
            return result

    async def _current_config(self, turn: TurnState, origin: str) -> GuildConfig | WriteResult:
        """The guild's settings as they are now (cached: no query), or why a write must
        be refused: an admin changed them (in any process) since the turn began, or while
        the summarizer waited on its model. Memory turned off refuses every write but an
        admin's own edit; other categories refuse a write shaped for the old ones (it would
        wipe what was stored under the new ones: a summary, or other categories)."""
        try:
            config = await self.guild_config(turn.guild_id)
        except MemoryUnavailable:
            return rejected(REASON_STORAGE)
        if origin != "admin" and not config.stm_enabled:
            return rejected(REASON_DISABLED)
        if write_shape(config) != write_shape(turn.config):
            return rejected(REASON_CATEGORIES_CHANGED)
        return config

    def _contributors(
        self, turn: TurnState, channel_entry: StmEntry, marker: Marker | None
    ) -> set[int]:
        """Whose messages this memory is derived from: the triggering user and every
        human author of the messages it newly covers (for ``/forget-me``)."""
        contributors = {turn.user_id}
        window = self.windows.get(turn.channel_id)
        for message in messages_after_marker(window, channel_entry.marker):
            if marker is not None and message.message_id > marker.message_id:
                break
            if not message.is_bot:
                contributors.add(message.author_id)
        return contributors

    def _spool_first(self) -> bool:
        """Earlier operations still wait in the spool: a new one must queue behind them,
        or it could be overtaken (a wiped memory replayed over, an older version)."""
        return self.spool is not None and self.spool.pending > 0

    def _spool_at_once(self) -> bool:
        """An operation goes to the spool without trying the database: it must queue
        behind earlier ones, or the database is known to be down (see ``storage``) and
        it would only wait for its timeout to land in the spool anyway."""
        return self._spool_first() or (self.spool is not None and self._ledger.database_down())

    @staticmethod
    def _deletion_failed(
        sessions: async_sessionmaker[AsyncSession], what: str, exc: Exception
    ) -> None:
        """A deletion was not done now (it is spooled, or refused): a failure of the
        database (``sessions``, the one it was tried on) is reported to its breaker (an
        outage is logged once, not per call)."""
        if not isinstance(exc, _NotTried):
            database_failed(sessions, what, exc)
        log.info("%s deferred: %s", what, exc.__class__.__name__)

    async def _persist(
        self,
        entries: Sequence[StmEntry],
        events: Sequence[EventRecord],
        before: Sequence[StmEntry],
        turn: TurnState,
    ) -> WriteResult:
        """Write ``entries`` (built on ``before``) for ``turn``: to the database, or to
        the spool when it cannot take them (see _spool_write)."""
        if self._spool_at_once():
            return self._spool_write(entries, events, before, turn)
        try:
            outcome = await self._commits.write(
                entries,
                events,
                turn.started_at,
                abandoned=partial(self._abandoned_write, entries),
            )
        except asyncio.CancelledError:
            # The write is still on its way and may yet commit: until it is settled its
            # keys stay "being written" (a read meanwhile must not cache the row it
            # replaces); _abandoned_write lets go of them.
            self._writing.update(entry.key for entry in entries)
            raise
        if outcome is None:
            return WriteResult("saved")
        if isinstance(outcome, StaleWrite | ClearedElsewhere):
            # Another process wrote a newer version, or wiped the channel: drop ours (and
            # the stale cache) so the next read hydrates the truth; never report it saved.
            for entry in entries:
                self.cache.pop(entry.key)
            if isinstance(outcome, ClearedElsewhere):
                return rejected(REASON_CLEARED)
            return rejected("a newer version of this memory exists; nothing was saved")
        # GroupCommit.commit told the breaker of the database that failed.
        return self._spool_write(entries, events, before, turn)

    def _abandoned_write(self, entries: Sequence[StmEntry], outcome: Exception | None) -> None:
        """The turn that made a write was cancelled before it was settled. Committed, the
        cache holds what is stored; if not, it must not keep the entries as if they were:
        they go (unless a later write replaced them), and the next read hydrates the
        truth. (Never reported saved, the write is not spooled either.)"""
        self._writing -= Counter(entry.key for entry in entries)
        if outcome is None:
            return
        for entry in entries:
            if self.cache.get(entry.key) is entry:
                self.cache.pop(entry.key)

    async def writes_settled(self) -> None:
        """Return when every STM write on its way to the database is settled: before the
        engine is disposed at shutdown, writes of cancelled turns included."""
        await self._commits.settled()

    def _spool_write(
        self,
        entries: Sequence[StmEntry],
        events: Sequence[EventRecord],
        before: Sequence[StmEntry],
        turn: TurnState,
    ) -> WriteResult:
        refused = self._refused_before_spooling(entries, turn)
        if self.spool is not None and refused is None:
            try:
                self.spool.append(entries, events, started_at=turn.started_at, bases=before)
            except (OSError, ValueError):  # ValueError: the spool file is closed
                log.exception("STM spool append failed")
            else:
                # Stored durably: whatever follows, it is saved (and will be replayed).
                return WriteResult("saved, pending sync")
        # Never report or keep what was not saved: what was cached before goes back,
        # unless the entry left the cache meanwhile (a /refresh, a /forget-me, a notice):
        # then what it held may be gone from the database too.
        for old, new in zip(before, entries, strict=True):
            if self.cache.get(old.key) is new:
                self.cache.put(old)
        if refused is not None:
            return rejected(refused)
        return rejected("the memory could not be saved right now (database unavailable)")

    def _refused_before_spooling(self, entries: Sequence[StmEntry], turn: TurnState) -> str | None:
        """Why a write must not go to the spool, if it must not: a /refresh or /forget-me
        heard while it waited for the database (its channel's epoch moved since the turn
        checked it), or a /forget-me heard from another process of a user it is derived
        from, since its turn began. The database refuses such a write, and so would the
        replay: spooled, it would be acknowledged as saved, then dropped, and meanwhile
        this process's later writes would build on its text.

        (A turn begun before the listener was lost and back, when notices may have been
        missed, is spooled: only the replay can tell whether a wipe refuses it, and then
        the writes built on it here go too; see spool_replay._chain_wiped.)"""
        if self.epoch(turn.channel_id) != turn.epoch or self._forgotten_since(
            entries, turn.started_at
        ):
            return REASON_CLEARED
        return None

    def _forgotten_since(self, entries: Sequence[StmEntry], started_at: datetime | None) -> bool:
        """Whether another process's /forget-me, heard of here, of a user ``entries`` are
        derived from came after the writing turn began. The database refuses such a
        write (``stm_repo.writes_refused``), and so would the spool's replay: spooled, it
        would be acknowledged as saved and then dropped. (A deletion queued behind it
        instead would reach rows written since the forget, by turns begun after it.)"""
        if started_at is None:
            return False
        return any(
            started_at <= forgotten_at and any(e.derived_from(user_id) for e in entries)
            for user_id, forgotten_at in list(self._forgotten_elsewhere.items())
        )

    def _spool_or_raise(self, exc: Exception, append: Callable[[DurableSpool], None]) -> None:
        """Queue a deletion the database did not take (or must not take yet) in the spool;
        without a spool, or if the spool cannot be written, the caller hears it failed."""
        try:
            if self.spool is None:
                raise OSError("no spool")
            append(self.spool)
        except (OSError, ValueError) as spool_error:
            if not isinstance(exc, _NotTried):
                spool_error.__cause__ = exc
            raise MemoryUnavailable("the database is unavailable; try again shortly") from (
                spool_error
            )

    async def admin_edit(
        self,
        *,
        guild_id: int | None,
        channel_id: int,
        actor_user_id: int,
        summary: str | None = None,
        categories: Mapping[str, str] | None = None,
        parent_channel_id: int | None = None,
        expected_version: int | None = None,
        epoch: int | None = None,
        started_at: datetime | None = None,
    ) -> WriteResult:
        """``/stm edit``: an admin replaces the channel's memory (origin ``admin``).
        ``epoch`` and ``started_at``: when the edit form was opened; a ``/refresh``
        since then (in any process) refuses the edit, as it refuses a turn's write."""
        turn = TurnState(
            channel_id=channel_id,
            user_id=actor_user_id,
            guild_id=guild_id,
            config=await self.guild_config(guild_id),
            epoch=self.epoch(channel_id) if epoch is None else epoch,
            started_at=started_at or self.clock.now(),
            parent_channel_id=parent_channel_id,
        )
        return await self.update_stm(
            turn,
            summary=summary,
            categories=categories,
            origin="admin",
            expected_version=expected_version,
            detail="/stm edit",
        )

    # ----------------------------------------------------------------- deleting

    async def clear_channel(
        self, channel_id: int, *, guild_id: int | None, actor_user_id: int | None
    ) -> ClearReceipt:
        """``/refresh``: wipe the channel's STM in every scope, cache and rows.

        When the rows cannot be deleted now (database down, or earlier operations still
        in the spool) the deletion is queued in the spool (``pending_sync``); without a
        spool that raises :class:`MemoryUnavailable`. Either way the cache is cleared and
        the channel is never hydrated back from those rows.
        """
        async with self._lock(channel_id):
            self._epochs[channel_id] = self.epoch(channel_id) + 1
            self._tombstones.add(channel_id)
            # The receipt counts memories, not the empty entries a mere read caches.
            held = 0
            for key in self.cache.keys_of_channel(channel_id):
                popped = self.cache.pop(key)
                if popped is not None and popped.has_content:
                    held += 1
            self.windows.clear(channel_id)
            at = self.clock.now()
            sessions = self._sessions
            try:
                if self._spool_at_once():
                    raise _NotTried
                async with asyncio.timeout(DB_TIMEOUT_SECONDS):
                    async with (
                        open_session(sessions, "clearing a channel") as session,
                        session.begin(),
                    ):
                        rows = await delete_channel_rows(
                            session,
                            channel_id,
                            self.clock.now,  # read once the channel's lock is held
                            guild_id=guild_id,
                            actor_user_id=actor_user_id,
                            origin=self.instance_id,
                            notify=self._notify,
                        )
            except Exception as exc:
                self._deletion_failed(sessions, f"clearing channel {channel_id}", exc)
                try:
                    self._spool_or_raise(
                        exc,
                        lambda spool: spool.append_clear(channel_id, guild_id, actor_user_id, at),
                    )
                except MemoryUnavailable:
                    self._clear_not_done(channel_id)
                    raise
                return ClearReceipt(rows=0, cache_entries=held, pending_sync=True)
            except asyncio.CancelledError:
                # Cancelled on its way (its transaction rolled back, unless it was already
                # committing): nobody hears of it, nothing was spooled. As when it could
                # not be done, the channel is not kept as wiped here, or it would never be
                # read again while its rows may stay (and every write refused as stale).
                self._clear_not_done(channel_id)
                raise
            database_answered(sessions)
            self._tombstones.discard(channel_id)
            # The refresh counts from when it held the lock: what was said while it waited
            # for it is wiped too (as the database, and every other process, has it).
            self.windows.clear(channel_id)
            return ClearReceipt(rows=rows, cache_entries=held)

    def _clear_not_done(self, channel_id: int) -> None:
        """A clear reported as not done: the rows stay, and may be read again (what was
        cached meanwhile was read as wiped: empty, so it goes too)."""
        self._tombstones.discard(channel_id)
        for key in self.cache.keys_of_channel(channel_id):
            self.cache.pop(key)

    async def forget_user(self, user_id: int) -> ForgetReceipt:
        """``/forget-me``: delete every memory derived from the user's messages.

        Every channel that could hold something of theirs (a cached memory, or their
        messages in a raw window) gets a new epoch, so a turn of this process already
        reading those messages cannot store them again; reads in flight do not cache what
        they read; the channels' locks are taken, so a write already on its way to the
        database lands before the deletion, not after it. The deletion is recorded in
        ``stm_forgets``: a write from a turn that started before it (any process, also
        one that missed the notice, or a spool replay) is refused by the database."""
        # Reads in flight may return what is about to be deleted: they must not cache it.
        self._ledger.note(FORGET_NOTICED)
        affected = {entry.key.channel_id for entry in self._derived_from(user_id)}
        affected |= self.windows.channels_with_author(user_id)
        for channel_id in affected:
            self._epochs[channel_id] = self.epoch(channel_id) + 1
        async with contextlib.AsyncExitStack() as held:
            for channel_id in sorted(affected):
                await held.enter_async_context(self._lock(channel_id))
            return await self._forget_user(user_id)

    def _derived_from(self, user_id: int) -> list[StmEntry]:
        """Every cached memory holding something of the user (see
        :meth:`StmEntry.derived_from`: their key, their words, their hand); live ones
        only (the /forget-me receipt counts these)."""
        return [entry for entry in self.cache.entries() if entry.derived_from(user_id)]

    def _drop_derived_from(self, user_id: int) -> list[ScopeKey]:
        """Take every cached memory holding something of the user out of the cache;
        return their keys."""
        keys = [entry.key for entry in self._derived_from(user_id)]
        for key in keys:
            self.cache.pop(key)
        return keys

    async def _forget_user(self, user_id: int) -> ForgetReceipt:
        dropped = len(self._drop_derived_from(user_id))
        raw = self.windows.forget_author(user_id)
        self._guilds.forget_user(user_id)
        self._forget_set_aside(user_id)
        at = self.clock.now()
        sessions = self._sessions
        try:
            if self._spool_at_once():
                raise _NotTried
            async with asyncio.timeout(DB_TIMEOUT_SECONDS * 2):
                async with open_session(sessions, "forgetting a user") as session, session.begin():
                    deleted = await delete_user_rows(
                        session,
                        user_id,
                        self.clock.now,  # read once the locks are held
                        origin=self.instance_id,
                        notify=self._notify,
                    )
        except Exception as exc:
            self._deletion_failed(sessions, "forgetting a user", exc)
            self._spool_or_raise(exc, lambda spool: spool.append_forget(user_id, at))
            self._ledger.note(FORGET_NOTICED)  # as below: what was cached while it was tried goes
            self._drop_derived_from(user_id)
            return ForgetReceipt(0, 0, 0, 0, dropped, raw, pending_sync=True)
        database_answered(sessions)
        # The forget counts from when it held its locks: what they said while it waited
        # for them is forgotten too (as the database, and every other process, has it).
        raw += self.windows.forget_author(user_id)
        # A read that began while the deletion was on its way (a turn of another channel
        # member) may have cached a row it deleted: such reads are stale, and what they
        # cached goes.
        self._ledger.note(FORGET_NOTICED)
        self._drop_derived_from(user_id)
        self._drop_stand_ins()
        return ForgetReceipt(
            user_rows=deleted.stm.user_rows,
            contributed_rows=deleted.stm.contributed_rows,
            long_term=deleted.long_term,
            events=deleted.events,
            cache_entries=dropped,
            raw_messages=raw,
        )

    def _drop_stand_ins(self) -> None:
        """Rows were deleted without their keys being named (a /forget-me deletes rows it
        does not list; the janitor, expired ones): drop every cached entry that stands in
        for a row without showing it (expired, or withheld), keeping only its version.
        Once the row is gone the next write elsewhere counts from 1 again, and a write
        built on the stand-in (a higher version) would overwrite it. Each costs one read
        on its next use. Entries for keys with no row (version 0) stay: still true."""
        for entry in list(self.cache.entries()):
            if entry.version and not entry.has_content and entry.key not in self._writing:
                self.cache.pop(entry.key)

    def _forget_set_aside(self, user_id: int) -> None:
        """Records the database refused were set aside in the data folder, words and all:
        the user's go too."""
        if self.spool is None:
            return
        try:
            self.spool.forget_set_aside(user_id)
        except Exception:  # the deletion in the database must not depend on that file
            log.exception("could not remove a user's records from the set-aside spool files")

    # ------------------------------------------------------------- coherence

    async def _announce(self, session: AsyncSession, notice: Notice) -> None:
        if self._notify:
            await send_notice(session, notice)

    def apply_notice(self, notice: Notice) -> None:
        """Another process changed shared state: evict what it names (never insert, so a
        late notice cannot resurrect anything; the next read hydrates the truth)."""
        if notice.get("o") == self.instance_id:
            return
        self._ledger.heard()
        handler = self._notice_handlers.get(notice.get("t"))
        if handler is not None:  # a kind of a newer version of the bot: nothing to evict
            handler(self, notice)

    def _on_stm(self, notice: Notice) -> None:
        for kind, guild, user, channel, _version in notice.get("k", ()):
            key = ScopeKey("server" if kind == "server" else "user", int(channel), guild, user)
            self._ledger.mark(key)
            # Whatever the versions: rows deleted without a notice naming them (the
            # janitor's purge, a /forget-me) count from 1 again, so a cached version
            # higher than the notice's is no proof of being newer. A notice never
            # inserts, so evicting on a late one costs only a re-read.
            self.cache.pop(key)
            # "Other channels" of that guild and that user's DMs load again on next use
            # (a memory that was not cached here may be new, or newer).
            if guild is not None:
                self._guilds_hydrated.pop(int(guild), None)
            if user is not None:
                self._users_hydrated.pop(int(user), None)

    def _on_clear(self, notice: Notice) -> None:
        channel_id = int(notice["c"])
        self._epochs[channel_id] = self.epoch(channel_id) + 1
        for key in self.cache.keys_of_channel(channel_id):
            self.cache.pop(key)
        self.windows.clear(channel_id)
        if self.spool is not None:
            # What waits in this process's spool was wiped too: not hydrated back.
            self.spool.blank_channel(channel_id)

    def _on_forget(self, notice: Notice) -> None:
        user_id = int(notice["u"])
        self._ledger.mark(FORGET_NOTICED)
        # When it was asked for (a turn that began after it is not concerned); a notice
        # of an older version of the bot does not say: the time it was heard, then.
        sent_at = notice.get("at")
        forgotten_at = datetime.fromisoformat(sent_at) if sent_at else self.clock.now()
        # A write of theirs still on its way may yet land in the spool: see _spool_write.
        self._forgotten_elsewhere[user_id] = forgotten_at
        if self.spool is not None and self.spool.holds_user(user_id):
            # Writes of theirs still wait in this process's spool and would be replayed
            # after the deletion elsewhere: the deletion queues behind them here too.
            try:
                self.spool.append_forget(user_id, forgotten_at)
            except (OSError, ValueError):
                log.exception("could not queue a /forget-me behind the spool")
        elif self.spool is not None:
            self.spool.drop_states_of(user_id)
        # As in forget_user: no turn already holding their words may store them.
        channels = self.windows.channels_with_author(user_id)
        channels |= {key.channel_id for key in self._drop_derived_from(user_id)}
        for channel_id in channels:
            self._epochs[channel_id] = self.epoch(channel_id) + 1
        self.windows.forget_author(user_id)
        self._guilds.forget_user(user_id)
        self._forget_set_aside(user_id)
        self._drop_stand_ins()

    def _on_purge(self, notice: Notice) -> None:
        # The janitor deleted rows (not named): in-flight reads are stale, and the
        # versions held for expired rows go (see _drop_stand_ins).
        self._ledger.mark(FORGET_NOTICED)
        self._drop_stand_ins()

    def _on_opt_in(self, notice: Notice) -> None:
        self._guilds.opt_in_noticed(int(notice["u"]))

    def _on_guild(self, notice: Notice) -> None:
        guild_id = int(notice["g"])
        self._guilds.guild_noticed(guild_id)
        self._guilds_hydrated.pop(guild_id, None)

    # What each kind of notice (its "t") evicts.
    _notice_handlers: ClassVar[dict[object, Callable[[MemoryService, Notice], None]]] = {
        "stm": _on_stm,
        "clear": _on_clear,
        "forget": _on_forget,
        "purge": _on_purge,
        "opt-in": _on_opt_in,
        "guild": _on_guild,
    }

    def listener_lost(self) -> None:
        """The notice connection is gone: notices from other processes go unheard until
        it is back. Meanwhile every use reads the database again (slower, never stale);
        the cache only stands in when the database is down too (then no other process
        can change anything either), other channels' memories are not shown, and the
        raw windows are checked against the stored wipe times (see
        :meth:`recent_messages`)."""
        if not self._ledger.deaf:
            log.warning(
                "cache notices unavailable: reading memory from the database on every use "
                "until the listener is back"
            )
        self._ledger.deaf = True

    def listening_again(self) -> None:
        """The notice connection is back (LISTEN done): caching resumes, from empty. The
        database answered that connection: it is up again."""
        database_answered(self._sessions)
        self._ledger.deaf = False
        self._wipes_unread_since = None
        self.drop_all()

    def drop_all(self) -> None:
        """Forget everything loaded from the database (after missed notices). Running
        turns keep their epochs: a /refresh this process missed still refuses their
        writes in the database (``stm_clears``), or at the replay of the spool."""
        self._ledger.note(FORGET_NOTICED)
        self.cache.clear()
        # The raw windows too: a missed /forget-me leaves the user's words in them, and a
        # turn starting now (after the forget, so not refused by it) would store them.
        self.windows.drop_all()
        self._guilds.drop_all()
        self._guilds_hydrated.clear()
        self._users_hydrated.clear()

    @property
    def hearing_notices(self) -> bool:
        """Whether other processes' notices reach this one (else every use reads)."""
        return not self._ledger.deaf

    @property
    def database_failing(self) -> bool:
        """The database failed and has not answered since."""
        return self._ledger.database_down()

    @property
    def pending_sync(self) -> int:
        """Operations waiting in the spool for the database."""
        return self.spool.pending if self.spool is not None else 0

    def pending_changes_in(self, channel_id: int) -> PendingChanges:
        """The channel's writes and clear waiting in the spool (``/stm show``)."""
        if self.spool is None:
            return PendingChanges(0, False)
        return self.spool.pending_changes_in(channel_id)

    def spool_replayed(self) -> None:
        """Every spooled operation reached the database: clears are now real deletions,
        and the keys it wrote are read again (a write refused or skipped by the replay,
        e.g. a newer row of another process, must not stay cached as if stored)."""
        self._tombstones.clear()
        # A replayed /forget-me deleted rows it does not name (this process ignores its
        # own notice): the versions held for expired rows go, as in forget_user.
        self._ledger.note(FORGET_NOTICED)
        self._drop_stand_ins()
        if self.spool is not None:
            for key in self.spool.replayed_keys:
                if key not in self._writing:
                    self._ledger.note(key)
                    self.cache.pop(key)
            # While a clear waited, the channel was shown empty without reading its rows.
            # Its replay may have been skipped (a later /refresh covered it) and rows
            # written since: those entries are read again too.
            for channel_id in self.spool.replayed_clears:
                for key in self.cache.keys_of_channel(channel_id):
                    if key not in self._writing:
                        self._ledger.note(key)
                        self.cache.pop(key)

    async def purge_expired_rows(self) -> int:
        """The janitor's pass: delete rows not updated within the retention period. When
        it deleted any, every process (this one too) drops the entries standing in for
        expired rows: their versions would outrank the rows written next."""
        cutoff = self.clock.now() - timedelta(days=self.settings.stm.retention_days)
        async with self._storage("purging expired rows") as session, session.begin():
            deleted = await stm_repo.delete_older_than(session, cutoff)
            await stm_repo.purge_clears(session, self.clock.now() - CLEAR_RECORD_KEPT)
            await stm_repo.purge_forgets(session, self.clock.now() - FORGET_RECORD_KEPT)
            if deleted:
                await stm_repo.add_events(session, [EventRecord("expire")])
                # One small notice, not the keys: a pass may delete thousands of rows.
                await self._announce(session, {"o": self.instance_id, "t": "purge"})
        if deleted:
            self._ledger.note(FORGET_NOTICED)  # a read in flight may hold a row just deleted
            self._drop_stand_ins()
        return deleted

    async def wiped_history(
        self, channel_id: int, messages: Sequence[RawMessage]
    ) -> Callable[[RawMessage], bool]:
        """For a back-fill from Discord: which of ``messages`` a ``/refresh`` of the
        channel (also one whose marker was deleted) or a ``/forget-me`` of their author
        (also one made in another process) wiped after they were sent."""
        async with self._storage("reading when history was wiped") as session:
            clears, forgotten = await stm_repo.wipe_times(
                session, {channel_id}, {m.author_id for m in messages}
            )
        cleared = clears.get(channel_id)

        def wiped(message: RawMessage) -> bool:
            if cleared is not None and message.created_at <= cleared:
                return True
            at = forgotten.get(message.author_id)
            return at is not None and message.created_at <= at

        return wiped

    async def recent_events(self, guild_id: int, limit: int = 15) -> list[AuditEvent]:
        """The guild's latest audit events (``/stm history``); they hold no memory text."""
        async with self._storage("reading audit events") as session:
            return await stm_repo.recent_events(session, guild_id, limit)

    # ------------------------------------------------------------ configuration

    async def update_guild_settings(
        self,
        guild_id: int,
        actor_user_id: int,
        *,
        always_on: tuple[int, bool] | None = None,
        **changes: Any,
    ) -> GuildConfig:
        """Change a guild's settings (see :meth:`GuildSettings.update`)."""
        return await self._guilds.update(guild_id, actor_user_id, always_on=always_on, **changes)

    async def set_always_on(
        self, guild_id: int, channel_id: int, enabled: bool, actor_user_id: int
    ) -> GuildConfig:
        """Mark a channel where the bot answers every message (or unmark it)."""
        return await self._guilds.update(guild_id, actor_user_id, always_on=(channel_id, enabled))

    async def set_categories(
        self, guild_id: int, actor_user_id: int, categories: Sequence[Category]
    ) -> GuildConfig:
        """Replace the guild's STM categories (an empty list: summary mode)."""
        return await self._guilds.set_categories(guild_id, actor_user_id, categories)
