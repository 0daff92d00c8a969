"""The chat pipeline's door: whether a message is addressed to the bot, and whether its
author may start a turn here, decided by :func:`bot.conversation.access.refusal` before
any model call."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import aiohttp
import discord

from bot.cogs.chat.members import Members
from bot.conversation import Refusal, refusal
from bot.vocabulary import GuildAccess, MemoryUnavailable

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)


def is_addressed(message: discord.Message, me: discord.ClientUser | None) -> bool:
    """A DM, a mention of the bot (``me``), or a reply to one of its messages."""
    if me is None:
        return False
    if message.guild is None or me in message.mentions:
        return True
    # Discord's mention picker offers the bot's managed role beside the bot itself.
    own_role = message.guild.self_role
    if own_role is not None and own_role in message.role_mentions:
        return True
    reference = message.reference
    return (
        reference is not None
        and isinstance(reference.resolved, discord.Message)
        and reference.resolved.author.id == me.id
    )


class AccessGate:
    """Applies the DM switch and the servers' access lists to everything that would call
    the model: messages, and commands such as ``/stm summarize``."""

    def __init__(self, bot: KiokuBot, members: Members | None = None) -> None:
        self.bot = bot
        self.members = members or Members(bot)

    def cached_refusal(self, message: discord.Message) -> Refusal | None:
        """The refusal known without waiting (DMs, servers whose settings are cached);
        owners are not told apart yet (see :meth:`refused`)."""
        guild, author = message.guild, message.author
        if guild is None:
            return self._decide(author, None) or self._blocked_in_a_server(author)
        config = self.bot.memory.cached_guild_config(guild.id)
        return None if config is None else self._decide(author, config.access)

    async def refused(self, message: discord.Message) -> Refusal | None:
        """Why ``message`` gets no turn (None: it does)."""
        why = await self.refused_author(message.author, message.guild)
        if why is not None:
            log.debug("no turn for message %s in %s: %s", message.id, message.channel.id, why)
        return why

    async def refused_author(
        self, author: discord.User | discord.Member, guild: discord.Guild | None
    ) -> Refusal | None:
        """Why ``author`` may not have the model called for them in ``guild`` (None: a DM),
        with the server's lists read if they are not cached. During a database outage a
        server with uncached settings answers as if it had no lists: mentions stay
        answered, as for the rest. In a DM, a block in any server the author shares with
        the bot holds too."""
        access: GuildAccess | None = None
        if guild is not None:
            try:
                access = (await self.bot.memory.guild_config(guild.id)).access
            except MemoryUnavailable:
                access = GuildAccess()
        why = self._decide(author, access)
        if why is None and guild is None:
            why = await self._blocked_in_a_server_now(author)
        if why is not None and await self._is_owner(author):
            return None
        return why

    def _decide(
        self, author: discord.User | discord.Member, access: GuildAccess | None
    ) -> Refusal | None:
        roles = [role.id for role in author.roles] if isinstance(author, discord.Member) else []
        return refusal(
            access,
            user_id=author.id,
            role_ids=roles,
            owner=False,
            direct_messages=self.bot.settings.access.direct_messages,
        )

    def _blocked_in_a_server(self, author: discord.User | discord.Member) -> Refusal | None:
        """``blocked_in_server`` when a server whose settings are cached blocks ``author``
        (by id, or by a role they hold there as far as their membership is known)."""
        memory = self.bot.memory
        for guild in self.bot.guilds:
            config = memory.cached_guild_config(guild.id)
            if config is not None and self._blocks(config.access, guild, author.id):
                return "blocked_in_server"
        return None

    async def _blocked_in_a_server_now(
        self, author: discord.User | discord.Member
    ) -> Refusal | None:
        """:meth:`_blocked_in_a_server`, reading the settings of the servers the author is
        known to be a member of (cached members, or fetched lately) when not cached."""
        memory = self.bot.memory
        for guild in self.bot.guilds:
            config = memory.cached_guild_config(guild.id)
            if config is None and self.members.member(guild, author.id) is not None:
                try:
                    config = await memory.guild_config(guild.id)
                except MemoryUnavailable:
                    continue
            if config is not None and self._blocks(config.access, guild, author.id):
                return "blocked_in_server"
        return None

    def _blocks(self, access: GuildAccess, guild: discord.Guild, user_id: int) -> bool:
        if user_id in access.blocked_users:
            return True
        member = self.members.member(guild, user_id)
        roles = {role.id for role in member.roles} if member is not None else set()
        return not access.blocked_roles.isdisjoint(roles)

    async def _is_owner(self, user: discord.abc.User) -> bool:
        """The application's owner (its team's admins and developers) or one of ``owner_ids``."""
        try:
            # Asks Discord once for the application's owner when owner_ids is empty.
            return await self.bot.is_owner(user)
        except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("could not tell whether %s owns the bot: %s", user.id, type(exc).__name__)
            return False
