"""The Discord permissions the bot uses, one place for both its checks and its invite link."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord
from discord.ext import commands

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)

# Each set is what one action of the cogs needs; the checks in chat.py and stm.py test
# these, so the invite asks for exactly what the code uses.
SEE = discord.Permissions(view_channel=True)
# Back-filling a cold channel reads its history; a reply referencing a message needs it too.
READ_HISTORY = discord.Permissions(read_message_history=True)
POST = discord.Permissions(send_messages=True)
POST_IN_THREADS = discord.Permissions(send_messages_in_threads=True)
# Discord asks for Read Message History as well to add a new reaction.
REACT = discord.Permissions(add_reactions=True) | READ_HISTORY

INVITE_PERMISSIONS = SEE | READ_HISTORY | POST | POST_IN_THREADS | REACT
INVITE_SCOPES = ("bot", "applications.commands")


def invite_url(client_id: int) -> str:
    """The OAuth2 link that adds the bot to a server with the permissions it uses."""
    return discord.utils.oauth_url(client_id, permissions=INVITE_PERMISSIONS, scopes=INVITE_SCOPES)


class InviteLink(commands.Cog):
    """Logs the invite link once, when the bot first comes online."""

    def __init__(self, bot: KiokuBot) -> None:
        self.bot = bot
        self._logged = False

    @commands.Cog.listener()
    async def on_ready(self) -> None:
        # on_ready comes again after each resumed session: the link is logged once.
        if self._logged or self.bot.user is None:
            return
        self._logged = True
        log.info("invite link: %s", invite_url(self.bot.application_id or self.bot.user.id))


async def setup(bot: KiokuBot) -> None:
    await bot.add_cog(InviteLink(bot))
