"""What ``/stm show``, ``/stm settings`` and ``/stm summarize`` answer, from the memory's state."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import discord

from bot.cogs.errors import plural
from bot.cogs.stm.forms import quoted
from bot.conversation import SummaryOutcome
from bot.memory import VALUE_LIMIT, MemoryService
from bot.vocabulary import GuildConfig, StmEntry

# A server may mark hundreds of always-on channels (threads too), and one answer must
# stay within Discord's 2,000 characters.
ALWAYS_ON_SHOWN = 20

RENDER_MODES = {
    "crude_summary": "crude summary: distilled text plus the last raw messages",
    "supersede": "supersede: distilled text only, raw messages when there is none",
}
# Who wrote a memory, by its provenance's origin.
ORIGINS = {
    "model_tool": "the model",
    "summarizer": "the summarizer",
    "admin": "an admin",
    "user_command": "a command",
    "import": "an import",
}

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
SUMMARY_NOT_ALLOWED = (
    "This server's access settings (or the bot's direct-message setting) do not let you "
    "use the bot here, so nothing was summarized."
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
    """Who last wrote ``entry``, and for whom or how."""
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


def describe_always_on(
    channel_ids: Collection[int], guild: discord.Guild | None, here: int | None = None
) -> str:
    """The always-on channels the server still shows, ``here`` first, the rest counted."""
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
    """The lines of ``/stm settings``."""
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


def channel_label(interaction: discord.Interaction[Any]) -> str:
    """The channel of ``interaction`` as a title names it."""
    name = getattr(interaction.channel, "name", None)
    return f"#{name}" if name else "this channel"
