"""``/forget-me`` and ``/memories``: what the bot keeps about a user, and deleting it.

``/forget-me`` deletes every memory derived from the user's messages, after a confirm.
``/memories list / forget / clear`` show and delete the user's long-term memories (their
own only, wherever they were made); ``/memories cross-context`` turns on or off whether
DMs may use what the bot remembers about the user from servers. Everything happens in
the user's ephemeral messages, so nobody else learns what they keep or delete.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import discord
from discord import app_commands
from discord.ext import commands

from bot.cogs.checks import IntRange
from bot.cogs.errors import UNAVAILABLE, ReportingView, answer, plural, think
from bot.db import ForgetReceipt
from bot.memory import FactPage, LongTermService
from bot.vocabulary import Fact, MemoryUnavailable

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
    "• the long-term memories you asked me to keep\n"
    "• the messages of yours I have cached, and your name in the audit log (its entries "
    "stay, naming nobody)\n"
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
            f"• {plural(receipt.long_term, 'long-term memory', 'long-term memories')}",
            f"• {plural(receipt.events, 'audit entry', 'audit entries')} no longer naming you",
            f"• {plural(receipt.raw_messages, 'cached message')} and "
            f"{plural(receipt.cache_entries, 'cached memory', 'cached memories')}",
        ]
    )


class ConfirmAnswers(NamedTuple):
    """What a :class:`ConfirmView` says when cancelled, timed out, or clicked by another."""

    cancelled: str
    timed_out: str
    not_yours: str


_FORGET_ANSWERS = ConfirmAnswers(CANCELLED, TIMED_OUT, NOT_YOURS)


class ConfirmView(ReportingView):
    """Confirm / Cancel for one user: ``action`` runs only if they confirm in time, and
    its text replaces the prompt. Used by ``/forget-me`` and ``/memories clear``."""

    def __init__(
        self,
        user_id: int,
        confirm_label: str,
        action: Callable[[], Awaitable[str]],
        answers: ConfirmAnswers,
    ) -> None:
        super().__init__(timeout=CONFIRM_TIMEOUT)
        self.user_id = user_id
        self.action = action
        self.cancelled, self.timed_out, self.not_yours = answers
        self.confirm.label = confirm_label
        self.origin: discord.Interaction[Any] | None = None
        # Set before the first await of a click: a second click dispatched meanwhile (a
        # double-click) must not run the deletion again.
        self._answered = False

    async def ask(self, interaction: discord.Interaction[Any], prompt: str) -> None:
        """Answer ``interaction`` with ``prompt`` and the buttons (tidied when they time out)."""
        self.origin = interaction
        await answer(interaction, prompt, view=self)

    async def interaction_check(self, interaction: discord.Interaction[Any]) -> bool:
        if interaction.user.id != self.user_id:
            await answer(interaction, self.not_yours)
            return False
        if self._answered:
            await interaction.response.defer()  # already being handled: nothing to do
            return False
        self._answered = True
        return True

    @discord.ui.button(label="Confirm", style=discord.ButtonStyle.danger)
    async def confirm(
        self, interaction: discord.Interaction[Any], button: discord.ui.Button[Any]
    ) -> None:
        self.stop()
        # Remove the buttons first: a second click cannot start a second deletion.
        await interaction.response.edit_message(content=WORKING, view=None)
        try:
            result = await self.action()
        except MemoryUnavailable:
            result = UNAVAILABLE
        except Exception:
            # Not left on "Deleting…": the error handler logs it and answers as well.
            await interaction.edit_original_response(content=UNAVAILABLE)
            raise
        await interaction.edit_original_response(content=result)

    @discord.ui.button(label="Cancel", style=discord.ButtonStyle.secondary)
    async def cancel(
        self, interaction: discord.Interaction[Any], button: discord.ui.Button[Any]
    ) -> None:
        self.stop()
        await interaction.response.edit_message(content=self.cancelled, view=None)

    async def on_timeout(self) -> None:
        if self.origin is None:
            return
        # The message may be gone or the token expired: then there is nothing to tidy.
        with contextlib.suppress(discord.HTTPException):
            await self.origin.edit_original_response(content=self.timed_out, view=None)


# ------------------------------------------------------------------ /memories

PAGE_SIZE = 5
PAGER_TIMEOUT = 300.0
CHOICE_NAME_LIMIT = 100
MAX_FACT_ID = 2**53  # Discord integer options stop there
NO_MEMORIES = (
    "I have no long-term memories of you yet. Ask me in chat to remember something "
    '("remember that my cat is called Miso") and it will show up here.'
)
NOTHING_TO_CLEAR = "You have no long-term memories to delete."
CLEAR_CANCELLED = "Nothing was deleted."
CLEAR_TIMED_OUT = "No answer within a minute: nothing was deleted."
MEMORIES_NOT_YOURS = "These buttons belong to the person who ran the command."
_CLEAR_ANSWERS = ConfirmAnswers(CLEAR_CANCELLED, CLEAR_TIMED_OUT, MEMORIES_NOT_YOURS)
CROSS_CONTEXT_EFFECT = {
    True: (
        "in our DMs I may use what I remember about you from servers: the memories of "
        "server conversations you took part in and the long-term memories you asked me to "
        "keep there."
    ),
    False: (
        "in our DMs I use only what was said in our DMs; what I remember about you from "
        "servers stays in those servers."
    ),
}
CROSS_CONTEXT_NOTE = "Nothing from our DMs is ever shown in a server, whichever you choose."
FACT_ORIGINS = {
    "model_tool": "you asked in chat",
    "user_command": "a command",
    "summarizer": "the summarizer",
    "admin": "an admin",
    "import": "an import",
}


def describe_cross_context(enabled: bool, *, changed: bool) -> str:
    """The answer to ``/memories cross-context``: the state now, and what it means."""
    state = "on" if enabled else "off"
    head = "is now" if changed else "was already"
    other = "off" if enabled else "on"
    return (
        f"Cross-context memory {head} **{state}**: {CROSS_CONTEXT_EFFECT[enabled]}\n"
        f"-# {CROSS_CONTEXT_NOTE} `/memories cross-context enabled:{other}` turns it {other}."
    )


# What one fact may take in a /memories list page (five per page, 4,096 per embed).
FACT_SHOWN_CHARS = 500


def fact_place(bot: discord.Client, fact: Fact) -> str:
    if fact.guild_id is None:
        return "our DMs"
    guild = bot.get_guild(fact.guild_id)
    return guild.name if guild is not None else "a server I'm no longer in"


def fact_line(bot: discord.Client, fact: Fact) -> str:
    """``**#12** My cat is called Miso`` and a line saying where, when and how."""
    origin = FACT_ORIGINS.get(fact.origin, fact.origin)
    details = " · ".join(
        [
            f"in {discord.utils.escape_markdown(fact_place(bot, fact))}",
            f"saved {discord.utils.format_dt(fact.updated_at, 'R')}",
            origin,
        ]
    )
    return f"**#{fact.id}** {shown_text(fact)}\n-# {details}"


