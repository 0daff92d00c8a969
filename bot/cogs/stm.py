"""``/stm``: look at, edit and configure the short-term memory of a channel.

``show`` is for everyone (in DMs it shows the DM's memory); ``summarize`` needs Manage
Messages (in DMs anyone may summarize their own conversation); everything else needs
Manage Server and a server. Answers are ephemeral; memory text is only ever shown to
the person who asked, never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands
from discord.ext import commands

from bot.cogs.chat import split_reply
from bot.cogs.checks import admin_only, moderator_only
from bot.cogs.errors import answer, report_error, think
from bot.cogs.history import backfill
from bot.db.models import StmEvent
from bot.memory.categories import (
    DESCRIPTION_MAX_LENGTH,
    LABEL_MAX_LENGTH,
    CategoryDefinitionError,
    parse_category_lines,
)
from bot.memory.model import (
    MAX_CATEGORIES,
    SUMMARY_SLUG,
    Category,
    GuildConfig,
    ScopeKey,
    StmEntry,
)
from bot.memory.prompt import VALUE_LIMIT, relative_time, render_memory_text
from bot.memory.service import MemoryService, WriteResult
from bot.memory.storage import MemoryUnavailable
from bot.memory.summarizer import Summarizer, SummaryOutcome
from bot.memory.turn import REASON_CHANGED

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)

MESSAGE_LIMIT = 2000
HISTORY_LIMIT = 15
MODAL_TIMEOUT = 600.0
RETRY_TIMEOUT = 300.0
TITLE_LIMIT = 45
PLACEHOLDER_LIMIT = 100
# A row holds a label and its description, with room for the ": " between them.
CATEGORY_ROW_LIMIT = LABEL_MAX_LENGTH + 2 + DESCRIPTION_MAX_LENGTH
CATEGORY_PLACEHOLDERS = ("Decisions: what the group decided", "Open questions: what is unsettled")

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


class IntRange(app_commands.Transformer):
    """An integer option Discord bounds in its UI and the bot re-checks, so an
    out-of-range value (an outdated client, a hand-made request) is refused with a
    clear message instead of being stored. (``app_commands.Range`` only does the first.)"""

    def __init__(self, low: int, high: int) -> None:
        self.low = low
        self.high = high

    @property
    def type(self) -> discord.AppCommandOptionType:
        return discord.AppCommandOptionType.integer

    @property
    def min_value(self) -> int:
        return self.low

    @property
    def max_value(self) -> int:
        return self.high

    async def transform(self, interaction: discord.Interaction[Any], value: Any, /) -> int:
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or not (self.low <= value <= self.high)
        ):
            raise app_commands.TransformerError(value, self.type, self)
        return value


# ------------------------------------------------------------------- formatting


def chunked(blocks: Sequence[str], limit: int = MESSAGE_LIMIT) -> list[str]:
    """``blocks`` joined by newlines into as few messages of at most ``limit`` characters
    as possible (a block longer than ``limit`` is split)."""
    messages: list[str] = []
    current = ""
    for block in blocks:
        if len(block) > limit:
            # Cut between lines where possible (a quoted memory stays quoted), never
            # inside a character.
            *whole, block = split_reply(block, limit)
            if current:
                messages.append(current)
                current = ""
            messages.extend(whole)
        candidate = f"{current}\n{block}" if current else block
        if len(candidate) > limit:
            messages.append(current)
            current = block
        else:
            current = candidate
    if current:
        messages.append(current)
    return messages


async def answer_blocks(interaction: discord.Interaction[Any], blocks: Sequence[str]) -> None:
    for content in chunked(blocks):
        await answer(interaction, content)


def quoted(text: str) -> str:
    return "\n".join(f"> {line}" for line in text.strip().splitlines())


def describe_write(result: WriteResult) -> str:
    if result.status == "saved":
        return "Saved. The model sees the new memory from its next reply on."
    if result.status == "saved, pending sync":
        return (
            "Saved, pending sync: the database is unavailable; it will be written when it is back."
        )
    if result.reason == REASON_CHANGED:
        return (
            "Not saved: the memory changed while you were editing it (the model or another "
            "admin updated it). Run `/stm edit` again to start from the new text."
        )
    return f"Not saved: {result.reason}."


NOTHING_EDITED = "Nothing changed, so nothing was saved."
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
            parts.append(f"{outcome.skipped} older new message(s) were too many to read.")
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


def describe_categories(categories: Sequence[Category]) -> list[str]:
    return [f"• **{c.label}** → `{c.slug}`: {c.description}" for c in categories]


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


def fit_title(text: str) -> str:
    return text if len(text) <= TITLE_LIMIT else text[: TITLE_LIMIT - 1] + "…"


# ----------------------------------------------------------------------- modals


class ReportingModal(discord.ui.Modal):
    """A modal whose errors get the tree's answers (a modal bypasses ``tree.on_error``)."""

    async def on_error(  # type: ignore[override]  # Modal narrows View's signature
        self, interaction: discord.Interaction[Any], error: Exception, /
    ) -> None:
        await report_error(interaction, error)


