"""``/forget-me``: delete every memory derived from the user's messages, after a confirm.

Everything happens in the user's ephemeral message: the explanation, the buttons and
finally the receipt of what was deleted, so nobody else learns that they asked.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands
from discord.ext import commands

from bot.cogs.errors import UNAVAILABLE, answer, report_error
from bot.cogs.refresh import plural
from bot.memory.service import ForgetReceipt, MemoryService, MemoryUnavailable

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)

CONFIRM_TIMEOUT = 60.0
EXPLANATION = (
    "**Forget me**\n"
    "This deletes everything I remember that came from your messages, in every server "
    "and in our DMs:\n"
    "• your own short-term memories\n"
    "• shared channel memories built from your messages (the whole channel memory, "
    "since it can't be split by author)\n"
    "• the long-term facts you asked me to remember\n"
    "• audit entries about you, and the messages of yours I have cached\n"
    "This cannot be undone."
)
CANCELLED = "Nothing was deleted."
TIMED_OUT = "No answer within a minute: nothing was deleted."
NOT_YOURS = "These buttons belong to the person who ran `/forget-me`."
WORKING = "Deleting…"


def describe_receipt(receipt: ForgetReceipt) -> str:
    if receipt.pending_sync:
        return (
            "**Done.** I dropped everything derived from your messages from my cache "
            f"({plural(receipt.cache_entries, 'cached memory', 'cached memories')}, "
            f"{plural(receipt.raw_messages, 'cached message')}). The database is unreachable "
            "right now; the stored copies are deleted as soon as it is back (the deletion is "
            "queued durably)."
        )
    return "\n".join(
        [
            "**Done.** I deleted everything derived from your messages:",
            f"• {plural(receipt.user_rows, 'memory of yours', 'memories of yours')}",
            f"• {plural(receipt.contributed_rows, 'shared memory', 'shared memories')} "
            "built from your messages",
            f"• {plural(receipt.long_term, 'long-term fact')}",
            f"• {plural(receipt.events, 'audit entry', 'audit entries')}",
            f"• {plural(receipt.raw_messages, 'cached message')} and "
            f"{plural(receipt.cache_entries, 'cached memory', 'cached memories')}",
        ]
    )


class ForgetConfirmView(discord.ui.View):
    """Confirm / Cancel for one user; nothing happens unless they confirm in time."""

    def __init__(self, memory: MemoryService, *, user_id: int) -> None:
        super().__init__(timeout=CONFIRM_TIMEOUT)
        self.memory = memory
        self.user_id = user_id
        self.origin: discord.Interaction[Any] | None = None

    async def interaction_check(self, interaction: discord.Interaction[Any]) -> bool:
        if interaction.user.id == self.user_id:
            return True
        await answer(interaction, NOT_YOURS)
        return False

    @discord.ui.button(label="Delete my memories", style=discord.ButtonStyle.danger)
    async def confirm(
        self, interaction: discord.Interaction[Any], button: discord.ui.Button[Any]
    ) -> None:
        self.stop()
        # Remove the buttons first: a second click cannot start a second deletion.
        await interaction.response.edit_message(content=WORKING, view=None)
        try:
            receipt = await self.memory.forget_user(self.user_id)
        except MemoryUnavailable:
            await interaction.edit_original_response(content=UNAVAILABLE)
            return
        log.info(
            "forget-me: %d own rows, %d shared rows, %d long-term, %d events deleted",
            receipt.user_rows,
            receipt.contributed_rows,
            receipt.long_term,
            receipt.events,
        )
        await interaction.edit_original_response(content=describe_receipt(receipt))

    @discord.ui.button(label="Cancel", style=discord.ButtonStyle.secondary)
    async def cancel(
        self, interaction: discord.Interaction[Any], button: discord.ui.Button[Any]
    ) -> None:
        self.stop()
        await interaction.response.edit_message(content=CANCELLED, view=None)

    async def on_timeout(self) -> None:
        if self.origin is None:
            return
        # The message may be gone or the token expired: then there is nothing to tidy.
        with contextlib.suppress(discord.HTTPException):
            await self.origin.edit_original_response(content=TIMED_OUT, view=None)

    async def on_error(
        self, interaction: discord.Interaction[Any], error: Exception, item: discord.ui.Item[Any]
    ) -> None:
        await report_error(interaction, error)


class PrivacyCog(commands.Cog):
    def __init__(self, bot: KiokuBot) -> None:
        self.bot = bot

    @app_commands.command(
        name="forget-me", description="Delete every memory the bot has from your messages"
    )
    async def forget_me(self, interaction: discord.Interaction[KiokuBot]) -> None:
        view = ForgetConfirmView(self.bot.memory, user_id=interaction.user.id)
        view.origin = interaction
        await answer(interaction, EXPLANATION, view=view)


async def setup(bot: KiokuBot) -> None:
    await bot.add_cog(PrivacyCog(bot))
