"""Guild STM settings and users' cross-context opt-ins: stored, cached, announced.

Every turn reads its guild's configuration, so it is cached (a warm turn makes no
query) and read single-flight on a miss. A change commits with its notice, so other
processes drop their copy; this process drops its own after the commit, and a read that
the change overtook is used once, not cached (see :class:`NoticeLedger`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from cachetools import LRUCache
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.db import EventRecord, Notice, memory_session
from bot.db.repositories import guilds as guild_repo
from bot.db.repositories import stm as stm_repo
from bot.memory.stm.coherence import STALE_READ_RETRIES, NoticeLedger
from bot.runtime import SingleFlight
from bot.vocabulary import Category, GuildConfig

Announce = Callable[[AsyncSession, Notice], Awaitable[None]]


def _guild(guild_id: int) -> tuple[str, int]:
    return ("guild", guild_id)


def _opt_in(user_id: int) -> tuple[str, int]:
    return ("opt-in", user_id)


class GuildSettings:
    """The configuration of every guild (``guild_settings`` and ``stm_categories``) and
    every user's cross-context opt-in, as this process caches them."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        defaults: GuildConfig,
        ledger: NoticeLedger,
        announce: Announce,
        instance_id: str,
    ) -> None:
        self.sessions = sessions
        self.defaults = defaults
        self._ledger = ledger
        self._announce = announce
        self._instance_id = instance_id
        self._configs: LRUCache[int, GuildConfig] = LRUCache(10_000)
        self._opt_ins: LRUCache[int, bool] = LRUCache(50_000)
        self._config_flight: SingleFlight[int, GuildConfig] = SingleFlight()
        self._opt_in_flight: SingleFlight[tuple[int, int], bool] = SingleFlight()

    # ----------------------------------------------------------------- reading

    async def config(self, guild_id: int | None) -> GuildConfig:
        """The guild's STM configuration (cached; DMs use the operator's defaults)."""
        if guild_id is None:
            return self.defaults
        cached = self._configs.get(guild_id)
        if cached is not None and not self._ledger.deaf:
            return cached  # the warm path, on every turn: no closure, no inner coroutine
        return await self._ledger.cached_or_read(
            cached,
            lambda: self._config_flight.run(guild_id, lambda: self._load(guild_id)),
        )

    async def _load(self, guild_id: int) -> GuildConfig:
        for _ in range(STALE_READ_RETRIES):
            seq = self._ledger.seq
            async with memory_session(self.sessions, "loading guild settings") as session:
                config = await guild_repo.load_guild_config(session, guild_id, self.defaults)
            if not self._ledger.since(seq, _guild(guild_id)):
                self._configs[guild_id] = config
                break
        return config

    def cached(self, guild_id: int) -> GuildConfig | None:
        """The guild's configuration if it is cached (no database access)."""
        return None if self._ledger.deaf else self._configs.get(guild_id)

    def invalidate(self, guild_id: int) -> None:
        """Drop the guild's cached configuration: the next use reads it."""
        self._configs.pop(guild_id, None)

    async def opt_in(self, user_id: int) -> bool:
        """Whether the user lets their DMs show their server memories (cached)."""

        async def load() -> bool:
            seq = self._ledger.seq
            async with memory_session(self.sessions, "loading privacy settings") as session:
                found = await guild_repo.cross_context_opt_in(session, user_id)
            # Changed while we read (here or elsewhere): use once, do not cache.
            if not self._ledger.since(seq, _opt_in(user_id)):
                self._opt_ins[user_id] = found
            return found

        # A read begun before a change made here is not joined after it.
        since = self._ledger.last(_opt_in(user_id))
        return await self._ledger.cached_or_read(
            self._opt_ins.get(user_id), lambda: self._opt_in_flight.run((user_id, since), load)
        )

    # ---------------------------------------------------------------- changing

    async def set_opt_in(self, user_id: int, enabled: bool) -> None:
        async with (
            memory_session(self.sessions, "saving privacy settings") as session,
            session.begin(),
        ):
            await guild_repo.set_cross_context_opt_in(session, user_id, enabled)
            # DMs may be served by another shard process: it must not keep the old answer.
            await self._announce(session, {"o": self._instance_id, "t": "opt-in", "u": user_id})
        self._ledger.note(_opt_in(user_id))
        self._opt_ins[user_id] = enabled

    async def update(
        self,
        guild_id: int,
        actor_user_id: int,
        *,
        always_on: tuple[int, bool] | None = None,
        id_changes: Mapping[str, tuple[int, bool]] | None = None,
        **changes: Any,
    ) -> GuildConfig:
        """Change a guild's settings in one transaction (all or nothing); ``always_on``
        marks one channel as answering every message, or unmarks it; ``id_changes`` adds
        an id to (or removes it from) other lists, such as the access lists."""
        # The always-on channel is added or removed by the database, against the list as
        # committed (not this process's cached copy): toggles elsewhere are kept.
        async with (
            memory_session(self.sessions, "saving guild settings") as session,
            session.begin(),
        ):
            await guild_repo.update_guild_settings(
                session,
                guild_id,
                self.defaults,
                changes,
                always_on=always_on,
                id_changes=id_changes,
            )
            await self._changed(
                session,
                guild_id,
                EventRecord("settings", guild_id=guild_id, actor_user_id=actor_user_id),
            )
        return await self._reloaded(guild_id)

    async def set_categories(
        self, guild_id: int, actor_user_id: int, categories: Sequence[Category]
    ) -> GuildConfig:
        """Replace the guild's STM categories (an empty list: summary mode)."""
        async with memory_session(self.sessions, "saving categories") as session, session.begin():
            await guild_repo.replace_categories(session, guild_id, categories)
            await self._changed(
                session,
                guild_id,
                EventRecord("categories", guild_id=guild_id, actor_user_id=actor_user_id),
            )
        return await self._reloaded(guild_id)

    async def _changed(self, session: AsyncSession, guild_id: int, event: EventRecord) -> None:
        """In the change's transaction: its notice and its audit event."""
        await self._announce(session, {"o": self._instance_id, "t": "guild", "g": guild_id})
        await stm_repo.add_events(session, [event])

    async def _reloaded(self, guild_id: int) -> GuildConfig:
        # As a notice from another process would: a read already in flight (it began
        # before the commit) must not cache the old configuration.
        self._ledger.note(_guild(guild_id))
        self.invalidate(guild_id)
        return await self.config(guild_id)

    # ------------------------------------------------------------- coherence

    def guild_noticed(self, guild_id: int) -> None:
        """Another process changed the guild's settings."""
        self._ledger.mark(_guild(guild_id))
        self.invalidate(guild_id)

    def opt_in_noticed(self, user_id: int) -> None:
        """Another process changed the user's opt-in."""
        self._ledger.mark(_opt_in(user_id))
        self._opt_ins.pop(user_id, None)

    def forget_user(self, user_id: int) -> None:
        """A /forget-me: the user's opt-in goes with the rest of their data."""
        self._opt_ins.pop(user_id, None)

    def drop_all(self) -> None:
        """Forget everything read (after missed notices)."""
        self._configs.clear()
        self._opt_ins.clear()
