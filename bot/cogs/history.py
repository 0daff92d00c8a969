"""A channel's raw history as the memory core sees it: Discord messages translated to
``RawMessage``, and the one-time back-fill of a cold channel's window (used by turns and
by ``/stm summarize``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import aiohttp
import discord

from bot.cogs.images import image_refs
from bot.cogs.refresh import REFRESH_MARKER_PREFIX
from bot.llm import FRIENDLY_ERRORS
from bot.vocabulary import MemoryUnavailable, RawMessage, speaker_name, strip_control_chars

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)

# Said instead of an answer the model made from what a /refresh wiped meanwhile.
WIPED_WHILE_ANSWERING = (
    "This channel's memory was cleared while I was answering, so I dropped that answer. "
    "Please ask again."
)
# The bot's notices: never part of the conversation the model sees.
BOT_NOTICES = FRIENDLY_ERRORS | {WIPED_WHILE_ANSWERING}


def to_raw(message: discord.Message) -> RawMessage:
    """A Discord message as the memory core sees it: display name, text with mentions
    resolved, attachment names (images noted as ``[image: name]`` and referenced for vision
    models, never their bytes); what a message without text shows (a forward, a sticker,
    an embed, a poll) in brackets, so it is not an empty line."""
    images = image_refs(message)
    shown = {image.url for image in images}
    files = [a for a in message.attachments if a.url not in shown]
    text = _with_attachments(message.clean_content, files)
    noted = [f"[image: {image.name}]" for image in images]
    text = "\n".join(part for part in (text, *noted) if part)
    extras = [
        _with_attachments(f"[forwarded: {snapshot.content}]", snapshot.attachments)
        if snapshot.content
        else _with_attachments("[forwarded]", snapshot.attachments)
        for snapshot in message.message_snapshots
    ]
    extras += [f"[sticker: {sticker.name}]" for sticker in message.stickers]
    if message.poll is not None:
        extras.append(f"[poll: {message.poll.question}]")
    if not text and not extras and message.embeds:
        extras.append(_embed_text(message.embeds[0]))
    text = "\n".join(part for part in (text, *extras) if part)
    return RawMessage(
        message_id=message.id,
        author_id=message.author.id,
        author_name=speaker_name(strip_control_chars(message.author.display_name)),
        # As stored memory text is: no invisible characters that could hide a fence
        # closer from the prompt's defusing (``</mem<ZWSP>ory>``), no stray controls.
        content=strip_control_chars(text),
        created_at=message.created_at,
        is_bot=message.author.bot,
        images=images,
    )


def _with_attachments(text: str, attachments: Sequence[discord.Attachment]) -> str:
    if not attachments:
        return text
    names = ", ".join(a.filename for a in attachments)
    return f"{text}\n[attachments: {names}]" if text else f"[attachments: {names}]"


def _embed_text(embed: discord.Embed) -> str:
    """An embed-only message (a link preview, another bot's card): its title and text."""
    shown = [part for part in (embed.title, embed.description) if part]
    return "\n".join(shown) if shown else "[embed]"


async def backfill(
    bot: KiokuBot, channel: discord.abc.Messageable, *, before: discord.Message | None = None
) -> None:
    """Seed a cold channel's raw window once from Discord history (the messages before
    ``before``, or the latest), stopping at the bot's newest ``/refresh`` marker so
    nothing a refresh removed comes back (nor, by the database's record, what a refresh
    whose marker was deleted or a /forget-me of the author removed). Error notices of the
    bot are left out."""
    windows = bot.memory.windows
    channel_id = getattr(channel, "id", None)
    if channel_id is None or windows.is_primed(channel_id):
        return
    history: list[RawMessage] = []
    me = bot.user
    fill = windows.begin_backfill(channel_id)
    try:
        async for old in channel.history(limit=bot.settings.stm.raw_window, before=before):
            if is_refresh_marker(old, me):
                break
            if belongs_in_window(old, me):
                history.append(to_raw(old))
    except (discord.DiscordServerError, aiohttp.ClientError, OSError, TimeoutError) as exc:
        # The network or Discord (5xx, after discord.py's own retries) failed: the turn
        # goes on without history; a later one tries again.
        windows.abandon_backfill(channel_id, fill)
        log.info("no history back-fill for channel %s now: %s", channel_id, type(exc).__name__)
        return
    except discord.HTTPException as exc:
        # Refused for good (403 without Read Message History, 404): the window starts empty.
        log.info("no history back-fill for channel %s: %s", channel_id, exc.status)
    except BaseException:
        windows.abandon_backfill(channel_id, fill)  # a cancelled turn
        raise
    try:
        wiped = await bot.memory.wiped_history(channel_id, history)
    except MemoryUnavailable:
        # Unknown what was wiped: nothing read back now; a later turn tries again.
        windows.abandon_backfill(channel_id, fill)
        return
    windows.prime(channel_id, [m for m in reversed(history) if not wiped(m)], fill)


def is_refresh_marker(message: discord.Message, me: discord.abc.User | None) -> bool:
    """The marker a ``/refresh`` posted: history before it is not the conversation."""
    return (
        me is not None
        and message.author.id == me.id
        and message.content.startswith(REFRESH_MARKER_PREFIX)
    )


def belongs_in_window(message: discord.Message, me: discord.abc.User | None) -> bool:
    """Whether a message is part of the conversation the model sees: what people (and
    the bot) said, not system messages (joins, pins, thread notices), the bot's error
    notices or its refresh markers. The live path and the back-fill both ask this."""
    if message.type not in (discord.MessageType.default, discord.MessageType.reply):
        return False
    if me is not None and message.author.id == me.id:
        return message.content not in BOT_NOTICES and not is_refresh_marker(message, me)
    return True
