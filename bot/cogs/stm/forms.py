"""The forms of ``/stm``: the ``/stm edit`` modals, the ``/stm categories set`` modal
and the button that reopens it with what was typed, and the answers they share with
the commands."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import discord

from bot.cogs.checks import is_bot_owner, require_admin
from bot.cogs.errors import UNAVAILABLE, ReportingModal, ReportingView, answer, plural, think
from bot.cogs.replies import split_reply
from bot.memory import (
    DESCRIPTION_MAX_LENGTH,
    LABEL_MAX_LENGTH,
    REASON_ALL_EMPTY,
    REASON_CHANGED,
    REASON_CLEARED,
    REASON_STORAGE,
    VALUE_LIMIT,
    CategoryDefinitionError,
    MemoryService,
    WriteResult,
    parse_category_lines,
)
from bot.vocabulary import (
    MAX_CATEGORIES,
    SUMMARY_SLUG,
    Category,
    MemoryUnavailable,
    ScopeKey,
    truncate_graphemes,
)

log = logging.getLogger(__name__)

MESSAGE_LIMIT = 2000
MODAL_TIMEOUT = 600.0
RETRY_TIMEOUT = 300.0
TITLE_LIMIT = 45
PLACEHOLDER_LIMIT = 100
# A row holds a label and its description, with room for the ": " between them.
CATEGORY_ROW_LIMIT = LABEL_MAX_LENGTH + 2 + DESCRIPTION_MAX_LENGTH
CATEGORY_PLACEHOLDERS = ("Decisions: what the group decided", "Open questions: what is unsettled")

NOTHING_EDITED = "Nothing changed, so nothing was saved."
SUMMARY_EMPTY = "Not saved: the summary can't be empty."
ALL_EMPTY = "Not saved: that would leave every category empty."
# /stm edit needs Manage Server, /refresh Manage Messages: an admin may lack the latter.
WIPE_WITH_REFRESH = "To wipe this channel's memory, use `/refresh`."
WIPE_ASK_A_MODERATOR = (
    "To wipe this channel's memory, ask a moderator (Manage Messages) to run `/refresh`."
)
TYPED_AGAIN = "What you typed, to paste again:"
CUT_OFF = (
    "The end of the memory did not fit in the form ({chars} characters) and is no longer "
    "kept. It was:"
)
SUMMARY_REPLACED = (
    "The summary kept from before the categories was replaced by them. "
    "It was, to paste into a category:"
)
# Neutral: the admin may have saved through the button before it expired.
RETRY_EXPIRED = "The **Edit again** button has expired: `/stm categories set` opens the form again."

# The memory service words its refusals for the model (they are its tool's results:
# "give `summary` instead", "during this turn"); an admin at a form is told this instead.
# Matched by the start of the reason, so a reworded detail still finds its answer.
_CHANGED = (
    "Not saved: the memory changed while you were editing it (the model or another "
    "admin updated it). Run `/stm edit` again to start from the new text."
)
_CATEGORIES_CHANGED = (
    "Not saved: the categories changed since you opened the form. "
    "Run `/stm edit` again to get the current fields."
)
_STORAGE = "Not saved: memory storage is unavailable right now. Try again shortly."
_UNSAFE = (
    "Not saved: nothing is left of {what} after removing unsafe content (secrets, "
    "placeholders, invisible characters)."
)
ADMIN_REASONS: tuple[tuple[str, str], ...] = (
    (REASON_CHANGED, _CHANGED),
    ("a newer version of this memory exists", _CHANGED),
    (
        REASON_CLEARED,
        "Not saved: this channel's memory was wiped while you were editing (a `/refresh`, "
        "or a `/forget-me` of someone in it). Run `/stm edit` again to start from there.",
    ),
    ("this server uses categories", _CATEGORIES_CHANGED),
    ("this server uses a single summary", _CATEGORIES_CHANGED),
    ("unknown categories", _CATEGORIES_CHANGED),
    (REASON_STORAGE, _STORAGE),
    ("the memory could not be saved right now", _STORAGE),
    ("the summary is empty after removing unsafe content", _UNSAFE.format(what="the summary")),
    ("categories [", _UNSAFE.format(what="a field you filled in")),
)


def may_refresh(interaction: discord.Interaction[Any]) -> bool:
    """Whether the user may run ``/refresh`` here (the check of ``moderator_only``)."""
    if interaction.guild_id is None or is_bot_owner(interaction):
        return True
    permissions = interaction.permissions
    return permissions.administrator or permissions.manage_messages


def wipe_advice(interaction: discord.Interaction[Any]) -> str:
    """How this user can wipe the channel's memory instead of emptying it."""
    return WIPE_WITH_REFRESH if may_refresh(interaction) else WIPE_ASK_A_MODERATOR


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