# A modal must be the first answer, so nothing can be acknowledged before the reads
# behind it: they get this long, and the error handler answers within Discord's 3 s.
MODAL_READ_SECONDS = 2.0


@contextlib.asynccontextmanager
async def before_a_modal() -> AsyncIterator[None]:
    try:
        async with asyncio.timeout(MODAL_READ_SECONDS):
            yield
    except TimeoutError:
        raise MemoryUnavailable("memory storage is too slow right now") from None


@dataclass(frozen=True, slots=True)
class EditTarget:
    """Which channel's memory a ``/stm edit`` modal edits, and what the form showed when
    it opened: a submit minutes later must not undo what happened meanwhile (a model
    update of another field, a ``/refresh``)."""

    guild_id: int
    channel_id: int
    parent_channel_id: int | None
    title: str
    version: int
    epoch: int
    opened_at: datetime


class _EditModal(ReportingModal):
    """``/stm edit``: what both modes share (where the memory is, how it is saved)."""

    def __init__(self, memory: MemoryService, target: EditTarget) -> None:
        super().__init__(title=fit_title(target.title), timeout=MODAL_TIMEOUT)
        self.memory = memory
        self.target = target

    async def _save(
        self,
        interaction: discord.Interaction[Any],
        *,
        summary: str | None = None,
        categories: dict[str, str] | None = None,
    ) -> None:
        target = self.target
        await think(interaction)  # the database may be slow: Discord waits only 3 s
        result = await self.memory.admin_edit(
            guild_id=target.guild_id,
            channel_id=target.channel_id,
            parent_channel_id=target.parent_channel_id,
            actor_user_id=interaction.user.id,
            summary=summary,
            categories=categories,
            # A summary is one field: saved only over the text the form showed.
            expected_version=target.version if summary is not None else None,
            epoch=target.epoch,
            started_at=target.opened_at,
        )
        content = describe_write(result)
        if summary is not None and not result.ok:
            content += f"\nWhat you typed, to paste again:\n{quoted(summary)}"
        await answer_blocks(interaction, [content])


class SummaryEditModal(_EditModal):
    """``/stm edit`` in summary mode: one paragraph, prefilled with the summary."""

    def __init__(self, memory: MemoryService, target: EditTarget, *, current: str) -> None:
        super().__init__(memory, target)
        self.summary: discord.ui.TextInput[SummaryEditModal] = discord.ui.TextInput(
            label="Summary",
            custom_id="summary",
            style=discord.TextStyle.paragraph,
            default=current[:VALUE_LIMIT] or None,
            max_length=VALUE_LIMIT,
            required=True,
        )
        self.add_item(self.summary)

    async def on_submit(self, interaction: discord.Interaction[Any]) -> None:
        if self.summary.value == (self.summary.default or ""):
            await answer(interaction, NOTHING_EDITED)
            return
        await self._save(interaction, summary=self.summary.value)


class CategoryEditModal(_EditModal):
    """``/stm edit`` in category mode: one input per category; an empty one clears it."""

    def __init__(
        self,
        memory: MemoryService,
        target: EditTarget,
        *,
        categories: Sequence[Category],
        current: dict[str, str],
    ) -> None:
        super().__init__(memory, target)
        self.inputs: dict[str, discord.ui.TextInput[CategoryEditModal]] = {}
        for category in categories:
            field: discord.ui.TextInput[CategoryEditModal] = discord.ui.TextInput(
                label=fit_title(category.label),
                custom_id=category.slug,
                style=discord.TextStyle.paragraph,
                default=current.get(category.slug, "")[:VALUE_LIMIT] or None,
                placeholder=category.description[:PLACEHOLDER_LIMIT],
                max_length=VALUE_LIMIT,
                required=False,
            )
            self.inputs[category.slug] = field
            self.add_item(field)

    async def on_submit(self, interaction: discord.Interaction[Any]) -> None:
        # Only the fields the admin changed: Discord sends every field back, and the
        # others hold what they showed at opening, which the model may have updated since.
        changed = {
            slug: field.value
            for slug, field in self.inputs.items()
            if field.value != (field.default or "")
        }
        if not changed:
            await answer(interaction, NOTHING_EDITED)
            return
        await self._save(interaction, categories=changed)


