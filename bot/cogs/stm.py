"""``/stm``: look at, edit and configure the short-term memory of a channel.

``show`` is for everyone (in DMs it shows the DM's memory); ``summarize`` needs Manage
Messages (in DMs anyone may summarize their own conversation); everything else needs
Manage Server and a server. Answers are ephemeral; memory text is only ever shown to
the person who asked, never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands
from discord.ext import commands

from bot.cogs.checks import IntRange, admin_only, moderator_only
from bot.cogs.errors import answer, plural, think
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
from bot.conversation.summarizer import SummaryOutcome
from bot.db.storage import MemoryUnavailable
from bot.memory.prompt import VALUE_LIMIT, relative_time, render_memory_text
from bot.memory.service import MemoryService
from bot.vocabulary.model import (
    AuditEvent,
    GuildConfig,
    ScopeKey,
    StmEntry,
)

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)

HISTORY_LIMIT = 15
# How many of the latest events /stm history reads, widening while too few of them are in
# channels the admin can read (each write records two: the channel's and a member's copy).
HISTORY_READS = (HISTORY_LIMIT * 4, HISTORY_LIMIT * 40)
# Always-on channels named in /stm settings: a server may mark hundreds (threads too),
# and one answer must stay within Discord's 2,000 characters.
ALWAYS_ON_SHOWN = 20

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
# What /stm history calls each kind of audit event (``EventRecord.event``).
EVENTS = {
    "update": "Memory updated",
    "refresh": "Wiped (/refresh)",
    "forget": "Forgotten (/forget-me)",
    "expire": "Expired",
    "settings": "Settings changed",
    "categories": "Categories changed",
}


# ------------------------------------------------------------------- formatting


ALWAYS_ON_UNHEARD = (
    "I can't read or send messages in this channel, so I won't answer here until I'm "
    "given **View Channel** and **Send Messages**."
)
SUMMARY_BUSY = "A summary is already being made for this channel."
NOTHING_NEW = "Nothing new since the last summary — no model call made."
SUMMARY_UNSEEN = (
    "I can't see this channel's messages, so there is nothing for me to summarize. "
    "I need **View Channel** and **Read Message History** here."
)
SUMMARY_DISABLED = (
    "Short-term memory is turned off in this server, so there is nothing to summarize."
)


def describe_summary(outcome: SummaryOutcome) -> str:
    """The answer to ``/stm summarize``."""
    if outcome.status == "updated":
        parts = [
            f"Summary updated from {plural(outcome.new_messages, 'new message')} "
            f"({outcome.chars} chars)."
        ]
        if outcome.skipped:
            verb = "was" if outcome.skipped == 1 else "were"
            parts.append(
                f"{plural(outcome.skipped, 'older new message')} did not fit in the model's "
                f"reading and {verb} skipped."
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
        # Labels are an admin's text: a `**` or `_` in one must not break the heading.
        size = f"({len(value)}/{VALUE_LIMIT} chars)"
        heading = discord.utils.escape_markdown(label)
        return f"**{heading}** {size}\n{quoted(value) if value.strip() else '*(empty)*'}"

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


def describe_always_on(
    channel_ids: Collection[int], guild: discord.Guild | None, here: int | None = None
) -> str:
    """The always-on channels the server still shows (``here`` first), at most
    :data:`ALWAYS_ON_SHOWN` of them; the others are counted, not named."""
    present = sorted(
        c for c in channel_ids if guild is None or guild.get_channel_or_thread(c) is not None
    )
    if here in present:
        present.remove(here)
        present.insert(0, here)
    parts = [", ".join(f"<#{c}>" for c in present[:ALWAYS_ON_SHOWN])] if present else []
    if len(present) > ALWAYS_ON_SHOWN:
        parts.append(f"and {len(present) - ALWAYS_ON_SHOWN} more")
    # Discord does not tell a bot about archived threads: such a thread (or a channel
    # deleted while the bot was away) is kept, and counted here.
    unseen = len(channel_ids) - len(present)
    if unseen:
        gone = plural(
            unseen,
            "archived thread or deleted channel",
            "archived threads or deleted channels",
        )
        parts.append(f"(and {gone})" if parts else gone)
    return " ".join(parts) or "none"


def describe_settings(
    config: GuildConfig, guild: discord.Guild | None = None, here: int | None = None
) -> list[str]:
    if config.category_mode:
        categories = ", ".join(f"`{c.slug}`" for c in config.categories)
    else:
        categories = "none (one summary per channel)"
    return [
        f"Enabled: **{'yes' if config.stm_enabled else 'no'}**",
        f"Refresh cadence: every **{config.refresh_cadence}** "
        + ("bot turn" if config.refresh_cadence == 1 else "bot turns"),
        f"Render mode: **{RENDER_MODES.get(config.render_mode, config.render_mode)}**",
        f"Raw messages from other channels: **{config.crude_message_count}**",
        f"Categories: {categories}",
        f"Always-on channels: {describe_always_on(config.always_on_channels, guild, here)}",
    ]


def describe_pending(memory: MemoryService, channel_id: int) -> list[str]:
    """What ``/stm show`` says of the channel's changes waiting for the database."""
    pending = memory.pending_changes_in(channel_id)
    notes: list[str] = []
    if pending.cleared:
        notes.append(
            "This channel's memory was wiped; the deletion reaches the database when it is back."
        )
    if pending.writes:
        verb = "is" if pending.writes == 1 else "are"
        notes.append(
            f"{plural(pending.writes, 'change')} to this channel's memory {verb} waiting for "
            "the database (saved locally)."
        )
    return notes