def describe_write(result: WriteResult, interaction: discord.Interaction[Any]) -> str:
    """The answer to a ``/stm edit`` form, in an admin's terms (``interaction``: whose
    permissions decide what to advise)."""
    if result.status == "saved":
        return "Saved. The model sees the new memory from its next reply on."
    if result.status == "saved, pending sync":
        return (
            "Saved, pending sync: the database is unavailable; it will be written when it is back."
        )
    reason = result.reason or ""
    if reason.startswith(REASON_ALL_EMPTY):
        return f"{ALL_EMPTY} {wipe_advice(interaction)}"
    for start, wording in ADMIN_REASONS:
        if reason.startswith(start):
            return wording
    return f"Not saved: {reason.rstrip('.')}."


def describe_categories(categories: Sequence[Category]) -> list[str]:
    # Labels and descriptions are an admin's text, shown as markdown: a `**` or `_` in
    # one must not break the list (mentions in them never ping: the bot allows none).
    escape = discord.utils.escape_markdown
    return [f"• **{escape(c.label)}** → `{c.slug}`: {escape(c.description)}" for c in categories]


def fit_title(text: str) -> str:
    return text if len(text) <= TITLE_LIMIT else text[: TITLE_LIMIT - 1] + "…"


# ----------------------------------------------------------------------- modals


class AdminModal(ReportingModal):
    """A form only Manage Server may submit. The permission is checked again on submit,
    as it may be taken away while the form is open; errors (the refusal included) get
    the tree's answers (a modal bypasses ``tree.on_error``)."""

    async def interaction_check(self, interaction: discord.Interaction[Any], /) -> bool:
        require_admin(interaction)  # raises: answered by on_error
        return True


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


class _EditModal(AdminModal):
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
    ) -> WriteResult:
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
        return result


class SummaryEditModal(_EditModal):
    """``/stm edit`` in summary mode: one paragraph, prefilled with the summary."""

    def __init__(self, memory: MemoryService, target: EditTarget, *, current: str) -> None:
        super().__init__(memory, target)
        # Leftover categories shown as one text may be longer than a summary may be, and
        # saving replaces them all: the cut is shown in the label, and handed back.
        shown = truncate_graphemes(current, VALUE_LIMIT)
        self.cut_off = current[len(shown) :]
        label = f"Summary (cut to {len(shown)} of {len(current)} characters)"
        self.summary: discord.ui.TextInput[SummaryEditModal] = discord.ui.TextInput(
            label=label if self.cut_off else "Summary",
            custom_id="summary",
            style=discord.TextStyle.paragraph,
            default=shown or None,
            max_length=VALUE_LIMIT,
            required=True,
        )
        self.add_item(self.summary)

    async def on_submit(self, interaction: discord.Interaction[Any]) -> None:
        typed = self.summary.value
        if typed == (self.summary.default or ""):
            await answer(interaction, NOTHING_EDITED)
            return
        if not typed.strip():
            # Discord's "required" lets whitespace through; there is nothing to hand back.
            await answer(interaction, f"{SUMMARY_EMPTY} {wipe_advice(interaction)}")
            return
        result = await self._save(interaction, summary=typed)
        blocks = [describe_write(result, interaction)]
        if not result.ok:
            blocks.append(f"{TYPED_AGAIN}\n{quoted(typed)}")
        elif self.cut_off.strip():
            blocks.append(f"{CUT_OFF.format(chars=len(self.cut_off))}\n{quoted(self.cut_off)}")
        await answer_blocks(interaction, blocks)


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
        self.labels = {category.slug: category.label for category in categories}
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

    async def _summary_from_before_categories(self) -> str:
        """The summary the channel kept from before the server chose categories (what
        /stm show lists under that name), or "" (also when it cannot be read now: the
        write then reports the storage problem)."""
        target = self.target
        key = ScopeKey.server(target.guild_id, target.channel_id)
        try:
            entry = await self.memory.entry(key, parent_channel_id=target.parent_channel_id)
        except MemoryUnavailable:
            return ""
        return entry.summary if entry.has_summary else ""

    async def on_submit(self, interaction: discord.Interaction[Any]) -> None:
        # Only the fields the admin changed: Discord sends every field back, and the
        # others hold what they showed at opening, which the model may have updated since.
        changed: dict[str, str] = {}
        for slug, field in self.inputs.items():
            # Whitespace alone is no content: it clears the category, as an empty field does.
            value = field.value if field.value.strip() else ""
            if value != (field.default or ""):
                changed[slug] = value
        if not changed:
            await answer(interaction, NOTHING_EDITED)
            return
        await think(interaction)  # the database may be slow: Discord waits only 3 s
        replaced = await self._summary_from_before_categories()
        result = await self._save(interaction, categories=changed)
        blocks = [describe_write(result, interaction)]
        if result.ok and replaced:
            # A category's value supersedes it (see the memory service), and the form had
            # no field for it: said, and handed back, rather than dropped unseen.
            blocks.append(f"{SUMMARY_REPLACED}\n{quoted(replaced)}")
        # Only text is worth handing back (emptied fields are listed along with it).
        if not result.ok and any(changed.values()):
            blocks.append(TYPED_AGAIN)
            for slug, value in changed.items():
                label = discord.utils.escape_markdown(self.labels[slug])
                blocks.append(
                    f"**{label}**\n{quoted(value)}" if value else f"**{label}**: *(emptied)*"
                )
        await answer_blocks(interaction, blocks)


