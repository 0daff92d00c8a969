"""Wipes in a live process (``/refresh``, ``/forget-me``, the janitor's purge) that no turn
already running can undo: in the cache, the raw windows and the database, or the spool."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from bot.db import (
    DB_TIMEOUT_SECONDS,
    ClearReceipt,
    EventRecord,
    ForgetReceipt,
    database_answered,
    database_deadline,
    delete_channel_rows,
    delete_user_rows,
    open_session,
)
from bot.db.repositories import stm as stm_repo
from bot.memory.stm.coherence import FORGET_NOTICED
from bot.memory.stm.state import MemoryState
from bot.memory.stm.unsynced import NotTried, Pending, deletion_deferred
from bot.vocabulary import MemoryUnavailable

# How long a channel's clear time is kept (``stm_clears``): longer than any turn, and
# long enough to bound a back-fill whose /refresh marker was deleted.
CLEAR_RECORD_KEPT = timedelta(days=30)
# How long a /forget-me is kept (``stm_forgets``, a hash of the id): longer than any turn,
# and as long as a spool may wait for its replay (a process down for weeks is not).
FORGET_RECORD_KEPT = CLEAR_RECORD_KEPT


class Wipes:
    """The deletions users and the janitor ask for."""

    def __init__(self, state: MemoryState, pending: Pending) -> None:
        self._state = state
        self._pending = pending

    async def clear_channel(
        self, channel_id: int, *, guild_id: int | None, actor_user_id: int | None
    ) -> ClearReceipt:
        """``/refresh``: wipe the channel's STM in every scope, cache and rows. When the
        rows cannot be deleted now the deletion is spooled (``pending_sync``); without a
        spool that raises :class:`MemoryUnavailable`. Either way the cache is cleared and
        the channel is never hydrated back from those rows."""
        state = self._state
        async with state.locks(channel_id):
            state.new_epoch(channel_id)
            state.tombstones.add(channel_id)
            held = self._drop_cached(channel_id)
            state.windows.clear(channel_id)
            at = state.clock.now()
            sessions = state.sessions
            try:
                rows = await self._delete_channel_rows(channel_id, guild_id, actor_user_id)
            except Exception as exc:
                deletion_deferred(sessions, f"clearing channel {channel_id}", exc)
                try:
                    self._pending.queue_or_raise(
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
            state.tombstones.discard(channel_id)
            # The refresh counts from when it held the lock: what was said while it waited
            # for it is wiped too (as the database, and every other process, has it).
            state.windows.clear(channel_id)
            return ClearReceipt(rows=rows, cache_entries=held)

    def _drop_cached(self, channel_id: int) -> int:
        """Drop the channel's entries from the cache; how many held a memory (the receipt
        counts memories, not the empty entries a mere read caches)."""
        state = self._state
        held = 0
        for key in state.cache.keys_of_channel(channel_id):
            popped = state.cache.pop(key)
            if popped is not None and popped.has_content:
                held += 1
        return held

    async def _delete_channel_rows(
        self, channel_id: int, guild_id: int | None, actor_user_id: int | None
    ) -> int:
        """Delete the channel's rows in the database (raises :class:`NotTried` while the
        database is skipped); how many were deleted."""
        state = self._state
        if self._pending.skip_database():
            raise NotTried
        async with (
            database_deadline(DB_TIMEOUT_SECONDS),
            open_session(state.sessions, "clearing a channel") as session,
            session.begin(),
        ):
            return await delete_channel_rows(
                session,
                channel_id,
                state.clock.now,  # read once the channel's lock is held
                guild_id=guild_id,
                actor_user_id=actor_user_id,
                origin=state.instance_id,
                notify=state.notify,
            )

    def _clear_not_done(self, channel_id: int) -> None:
        """A clear reported as not done: the rows stay, and may be read again (what was
        cached meanwhile was read as wiped: empty, so it goes too)."""
        state = self._state
        state.tombstones.discard(channel_id)
        for key in state.cache.keys_of_channel(channel_id):
            state.cache.pop(key)

    async def forget_user(self, user_id: int) -> ForgetReceipt:
        """``/forget-me``: delete every memory derived from the user's messages.

        Every channel that could hold something of theirs (a cached memory, their words
        in a raw window) gets a new epoch, so a turn here already reading them cannot
        store them again; reads in flight do not cache what they read; the channels'
        locks are taken, so a write on its way lands before the deletion, not after. The
        deletion is recorded in ``stm_forgets``: a write from a turn that started before
        it (any process, or a spool replay) is refused by the database."""
        state = self._state
        # Reads in flight may return what is about to be deleted: they must not cache it.
        state.ledger.note(FORGET_NOTICED)
        affected = {entry.key.channel_id for entry in state.derived_from(user_id)}
        affected |= state.windows.channels_with_author(user_id)
        for channel_id in affected:
            state.new_epoch(channel_id)
        async with contextlib.AsyncExitStack() as held:
            for channel_id in sorted(affected):
                await held.enter_async_context(state.locks(channel_id))
            return await self._forget_user(user_id)

    async def _forget_user(self, user_id: int) -> ForgetReceipt:
        state = self._state
        dropped = len(state.drop_derived_from(user_id))
        raw = state.windows.forget_author(user_id)
        state.guilds.forget_user(user_id)
        state.forget_set_aside(user_id)
        at = state.clock.now()
        sessions = state.sessions
        try:
            if self._pending.skip_database():
                raise NotTried
            async with (
                database_deadline(DB_TIMEOUT_SECONDS * 2),
                open_session(sessions, "forgetting a user") as session,
                session.begin(),
            ):
                deleted = await delete_user_rows(
                    session,
                    user_id,
                    state.clock.now,  # read once the locks are held
                    origin=state.instance_id,
                    notify=state.notify,
                )
        except Exception as exc:
            deletion_deferred(sessions, "forgetting a user", exc)
            self._pending.queue_or_raise(exc, lambda spool: spool.append_forget(user_id, at))
            state.ledger.note(FORGET_NOTICED)  # as below: what was cached while it was tried goes
            state.drop_derived_from(user_id)
            return ForgetReceipt(0, 0, 0, 0, dropped, raw, pending_sync=True)
        database_answered(sessions)
        # The forget counts from when it held its locks: what they said while it waited
        # for them is forgotten too (as the database, and every other process, has it).
        raw += state.windows.forget_author(user_id)
        # A read that began while the deletion was on its way (a turn of another channel
        # member) may have cached a row it deleted: such reads are stale, and what they
        # cached goes.
        state.ledger.note(FORGET_NOTICED)
        state.drop_derived_from(user_id)
        state.drop_stand_ins()
        return ForgetReceipt(
            user_rows=deleted.stm.user_rows,
            contributed_rows=deleted.stm.contributed_rows,
            long_term=deleted.long_term,
            events=deleted.events,
            cache_entries=dropped,
            raw_messages=raw,
        )

    async def purge_expired_rows(self) -> int:
        """The janitor's pass: delete rows not updated within the retention period. When
        it deleted any, every process (this one too) drops the entries standing in for
        expired rows: their versions would outrank the rows written next."""
        state = self._state
        now = state.clock.now()
        cutoff = now - timedelta(days=state.settings.stm.retention_days)
        async with state.storage("purging expired rows") as session, session.begin():
            deleted = await stm_repo.delete_older_than(session, cutoff)
            await stm_repo.purge_clears(session, now - CLEAR_RECORD_KEPT)
            await stm_repo.purge_forgets(session, now - FORGET_RECORD_KEPT)
            if deleted:
                await stm_repo.add_events(session, [EventRecord("expire")])
                # One small notice, not the keys: a pass may delete thousands of rows.
                await state.announce(session, {"o": state.instance_id, "t": "purge"})
        if deleted:
            state.ledger.note(FORGET_NOTICED)  # a read in flight may hold a row just deleted
            state.drop_stand_ins()
        return deleted
