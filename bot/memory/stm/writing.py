"""The STM write path (SPEC §3): sanitize → mutate the live cache entries → persist the
rows and their audit events in one transaction, or spool them, or roll the cache back;
and the turn counts of the refresh cadence."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Literal

from sqlalchemy.ext.asyncio import AsyncSession

from bot.db import EventRecord, stm_notice
from bot.db.repositories import stm as stm_repo
from bot.memory.stm.change import (
    REASON_ALL_EMPTY,
    REASON_CATEGORIES_CHANGED,
    WriteResult,
    apply_change,
    keeps_a_value,
    rejected,
    sanitized_change,
    write_shape,
)
from bot.memory.stm.commit import ClearedElsewhere, GroupCommit, StaleWrite
from bot.memory.stm.reading import Reader
from bot.memory.stm.state import MemoryState
from bot.memory.stm.unsynced import Pending
from bot.memory.turn import (
    REASON_ALREADY_UPDATED,
    REASON_CHANGED,
    REASON_CLEARED,
    REASON_DISABLED,
    REASON_STORAGE,
    TurnState,
    messages_after_marker,
)
from bot.vocabulary import GuildConfig, Marker, MemoryUnavailable, Provenance, ScopeKey, StmEntry

log = logging.getLogger(__name__)

Origin = Literal["model_tool", "summarizer", "admin", "user_command", "import"]


def _update_events(
    before: Sequence[StmEntry], entries: Sequence[StmEntry], turn: TurnState, origin: Origin
) -> list[EventRecord]:
    """The audit event of each entry an update changed (sizes, never the text)."""
    return [
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


class Writer:
    """Writes STM: at most one update per turn, never reported saved unless it is stored
    (or durably spooled), never over a wipe made after its turn started."""

    def __init__(self, state: MemoryState, reader: Reader, pending: Pending) -> None:
        self._state = state
        self._reader = reader
        self._pending = pending
        self._commits = GroupCommit(state.sessions, self._announce_written)
        # Entries whose turn count changed since save_turn_counts last stored them.
        self._counts_unsaved: dict[ScopeKey, StmEntry] = {}

    async def _announce_written(self, session: AsyncSession, entries: Sequence[StmEntry]) -> None:
        await self._state.announce(session, stm_notice(self._state.instance_id, entries))

    async def update_stm(
        self,
        turn: TurnState,
        *,
        summary: str | None = None,
        categories: Mapping[str, str] | None = None,
        origin: Origin = "model_tool",
        marker: Marker | None = None,
        expected_version: int | None = None,
        detail: str | None = None,
    ) -> WriteResult:
        """Apply one STM update for ``turn`` (guards, sanitize, merge, write through).
        ``expected_version``: refuse unless the memory is still at that version (what the
        caller built the update on). ``detail``: the provenance's detail (by default the
        model's name for the model's and the summarizer's writes)."""
        state = self._state
        change = await self._change(turn, origin, summary, categories)
        if isinstance(change, WriteResult):
            return change
        if detail is None and origin in ("model_tool", "summarizer"):
            detail = turn.model
        provenance = Provenance(origin, detail, turn.user_id, turn.source_message_id)
        async with state.locks(turn.channel_id):
            entries = await self._entries(turn)
            if isinstance(entries, WriteResult):
                return entries
            # Again: the settings may have changed while this write waited for the lock.
            config = await self._current_config(turn, origin)
            if isinstance(config, WriteResult):
                return config
            # Checked after the awaits above, with no await until the cache is mutated.
            refused = self._refused_in_lock(
                turn, entries[0], config, origin, marker, expected_version, categories=change[1]
            )
            if refused is not None:
                return refused
            before = [replace(e, categories=dict(e.categories)) for e in entries]
            self._apply(turn, entries, change, config, marker or turn.marker, provenance)
            result = await self._write(entries, before, turn, origin)
            if result.ok and origin == "model_tool":
                turn.stm_updated = True
            return result

    async def _change(
        self,
        turn: TurnState,
        origin: Origin,
        summary: str | None,
        categories: Mapping[str, str] | None,
    ) -> tuple[str | None, dict[str, str] | None] | WriteResult:
        """The sanitized summary or category values, or why the write is refused before
        the channel's lock is taken."""
        if origin == "model_tool":
            reason = turn.stm_block_reason()
            if reason is not None:
                return rejected(reason)
        config = await self._current_config(turn, origin)
        if isinstance(config, WriteResult):
            return config
        return sanitized_change(config, summary, categories)

    async def _entries(self, turn: TurnState) -> list[StmEntry] | WriteResult:
        """The live entries of every key ``turn`` writes, or why they cannot be read."""
        try:
            return [
                await self._reader.entry(key, parent_channel_id=turn.parent_channel_id)
                for key in turn.write_keys
            ]
        except MemoryUnavailable:
            return rejected(REASON_STORAGE)

    def _refused_in_lock(
        self,
        turn: TurnState,
        channel_entry: StmEntry,
        config: GuildConfig,
        origin: Origin,
        marker: Marker | None,
        expected_version: int | None,
        *,
        categories: Mapping[str, str] | None,
    ) -> WriteResult | None:
        """Why the write must be refused, judged on the entries as they are under the
        channel's lock (``channel_entry``: the first key's), or None."""
        if self._state.epoch(turn.channel_id) != turn.epoch:
            return rejected(REASON_CLEARED)
        if turn.history_trimmed and marker is None and channel_entry.marker != turn.marker_at_start:
            # Built on part of what the marker, moved meanwhile, now claims is covered.
            return rejected(REASON_CHANGED)
        if origin == "model_tool" and turn.stm_updated:
            return rejected(REASON_ALREADY_UPDATED)
        if expected_version is not None and channel_entry.version != expected_version:
            return rejected(REASON_CHANGED)
        if categories is not None and not keeps_a_value(channel_entry, categories, config):
            return rejected(REASON_ALL_EMPTY)
        return None

    def _apply(
        self,
        turn: TurnState,
        entries: Sequence[StmEntry],
        change: tuple[str | None, Mapping[str, str] | None],
        config: GuildConfig,
        marker: Marker | None,
        provenance: Provenance,
    ) -> None:
        """Change the live cache entries of the write (``change``: the sanitized summary or
        category values), each with every contributor."""
        state = self._state
        summary, categories = change
        # Every key of one write holds the same text, so every row carries the whole
        # conversation's contributors: /forget-me must find the user's words in other
        # users' copies too, not only in the channel's row.
        contributors = self._contributors(turn, entries[0], marker)
        contributors |= turn.shown_contributors() | turn.read_authors
        contributors |= turn.memory_contributors
        for entry in entries:
            contributors |= set(entry.contributor_ids)
        now = state.clock.now()
        for entry in entries:
            apply_change(
                entry,
                summary=summary,
                categories=categories,
                config=config,
                marker=marker,
                contributors=contributors,
                provenance=provenance,
                now=now,
            )
            state.cache.put(entry)  # re-insert: the TTL restarts from this update

    async def _write(
        self,
        entries: Sequence[StmEntry],
        before: Sequence[StmEntry],
        turn: TurnState,
        origin: Origin,
    ) -> WriteResult:
        """Persist the update of ``entries`` (built on ``before``) and its audit events
        (:meth:`_persist`), their keys marked "being written" meanwhile."""
        state = self._state
        events = _update_events(before, entries, turn, origin)
        keys = [e.key for e in entries]
        state.writing.update(keys)
        try:
            return await self._persist(entries, events, before, turn)
        finally:
            state.writing -= Counter(keys)

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
        """``/stm edit``: an admin replaces the channel's memory (origin ``admin``);
        ``epoch`` and ``started_at``: when the form was opened (a /refresh since refuses
        the edit, as it refuses a turn's write)."""
        state = self._state
        turn = TurnState(
            channel_id=channel_id,
            user_id=actor_user_id,
            guild_id=guild_id,
            config=await state.guilds.config(guild_id),
            epoch=state.epoch(channel_id) if epoch is None else epoch,
            started_at=started_at or state.clock.now(),
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

    async def _current_config(self, turn: TurnState, origin: str) -> GuildConfig | WriteResult:
        """The guild's settings as they are now (cached: no query), or why a write must
        be refused: memory turned off (for all but an admin's own edit), or categories
        changed since the turn began (a write shaped for the old ones would wipe what
        is stored under the new ones)."""
        try:
            config = await self._state.guilds.config(turn.guild_id)
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
        window = self._state.windows.get(turn.channel_id)
        for message in messages_after_marker(window, channel_entry.marker):
            if marker is not None and message.message_id > marker.message_id:
                break
            if not message.is_bot:
                contributors.add(message.author_id)
        return contributors

    async def _persist(
        self,
        entries: Sequence[StmEntry],
        events: Sequence[EventRecord],
        before: Sequence[StmEntry],
        turn: TurnState,
    ) -> WriteResult:
        """Write ``entries`` (built on ``before``) for ``turn``: to the database, or to
        the spool when it cannot take them (see _spool_write)."""
        state = self._state
        if self._pending.skip_database():
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
            state.writing.update(entry.key for entry in entries)
            raise
        if outcome is None:
            return WriteResult("saved")
        if isinstance(outcome, StaleWrite | ClearedElsewhere):
            # Another process wrote a newer version, or wiped the channel: drop ours (and
            # the stale cache) so the next read hydrates the truth; never report it saved.
            for entry in entries:
                state.cache.pop(entry.key)
            if isinstance(outcome, ClearedElsewhere):
                return rejected(REASON_CLEARED)
            return rejected("a newer version of this memory exists; nothing was saved")
        # GroupCommit.commit told the breaker of the database that failed.
        return self._spool_write(entries, events, before, turn)

    def _abandoned_write(self, entries: Sequence[StmEntry], outcome: Exception | None) -> None:
        """The turn that made a write was cancelled before it was settled. Committed, the
        cache holds what is stored; if not, the entries go (unless a later write replaced
        them) and the next read hydrates the truth. (Never reported saved, the write is
        not spooled either.)"""
        state = self._state
        state.writing -= Counter(entry.key for entry in entries)
        if outcome is None:
            return
        for entry in entries:
            if state.cache.get(entry.key) is entry:
                state.cache.pop(entry.key)

    async def settled(self) -> None:
        """Return when every STM write on its way to the database is settled."""
        await self._commits.settled()

    def _spool_write(
        self,
        entries: Sequence[StmEntry],
        events: Sequence[EventRecord],
        before: Sequence[StmEntry],
        turn: TurnState,
    ) -> WriteResult:
        state = self._state
        refused = self._refused_before_spooling(entries, turn)
        if state.spool is not None and refused is None:
            try:
                state.spool.append(entries, events, started_at=turn.started_at, bases=before)
            except (OSError, ValueError):  # ValueError: the spool file is closed
                log.exception("STM spool append failed")
            else:
                # Stored durably: whatever follows, it is saved (and will be replayed).
                return WriteResult("saved, pending sync")
        # Never report or keep what was not saved: what was cached before goes back,
        # unless the entry left the cache meanwhile (a /refresh, a /forget-me, a notice):
        # then what it held may be gone from the database too.
        for old, new in zip(before, entries, strict=True):
            if state.cache.get(old.key) is new:
                state.cache.put(old)
        if refused is not None:
            return rejected(refused)
        return rejected("the memory could not be saved right now (database unavailable)")

    def _refused_before_spooling(self, entries: Sequence[StmEntry], turn: TurnState) -> str | None:
        """Why a write must not go to the spool: a /refresh or /forget-me heard while it
        waited for the database (its channel's epoch moved), or another process's
        /forget-me, heard of here, of a user it is derived from since its turn began. The
        database refuses such a write, and so would the replay: spooled, it would be
        acknowledged as saved, then dropped, and later writes here would build on it.

        (A turn begun before the listener was lost and back is spooled: only the replay
        can tell whether a wipe refuses it; see spool_replay._chain_wiped.)"""
        if self._state.epoch(turn.channel_id) != turn.epoch or self._forgotten_since(
            entries, turn.started_at
        ):
            return REASON_CLEARED
        return None

    def _forgotten_since(self, entries: Sequence[StmEntry], started_at: datetime | None) -> bool:
        """Whether another process's /forget-me, heard of here, of a user ``entries`` are
        derived from came after the writing turn began (a deletion queued behind it
        instead would reach rows written since the forget, by turns begun after it)."""
        if started_at is None:
            return False
        return any(
            started_at <= forgotten_at and any(e.derived_from(user_id) for e in entries)
            for user_id, forgotten_at in list(self._state.forgotten_elsewhere.items())
        )

    # ------------------------------------------------------------- turn counts

    def count_turn(self, turn: TurnState) -> StmEntry | None:
        """Count an answered turn toward the cadence: in the cache now, in the row at the
        next :meth:`save_turn_counts` (a restart, or an eviction, forgets at most the
        turns since). Returns the channel's memory as cached now."""
        state = self._state
        entry = state.cache.get(turn.channel_key)
        if turn.stm_updated:
            return entry
        if entry is not None and state.epoch(turn.channel_id) == turn.epoch:
            entry.turns_since_refresh += 1
            if entry.version > 0:  # a row exists to keep it (a new entry has none yet)
                self._counts_unsaved[entry.key] = entry
        return entry

    async def save_turn_counts(self) -> int:
        """Store the turn counts changed since the last call in their rows (one
        statement); return how many rows took theirs (a row written since keeps its
        own). If the database fails, the counts are kept for the next call."""
        entries = list(self._counts_unsaved.values())
        if not entries:
            return 0
        self._counts_unsaved.clear()
        try:
            async with self._state.storage("saving turn counts") as session, session.begin():
                return await stm_repo.save_turn_counts(session, entries)
        except MemoryUnavailable:
            for entry in entries:  # unless counted again meanwhile (the same object)
                self._counts_unsaved.setdefault(entry.key, entry)
            raise
