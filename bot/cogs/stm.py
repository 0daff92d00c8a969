"""``/stm``: look at, edit and configure the short-term memory of a channel.

``show`` is for everyone (in DMs it shows the DM's memory); ``summarize`` needs Manage
Messages (in DMs anyone may summarize their own conversation); everything else needs
Manage Server and a server. Answers are ephemeral; memory text is only ever shown to
the person who asked, never logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands
from discord.ext import commands

from bot.cogs.checks import IntRange, admin_only, moderator_only
from bot.cogs.errors import answer, think
from bot.cogs.history import backfill
from bot.cogs.stm_forms import (
    CategoriesModal,
    CategoryEditModal,
    EditTarget,
    SummaryEditModal,
    answer_blocks,
    before_a_modal,
    describe_categories,
    quoted,
)
from bot.db.models import StmEvent
from bot.memory.model import (
    GuildConfig,
    ScopeKey,
    StmEntry,
)
from bot.memory.prompt import VALUE_LIMIT, relative_time, render_memory_text
from bot.memory.service import MemoryService
from bot.memory.summarizer import Summarizer, SummaryOutcome

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)

HISTORY_LIMIT = 15

RENDER_MODES = {
    "crude_summary": "crude summary: distilled text plus the last raw messages",
    "supersede": "supersede: distilled text only, raw messages when there is none",
}
ORIGINS = {
    "model_tool": "the model",
    "summarizer": "the summarizer",
    "admin": "an admin",
    "user_command": "a command",
    "import": "an import",
}


# ------------------------------------------------------------------- formatting


SUMMARY_BUSY = "A summary is already being made for this channel."
NOTHING_NEW = "Nothing new since the last summary — no model call made."
SUMMARY_DISABLED = (
    "Short-term memory is turned off in this server, so there is nothing to summarize."
)


def describe_summary(outcome: SummaryOutcome) -> str:
    """The answer to ``/stm summarize``."""
    if outcome.status == "updated":
        plural = "" if outcome.new_messages == 1 else "s"
        parts = [
            f"Summary updated from {outcome.new_messages} new message{plural} "
            f"({outcome.chars} chars)."
        ]
        if outcome.skipped:
            parts.append(
                f"{outcome.skipped} older new message(s) did not fit in the model's reading "
                "and were skipped."
            )
        if outcome.pending_sync:
            parts.append(
                "Saved, pending sync: the database is unavailable; "
                "it will be written when it is back."
            )
        return " ".join(parts)
    if outcome.status == "nothing_new":
        return NOTHING_NEW
    if outcome.status == "busy":
        return SUMMARY_BUSY
    if outcome.status == "disabled":
        return SUMMARY_DISABLED
    error = (outcome.error or "unknown error").strip().rstrip(".")
    return f"The summarizer failed: {error}. The memory was left unchanged."


def describe_origin(entry: StmEntry) -> str:
    provenance = entry.provenance
    if provenance is None:
        return "unknown"
    origin = ORIGINS.get(provenance.origin, provenance.origin)
    if provenance.origin in ("model_tool", "summarizer") and provenance.detail:
        origin += f" ({provenance.detail})"
    elif provenance.origin in ("admin", "user_command") and provenance.actor_user_id:
        origin += f" (<@{provenance.actor_user_id}>)"
    return origin


def memory_sections(entry: StmEntry, config: GuildConfig) -> list[str]:
    """One block per stored value, with its size against the limit."""

    def section(label: str, value: str) -> str:
        size = f"({len(value)}/{VALUE_LIMIT} chars)"
        return f"**{label}** {size}\n{quoted(value) if value.strip() else '*(empty)*'}"

    sections: list[str] = []
    defined = {category.slug for category in config.categories}
    if config.category_mode:
        for category in config.categories:
            sections.append(section(category.label, entry.categories.get(category.slug, "")))
    for slug, value in entry.categories.items():
        if (slug not in defined or not config.category_mode) and value.strip():
            sections.append(section(f"{slug} (no longer a category)", value))
    if entry.has_summary:
        label = "Summary (from before categories)" if config.category_mode else "Summary"
        sections.append(section(label, entry.summary))
    return sections


def describe_settings(config: GuildConfig) -> list[str]:
    if config.category_mode:
        categories = ", ".join(f"`{c.slug}`" for c in config.categories)
    else:
        categories = "none (one summary per channel)"
    return [
        f"Enabled: **{'yes' if config.stm_enabled else 'no'}**",
        f"Refresh cadence: every **{config.refresh_cadence}** bot turns",
        f"Render mode: **{RENDER_MODES.get(config.render_mode, config.render_mode)}**",
        f"Raw messages from other channels: **{config.crude_message_count}**",
        f"Categories: {categories}",
        "Always-on channels: "
        + (", ".join(f"<#{c}>" for c in sorted(config.always_on_channels)) or "none"),
    ]


def describe_event(event: StmEvent) -> str:
    parts = [f"**{event.event}**"]
    if event.origin:
        parts[0] += f" ({event.origin})"
    if event.scope_kind:
        parts.append(event.scope_kind)
    elif event.event == "refresh":
        parts.append("all scopes")
    if event.channel_id:
        parts.append(f"<#{event.channel_id}>")
    parts.append(discord.utils.format_dt(event.created_at, "R"))
    if event.chars_before is not None or event.chars_after is not None:
        parts.append(f"{event.chars_before or 0} → {event.chars_after or 0} chars")
    if event.actor_user_id:
        parts.append(f"by <@{event.actor_user_id}>")
    return "• " + " · ".join(parts)


def channel_label(interaction: discord.Interaction[Any]) -> str:
    name = getattr(interaction.channel, "name", None)
    return f"#{name}" if name else "this channel"


# -------------------------------------------------------------------------- cog


class StmCog(commands.Cog):
    stm = app_commands.Group(name="stm", description="The bot's short-term memory of a channel")
    categories = app_commands.Group(
        name="categories", description="Split the memory into named fields", parent=stm
    )

    def __init__(self, bot: KiokuBot) -> None:
        self.bot = bot

    @property
    def memory(self) -> MemoryService:
        return self.bot.memory

    async def _channel_entry(self, interaction: discord.Interaction[Any]) -> StmEntry:
        channel_id = interaction.channel_id
        assert channel_id is not None
        channel = interaction.channel
        parent_id = channel.parent_id if isinstance(channel, discord.Thread) else None
        if interaction.guild_id is None:
            key = ScopeKey.user(interaction.user.id, channel_id)
        else:
            key = ScopeKey.server(interaction.guild_id, channel_id)
        return await self.memory.entry(key, parent_channel_id=parent_id)

    @staticmethod
    def _guild_id(interaction: discord.Interaction[Any]) -> int:
        guild_id = interaction.guild_id
        assert guild_id is not None  # the admin checks refuse DMs
        return guild_id

    @stm.command(name="show", description="What the bot remembers in this channel")
    async def show(self, interaction: discord.Interaction[KiokuBot]) -> None:
        await think(interaction)  # the database may be slow: Discord waits only 3 s
        config = await self.memory.guild_config(interaction.guild_id)
        entry = await self._channel_entry(interaction)
        where = "in this channel" if interaction.guild_id is not None else "in our DMs"
        notes: list[str] = []
        if interaction.guild_id is not None and not config.stm_enabled:
            notes.append("Short-term memory is turned off in this server, so I am not updating it.")
        pending = self.memory.pending_sync_in(entry.key.channel_id)
        if pending:
            notes.append(
                f"{pending} memory writes of this channel are waiting for the database "
                "(saved locally, pending sync)."
            )
        if not entry.has_content:
            await answer_blocks(interaction, [f"I don't remember anything {where} yet.", *notes])
            return
        updated = relative_time(entry.updated_at, self.memory.clock.now())
        header = f"**What I remember {where}**\nUpdated {updated} by {describe_origin(entry)}."
        await answer_blocks(interaction, [header, *notes, *memory_sections(entry, config)])

    @property
    def summarizer(self) -> Summarizer:
        """The bot's one summarizer (``bot.summarizer``), made here if the bot has none:
        one instance, so a command and an automatic run never overlap in a channel."""
        summarizer = getattr(self.bot, "summarizer", None)
        if not isinstance(summarizer, Summarizer):
            summarizer = Summarizer(self.bot.memory, self.bot.llm, self.bot.settings)
            setattr(self.bot, "summarizer", summarizer)  # noqa: B010  # not declared on KiokuBot
        return summarizer

    @stm.command(name="summarize", description="Fold the new messages into this channel's memory")
    @moderator_only(dm_allowed=True)
    async def summarize(self, interaction: discord.Interaction[KiokuBot]) -> None:
        channel_id = interaction.channel_id
        assert channel_id is not None
        channel = interaction.channel
        parent_id = channel.parent_id if isinstance(channel, discord.Thread) else None
        await interaction.response.defer(ephemeral=True, thinking=True)
        if isinstance(channel, discord.abc.Messageable):
            # After a restart the window is empty until the channel's next turn: read the
            # history first, or "nothing new" would hide what was said before it.
            await backfill(self.bot, channel)
        outcome = await self.summarizer.summarize(
            guild_id=interaction.guild_id,
            channel_id=channel_id,
            actor_user_id=interaction.user.id,
            reason="command",
            parent_channel_id=parent_id,
        )
        await answer(interaction, describe_summary(outcome))

    @stm.command(name="edit", description="Edit what the bot remembers in this channel")
    @admin_only()
    async def edit(self, interaction: discord.Interaction[KiokuBot]) -> None:
        guild_id = self._guild_id(interaction)
        async with before_a_modal():
            config = await self.memory.guild_config(guild_id)
            entry = await self._channel_entry(interaction)
        channel_id = entry.key.channel_id
        title = f"Memory of {channel_label(interaction)}"
        target = EditTarget(
            guild_id,
            channel_id,
            entry.parent_channel_id,
            title,
            version=entry.version,
            epoch=self.memory.epoch(channel_id),
            opened_at=self.memory.clock.now(),
        )
        modal: discord.ui.Modal
        if config.category_mode:
            modal = CategoryEditModal(
                self.memory, target, categories=config.categories, current=entry.categories
            )
        else:
            # With no summary yet, what the model is shown: values of former categories.
            current = entry.summary or render_memory_text(entry, config)
            modal = SummaryEditModal(self.memory, target, current=current)
        await interaction.response.send_modal(modal)

    @categories.command(name="set", description="Define up to five memory categories")
    @admin_only()
    async def categories_set(self, interaction: discord.Interaction[KiokuBot]) -> None:
        guild_id = self._guild_id(interaction)
        async with before_a_modal():
            config = await self.memory.guild_config(guild_id)
        rows = [f"{c.label}: {c.description}" for c in config.categories]
        await interaction.response.send_modal(
            CategoriesModal(self.memory, guild_id=guild_id, rows=rows)
        )

    @categories.command(name="list", description="Show this server's memory categories")
    @admin_only()
    async def categories_list(self, interaction: discord.Interaction[KiokuBot]) -> None:
        await think(interaction)  # the database may be slow: Discord waits only 3 s
        config = await self.memory.guild_config(self._guild_id(interaction))
        if not config.categories:
            await answer(
                interaction,
                "No categories: the model keeps one summary per channel. "
                "Define some with `/stm categories set`.",
            )
            return
        head = f"**Memory categories** ({len(config.categories)})"
        await answer_blocks(interaction, [head, *describe_categories(config.categories)])

    @categories.command(name="clear", description="Remove the categories: back to one summary")
    @admin_only()
    async def categories_clear(self, interaction: discord.Interaction[KiokuBot]) -> None:
        await think(interaction)  # the database may be slow: Discord waits only 3 s
        guild_id = self._guild_id(interaction)
        config = await self.memory.guild_config(guild_id)
        if not config.categories:
            await answer(
                interaction, "There are no categories; the model already keeps one summary."
            )
            return
        await self.memory.set_categories(guild_id, interaction.user.id, [])
        await answer(
            interaction, "Categories cleared: the model keeps one summary per channel again."
        )

    @stm.command(name="settings", description="Show or change this server's memory settings")
    @app_commands.describe(
        enabled="Turn short-term memory on or off",
        cadence="Bot turns between reminders to update the memory (1-100)",
        render_mode="How memories of other channels appear to the model",
        raw_messages="Raw messages shown with another channel's memory (1-10)",
        always_on="Answer every message in THIS channel, not only mentions and replies",
    )
    @app_commands.choices(
        render_mode=[
            app_commands.Choice(name=RENDER_MODES["crude_summary"], value="crude_summary"),
            app_commands.Choice(name=RENDER_MODES["supersede"], value="supersede"),
        ]
    )
    @admin_only()
    async def settings(
        self,
        interaction: discord.Interaction[KiokuBot],
        enabled: bool | None = None,
        cadence: app_commands.Transform[int, IntRange(1, 100)] | None = None,
        render_mode: app_commands.Choice[str] | None = None,
        raw_messages: app_commands.Transform[int, IntRange(1, 10)] | None = None,
        always_on: bool | None = None,
    ) -> None:
        await think(interaction)  # the database may be slow: Discord waits only 3 s
        guild_id = self._guild_id(interaction)
        changes: dict[str, Any] = {}
        if always_on is not None and interaction.channel_id is not None:
            changes["always_on"] = (interaction.channel_id, always_on)
        if enabled is not None:
            changes["short_term_memory_enabled"] = enabled
        if cadence is not None:
            changes["refresh_cadence"] = cadence
        if render_mode is not None:
            changes["render_mode"] = render_mode.value
        if raw_messages is not None:
            changes["crude_message_count"] = raw_messages
        if changes:
            config = await self.memory.update_guild_settings(
                guild_id, interaction.user.id, **changes
            )
            log.info("guild %s changed STM settings: %s", guild_id, sorted(changes))
        else:
            config = await self.memory.guild_config(guild_id)
        if changes or always_on is not None:
            head = "**Settings updated.** Short-term memory settings of this server:"
        else:
            head = "**Short-term memory settings of this server**"
        await answer(interaction, "\n".join([head, *describe_settings(config)]))

    @stm.command(name="history", description="Recent changes to this server's memory")
    @admin_only()
    async def history(self, interaction: discord.Interaction[KiokuBot]) -> None:
        await think(interaction)  # the database may be slow: Discord waits only 3 s
        # Manage Server does not open every channel: events of channels (and threads) the
        # admin cannot read are left out, or they would show who talked there, and when.
        found = await self.memory.recent_events(self._guild_id(interaction), HISTORY_LIMIT * 4)
        events = [e for e in found if _may_see(interaction, e.channel_id)][:HISTORY_LIMIT]
        if not events:
            await answer(interaction, "No memory events recorded in this server yet.")
            return
        head = f"**Last {len(events)} memory events** (newest first; memory text is never logged)"
        await answer_blocks(interaction, [head, *(describe_event(e) for e in events)])


def _may_see(interaction: discord.Interaction[Any], channel_id: int | None) -> bool:
    """Whether the user of ``interaction`` can read that channel of its server (a guild-
    wide event has none); an unknown or deleted one counts as not readable."""
    if channel_id is None:
        return True
    guild, member = interaction.guild, interaction.user
    channel = guild.get_channel_or_thread(channel_id) if guild is not None else None
    if channel is None or not isinstance(member, discord.Member):
        return False
    if isinstance(channel, discord.Thread) and channel.type is discord.ChannelType.private_thread:
        parent = channel.parent
        return parent is not None and parent.permissions_for(member).manage_threads
    return channel.permissions_for(member).view_channel


async def setup(bot: KiokuBot) -> None:
    await bot.add_cog(StmCog(bot))
