"""The turn request a member's message becomes: who asks, where, the message it answers,
and what the prompt may show beside it (reply chain, thread starter, other channels)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import discord

from bot.cogs.chat.members import Members
from bot.cogs.chat.references import reply_chain
from bot.cogs.chat.threads import ThreadStarters
from bot.cogs.chat.visibility import labeler, view_here
from bot.cogs.history import to_raw
from bot.cogs.images import ImageDownloader
from bot.conversation import TurnRequest

if TYPE_CHECKING:
    from bot.app import KiokuBot


def _request(bot: KiokuBot, message: discord.Message, members: Members) -> TurnRequest:
    me = bot.user
    assert me is not None
    channel = message.channel
    guild = message.guild
    parent_id = channel.parent_id if isinstance(channel, discord.Thread) else None
    visible = view_here(message, members)
    own_role = guild.self_role if guild else None
    return TurnRequest(
        channel_id=channel.id,
        user_id=message.author.id,
        source_message_id=message.id,
        content=message.content,
        bot_user_id=me.id,
        guild_id=guild.id if guild else None,
        bot_role_ids=(own_role.id,) if own_role is not None else (),
        parent_channel_id=parent_id,
        user_name=message.author.display_name,
        bot_name=me.display_name,
        channel_name=f"#{channel.name}"
        if isinstance(channel, discord.abc.GuildChannel | discord.Thread)
        else "a direct message",
        guild_name=guild.name if guild else None,
        label_for=labeler(bot, message, visible),
        may_show=visible,
    )


async def turn_request(
    bot: KiokuBot,
    message: discord.Message,
    *,
    members: Members,
    starters: ThreadStarters,
    read_image: ImageDownloader,
    trigger_epoch: int,
) -> TurnRequest:
    """The request answering ``message``, which arrived at the channel's ``trigger_epoch``.

    A busy channel may have pushed the message out of the raw window while the turn
    waited; the turn still answers it, unless a wipe since its arrival (the epoch) took
    it."""
    channel = message.channel
    return dataclasses.replace(
        _request(bot, message, members),
        trigger=to_raw(message),
        trigger_epoch=trigger_epoch,
        replied_to=await reply_chain(bot, message),
        thread_starter=await starters.starter(channel)
        if isinstance(channel, discord.Thread)
        else None,
        read_image=read_image,
    )