def shown_text(fact: Fact) -> str:
    """The fact's text as markdown, escaped and cut to :data:`FACT_SHOWN_CHARS`."""
    text = discord.utils.escape_markdown(fact.content)
    if len(text) > FACT_SHOWN_CHARS:
        # Escaping can double a 500-character fact; five of those must still fit in one
        # embed (4,096 characters). The whole fact stays stored and recallable.
        text = text[: FACT_SHOWN_CHARS - 1].rstrip("\\") + "…"
    return text


def quoted_block(text: str) -> str:
    """``text`` as a Discord block quote, every line of it."""
    return "\n".join(f"> {line}" for line in text.splitlines() or [""])


def facts_embed(bot: discord.Client, page: FactPage) -> discord.Embed:
    embed = discord.Embed(
        title="Your long-term memories",
        description="\n\n".join(fact_line(bot, fact) for fact in page.facts),
    )
    embed.set_footer(
        text=f"Page {page.page}/{page.pages} · {plural(page.total, 'memory', 'memories')} · "
        "/memories forget <id> deletes one"
    )
    return embed


class MemoriesPager(ReportingView):
    """Previous / Next over one user's facts; each click reads the page afresh, from
    the first or last fact shown (a fact deleted meanwhile moves no other off the
    pages)."""

    def __init__(self, bot: discord.Client, service: LongTermService, *, user_id: int) -> None:
        super().__init__(timeout=PAGER_TIMEOUT)
        self.bot = bot
        self.service = service
        self.user_id = user_id
        self.shown: FactPage | None = None
        self.origin: discord.Interaction[Any] | None = None

    def show(self, page: FactPage) -> None:
        self.shown = page
        self.previous.disabled = not page.has_previous
        self.next.disabled = not page.has_next

    async def ask(self, interaction: discord.Interaction[Any], prompt: str) -> None:
        """Answer ``interaction`` with ``prompt`` and the buttons (tidied when they time out)."""
        self.origin = interaction
        await answer(interaction, prompt, view=self)

    async def interaction_check(self, interaction: discord.Interaction[Any]) -> bool:
        if interaction.user.id == self.user_id:
            return True
        await answer(interaction, MEMORIES_NOT_YOURS)
        return False

    async def _turn(self, interaction: discord.Interaction[Any], *, forward: bool) -> None:
        await interaction.response.defer()  # a click, too, is dropped unanswered after 3 s
        shown = self.shown
        page = await self.service.list_facts(
            self.user_id,
            page_size=PAGE_SIZE,
            older_than=shown.last if shown is not None and forward else None,
            newer_than=shown.first if shown is not None and not forward else None,
        )
        if not page.facts:
            self.stop()
            await interaction.edit_original_response(content=NO_MEMORIES, embed=None, view=None)
            return
        self.show(page)
        await interaction.edit_original_response(
            content=None, embed=facts_embed(self.bot, page), view=self
        )

    @discord.ui.button(label="Previous", style=discord.ButtonStyle.secondary)
    async def previous(
        self, interaction: discord.Interaction[Any], button: discord.ui.Button[Any]
    ) -> None:
        await self._turn(interaction, forward=False)

    @discord.ui.button(label="Next", style=discord.ButtonStyle.secondary)
    async def next(
        self, interaction: discord.Interaction[Any], button: discord.ui.Button[Any]
    ) -> None:
        await self._turn(interaction, forward=True)

    async def on_timeout(self) -> None:
        if self.origin is None:
            return
        with contextlib.suppress(discord.HTTPException):
            await self.origin.edit_original_response(view=None)


