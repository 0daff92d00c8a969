"""Reading STM: entries from the cache, else hydrated from their rows (or the spool), and
the raw windows as a prompt may use them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Literal

from cachetools import LRUCache

from bot.db import outage_number
from bot.db.repositories import stm as stm_repo
from bot.memory.spool import carried_row_wiped
from bot.memory.stm.coherence import STALE_READ_RETRIES
from bot.memory.stm.state import MemoryState
from bot.runtime import BatchLoader, SingleFlight
from bot.vocabulary import MemoryUnavailable, RawMessage, ScopeKey, StmEntry

# "Other channels" (and opted-in DM recall) after a restart: a guild's (a user's) memories
# updated within the TTL are loaded once, the most recent first, up to this many. Which
# of them may be shown is judged after (it depends on the channel asking), so the limit
# is generous: the rows of channels more private than the one asking (tickets, staff
# channels, private threads) must not crowd out the ones it may show.
OTHER_CHANNEL_HYDRATE_LIMIT = 200
# Deaf with the database down: failed reads of the wipe times further apart than this
# are not taken for one outage (the database may have answered others in between).
WIPES_UNREAD_GAP_SECONDS = 30.0
# What a wipe time is looked up by: a channel's last /refresh, a user's last /forget-me.
WipeKey = tuple[Literal["clear", "forget"], int]


class Reader:
    """Reads entries (single-flight per key), a guild's or a user's recent memories
    (once), and the raw windows checked against wipes this process may have missed."""

    def __init__(self, state: MemoryState) -> None:
        self._state = state
        self._entry_flight: SingleFlight[ScopeKey, StmEntry] = SingleFlight()
        self._owner_flight: SingleFlight[tuple[str, int], None] = SingleFlight()
        # Cold reads come in bursts (a restart, a thousand channels waking at once): each
        # kind is loaded in batches, a few at a time, not one query per key.
        loads = state.settings.database.batched_loads
        self.rows: BatchLoader[ScopeKey, StmEntry] = BatchLoader(self._load_rows, concurrency=loads)
        self.wipe_times: BatchLoader[WipeKey, datetime] = BatchLoader(
            self._load_wipe_times, concurrency=loads
        )

    async def entry(self, key: ScopeKey, *, parent_channel_id: int | None = None) -> StmEntry:
        """The live entry for ``key``: from the cache, else hydrated from its row
        (single-flight), else a new empty one. Never returns an expired memory."""
        cached = self._state.cache.get(key)
        if cached is not None and not self._state.ledger.deaf:
            return cached  # the warm path, several times a turn
        return await self.read(cached, key, parent_channel_id)

    async def entries(
        self, keys: Sequence[ScopeKey], *, parent_channel_id: int | None = None
    ) -> list[StmEntry]:
        """The live entries of ``keys`` (see :meth:`entry`), those not cached read at once,
        so they share one batch."""
        state = self._state
        deaf = state.ledger.deaf
        found = [None if deaf else state.cache.get(key) for key in keys]
        missing = [i for i, entry in enumerate(found) if entry is None]
        if len(missing) == 1:
            index = missing[0]
            found[index] = await self.entry(keys[index], parent_channel_id=parent_channel_id)
        elif missing:
            read = await asyncio.gather(
                *(self.read(state.cache.get(keys[i]), keys[i], parent_channel_id) for i in missing)
            )
            for index, entry in zip(missing, read, strict=True):
                found[index] = entry
        return [entry for entry in found if entry is not None]

    def read(
        self, cached: StmEntry | None, key: ScopeKey, parent_channel_id: int | None
    ) -> Coroutine[Any, Any, StmEntry]:
        """The cold path of :meth:`entry` (``cached``: what the cache holds, if anything)."""
        return self._state.ledger.cached_or_read(
            cached,
            lambda: self._entry_flight.run(key, lambda: self._hydrate(key, parent_channel_id)),
        )

    async def _hydrate(self, key: ScopeKey, parent_channel_id: int | None) -> StmEntry:
        state = self._state
        epoch = state.epoch(key.channel_id)
        writing_at_start = key in state.writing
        row, settled, unavailable = await self._load_row(key)
        # Looked up after the read: a spooled write or deletion may have landed meanwhile.
        spooled = state.spool.latest(key) if state.spool is not None else None
        if unavailable is not None and spooled is None:
            raise unavailable
        if spooled is not None and (row is None or spooled.version >= row.version):
            # Not replayed yet and newer than its row (unless another process has written
            # since): hydrating the row would let the next write reuse a version number
            # and the replay lose to it.
            row = replace(spooled, categories=dict(spooled.categories))
        if state.epoch(key.channel_id) != epoch:
            # Cleared (or a /forget-me of someone here) while we were reading: what we
            # read may be gone. Shown empty this once, not cached: a forget may have left
            # the row (not theirs), and the next use reads what is there now.
            row = None
            settled = False
        entry = self._entry_of(key, parent_channel_id, row)
        existing = state.cache.get(key)
        if existing is not None and self._keeps_cached(key, existing, entry, row):
            return existing
        # A write of this process to the key is on its way (its entry was evicted
        # meanwhile): the row read may predate it, so it is used once, not cached.
        if settled and key not in state.writing and not writing_at_start:
            state.cache.put(entry)
        return entry

    async def _load_row(
        self, key: ScopeKey
    ) -> tuple[StmEntry | None, bool, MemoryUnavailable | None]:
        """The row of ``key`` as the database holds it (None: none, or not read); whether
        the read was settled (False while the last read was overtaken by a notice, or a
        /forget-me, about it: then the result is used once and not cached, so the next
        use reads again); and why it could not be read."""
        state = self._state
        spool, ledger = state.spool, state.ledger
        if spool is not None and spool.latest(key) is not None and ledger.database_down():
            # What waits in the spool is what a read would fall back on: no need to wait.
            return None, True, MemoryUnavailable("memory storage is unavailable right now")
        row: StmEntry | None = None
        settled = True
        if state.wiped(key.channel_id):
            return row, settled, None
        try:
            for _ in range(STALE_READ_RETRIES):
                seq = ledger.seq
                # Noted before asking: the batch is sent after, so a notice since is seen.
                row = await self.rows.get(key)
                settled = not ledger.since(seq, key)
                if settled:
                    break
            wiped_copy = await self._spooled_copy_wiped(key, row)
        except MemoryUnavailable as exc:
            return row, settled, exc
        if wiped_copy is not None and spool is not None:
            # As a notice of that wipe would (see Notices): shown empty from now on, so
            # the next write is built on an empty memory, not on the copy.
            spool.blank_copy(key, wiped_copy)
            if key not in state.writing:
                state.cache.pop(key)
        return row, settled, None

    def _entry_of(
        self, key: ScopeKey, parent_channel_id: int | None, row: StmEntry | None
    ) -> StmEntry:
        """The live entry ``row`` hydrates: the row itself, or a new empty entry."""
        entry = self._state.fresh(key, parent_channel_id)
        if row is not None:
            if self._state.cache.is_expired(row) or self._state.withheld(row):
                # Keep only the version (and which row) so the next write still
                # supersedes the row.
                entry.version, entry.created_at = row.version, row.created_at
            else:
                entry = row
        return entry

    def _keeps_cached(
        self, key: ScopeKey, existing: StmEntry, entry: StmEntry, row: StmEntry | None
    ) -> bool:
        """Whether the entry cached meanwhile (``existing``) wins over the one just read: a
        write landed while we were loading (or, deaf, the row is what we hold)."""
        state = self._state
        return (
            not state.ledger.deaf
            or key in state.writing
            or (
                row is not None
                and existing.version == entry.version
                and existing.updated_at == entry.updated_at
            )
        )

    async def _load_rows(self, keys: Sequence[ScopeKey]) -> dict[ScopeKey, StmEntry]:
        async with self._state.storage("hydrating STM entries") as session:
            return await stm_repo.load_entries(session, keys)

    async def _spooled_copy_wiped(self, key: ScopeKey, row: StmEntry | None) -> datetime | None:
        """When the spooled state of ``key`` carries the text of a stored row that a
        /refresh or /forget-me wiped since (``row``: what the database holds now), that
        row's creation time. A process that missed the wipe's notice learns of it here, as
        the spool's replay would; read only when such a copy waits, never on the warm path."""
        spool = self._state.spool
        carried = spool.carried_row(key) if spool is not None else None
        if carried is None:
            return None
        created_at, users = carried
        async with self._state.storage("hydrating STM entries: a spooled copy") as session:
            wiped = await carried_row_wiped(session, key, row, created_at, users)
        return created_at if wiped else None

    async def hydrate_guild_once(self, guild_id: int) -> None:
        """Load a guild's recent channel memories once, for "other channels" after a
        restart (no bulk pre-load at start-up; one query per guild, on first use)."""
        await self._hydrate_once(
            "guild", guild_id, self._state.guilds_hydrated, stm_repo.recent_server_entries
        )

    async def hydrate_user_once(self, user_id: int) -> None:
        """Likewise a user's recent server memories, for their opted-in DMs."""
        await self._hydrate_once(
            "user", user_id, self._state.users_hydrated, stm_repo.recent_user_entries
        )

    async def load_user_memories(self, user_id: int) -> list[StmEntry]:
        """The user's recent server memories (loaded once, then from the cache)."""
        await self.hydrate_user_once(user_id)
        return [e for e in self._state.cache.entries_of_user(user_id) if e.key.guild_id]

    async def _hydrate_once(
        self,
        what: str,
        owner_id: int,
        done: LRUCache[int, bool],
        query: Callable[..., Awaitable[list[StmEntry]]],
    ) -> None:
        if owner_id in done:
            return
        state = self._state

        async def load() -> None:
            since = state.clock.now() - timedelta(hours=state.settings.stm.ttl_summary_hours)
            epochs, seq = dict(state.epochs), state.ledger.seq
            async with state.storage(f"loading a {what}'s memories") as session:
                rows = await query(
                    session, owner_id, since=since, limit=OTHER_CHANNEL_HYDRATE_LIMIT
                )
            # A channel cleared while we were reading: what we read of it is gone; a row
            # changed meanwhile is stale (the next use loads the guild or user again).
            fresh = [
                r
                for r in rows
                if state.epoch(r.key.channel_id) == epochs.get(r.key.channel_id, 0)
                and not state.ledger.since(seq, r.key)
            ]
            self._adopt(fresh)
            if len(fresh) == len(rows) and not state.ledger.since(seq):
                done[owner_id] = True

        await self._owner_flight.run((what, owner_id), load)

    def _adopt(self, rows: Sequence[StmEntry]) -> None:
        state = self._state
        for row in sorted(rows, key=lambda r: r.updated_at):
            if (
                row.key in state.cache
                or row.key in state.writing  # may predate the write on its way
                or state.wiped(row.key.channel_id)
                or state.withheld(row)
            ):
                continue
            spooled = state.spool.latest(row.key) if state.spool is not None else None
            if spooled is not None and spooled.version >= row.version:
                # As in _hydrate: the row is older than what waits in the spool, and a
                # write built on it would lose to the replay.
                row = replace(spooled, categories=dict(spooled.categories))
            if not state.cache.is_expired(row):
                state.cache.put(row)

    async def recent_messages(
        self,
        channel_id: int,
        *,
        source_message_id: int | None = None,
        database_up: bool = True,
    ) -> Sequence[RawMessage]:
        """The channel's raw window, as a prompt or a summary may use it.

        Notices keep it current. Deaf, a /refresh or /forget-me made elsewhere went
        unheard: the window is checked against the stored wipe times (one query). If
        they cannot be read (``database_up=False``: the caller found the database down),
        only messages sent since the first failed read are used (a wipe must reach the
        database, so none can cover them) and the message being answered."""
        state = self._state
        window = state.windows.get(channel_id)
        if not state.ledger.deaf or not window:
            return window
        began = state.clock.now()
        try:
            if not database_up or state.ledger.database_down():
                raise MemoryUnavailable("memory storage is unavailable right now")
            wiped = await self.wiped_history(channel_id, window)
        except MemoryUnavailable:
            # Since when the wipe times could not be read: the start of this outage, as
            # far as this process saw it. Only one outage seen without a break counts:
            # the database answering in between (a new outage since), or a long silence
            # in which it may have, could have taken a wipe of older messages.
            outage = outage_number(state.sessions)
            last = state.wipes_unread_last
            if (
                outage is None
                or state.wipes_unread_since is None
                or state.wipes_unread_outage != outage
                or last is None
                or (began - last).total_seconds() > WIPES_UNREAD_GAP_SECONDS
            ):
                state.wipes_unread_since, state.wipes_unread_outage = began, outage
            state.wipes_unread_last = began
            since = state.wipes_unread_since
            return tuple(
                m for m in window if m.created_at > since or m.message_id == source_message_id
            )
        state.wipes_unread_since = None
        for message in window:
            if wiped(message):
                state.windows.delete(channel_id, message.message_id)
        # Messages that arrived during the query are checked too (by the clear time).
        return tuple(m for m in state.windows.get(channel_id) if not wiped(m))

    async def wiped_history(
        self, channel_id: int, messages: Sequence[RawMessage]
    ) -> Callable[[RawMessage], bool]:
        """Which of ``messages`` a /refresh of the channel (also one whose marker was
        deleted) or a /forget-me of their author (also one made elsewhere) wiped after
        they were sent."""
        # Batched with other channels' (every cold channel's back-fill asks once).
        times = await self.wipe_times.get_many(
            [("clear", channel_id), *(("forget", m.author_id) for m in messages)]
        )
        cleared = times[("clear", channel_id)]

        def wiped(message: RawMessage) -> bool:
            if cleared is not None and message.created_at <= cleared:
                return True
            at = times[("forget", message.author_id)]
            return at is not None and message.created_at <= at

        return wiped

    async def _load_wipe_times(self, keys: Sequence[WipeKey]) -> dict[WipeKey, datetime]:
        channels = {id_ for kind, id_ in keys if kind == "clear"}
        users = {id_ for kind, id_ in keys if kind == "forget"}
        async with self._state.storage("reading when history was wiped") as session:
            clears, forgotten = await stm_repo.wipe_times(session, channels, users)
        found: dict[WipeKey, datetime] = {("clear", c): at for c, at in clears.items()}
        found.update((("forget", u), at) for u, at in forgotten.items())
        return found
