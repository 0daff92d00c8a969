"""The memory service: the facade through which the layers above read, write and wipe STM,
each call handed to the part that owns it (see ``bot/memory/__init__.py``)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.config import Settings
from bot.db import ClearReceipt, ForgetReceipt, Notice
from bot.db.repositories import stm as stm_repo
from bot.memory.guard import MessageGuard
from bot.memory.prepare import TurnPreparer
from bot.memory.spool import DurableSpool, PendingChanges
from bot.memory.stm import (
    MemoryState,
    Notices,
    Pending,
    Reader,
    WindowCache,
    Wipes,
    Writer,
)
from bot.memory.turn import FactRecall, PreparedTurn, TurnStart, TurnState
from bot.vocabulary import (
    AuditEvent,
    Category,
    Clock,
    GuildConfig,
    RawMessage,
    ScopeKey,
    StmEntry,
    SystemClock,
)

T = TypeVar("T")
# What the async methods return: the part's own coroutine (no extra await on the way).
Call = Coroutine[Any, Any, T]


class MemoryService:
    """Short-term memory for the bot: its cache, raw windows, write path and wipes."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        settings: Settings,
        *,
        clock: Clock | None = None,
        spool: DurableSpool | None = None,
        notify: bool = True,
    ) -> None:
        state = MemoryState.build(
            sessions, settings, clock=clock or SystemClock(), spool=spool, notify=notify
        )
        self._state = state
        self.instance_id = state.instance_id
        self.settings = settings
        # The bot's one clock: turns, TTLs and rate limits all read it (tests move it).
        self.clock = state.clock
        self.defaults = state.defaults
        self.cache = state.cache
        self._ledger = state.ledger
        self._reader = Reader(state)
        self._pending = Pending(state)
        self._writer = Writer(state, self._reader, self._pending)
        # The write path's own entry points: one STM update for a turn, and /stm edit.
        self.update_stm = self._writer.update_stm
        self.admin_edit = self._writer.admin_edit
        self._wipes = Wipes(state, self._pending)
        self._notices = Notices(state)
        self._preparer = TurnPreparer(state, self._reader)

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]:
        """The session factory (for services that share this database, e.g. long-term)."""
        return self._state.sessions

    @property
    def spool(self) -> DurableSpool | None:
        """Where operations the database refused wait (None: such writes are refused)."""
        return self._state.spool

    @property
    def windows(self) -> WindowCache:
        """The recent raw messages of each channel (the back-fill primes them)."""
        return self._state.windows

    # ----------------------------------------------------------------- reading

    async def entry(self, key: ScopeKey, *, parent_channel_id: int | None = None) -> StmEntry:
        """The live entry for ``key``: from the cache, else hydrated from its row
        (single-flight), else a new empty one. Never returns an expired memory."""
        cached = self.cache.get(key)
        if cached is not None and not self._ledger.deaf:
            return cached  # the warm path, several times a turn (as Reader.entry)
        return await self._reader.read(cached, key, parent_channel_id)

    def cached_entry(self, key: ScopeKey) -> StmEntry | None:
        """The entry for ``key`` if it is cached (no database access)."""
        return self.cache.get(key)

    def load_user_memories(self, user_id: int) -> Call[list[StmEntry]]:
        """The user's recent server memories (loaded once, then cached), for their DMs."""
        return self._reader.load_user_memories(user_id)

    def recent_messages(
        self, channel_id: int, *, source_message_id: int | None = None, database_up: bool = True
    ) -> Call[Sequence[RawMessage]]:
        """The channel's raw window, as a prompt or a summary may use it."""
        return self._reader.recent_messages(
            channel_id, source_message_id=source_message_id, database_up=database_up
        )

    def wiped_history(
        self, channel_id: int, messages: Sequence[RawMessage]
    ) -> Call[Callable[[RawMessage], bool]]:
        """For a back-fill: which of ``messages`` a /refresh or /forget-me wiped since."""
        return self._reader.wiped_history(channel_id, messages)

    async def recent_events(self, guild_id: int, limit: int = 15) -> list[AuditEvent]:
        """The guild's latest audit events (``/stm history``); they hold no memory text."""
        async with self._state.storage("reading audit events") as session:
            return await stm_repo.recent_events(session, guild_id, limit)

    # ---------------------------------------------------- messages and epochs

    def observe_message(self, channel_id: int, message: RawMessage) -> None:
        """A message was posted (or the bot's reply sent): it joins the raw window."""
        self._state.windows.append(channel_id, message)

    def message_edited(self, channel_id: int, message_id: int, content: str) -> None:
        self._state.windows.edit(channel_id, message_id, content)

    def message_deleted(self, channel_id: int, message_id: int) -> None:
        """Out of the raw window, and a late echo of it stays out."""
        self._state.windows.delete(channel_id, message_id)

    def was_deleted(self, message_id: int) -> bool:
        """Whether the message was deleted (or wiped out of its window) lately."""
        return self._state.windows.was_deleted(message_id)

    def channel_epoch(self, channel_id: int) -> int:
        """The channel's count of wipes: a turn notes it when it starts."""
        return self._state.epoch(channel_id)

    def wiped_since(self, channel_id: int, epoch: int) -> bool:
        """Whether a /refresh (or a /forget-me of someone there) wiped the channel since
        ``epoch`` (see :meth:`channel_epoch`)."""
        return self._state.epoch(channel_id) != epoch

    def guard(self, channel_id: int, message_id: int, *, epoch: int | None = None) -> MessageGuard:
        """What to ask later whether the message was deleted, its channel wiped since
        ``epoch`` (None: the epoch now) or someone forgotten since now."""
        state = self._state
        return MessageGuard(
            state,
            channel_id,
            message_id,
            state.epoch(channel_id) if epoch is None else epoch,
            self._ledger.seq,
        )

    # ------------------------------------------------------------------- turns

    def prepare_turn(
        self, start: TurnStart, recall: FactRecall | None = None
    ) -> Call[PreparedTurn]:
        """Everything a turn needs before calling the model, with the long-term facts
        ``recall`` finds for it; on a warm cache no query."""
        return self._preparer.prepare(start, recall)

    def finish_turn(self, turn: TurnState) -> StmEntry | None:
        """The turn was answered: count it toward the refresh cadence; return the
        channel's memory as cached now (for deciding on a summary)."""
        return self._writer.count_turn(turn)

    def save_turn_counts(self) -> Call[int]:
        """Store the turn counts moved since the last call (see janitor)."""
        return self._writer.save_turn_counts()

    # ----------------------------------------------------------------- writing

    def writes_settled(self) -> Call[None]:
        """Return when every write on its way is settled (before the engine goes)."""
        return self._writer.settled()

    # ----------------------------------------------------------------- wiping

    def clear_channel(
        self, channel_id: int, *, guild_id: int | None, actor_user_id: int | None
    ) -> Call[ClearReceipt]:
        """``/refresh``: wipe the channel's STM in every scope."""
        return self._wipes.clear_channel(channel_id, guild_id=guild_id, actor_user_id=actor_user_id)

    def forget_user(self, user_id: int) -> Call[ForgetReceipt]:
        """``/forget-me``: delete every memory derived from the user's messages."""
        return self._wipes.forget_user(user_id)

    def purge_expired_rows(self) -> Call[int]:
        """The janitor's pass: delete rows not updated within the retention period."""
        return self._wipes.purge_expired_rows()

    # ------------------------------------------------- other processes, spool

    def apply_notice(self, notice: Notice) -> None:
        """Another process changed shared state: evict what it names."""
        self._notices.apply(notice)

    def listener_lost(self) -> None:
        """Notices go unheard: every use reads the database until the listener is back."""
        self._notices.listener_lost()

    def listening_again(self) -> None:
        """Notices are heard again: caching resumes, from empty."""
        self._notices.listening_again()

    def drop_all(self) -> None:
        """Forget everything loaded from the database (after missed notices)."""
        self._notices.drop_all()

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
        return self._pending.count

    def pending_changes_in(self, channel_id: int) -> PendingChanges:
        """The channel's writes and clear waiting in the spool (``/stm show``)."""
        return self._pending.changes_in(channel_id)

    def spool_replayed(self) -> None:
        """Every spooled operation reached the database: what it wrote is read again."""
        self._pending.replayed()

    # ------------------------------------------------------------ configuration

    def guild_config(self, guild_id: int | None) -> Call[GuildConfig]:
        """The guild's STM configuration (cached; DMs use the operator's defaults)."""
        return self._state.guilds.config(guild_id)

    def cached_guild_config(self, guild_id: int) -> GuildConfig | None:
        """The guild's configuration if it is cached (no database access)."""
        return self._state.guilds.cached(guild_id)

    def update_guild_settings(
        self,
        guild_id: int,
        actor_user_id: int,
        *,
        always_on: tuple[int, bool] | None = None,
        id_changes: Mapping[str, tuple[int, bool]] | None = None,
        **changes: Any,
    ) -> Call[GuildConfig]:
        """Change a guild's settings (see :meth:`GuildSettings.update`)."""
        return self._state.guilds.update(
            guild_id, actor_user_id, always_on=always_on, id_changes=id_changes, **changes
        )

    def set_always_on(
        self, guild_id: int, channel_id: int, enabled: bool, actor_user_id: int
    ) -> Call[GuildConfig]:
        """Mark a channel where the bot answers every message (or unmark it)."""
        return self._state.guilds.update(guild_id, actor_user_id, always_on=(channel_id, enabled))

    def set_categories(
        self, guild_id: int, actor_user_id: int, categories: Sequence[Category]
    ) -> Call[GuildConfig]:
        """Replace the guild's STM categories (an empty list: summary mode)."""
        return self._state.guilds.set_categories(guild_id, actor_user_id, categories)

    def cross_context_opt_in(self, user_id: int) -> Call[bool]:
        """Whether the user lets their DMs show their server memories (cached)."""
        return self._state.guilds.opt_in(user_id)

    def set_cross_context_opt_in(self, user_id: int, enabled: bool) -> Call[None]:
        return self._state.guilds.set_opt_in(user_id, enabled)
