"""Reply chains: what a message replies to, followed back up to ``context.reply_chain_depth``.

A referenced message is taken from the channel's raw window when it is there (which
already leaves out what a /refresh or a /forget-me wiped), else from discord.py's cache
or Discord; one read from outside the window is brought back only if the database's
record of wipes says no /refresh of the channel and no /forget-me of its author came
after it. In doubt (the database down), the chain stops before it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import aiohttp
import discord

from bot.cogs.history import belongs_in_window, to_raw
from bot.vocabulary import MemoryUnavailable, RawMessage

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)


async def _referenced(
    channel: discord.abc.Messageable, reference: discord.MessageReference
) -> discord.Message | None:
    """The message ``reference`` points at (resolved, cached, or fetched), or None."""
    if isinstance(reference.resolved, discord.Message):
        return reference.resolved
    if reference.cached_message is not None:
        return reference.cached_message
    if reference.message_id is None or isinstance(
        reference.resolved, discord.DeletedReferencedMessage
    ):
        return None
    try:
        return await channel.fetch_message(reference.message_id)
    except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
        # Deleted, no Read Message History, or Discord unreachable: the chain stops here.
        log.debug("replied-to message not read: %s", getattr(exc, "status", type(exc).__name__))
        return None


async def reply_chain(bot: KiokuBot, message: discord.Message) -> tuple[RawMessage, ...]:
    """What ``message`` replies to, the direct reference first, then what that one replied
    to, at most ``context.reply_chain_depth`` messages, none of them wiped or deleted."""
    depth = bot.settings.context.reply_chain_depth
    channel = message.channel
    memory = bot.memory
    window = {m.message_id: m for m in memory.windows.get(channel.id)}
    chain: list[RawMessage] = []
    # Index in ``chain`` of the first message read from outside the window.
    first_outside: int | None = None
    current = message
    while len(chain) < depth:
        reference = current.reference
        if (
            reference is None
            or reference.message_id is None
            or reference.channel_id != channel.id  # a forward, or a reply elsewhere
            or reference.type is not discord.MessageReferenceType.reply
            or memory.was_deleted(reference.message_id)
        ):
            break
        found = await _referenced(channel, reference)
        if found is None or not belongs_in_window(found, bot.user):
            break
        known = window.get(found.id)
        if known is None and first_outside is None:
            first_outside = len(chain)
        chain.append(known if known is not None else to_raw(found))
        current = found
    if first_outside is None:
        return tuple(chain)
    try:
        wiped = await memory.wiped_history(channel.id, chain[first_outside:])
    except MemoryUnavailable:
        return tuple(chain[:first_outside])
    for index in range(first_outside, len(chain)):
        if chain[index].message_id not in window and wiped(chain[index]):
            return tuple(chain[:index])
    return tuple(chain)
