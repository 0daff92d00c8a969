"""A thread's starting point: the message it was started from, as the turn shows it.

Discord gives a thread started from a message the message's id; it lives in the parent
channel (a forum post's starter lives in the thread itself, and so is in its own window).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp
import discord
from cachetools import TTLCache

from bot.cogs.history import belongs_in_window, to_raw
from bot.memory import MessageGuard
from bot.vocabulary import MemoryUnavailable, RawMessage

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)

# A starter checked once is kept this long (an edit of it shows after at most this).
STARTER_KEPT_SECONDS = 600


async def _starter(thread: discord.Thread) -> discord.Message | None:
    if thread.starter_message is not None:
        return thread.starter_message
    parent = thread.parent
    if not isinstance(parent, discord.TextChannel | discord.VoiceChannel):
        return None  # a forum post: its starter is the thread's own first message
    try:
        return await parent.fetch_message(thread.id)
    except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
        # A thread not started from a message, the message deleted, or Discord unreachable.
        log.debug("no starter message for thread %s: %s", thread.id, getattr(exc, "status", exc))
        return None


async def thread_starter(bot: KiokuBot, thread: discord.Thread) -> RawMessage | None:
    """The message ``thread`` was started from, unless deleted, already in the thread's
    own window (a forum post), or wiped by a /refresh of the parent channel or a
    /forget-me of its author (in doubt, with the database down, left out)."""
    memory = bot.memory
    if any(m.message_id == thread.id for m in memory.windows.get(thread.id)):
        return None
    if memory.was_deleted(thread.id):
        return None
    parent_id = thread.parent_id
    known = next((m for m in memory.windows.get(parent_id) if m.message_id == thread.id), None)
    if known is not None:
        return known  # the parent's window already leaves out what was wiped
    message = await _starter(thread)
    if message is None or not belongs_in_window(message, bot.user):
        return None
    raw = to_raw(message)
    try:
        wiped = await memory.wiped_history(parent_id, [raw])
    except MemoryUnavailable:
        return None
    return None if wiped(raw) else raw


@dataclass(frozen=True, slots=True)
class _Checked:
    starter: RawMessage
    # The starter in the parent channel, as memory stood before it was looked for.
    guard: MessageGuard


class ThreadStarters:
    """Thread starters as :func:`thread_starter` finds them, kept while nothing wiped them,
    so a thread's warm turn neither asks Discord nor queries the database."""

    def __init__(self, bot: KiokuBot) -> None:
        self._bot = bot
        self._checked: TTLCache[int, _Checked] = TTLCache(4096, STARTER_KEPT_SECONDS)

    async def starter(self, thread: discord.Thread) -> RawMessage | None:
        memory = self._bot.memory
        checked = self._checked.get(thread.id)
        if checked is not None:
            guard = checked.guard
            if not guard.wiped() and not guard.forgotten() and not guard.deleted():
                return checked.starter
        guard = memory.guard(thread.parent_id, thread.id)
        starter = await thread_starter(self._bot, thread)
        if starter is None:
            self._checked.pop(thread.id, None)
        else:
            self._checked[thread.id] = _Checked(starter, guard)
        return starter

    def edited(self, message_id: int) -> None:
        """A message was edited: if it starts a thread, it is read again."""
        self._checked.pop(message_id, None)
