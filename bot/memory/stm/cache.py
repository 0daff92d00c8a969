"""The STM cache: a bounded TLRU cache of entries, indexed by guild, user and channel."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from cachetools import TLRUCache
from sortedcontainers import SortedList

from bot.vocabulary import Clock, ScopeKey, StmEntry

# (updated_at, insertion number, key): the number breaks ties, so keys are never compared.
_Rank = tuple[datetime, int, ScopeKey]


class _TLRU(TLRUCache[ScopeKey, StmEntry]):
    """A TLRUCache that calls ``on_remove`` on every removal (delete, LRU eviction, expiry)."""

    def __init__(
        self,
        maxsize: int,
        ttu: Callable[[ScopeKey, StmEntry, float], float],
        timer: Callable[[], float],
        on_remove: Callable[[ScopeKey], None],
    ) -> None:
        super().__init__(maxsize, ttu, timer)
        self._on_remove = on_remove

    def __delitem__(self, key: ScopeKey) -> None:
        try:
            super().__delitem__(key)
        finally:
            self._on_remove(key)

    def expire(self, time: float | None = None) -> list[tuple[ScopeKey, StmEntry]]:
        expired = super().expire(time)
        for key, _ in expired:
            self._on_remove(key)
        return expired


class _Recency:
    """Per owner (a guild, a user), the keys whose entries hold a memory, ordered by when
    it was last updated: "other channels" reads the newest few, never every channel."""

    def __init__(self) -> None:
        self._by_owner: dict[int, SortedList[_Rank]] = {}
        self._rank: dict[ScopeKey, tuple[int, _Rank]] = {}
        self._inserts = itertools.count()

    def update(self, owner: int | None, entry: StmEntry) -> None:
        """Rank ``entry`` under ``owner`` by its update time (an empty one: out)."""
        key = entry.key
        self.remove(key)
        if owner is None or not entry.has_content:
            return
        ranks = self._by_owner.get(owner)
        if ranks is None:
            ranks = self._by_owner[owner] = SortedList()
        # The number breaks ties, so keys are never compared.
        rank = (entry.updated_at, next(self._inserts), key)
        ranks.add(rank)
        self._rank[key] = (owner, rank)

    def remove(self, key: ScopeKey) -> None:
        held = self._rank.pop(key, None)
        if held is None:
            return
        owner, rank = held
        ranks = self._by_owner[owner]
        ranks.discard(rank)
        if not ranks:
            del self._by_owner[owner]

    def newest(self, owner: int) -> Iterator[ScopeKey]:
        """The owner's keys, most recently updated first (a view: consume without awaiting)."""
        for _, _, key in reversed(self._by_owner.get(owner, ())):
            yield key

    def clear(self) -> None:
        self._by_owner.clear()
        self._rank.clear()


