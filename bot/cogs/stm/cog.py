"""``/stm``: look at, edit and configure the short-term memory of a channel."""

# `show` is for everyone (in DMs, the DM's memory); `summarize` needs Manage Messages (in
# DMs anyone may summarize their own conversation); the rest needs Manage Server and a
# server.  Answers are ephemeral: memory text is only shown to who asked, never logged.

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands
from discord.ext import commands

from bot.cogs.chat import AccessGate
from bot.cogs.checks import IntRange, admin_only, moderator_only
from bot.cogs.errors import answer, plural, think
from bot.cogs.history import backfill
from bot.cogs.needs import POST, POST_IN_THREADS, SEE
from bot.cogs.stm.answers import (
    ALWAYS_ON_UNHEARD,
    RENDER_MODES,
    SUMMARY_NOT_ALLOWED,
    SUMMARY_UNSEEN,
    channel_label,
    describe_origin,
    describe_pending,
    describe_settings,
    describe_summary,
    memory_sections,
)
from bot.cogs.stm.forms import (
    CategoriesModal,
    CategoryEditModal,
    EditTarget,
    SummaryEditModal,
    answer_blocks,
    before_a_modal,
    describe_categories,
)
from bot.cogs.stm.history import describe_events
from bot.memory import MemoryService, relative_time, render_memory_text
from bot.vocabulary import AuditEvent, MemoryUnavailable, ScopeKey, StmEntry

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)

HISTORY_LIMIT = 15
# How many of the latest events /stm history reads, widening while too few of them are in
# channels the admin can read (each write records two: the channel's and a member's copy).
HISTORY_READS = (HISTORY_LIMIT * 4, HISTORY_LIMIT * 40)


class StmCog(commands.Cog):
    """The ``/stm`` command group, and forgetting deleted always-on channels."""

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
        notes.extend(describe_pending(self.memory, entry.key.channel_id))
        if not entry.has_content:
            await answer_blocks(interaction, [f"I don't remember anything {where} yet.", *notes])
            return
        updated = relative_time(entry.updated_at, self.memory.clock.now())
        header = f"**What I remember {where}**\nUpdated {updated} by {describe_origin(entry)}."
        await answer_blocks(interaction, [header, *notes, *memory_sections(entry, config)])

    @stm.command(name="summarize", description="Fold the new messages into this channel's memory")
    @moderator_only(dm_allowed=True)
    async def summarize(self, interaction: discord.Interaction[KiokuBot]) -> None:
        channel_id = interaction.channel_id
        assert channel_id is not None
        channel = interaction.channel
        parent_id = channel.parent_id if isinstance(channel, discord.Thread) else None
        await interaction.response.defer(ephemeral=True, thinking=True)
        # It calls the model: the same door as a mention (DM switch, allow and block lists).
        if await AccessGate(self.bot).refused_author(interaction.user, interaction.guild):
            await answer(interaction, SUMMARY_NOT_ALLOWED)
            return
        if interaction.guild_id is not None and not interaction.app_permissions.view_channel:
            # Discord delivers the command, but none of the channel's messages: "nothing
            # new" would be wrong.
            await answer(interaction, SUMMARY_UNSEEN)
            return
        if isinstance(channel, discord.abc.Messageable):
            # After a restart the window is empty until the channel's next turn: read the
            # history first, or "nothing new" would hide what was said before it.
            await backfill(self.bot, channel)
        # The bot's one summarizer (the turn runner's): a command and an automatic run
        # never overlap in a channel.
        outcome = await self.bot.summarizer.summarize(
            guild_id=interaction.guild_id,
            channel_id=channel_id,
            actor_user_id=interaction.user.id,
            reason="/stm summarize",
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
            epoch=self.memory.channel_epoch(channel_id),
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
        lines = describe_settings(config, interaction.guild, interaction.channel_id)
        if always_on and not _may_answer_here(interaction):
            lines.append(ALWAYS_ON_UNHEARD)
        await answer_blocks(interaction, [head, *lines])

    @stm.command(name="history", description="Recent changes to this server's memory")
    @admin_only()
    async def history(self, interaction: discord.Interaction[KiokuBot]) -> None:
        await think(interaction)  # the database may be slow: Discord waits only 3 s
        # Manage Server does not open every channel: events of channels (and threads) the
        # admin cannot read are left out, or they would show who talked there, and when.
        # A busy channel they cannot read may hold all the latest events: then look
        # further back, so their own channels' events still show.
        found: list[AuditEvent] = []
        lines: list[str] = []
        for limit in HISTORY_READS:
            found = await self.memory.recent_events(self._guild_id(interaction), limit)
            seen = [e for e in found if _may_see(interaction, e.channel_id)]
            lines = describe_events(seen)[:HISTORY_LIMIT]
            if len(lines) == HISTORY_LIMIT or len(found) < limit:
                break
        if not lines:
            where = "in the channels you can read" if found else "in this server yet"
            await answer(interaction, f"No memory events recorded {where}.")
            return
        count = plural(len(lines), "memory event")
        head = f"**Last {count}** (newest first; memory text is never logged)"
        await answer_blocks(interaction, [head, *lines])

    # ------------------------------------------------------------ deleted channels

    @commands.Cog.listener()
    async def on_guild_channel_delete(self, channel: discord.abc.GuildChannel) -> None:
        await self._drop_always_on(channel.guild.id, channel.id)

    @commands.Cog.listener()
    async def on_raw_thread_delete(self, payload: discord.RawThreadDeleteEvent) -> None:
        # Also dispatched for the known threads of a deleted channel.
        await self._drop_always_on(payload.guild_id, payload.thread_id)

    async def _drop_always_on(self, guild_id: int, channel_id: int) -> None:
        """Unmark a deleted always-on channel or thread, or the list only ever grows."""
        try:
            config = await self.memory.guild_config(guild_id)
            if channel_id not in config.always_on_channels:
                return
            me = self.bot.user
            # Recorded as a settings change by the bot itself: nobody else made it.
            await self.memory.set_always_on(
                guild_id, channel_id, False, actor_user_id=me.id if me is not None else 0
            )
        except MemoryUnavailable as exc:
            # Harmless: /stm settings counts it among the channels it can't find.
            log.warning(
                "deleted always-on channel %s of guild %s stays listed: %s",
                channel_id,
                guild_id,
                exc.__class__.__name__,
            )
            return
        log.info("deleted always-on channel %s of guild %s unmarked", channel_id, guild_id)


def _may_answer_here(interaction: discord.Interaction[Any]) -> bool:
    """Whether the bot gets and may answer the messages of the command's channel."""
    # Discord delivers commands from channels the bot cannot see.
    permissions = interaction.app_permissions
    if isinstance(interaction.channel, discord.Thread):
        return permissions >= SEE | POST_IN_THREADS
    return permissions >= SEE | POST


def _may_see(interaction: discord.Interaction[Any], channel_id: int | None) -> bool:
    """Whether the user of ``interaction`` can read that channel of its server."""
    # A guild-wide event has no channel; an unknown or deleted one is not readable.
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