class CategoriesModal(AdminModal):
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

    async def _answer_with_retry(
        self, interaction: discord.Interaction[Any], content: str, typed: Sequence[str]
    ) -> None:
        """Answer with an "Edit again" button that reopens the form with ``typed``."""
        retry = RetryCategoriesView(
            self.memory, guild_id=self.guild_id, user_id=interaction.user.id, rows=typed
        )
        retry.origin = interaction
        await answer(interaction, content, view=retry)

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
            await self._answer_with_retry(interaction, content[:MESSAGE_LIMIT], typed)
            return
        await think(interaction)  # the database may be slow: Discord waits only 3 s
        try:
            config = await self.memory.set_categories(
                self.guild_id, interaction.user.id, categories
            )
        except MemoryUnavailable:
            # As a /stm edit form hands back its text: the rows are not lost.
            await self._answer_with_retry(interaction, UNAVAILABLE, typed)
            return
        log.info("guild %s set %d STM categories", self.guild_id, len(categories))
        if config.category_mode:
            head = (
                f"Saved {plural(len(categories), 'category', 'categories')}. "
                "The model now keeps one field per category:"
            )
        else:
            head = f"Saved. A single `{SUMMARY_SLUG}` category is the same as summary mode:"
        # Escaping can double an admin's text: five long categories may not fit in one
        # message (as in /stm categories list).
        await answer_blocks(interaction, [head, *describe_categories(categories)])


class RetryCategoriesView(ReportingView):
    """Reopens the categories modal with what the admin typed, so nothing is lost."""

    def __init__(
        self, memory: MemoryService, *, guild_id: int, user_id: int, rows: Sequence[str]
    ) -> None:
        super().__init__(timeout=RETRY_TIMEOUT)
        self.memory = memory
        self.guild_id = guild_id
        self.user_id = user_id
        self.rows = list(rows)
        self.origin: discord.Interaction[Any] | None = None

    async def on_timeout(self) -> None:
        # A click on the expired button would go unanswered ("This interaction failed")
        # and what was typed be lost: the button goes, and the rows are handed back.
        if self.origin is None:
            return
        rows = [row for row in self.rows if row.strip()]
        typed = [TYPED_AGAIN, quoted("\n".join(rows))] if rows else []
        content = "\n".join([RETRY_EXPIRED, *typed])
        # The message may be gone or the token expired: then there is nothing to tidy.
        with contextlib.suppress(discord.HTTPException):
            await self.origin.edit_original_response(content=content, view=None)

    async def interaction_check(self, interaction: discord.Interaction[Any]) -> bool:
        if interaction.user.id != self.user_id:
            return False
        require_admin(interaction)  # Manage Server may be gone since; raises: on_error
        return True

    @discord.ui.button(label="Edit again", style=discord.ButtonStyle.primary)
    async def edit_again(
        self, interaction: discord.Interaction[Any], button: discord.ui.Button[Any]
    ) -> None:
        modal = CategoriesModal(self.memory, guild_id=self.guild_id, rows=self.rows)
        await interaction.response.send_modal(modal)