class CategoriesModal(ReportingModal):
    """``/stm categories set``: five rows, each ``label: description`` (empty rows are
    ignored; at least one is needed)."""

    def __init__(self, memory: MemoryService, *, guild_id: int, rows: Sequence[str]) -> None:
        super().__init__(title="Memory categories", timeout=MODAL_TIMEOUT)
        self.memory = memory
        self.guild_id = guild_id
        self.rows: list[discord.ui.TextInput[CategoriesModal]] = []
        for index in range(MAX_CATEGORIES):
            current = rows[index] if index < len(rows) else ""
            row: discord.ui.TextInput[CategoriesModal] = discord.ui.TextInput(
                label=f"Category {index + 1} (label: description)",
                custom_id=f"category_{index + 1}",
                style=discord.TextStyle.short,
                default=current[:CATEGORY_ROW_LIMIT] or None,
                placeholder=CATEGORY_PLACEHOLDERS[index] if index < 2 else None,
                max_length=CATEGORY_ROW_LIMIT,
                required=index == 0,
            )
            self.rows.append(row)
            self.add_item(row)

    async def on_submit(self, interaction: discord.Interaction[Any]) -> None:
        typed = [row.value for row in self.rows]
        try:
            # One row per line, so problems name the row ("row 3: …").
            categories = parse_category_lines(
                "\n".join(value.replace("\n", " ") for value in typed), place="row"
            )
        except CategoryDefinitionError as error:
            problems = "\n".join(f"• {problem}" for problem in error.problems)
            content = f"Nothing was changed. Please fix:\n{problems}"
            retry = RetryCategoriesView(
                self.memory, guild_id=self.guild_id, user_id=interaction.user.id, rows=typed
            )
            await answer(interaction, content[:MESSAGE_LIMIT], view=retry)
            return
        await think(interaction)  # the database may be slow: Discord waits only 3 s
        config = await self.memory.set_categories(self.guild_id, interaction.user.id, categories)
        log.info("guild %s set %d STM categories", self.guild_id, len(categories))
        if config.category_mode:
            head = (
                f"Saved {len(categories)} categories. The model now keeps one field per category:"
            )
        else:
            head = f"Saved. A single `{SUMMARY_SLUG}` category is the same as summary mode:"
        await answer(interaction, "\n".join([head, *describe_categories(categories)]))


class RetryCategoriesView(discord.ui.View):
    """Reopens the categories modal with what the admin typed, so nothing is lost."""

    def __init__(
        self, memory: MemoryService, *, guild_id: int, user_id: int, rows: Sequence[str]
    ) -> None:
        super().__init__(timeout=RETRY_TIMEOUT)
        self.memory = memory
        self.guild_id = guild_id
        self.user_id = user_id
        self.rows = list(rows)

    async def interaction_check(self, interaction: discord.Interaction[Any]) -> bool:
        return interaction.user.id == self.user_id

    @discord.ui.button(label="Edit again", style=discord.ButtonStyle.primary)
    async def edit_again(
        self, interaction: discord.Interaction[Any], button: discord.ui.Button[Any]
    ) -> None:
        modal = CategoriesModal(self.memory, guild_id=self.guild_id, rows=self.rows)
        await interaction.response.send_modal(modal)

    async def on_error(
        self, interaction: discord.Interaction[Any], error: Exception, item: discord.ui.Item[Any]
    ) -> None:
        await report_error(interaction, error)


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
        events = await self.memory.recent_events(self._guild_id(interaction), HISTORY_LIMIT)
        if not events:
            await answer(interaction, "No memory events recorded in this server yet.")
            return
        head = f"**Last {len(events)} memory events** (newest first; memory text is never logged)"
        await answer_blocks(interaction, [head, *(describe_event(e) for e in events)])


async def setup(bot: KiokuBot) -> None:
    await bot.add_cog(StmCog(bot))