class PrivacyCog(commands.Cog):
    memories = app_commands.Group(
        name="memories", description="The long-term memories the bot keeps about you"
    )

    def __init__(self, bot: KiokuBot) -> None:
        self.bot = bot

    @app_commands.command(
        name="forget-me", description="Delete every memory the bot has from your messages"
    )
    async def forget_me(self, interaction: discord.Interaction[KiokuBot]) -> None:
        memory, user_id = self.bot.memory, interaction.user.id

        async def forget() -> str:
            receipt = await memory.forget_user(user_id)
            log.info(
                "forget-me: %d own rows, %d shared rows, %d long-term, %d events deleted",
                receipt.user_rows,
                receipt.contributed_rows,
                receipt.long_term,
                receipt.events,
            )
            return describe_receipt(receipt)

        await ConfirmView(user_id, "Delete my memories", forget, _FORGET_ANSWERS).ask(
            interaction, EXPLANATION
        )

    @memories.command(name="list", description="Show what the bot remembers about you")
    async def memories_list(self, interaction: discord.Interaction[KiokuBot]) -> None:
        await think(interaction)
        service = self.bot.longterm
        page = await service.list_facts(interaction.user.id, 1, PAGE_SIZE)
        if not page.facts:
            await answer(interaction, NO_MEMORIES)
            return
        embed = facts_embed(self.bot, page)
        if page.pages == 1:
            await answer(interaction, "", embed=embed)
            return
        view = MemoriesPager(self.bot, service, user_id=interaction.user.id)
        view.show(page)
        view.origin = interaction
        await answer(interaction, "", embed=embed, view=view)

    @memories.command(name="forget", description="Delete one of your long-term memories")
    @app_commands.rename(fact_id="id")
    @app_commands.describe(fact_id="The memory's number, as /memories list shows it")
    async def memories_forget(
        self,
        interaction: discord.Interaction[KiokuBot],
        # Re-checked by the bot (a hand-made request may send anything): "**id** must be
        # between 1 and …", not a TypeError.
        fact_id: app_commands.Transform[int, IntRange(1, MAX_FACT_ID)],
    ) -> None:
        await think(interaction)
        result = await self.bot.longterm.forget(
            interaction.user.id,
            fact_id=fact_id,
            actor_user_id=interaction.user.id,
            origin="user_command",
        )
        deleted: tuple[Fact, ...] = result.deleted
        if not deleted:
            await answer(
                interaction,
                f"You have no long-term memory #{fact_id}. `/memories list` shows yours.",
            )
            return
        # Cut like a listed fact: escaping can double a long fact past Discord's 2,000.
        quote = quoted_block(shown_text(deleted[0]))
        await answer(interaction, f"Forgot memory #{fact_id}:\n{quote}")

    @memories_forget.autocomplete("fact_id")
    async def memories_forget_choices(
        self, interaction: discord.Interaction[KiokuBot], current: str
    ) -> list[app_commands.Choice[int]]:
        try:
            facts = await self.bot.longterm.suggest(interaction.user.id, str(current or ""))
        except MemoryUnavailable:
            return []
        choices = []
        for fact in facts:
            name = " ".join(f"#{fact.id} · {fact.content}".split())
            if len(name) > CHOICE_NAME_LIMIT:
                name = name[: CHOICE_NAME_LIMIT - 1] + "…"
            choices.append(app_commands.Choice(name=name, value=fact.id))
        return choices

    @memories.command(
        name="cross-context",
        description="Whether DMs may use what the bot remembers about you from servers",
    )
    @app_commands.describe(enabled="on: DMs may use your server memories; off: they may not")
    @app_commands.choices(
        enabled=[
            app_commands.Choice(name="on", value="on"),
            app_commands.Choice(name="off", value="off"),
        ]
    )
    async def memories_cross_context(
        self, interaction: discord.Interaction[KiokuBot], enabled: app_commands.Choice[str]
    ) -> None:
        await think(interaction)
        memory, user_id = self.bot.memory, interaction.user.id
        wanted = enabled.value == "on"
        changed = await memory.cross_context_opt_in(user_id) != wanted
        # Written even when unchanged: the stored setting is the truth, whatever was cached.
        await memory.set_cross_context_opt_in(user_id, wanted)
        if changed:
            log.info("cross-context memory turned %s", enabled.value)
        await answer(interaction, describe_cross_context(wanted, changed=changed))

    @memories.command(name="clear", description="Delete all your long-term memories")
    async def memories_clear(self, interaction: discord.Interaction[KiokuBot]) -> None:
        await think(interaction)
        service = self.bot.longterm
        total = await service.count(interaction.user.id)
        if total == 0:
            await answer(interaction, NOTHING_TO_CLEAR)
            return
        user_id = interaction.user.id

        async def clear() -> str:
            deleted = await service.clear(user_id)
            log.info("memories clear: %d long-term facts deleted", deleted)
            count = plural(deleted, "long-term memory", "long-term memories")
            return f"**Done.** I deleted {count}."

        view = ConfirmView(user_id, "Delete all my long-term memories", clear, _CLEAR_ANSWERS)
        await view.ask(
            interaction,
            f"**Clear long-term memory**\nThis deletes all "
            f"{plural(total, 'long-term memory', 'long-term memories')} I keep about you, "
            "from every server and our DMs. This cannot be undone.",
        )


async def setup(bot: KiokuBot) -> None:
    await bot.add_cog(PrivacyCog(bot))
