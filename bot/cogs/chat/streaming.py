"""A reply's Discord messages while it streams in: posted once the answer is slow, then edited.

An answer complete within ``llm.stream_edit_seconds`` of its first text is sent once,
whole, by the chat cog as before (no placeholder, no edit). A slower one is posted when
that time is up and edited at most once per interval after; past Discord's limit it goes
on in new messages, cut by :func:`split_reply` (words, code blocks), at most
``llm.max_reply_messages`` of them.
:meth:`StreamedReply.finish` shows the whole reply when the turn ends.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import aiohttp
import discord

from bot.cogs.refresh import REFRESH_MARKER_PREFIX
from bot.cogs.replies import DISCORD_LIMIT, capped_parts
from bot.llm import CUT_MESSAGE

log = logging.getLogger(__name__)

# Posts one part of the reply (the first as a reply to the member's message); None when
# Discord refused it or could not be reached.
Post = Callable[[str, bool], Awaitable[discord.Message | None]]
# Deletes a posted part, from Discord and from the raw window.
TakeBack = Callable[[discord.Message], Awaitable[None]]
# One character kept free for the marker guard (as the chat cog's own sending does).
PART_LIMIT = DISCORD_LIMIT - 1
NO_MENTIONS = discord.AllowedMentions.none()


def guard_marker(part: str) -> str:
    """``part``, made unable to pass for a ``/refresh`` marker."""
    # Only /refresh may post a marker: one a member coaxed out of the model would hide the
    # history before it, after a restart, like a refresh.
    return "\u200b" + part if part.startswith(REFRESH_MARKER_PREFIX) else part


def with_cut_note(shown: str) -> str:
    """What stays of a reply that broke off: what it said so far, then why it stops."""
    return f"{shown}\n\n{CUT_MESSAGE}" if shown.strip() else CUT_MESSAGE


class StreamedReply:
    """The preview a turn streams into (a ``ReplyPreview``), and the messages it posted."""

    def __init__(
        self,
        post: Post,
        take_back: TakeBack,
        *,
        interval: float,
        clock: Callable[[], float],
        wiped: Callable[[], bool],
        max_parts: int,
    ) -> None:
        self._post = post
        self._max_parts = max_parts
        self._take_back = take_back
        self._interval = interval
        self._clock = clock
        self._wiped = wiped
        # Counted from the answer's first text: time in the queue, the prompt and tool
        # calls makes no answer slow.
        self._due: float | None = None
        self._latest: Callable[[], str] | None = None
        self._stopped = False
        # The messages showing the reply, and the text each shows now.
        self.parts: list[discord.Message] = []
        self._shown: list[str] = []

    async def __call__(self, text: Callable[[], str]) -> None:
        """The reply grew: show it when the next edit is due (``text`` is read only then)."""
        # Called for every streamed piece: one clock read and a comparison on the way out.
        self._latest = text
        if self._stopped:
            return
        now = self._clock()
        if self._due is None:
            self._due = now + self._interval
            return
        if now < self._due:
            return
        self._due = now + self._interval
        if self._wiped():
            self._stopped = True  # the chat cog takes back what was posted
            return
        if not await self._show(reply_parts(text(), self._max_parts)):
            self._stopped = True  # Discord refused: the whole reply is tried once more at the end

    def received(self) -> str:
        """The reply as far as it streamed in (also the part not shown yet)."""
        return self._latest() if self._latest is not None else ""

    async def finish(self, text: str) -> list[discord.Message]:
        """Show ``text`` whole in the parts posted (more if needed, fewer: the rest deleted)."""
        chunks = reply_parts(text, self._max_parts) or ["…"]
        await self._show(chunks)
        for part in self.parts[len(chunks) :]:
            await self._take_back(part)
        del self.parts[len(chunks) :], self._shown[len(chunks) :]
        return self.parts

    async def _show(self, chunks: list[str]) -> bool:
        """Make the parts show ``chunks``, posting more if needed; False when Discord refused."""
        for index, chunk in enumerate(chunks):
            if index < len(self.parts):
                if self._shown[index] == chunk:
                    continue
                edited = await _edit(self.parts[index], chunk)
                if edited is None:
                    return False
                self.parts[index], self._shown[index] = edited, chunk
                continue
            posted = await self._post(chunk, not self.parts)
            if posted is None:
                return False
            self.parts.append(posted)
            self._shown.append(chunk)
        return True


def reply_parts(text: str, max_parts: int) -> list[str]:
    """The Discord messages that show ``text``: at most ``max_parts``, each guarded."""
    return [guard_marker(chunk) for chunk in capped_parts(text, PART_LIMIT, max_parts)]


async def _edit(part: discord.Message, text: str) -> discord.Message | None:
    """``part`` edited to show ``text``; None when Discord refused or could not be reached."""
    try:
        return await part.edit(content=text, allowed_mentions=NO_MENTIONS)
    except discord.HTTPException as exc:
        log.warning("could not edit a streamed reply in %s: %s", part.channel.id, exc.status)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        log.warning(
            "could not edit a streamed reply in %s: %s", part.channel.id, type(exc).__name__
        )
    return None
