"""The state the parts of the memory service share, and the few evictions they all make."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

from cachetools import LRUCache, TTLCache
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.config import Settings
from bot.db import Notice, memory_session, send_notice
from bot.memory.spool import DurableSpool
from bot.memory.stm.cache import StmCache
from bot.memory.stm.coherence import NoticeLedger
from bot.memory.stm.guild_settings import GuildSettings
from bot.memory.stm.window import WindowCache
from bot.runtime import KeyedLocks
from bot.vocabulary import Clock, GuildConfig, ScopeKey, StmEntry

log = logging.getLogger(__name__)

# How long a /forget-me heard from another process is remembered for writes in flight
# (they end within DB_TIMEOUT_SECONDS, queued ones a little later).
FORGOTTEN_ELSEWHERE_SECONDS = 300.0

# Sends a notice to the other processes inside the caller's transaction.
Announce = Callable[[AsyncSession, Notice], Awaitable[None]]


async def _no_notice(session: AsyncSession, notice: Notice) -> None:
    """A service built without notices (``notify=False``) announces nothing."""


@dataclass(eq=False, slots=True)
class MemoryState:
    """What the memory service's parts read and change, in one place."""

    settings: Settings
    # The session factory, read on every use (tests point a service at a dead server).
    sessions: async_sessionmaker[AsyncSession]
    clock: Clock
    # Operations the database refused wait here (None: such a write is refused).
    spool: DurableSpool | None
    # Names this process in its notices, so it ignores its own echoes.
    instance_id: str
    # Whether changes are announced to other processes (see announce).
    notify: bool
    announce: Announce
    cache: StmCache
    windows: WindowCache
    # The operator's STM settings: a DM's configuration, and a new guild's.
    defaults: GuildConfig
    # What changed since a read began; deaf while other processes' notices go unheard.
    ledger: NoticeLedger
    guilds: GuildSettings
    # Per channel: its writes and clears take turns, so a clear never interleaves with
    # a write's database round trip.
    locks: Callable[[int], asyncio.Lock]
    # Per channel, one more for every wipe: a turn begun in an older one may not write.
    epochs: dict[int, int] = field(default_factory=dict)
    # Channels whose clear is on its way to the database: never hydrated back.
    tombstones: set[int] = field(default_factory=set)
    # Keys whose write is on its way to the database (held under the channel lock, or
    # the write of a cancelled turn, until it is settled): how many writes each.
    writing: Counter[ScopeKey] = field(default_factory=Counter)
    # Users another process forgot (by notice), and when: for writes still in flight.
    forgotten_elsewhere: TTLCache[int, datetime] = field(
        default_factory=lambda: TTLCache(maxsize=10_000, ttl=FORGOTTEN_ELSEWHERE_SECONDS)
    )
    # Guilds (users) whose recent memories were loaded once for "other channels" (for
    # their opted-in DMs).
    guilds_hydrated: LRUCache[int, bool] = field(default_factory=lambda: LRUCache(10_000))
    users_hydrated: LRUCache[int, bool] = field(default_factory=lambda: LRUCache(50_000))
    # Deaf, and the stored wipe times unreadable: since when (the first failed read), in
    # which outage, and the latest failed read (see Reader.recent_messages).
    wipes_unread_since: datetime | None = None
    wipes_unread_outage: int | None = None
    wipes_unread_last: datetime | None = None

    @classmethod
    def build(
        cls,
        sessions: async_sessionmaker[AsyncSession],
        settings: Settings,
        *,
        clock: Clock,
        spool: DurableSpool | None,
        notify: bool,
    ) -> MemoryState:
        """A new process's state: empty caches, the operator's defaults."""
        stm = settings.stm
        instance_id = uuid.uuid4().hex[:12]
        if spool is not None:
            spool.notice_origin = instance_id  # its replays are this process's own
        announce: Announce = send_notice if notify else _no_notice
        defaults = GuildConfig(
            guild_id=None,
            stm_enabled=stm.enabled,
            refresh_cadence=stm.refresh_cadence,
            render_mode=stm.render_mode,
            crude_message_count=stm.crude_message_count,
        )
        ledger = NoticeLedger(sessions)
        return cls(
            settings=settings,
            sessions=sessions,
            clock=clock,
            spool=spool,
            instance_id=instance_id,
            notify=notify,
            announce=announce,
            cache=StmCache(
                maxsize=stm.cache_max_entries,
                ttl_summary_s=stm.ttl_summary_hours * 3600,
                ttl_empty_s=stm.ttl_empty_hours * 3600,
                clock=clock,
            ),
            windows=WindowCache(per_channel=stm.raw_window),
            defaults=defaults,
            ledger=ledger,
            guilds=GuildSettings(sessions, defaults, ledger, announce, instance_id),
            locks=KeyedLocks[int](),
        )

    def epoch(self, channel_id: int) -> int:
        return self.epochs.get(channel_id, 0)

    def new_epoch(self, channel_id: int) -> None:
        """The channel was wiped: turns begun before may not write."""
        self.epochs[channel_id] = self.epochs.get(channel_id, 0) + 1

    def storage(self, what: str) -> contextlib.AbstractAsyncContextManager[AsyncSession]:
        return memory_session(self.sessions, what)

    def wiped(self, channel_id: int) -> bool:
        """A clear of the channel has not reached the database yet (it is being sent, or
        waits in the spool, also from before a restart): its rows are as good as gone."""
        return channel_id in self.tombstones or (
            self.spool is not None and self.spool.clearing(channel_id)
        )

    def withheld(self, row: StmEntry) -> bool:
        """The row holds something of a user whose /forget-me waits in the spool."""
        return self.spool is not None and self.spool.withholds(row)

    def fresh(self, key: ScopeKey, parent_channel_id: int | None) -> StmEntry:
        return StmEntry(key=key, updated_at=self.clock.now(), parent_channel_id=parent_channel_id)

    def derived_from(self, user_id: int) -> list[StmEntry]:
        """Every cached memory holding something of the user (their key, their words,
        their hand: see :meth:`StmEntry.derived_from`)."""
        return [entry for entry in self.cache.entries() if entry.derived_from(user_id)]

    def drop_derived_from(self, user_id: int) -> list[ScopeKey]:
        """Take every cached memory holding something of the user out; return their keys."""
        keys = [entry.key for entry in self.derived_from(user_id)]
        for key in keys:
            self.cache.pop(key)
        return keys

    def drop_stand_ins(self) -> None:
        """Rows were deleted without their keys being named (a /forget-me, the janitor):
        drop every cached entry standing in for a row without showing it (expired, or
        withheld), whose version would outrank the row written next. Entries for keys
        with no row (version 0) stay: still true."""
        for entry in list(self.cache.entries()):
            if entry.version and not entry.has_content and entry.key not in self.writing:
                self.cache.pop(entry.key)

    def forget_set_aside(self, user_id: int) -> None:
        """Spool records the database refused, set aside in the data folder words and
        all: the user's go too."""
        if self.spool is None:
            return
        try:
            self.spool.forget_set_aside(user_id)
        except Exception:  # the deletion in the database must not depend on that file
            log.exception("could not remove a user's records from the set-aside spool files")
