"""``/refresh``: wipe what the bot remembers of this channel and mark the spot.

The public marker message is also where history back-fill stops (``cogs/history.py``
looks for :data:`REFRESH_MARKER_PREFIX`; the database's clear record stands in when the
marker was deleted), so nothing said before a refresh is read back into memory.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord
from discord import app_commands
from discord.ext import commands

from bot.cogs.checks import moderator_only
from bot.cogs.errors import answer, plural

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)

# What the back-fill recognises a marker by: markers posted by every version start with
# it, so the wording after it may change but this must not.
REFRESH_MARKER_PREFIX = "🧹 **Memory refreshed**"


def marker_text(user: discord.abc.User) -> str:
    # Only the channel's conversation memory is wiped: the long-term memories people
    # asked the bot to keep are not, so the marker must not promise they are.
    return (
        f"{REFRESH_MARKER_PREFIX} by {user.mention}. My memory of this channel's "
        "conversation starts fresh here: what was said above this line is no longer part "
        "of it. Long-term memories people asked me to keep stay (see `/memories`)."
    )


class RefreshCog(commands.Cog):
    def __init__(self, bot: KiokuBot) -> None:
        self.bot = bot

    @app_commands.command(name="refresh", description="Wipe what the bot remembers of this channel")
    @moderator_only(dm_allowed=True)
    async def refresh(self, interaction: discord.Interaction[KiokuBot]) -> None:
        channel_id = interaction.channel_id
        assert channel_id is not None  # slash commands always come from a channel
        await interaction.response.defer(ephemeral=True, thinking=True)
        receipt = await self.bot.memory.clear_channel(
            channel_id, guild_id=interaction.guild_id, actor_user_id=interaction.user.id
        )
        log.info(
            "channel %s refreshed (guild %s): %d rows, %d cache entries",
            channel_id,
            interaction.guild_id,
            receipt.rows,
            receipt.cache_entries,
        )
        lines = [
            "Memory of this channel wiped: "
            f"{plural(receipt.rows, 'stored memory', 'stored memories')} and "
            f"{plural(receipt.cache_entries, 'cached memory', 'cached memories')} removed."
        ]
        if receipt.pending_sync:
            lines = [
                "Memory of this channel wiped from my cache. The database is unreachable right "
                "now, so the stored copy will be deleted as soon as it is back (the deletion "
                "is queued durably and nothing can bring the memory back meanwhile)."
            ]
        if not await self._post_marker(interaction):
            lines.append(
                "I couldn't post the refresh marker in this channel, so older messages "
                "may be read back after a restart. Check that I can send messages here."
            )
        await answer(interaction, "\n".join(lines))

    async def _post_marker(self, interaction: discord.Interaction[KiokuBot]) -> bool:
        channel = interaction.channel
        if not isinstance(channel, discord.abc.Messageable):
            return False
        try:
            await channel.send(
                marker_text(interaction.user), allowed_mentions=discord.AllowedMentions.none()
            )
        except discord.HTTPException as exc:
            log.warning(
                "refresh marker not posted in channel %s: %s",
                interaction.channel_id,
                exc.__class__.__name__,
            )
            return False
        return True


async def setup(bot: KiokuBot) -> None:
    await bot.add_cog(RefreshCog(bot))
