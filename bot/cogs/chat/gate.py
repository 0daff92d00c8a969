"""The chat pipeline's door: whether a message is addressed to the bot, and whether its
author may start a turn here, decided by :func:`bot.conversation.access.refusal` before
any model call."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import aiohttp
import discord

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
    """Applies the DM switch and the servers' access lists to messages."""

    def __init__(self, bot: KiokuBot) -> None:
        self.bot = bot

    def cached_refusal(self, message: discord.Message) -> Refusal | None:
        """The refusal known without waiting (DMs, servers whose settings are cached);
        owners are not told apart yet (see :meth:`refused`)."""
        guild = message.guild
        if guild is None:
            return self._decide(message, None, owner=False)
        config = self.bot.memory.cached_guild_config(guild.id)
        return None if config is None else self._decide(message, config.access, owner=False)

    async def refused(self, message: discord.Message) -> Refusal | None:
        """Why ``message`` gets no turn (None: it does), with the server's lists read if
        they are not cached. During a database outage a server with uncached settings
        answers as if it had no lists: mentions stay answered, as for the rest."""
        guild = message.guild
        access: GuildAccess | None = None
        if guild is not None:
            try:
                access = (await self.bot.memory.guild_config(guild.id)).access
            except MemoryUnavailable:
                access = GuildAccess()
        why = self._decide(message, access, owner=False)
        if why is not None and await self._is_owner(message.author):
            return None
        if why is not None:
            log.debug("no turn for message %s in %s: %s", message.id, message.channel.id, why)
        return why

    def _decide(
        self, message: discord.Message, access: GuildAccess | None, *, owner: bool
    ) -> Refusal | None:
        author = message.author
        roles = [role.id for role in author.roles] if isinstance(author, discord.Member) else []
        return refusal(
            access,
            user_id=author.id,
            role_ids=roles,
            owner=owner,
            direct_messages=self.bot.settings.access.direct_messages,
        )

    async def _is_owner(self, user: discord.abc.User) -> bool:
        """The application's owner (its team's admins and developers) or one of ``owner_ids``."""
        try:
            # Asks Discord once for the application's owner when owner_ids is empty.
            return await self.bot.is_owner(user)
        except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("could not tell whether %s owns the bot: %s", user.id, type(exc).__name__)
            return False
