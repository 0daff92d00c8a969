"""A channel's raw history as the memory core sees it: Discord messages translated to
``RawMessage``, and the one-time back-fill of a cold channel's window (used by turns and
by ``/stm summarize``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord

from bot.cogs.refresh import REFRESH_MARKER_PREFIX
from bot.llm.tool_loop import FRIENDLY_ERRORS
from bot.memory.model import RawMessage

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)


def to_raw(message: discord.Message) -> RawMessage:
    """A Discord message as the memory core sees it: display name, text with mentions
    resolved, attachment names."""
    text = message.clean_content
    if message.attachments:
        names = ", ".join(a.filename for a in message.attachments)
        text = f"{text}\n[attachments: {names}]" if text else f"[attachments: {names}]"
    return RawMessage(
        message_id=message.id,
        author_id=message.author.id,
        author_name=message.author.display_name,
        content=text,
        created_at=message.created_at,
        is_bot=message.author.bot,
    )


async def backfill(
    bot: KiokuBot, channel: discord.abc.Messageable, *, before: discord.Message | None = None
) -> None:
    """Seed a cold channel's raw window once from Discord history (the messages before
    ``before``, or the latest), stopping at the bot's newest ``/refresh`` marker so
    nothing a refresh removed comes back. Error notices of the bot are left out."""
    windows = bot.memory.windows
    channel_id = getattr(channel, "id", None)
    if channel_id is None or windows.is_primed(channel_id):
        return
    history: list[RawMessage] = []
    me = bot.user
    try:
        async for old in channel.history(limit=bot.settings.stm.raw_window, before=before):
            if me is not None and old.author.id == me.id:
                if old.content.startswith(REFRESH_MARKER_PREFIX):
                    break
                if old.content in FRIENDLY_ERRORS:
                    continue
            history.append(to_raw(old))
    except discord.HTTPException as exc:
        log.info("no history back-fill for channel %s: %s", channel_id, exc.status)
    windows.prime(channel_id, list(reversed(history)))