class StmCache:
    """Bounded, TTL'd STM entries keyed by :class:`ScopeKey`."""

    def __init__(
        self, *, maxsize: int, ttl_summary_s: float, ttl_empty_s: float, clock: Clock
    ) -> None:
        self._clock = clock
        self._ttl_summary = ttl_summary_s
        self._ttl_empty = ttl_empty_s
        self._data = _TLRU(maxsize, self._expires_at, clock.monotonic, self._unindex)
        # Indexes, so prompt assembly never scans the whole cache nor a whole guild: the
        # channels of a guild (and a user's copies made in servers) that hold a memory,
        # ordered by updated_at, not insertion (an old row hydrated now is not recent).
        self._guild_memories = _Recency()
        self._user_memories = _Recency()
        self._by_user: dict[int, set[ScopeKey]] = {}
        self._by_channel: dict[int, set[ScopeKey]] = {}

    def ttl_for(self, entry: StmEntry) -> float:
        return self._ttl_summary if entry.has_summary else self._ttl_empty

    def _expires_at(self, key: ScopeKey, entry: StmEntry, now_monotonic: float) -> float:
        # From the last update, not from insertion: a row hydrated past its TTL is already
        # expired, never cached "fresh" (SPEC §2).
        age = (self._clock.now() - entry.updated_at).total_seconds()
        return now_monotonic + self.ttl_for(entry) - max(0.0, age)

    def is_expired(self, entry: StmEntry) -> bool:
        """Whether an entry (e.g. one just read from its row) is past its TTL."""
        return (self._clock.now() - entry.updated_at).total_seconds() >= self.ttl_for(entry)

    def get(self, key: ScopeKey) -> StmEntry | None:
        # Not TLRUCache.get: it does "in" and then "[]", twice the work of one "[]" (which
        # also checks expiry and updates the LRU order), and every turn makes several.
        try:
            return self._data[key]
        except KeyError:
            return None

    def __contains__(self, key: ScopeKey) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def put(self, entry: StmEntry) -> None:
        """Insert or re-insert ``entry`` (re-inserting restarts its TTL from ``updated_at``)."""
        key = entry.key
        self._data[key] = entry
        if key not in self._data:
            # Already expired: TLRUCache refused it and silently dropped the old entry.
            self._unindex(key)
            return
        if key.kind == "server":
            self._guild_memories.update(key.guild_id, entry)
        elif key.guild_id is not None:
            self._user_memories.update(key.user_id, entry)
        if key.user_id is not None:
            self._by_user.setdefault(key.user_id, set()).add(key)
        self._by_channel.setdefault(key.channel_id, set()).add(key)

    def pop(self, key: ScopeKey) -> StmEntry | None:
        entry = self._data.get(key)
        if key in self._data:
            del self._data[key]
        else:
            self._unindex(key)
        return entry

    def _unindex(self, key: ScopeKey) -> None:
        self._guild_memories.remove(key)
        self._user_memories.remove(key)
        for index, value in ((self._by_user, key.user_id), (self._by_channel, key.channel_id)):
            if value is None:
                continue
            keys = index.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[value]

    def _live(self, keys: Iterable[ScopeKey]) -> Iterator[StmEntry]:
        get = self.get
        for key in list(keys):
            entry = get(key)
            if entry is not None:
                yield entry

    def server_entries_of_guild(self, guild_id: int) -> Iterator[StmEntry]:
        """The guild's channel memories that hold something, most recently updated first,
        lazily: a caller that wants a few reads a few, however many channels the guild has."""
        return self._newest(self._guild_memories, guild_id)

    def memories_of_user(self, user_id: int) -> Iterator[StmEntry]:
        """The user's copies of server memories that hold something, most recently
        updated first, lazily (for an opted-in DM's "other channels")."""
        return self._newest(self._user_memories, user_id)

    def _newest(self, recency: _Recency, owner: int) -> Iterator[StmEntry]:
        # Expired entries leave the index first (cachetools expires lazily; when nothing
        # expired this costs one comparison), so the walk meets live entries only.
        self._data.expire()
        get = self.get  # a read: it counts as recently used, as a prompt shows it
        for key in recency.newest(owner):
            entry = get(key)
            if entry is not None:
                yield entry

    def entries_of_user(self, user_id: int) -> list[StmEntry]:
        """Live user-scope entries of a user (for cross-context recall in DMs)."""
        return [e for e in self._live(self._by_user.get(user_id, ())) if e.key.kind == "user"]

    def keys_of_channel(self, channel_id: int) -> list[ScopeKey]:
        # Expiry is lazy in cachetools: purge first, so the /refresh and /forget-me receipts
        # count no expired key.
        self._data.expire()
        return list(self._by_channel.get(channel_id, ()))

    def entries(self) -> Iterator[StmEntry]:
        """Every live entry (a scan: only for rare operations such as forgetting a user)."""
        for key in list(self._data):
            entry = self._data.get(key)
            if entry is not None:
                yield entry

    def clear(self) -> None:
        self._data.clear()
        self._guild_memories.clear()
        self._user_memories.clear()
        self._by_user.clear()
        self._by_channel.clear()