def _event_author(event: AuditEvent) -> str | None:
    """Who made an update (the origin, with the member it was for), or who acted."""
    actor = f"<@{event.actor_user_id}>" if event.actor_user_id else None
    if event.event != "update" or not event.origin:
        return f"by {actor}" if actor else None
    who = ORIGINS.get(event.origin, event.origin)
    if actor is None:
        return f"by {who}"
    if event.origin == "model_tool":
        return f"by {who}, answering {actor}"
    return f"by {who} ({actor})"


def _chars(event: AuditEvent) -> str | None:
    if event.chars_before is None and event.chars_after is None:
        return None
    return f"{event.chars_before or 0} → {event.chars_after or 0} chars"


def _scope(event: AuditEvent) -> str | None:
    if event.scope_kind == "server":
        return "channel memory"
    if event.scope_kind == "user":
        return f"<@{event.user_id}>'s copy" if event.user_id else "a member's copy"
    if event.event == "refresh":
        return "channel memory and every copy"
    if event.event == "forget" and event.channel_id:
        return "what a member's messages made of it"  # never whose
    if event.event == "expire" and event.channel_id:
        return "memories left unused for the retention period"
    return None


def _pair(first: AuditEvent, second: AuditEvent) -> tuple[AuditEvent, AuditEvent] | None:
    """(channel memory, member's copy) when the two are one write's rows: an update
    stores the channel's memory and the copy of the member it answered together."""
    if first.event != "update" or second.event != "update":
        return None
    same = ("channel_id", "origin", "actor_user_id", "message_id", "created_at")
    if any(getattr(first, name) != getattr(second, name) for name in same):
        return None
    kinds = (first.scope_kind, second.scope_kind)
    if kinds == ("server", "user"):
        return first, second
    if kinds == ("user", "server"):
        return second, first
    return None


def describe_event(event: AuditEvent, copy: AuditEvent | None = None) -> str:
    """One line of ``/stm history``; ``copy`` is the member's copy written with
    ``event`` (the channel memory), shown on the same line."""
    head = f"**{EVENTS.get(event.event, event.event)}**"
    author = _event_author(event)
    if event.event == "update" and author:
        head, author = f"{head} {author}", None
    parts = [head]
    scope = _scope(event)
    if copy is not None and scope:
        copy_scope = _scope(copy)
        if _chars(event) == _chars(copy):
            scope = f"{scope} and {copy_scope}"
        else:
            scope = f"{scope} ({_chars(event)}) and {copy_scope} ({_chars(copy)})"
    if scope:
        parts.append(scope)
    if event.channel_id:
        parts.append(f"<#{event.channel_id}>")
    parts.append(discord.utils.format_dt(event.created_at, "R"))
    chars = _chars(event)
    if chars and (copy is None or _chars(copy) == chars):
        parts.append(chars)
    if author:
        parts.append(author)
    return "• " + " · ".join(parts)


def describe_events(events: Sequence[AuditEvent]) -> list[str]:
    """The lines of ``/stm history``: a write's channel memory and member's copy on one."""
    lines: list[str] = []
    index = 0
    while index < len(events):
        pair = _pair(events[index], events[index + 1]) if index + 1 < len(events) else None
        if pair is not None:
            lines.append(describe_event(*pair))
            index += 2
        else:
            lines.append(describe_event(events[index]))
            index += 1
    return lines


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
    """Whether the bot gets the messages of the channel the command came from and may
    answer them there (Discord delivers commands from channels the bot cannot see)."""
    permissions = interaction.app_permissions
    if isinstance(interaction.channel, discord.Thread):
        return permissions.view_channel and permissions.send_messages_in_threads
    return permissions.view_channel and permissions.send_messages


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
