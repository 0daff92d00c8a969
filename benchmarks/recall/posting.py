"""Members' messages posted at a chosen time, and messages deleted, on the dpytest world.

dpytest stamps a message with the time it is sent; a conversation replayed from a dataset
needs its own dates, so a message's id (Discord's snowflake, which carries the time) and
timestamp are set here from the turn's time. Deletes go through the bot's HTTP client,
so the bot hears the MESSAGE_DELETE event Discord would send.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import discord

from tests.helpers.discord_payloads import (
    complete_message_payload,
    iso,
    member_payload,
    user_payload,
)
from tests.helpers.dpytest_env import DpytestEnv

DISCORD_EPOCH_MS = 1_420_070_400_000
_sequence = itertools.count()


def snowflake_at(at: datetime) -> int:
    """A message id carrying ``at``; ids made for one time still differ and grow."""
    milliseconds = int(at.timestamp() * 1000) - DISCORD_EPOCH_MS
    return (milliseconds << 22) | (next(_sequence) & 0xFFF)


async def post_message(
    env: DpytestEnv,
    channel: discord.TextChannel,
    author: discord.Member,
    content: str,
    at: datetime,
    *,
    mention_bot: bool = False,
    message_id: int | None = None,
) -> discord.Message:
    """Post ``content`` as ``author`` at ``at`` (with ``message_id``, else one made from
    ``at``); return once the bot's handlers are done (for a mention, once its answer
    went out)."""
    me = env.bot.user
    assert me is not None
    mentions: list[dict[str, Any]] = []
    if mention_bot:
        content = f"{me.mention} {content}"
        mention = user_payload(me)
        mention["member"] = member_payload(channel.guild.me, with_user=False)
        mentions.append(mention)
    message_id = snowflake_at(at) if message_id is None else message_id
    data: dict[str, Any] = {
        "id": message_id,
        "channel_id": channel.id,
        "guild_id": channel.guild.id,
        "author": user_payload(author),
        "content": content,
        "timestamp": iso(at),
        "mentions": mentions,
        "type": 0,
    }
    complete_message_payload(data, env.state)
    env.store(data)
    await env.run_parser(env.state.parse_message_create, copy.deepcopy(data))
    return env.message_object(data, channel)


async def settled(action: Callable[[], Awaitable[None]]) -> None:
    """Run ``action`` and wait for the event handlers it started (discord.py dispatches
    each gateway event to tasks of its own)."""
    before = asyncio.all_tasks()
    await action()
    started = asyncio.all_tasks() - before
    if started:
        await asyncio.gather(*started, return_exceptions=True)


async def delete_messages(messages: Sequence[discord.Message | discord.PartialMessage]) -> None:
    """Delete each message as Discord would, the bot hearing of every delete."""
    for message in messages:
        await settled(message.delete)
