"""Who is a member of which server, as far as a DM turn needs to know.

The bot has no members intent, so most members are not cached: they are fetched from
Discord before an opted-in DM turn and kept a few minutes, so a member who loses access
stops seeing that server's memory within minutes at most.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import aiohttp
import discord
from cachetools import TTLCache

from bot.memory import LongTermService, MemoryService
from bot.vocabulary import MemoryUnavailable

MEMBER_CHECK_SECONDS = 300
# At most this many servers are asked about one user before a DM turn (the rest show
# nothing this turn; they are asked on later turns as the cache fills).
MAX_MEMBER_FETCHES = 10
MEMBER_FETCH_TIMEOUT_SECONDS = 5.0


class Members:
    """Members of the bot's servers: cached by the gateway, or fetched lately."""

    def __init__(self, client: discord.Client) -> None:
        self.client = client
        # None: fetched, and not a member any more.
        self._fetched: TTLCache[tuple[int, int], discord.Member | None] = TTLCache(
            maxsize=10_000, ttl=MEMBER_CHECK_SECONDS
        )

    def member(self, guild: discord.Guild, user_id: int) -> discord.Member | None:
        """The user as a member of ``guild`` as far as known (cached or fetched lately)."""
        return self._cached(guild, user_id) or self._fetched.get((guild.id, user_id))

    def sees(self, user_id: int, channel_id: int) -> bool:
        """Whether the user can read that server channel now (never a private thread)."""
        channel = self.client.get_channel(channel_id)
        if not isinstance(channel, discord.abc.GuildChannel | discord.Thread):
            return False
        if isinstance(channel, discord.Thread) and (
            channel.type is discord.ChannelType.private_thread or channel.parent is None
        ):
            return False  # a private thread, or one whose parent (and rights) is unknown
        member = self.member(channel.guild, user_id)
        return member is not None and channel.permissions_for(member).view_channel

    async def fetch_missing(self, guild_ids: Iterable[int | None], user_id: int) -> None:
        """Fetch the user's membership in those servers where it is not known yet."""
        missing = [
            guild
            for guild in (self.client.get_guild(guild_id or 0) for guild_id in guild_ids)
            if guild is not None
            and self._cached(guild, user_id) is None
            and (guild.id, user_id) not in self._fetched
        ]
        members = await asyncio.gather(
            *(self._fetch(guild, user_id) for guild in missing[:MAX_MEMBER_FETCHES])
        )
        for guild, member in zip(missing, members, strict=False):
            self._fetched[(guild.id, user_id)] = member

    async def fetch_for_dm(
        self, memory: MemoryService, longterm: LongTermService, user_id: int
    ) -> None:
        """Before an opted-in DM turn: the user's membership in every server whose memory
        it could show."""
        try:
            if not await memory.cross_context_opt_in(user_id):
                return
            guild_ids = {e.key.guild_id for e in await memory.load_user_memories(user_id)}
            guild_ids |= await longterm.guild_ids(user_id)
        except MemoryUnavailable:
            return
        await self.fetch_missing(guild_ids, user_id)

    def _cached(self, guild: discord.Guild, user_id: int) -> discord.Member | None:
        # Only with the members intent does the gateway keep a member current; without
        # it a cached member's role changes are never sent.
        return guild.get_member(user_id) if self.client.intents.members else None

    @staticmethod
    async def _fetch(guild: discord.Guild, user_id: int) -> discord.Member | None:
        try:
            async with asyncio.timeout(MEMBER_FETCH_TIMEOUT_SECONDS):
                return await guild.fetch_member(user_id)
        except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError):
            return None  # left the server (404), or unknown right now: show nothing
