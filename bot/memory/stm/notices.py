"""Notices from other processes on the same database: what each evicts here, and what
happens while they go unheard (the listener lost) and once they are heard again."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import ClassVar

from bot.db import Notice, database_answered
from bot.memory.stm.coherence import FORGET_NOTICED
from bot.memory.stm.state import MemoryState
from bot.vocabulary import ScopeKey

log = logging.getLogger(__name__)


class Notices:
    """Applies other processes' notices: evicts what they name, never inserts (a late
    notice cannot resurrect anything; the next read hydrates the truth)."""

    def __init__(self, state: MemoryState) -> None:
        self._state = state

    def apply(self, notice: Notice) -> None:
        """Another process changed shared state (this process's own echoes are ignored)."""
        state = self._state
        if notice.get("o") == state.instance_id:
            return
        state.ledger.heard()
        handler = self._handlers.get(notice.get("t"))
        if handler is not None:  # a kind of a newer version of the bot: nothing to evict
            handler(self, notice)

    def _on_stm(self, notice: Notice) -> None:
        state = self._state
        for kind, guild, user, channel, _version in notice.get("k", ()):
            key = ScopeKey("server" if kind == "server" else "user", int(channel), guild, user)
            state.ledger.mark(key)
            # Whatever the versions: rows deleted without a notice naming them (the
            # janitor's purge, a /forget-me) count from 1 again, so a cached version
            # higher than the notice's is no proof of being newer. A notice never
            # inserts, so evicting on a late one costs only a re-read.
            state.cache.pop(key)
            # "Other channels" of that guild and that user's DMs load again on next use
            # (a memory that was not cached here may be new, or newer).
            if guild is not None:
                state.guilds_hydrated.pop(int(guild), None)
            if user is not None:
                state.users_hydrated.pop(int(user), None)

    def _on_clear(self, notice: Notice) -> None:
        state = self._state
        channel_id = int(notice["c"])
        state.new_epoch(channel_id)
        for key in state.cache.keys_of_channel(channel_id):
            state.cache.pop(key)
        state.windows.clear(channel_id)
        if state.spool is not None:
            # What waits in this process's spool was wiped too: not hydrated back.
            state.spool.blank_channel(channel_id)

    def _on_forget(self, notice: Notice) -> None:
        state = self._state
        user_id = int(notice["u"])
        state.ledger.mark(FORGET_NOTICED)
        # When it was asked for (a turn that began after it is not concerned); a notice
        # of an older version of the bot does not say: the time it was heard, then.
        sent_at = notice.get("at")
        forgotten_at = datetime.fromisoformat(sent_at) if sent_at else state.clock.now()
        # A write of theirs still on its way may yet land in the spool: see
        # Writer._refused_before_spooling.
        state.forgotten_elsewhere[user_id] = forgotten_at
        if state.spool is not None and state.spool.holds_user(user_id):
            # Writes of theirs still wait in this process's spool and would be replayed
            # after the deletion elsewhere: the deletion queues behind them here too.
            try:
                state.spool.append_forget(user_id, forgotten_at)
            except (OSError, ValueError):
                log.exception("could not queue a /forget-me behind the spool")
        elif state.spool is not None:
            state.spool.drop_states_of(user_id)
        # As in forget_user: no turn already holding their words may store them.
        channels = state.windows.channels_with_author(user_id)
        channels |= {key.channel_id for key in state.drop_derived_from(user_id)}
        for channel_id in channels:
            state.new_epoch(channel_id)
        state.windows.forget_author(user_id)
        state.guilds.forget_user(user_id)
        state.forget_set_aside(user_id)
        state.drop_stand_ins()

    def _on_purge(self, notice: Notice) -> None:
        # The janitor deleted rows (not named): in-flight reads are stale, and the
        # versions held for expired rows go (see MemoryState.drop_stand_ins).
        self._state.ledger.mark(FORGET_NOTICED)
        self._state.drop_stand_ins()

    def _on_opt_in(self, notice: Notice) -> None:
        self._state.guilds.opt_in_noticed(int(notice["u"]))

    def _on_guild(self, notice: Notice) -> None:
        guild_id = int(notice["g"])
        self._state.guilds.guild_noticed(guild_id)
        self._state.guilds_hydrated.pop(guild_id, None)

    # What each kind of notice (its "t") evicts.
    _handlers: ClassVar[dict[object, Callable[[Notices, Notice], None]]] = {
        "stm": _on_stm,
        "clear": _on_clear,
        "forget": _on_forget,
        "purge": _on_purge,
        "opt-in": _on_opt_in,
        "guild": _on_guild,
    }

    def listener_lost(self) -> None:
        """The notice connection is gone: until it is back every use reads the database
        (slower, never stale); the cache only stands in when the database is down too,
        other channels are not shown, and the raw windows are checked against the stored
        wipe times (see Reader.recent_messages)."""
        ledger = self._state.ledger
        if not ledger.deaf:
            log.warning(
                "cache notices unavailable: reading memory from the database on every use "
                "until the listener is back"
            )
        ledger.deaf = True

    def listening_again(self) -> None:
        """The notice connection is back (LISTEN done, so the database answered): caching
        resumes, from empty."""
        state = self._state
        database_answered(state.sessions)
        state.ledger.deaf = False
        state.wipes_unread_since = None
        self.drop_all()

    def drop_all(self) -> None:
        """Forget everything loaded from the database (after missed notices). Running
        turns keep their epochs: a /refresh missed here still refuses their writes in
        the database (``stm_clears``), or at the replay of the spool."""
        state = self._state
        state.ledger.note(FORGET_NOTICED)
        state.cache.clear()
        # The raw windows too: a missed /forget-me leaves the user's words in them, and a
        # turn starting now (after the forget, so not refused by it) would store them.
        state.windows.drop_all()
        state.guilds.drop_all()
        state.guilds_hydrated.clear()
        state.users_hydrated.clear()
