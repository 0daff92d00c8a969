"""Which channels' memory a channel may show: never one more private than itself.

A server channel shows another only if everyone who can read it can read the other too
(threads are judged by their parent; a private thread is never shown elsewhere). A DM
shows what its user may still read in servers. Long-term facts said where Discord shows
nothing now are judged by the :class:`Place` recorded with them.
"""

from __future__ import annotations

from collections.abc import Sequence

import discord

from bot.cogs.chat.members import Members
from bot.memory import ChannelFilter, ChannelView, LabelFor
from bot.vocabulary import Place, StmEntry


def _sees(channel: discord.abc.GuildChannel, roles: Sequence[discord.Role]) -> bool:
    """Whether a member holding exactly ``roles`` (no member overwrite) may view ``channel``."""
    guild = channel.guild
    base = discord.Permissions(guild.default_role.permissions.value)
    for role in roles:
        base.value |= role.permissions.value
    if base.administrator:
        return True
    base.handle_overwrite(*(p.value for p in channel.overwrites_for(guild.default_role).pair()))
    allow = deny = 0
    for role in roles:
        if not role.is_default():
            a, d = channel.overwrites_for(role).pair()
            allow, deny = allow | a.value, deny | d.value
    base.handle_overwrite(allow, deny)
    return base.view_channel


def may_show_elsewhere(current: discord.abc.GuildChannel, other: discord.abc.GuildChannel) -> bool:
    """Whether ``other``'s memory may appear in ``current``: only if everyone who can read
    ``current`` can read ``other`` too (never leak a more private channel)."""
    roles = current.guild.roles
    # A member's roles combine: one role may open ``current`` while another closes
    # ``other``. Any such member is witnessed by at most two of their roles.
    closers = [r for r in roles if other.overwrites_for(r).view_channel is False]
    for role in roles:
        for closer in (None, *closers):
            held = (role,) if closer is None else (role, closer)
            if _sees(current, held) and not _sees(other, held):
                return False
    for target in (*current.overwrites, *other.overwrites):
        if isinstance(target, discord.Role):
            continue
        if isinstance(target, discord.Member):
            if (
                current.permissions_for(target).view_channel
                and not other.permissions_for(target).view_channel
            ):
                return False
            continue
        # A member the bot has not cached (no members intent): their roles are unknown,
        # so judge by their own overwrites, and refuse when in doubt.
        here, there = current.overwrites_for(target), other.overwrites_for(target)
        if there.view_channel is False or (here.view_channel is True and not there.view_channel):
            return False
    return True


def readable_by_everyone(channel: discord.abc.GuildChannel) -> bool:
    """Whether every member of the server may read ``channel``: @everyone may view it
    and no overwrite takes that from a role or a member."""
    everyone = channel.guild.default_role
    if not _sees(channel, (everyone,)):
        return False
    return not any(
        overwrite.view_channel is False
        for target, overwrite in channel.overwrites.items()
        if target != everyone
    )


def place_of(channel: discord.abc.Messageable) -> Place:
    """What a long-term fact said in ``channel`` records about it (see :class:`Place`)."""
    channel_id: int = getattr(channel, "id", 0)
    if isinstance(channel, discord.Thread):
        private = channel.type is discord.ChannelType.private_thread
        parent = channel.parent
        everyone = not private and parent is not None and readable_by_everyone(parent)
        return Place(channel.id, channel.parent_id, private, everyone)
    if isinstance(channel, discord.abc.GuildChannel):
        return Place(channel_id, None, False, readable_by_everyone(channel))
    return Place(channel_id)


class OnlyHere(ChannelView):
    """Nothing from elsewhere (a channel whose rights are unknown)."""

    def __init__(self, channel_id: int, here: Place) -> None:
        self.channel_id, self.here = channel_id, here

    def __call__(self, channel_id: int, /) -> bool:
        return channel_id == self.channel_id

    def shows(self, guild_id: int | None, place: Place) -> bool:
        return place.channel_id == self.channel_id


class ServerView(ChannelView):
    """What a server channel (or a thread, judged by its parent ``base``) may show."""

    def __init__(
        self, guild: discord.Guild, current_id: int, base: discord.abc.GuildChannel, here: Place
    ) -> None:
        self.guild, self.current_id, self.base, self.here = guild, current_id, base, here

    def __call__(self, channel_id: int, /) -> bool:
        if channel_id in (self.current_id, self.base.id):
            return True
        other = self.guild.get_channel_or_thread(channel_id)
        if other is None:
            return False
        if isinstance(other, discord.Thread):
            if other.type is discord.ChannelType.private_thread or other.parent is None:
                return False
            return may_show_elsewhere(self.base, other.parent)
        return may_show_elsewhere(self.base, other)

    def shows(self, guild_id: int | None, place: Place) -> bool:
        """A fact's place as Discord shows it now; else, by what the fact recorded: a
        public thread Discord no longer caches (archived, or after a restart) as its
        parent channel; a deleted channel (or thread parent) only if every member of
        the server could read it, as then no channel here is more public than it was. A
        private thread is never shown elsewhere, cached or not."""
        if self(place.channel_id):
            return True
        if self.guild.get_channel_or_thread(place.channel_id) is not None:
            return False  # Discord shows it: judged as it is now
        if place.private_thread or guild_id != self.guild.id:
            return False
        parent = place.parent_channel_id
        if parent is not None and self.guild.get_channel(parent) is not None:
            return self(parent)
        return place.readable_by_everyone


class DirectView(ChannelView):
    """What a DM may show: the DM itself, and what the user may still read in servers."""

    def __init__(self, members: Members, user_id: int, dm_id: int, here: Place) -> None:
        self.members, self.user_id, self.dm_id, self.here = members, user_id, dm_id, here

    def __call__(self, channel_id: int, /) -> bool:
        return channel_id == self.dm_id or self.members.sees(self.user_id, channel_id)

    def shows(self, guild_id: int | None, place: Place) -> bool:
        """As :meth:`ServerView.shows`, for the user: an archived public thread if they
        may read its parent, a deleted channel every member could read if they are
        still a member of that server."""
        if self(place.channel_id):
            return True
        bot = self.members.client
        if guild_id is None or place.private_thread:
            return False
        if bot.get_channel(place.channel_id) is not None:
            return False  # Discord shows it: judged as it is now
        guild = bot.get_guild(guild_id)
        if guild is None:
            return False  # a server the bot left: who may read what is unknown
        parent = place.parent_channel_id
        if parent is not None and guild.get_channel(parent) is not None:
            return self.members.sees(self.user_id, parent)
        return place.readable_by_everyone and self.members.member(guild, self.user_id) is not None


def view_here(message: discord.Message, members: Members) -> ChannelView:
    """Whether what was said in another channel may be shown where ``message`` was
    sent: in a DM, the user's own DM shows anything; in a server, only channels no
    more private than this one (threads judged by their parent; never a private
    thread). Long-term facts said where Discord shows nothing now are judged by what
    was recorded with them (see :class:`ServerView` and :class:`DirectView`)."""
    guild = message.guild
    here = place_of(message.channel)
    if guild is None:
        # A DM shows what the user said in it, and what they may still read in servers.
        return DirectView(members, message.author.id, message.channel.id, here)
    current = message.channel
    base = current.parent if isinstance(current, discord.Thread) else current
    if not isinstance(base, discord.abc.GuildChannel):
        return OnlyHere(current.id, here)
    return ServerView(guild, current.id, base, here)


def labeler(client: discord.Client, message: discord.Message, visible: ChannelFilter) -> LabelFor:
    """How another channel's memory is labelled where ``message`` was sent (None: not
    shown there, by ``visible``)."""
    guild = message.guild
    if guild is None:

        def dm_label(entry: StmEntry) -> str | None:
            other_guild = client.get_guild(entry.key.guild_id or 0)
            channel = (
                other_guild.get_channel_or_thread(entry.key.channel_id) if other_guild else None
            )
            if other_guild is None or channel is None or not visible(entry.key.channel_id):
                return None
            return f"#{channel.name} in {other_guild.name}"

        return dm_label

    def guild_label(entry: StmEntry) -> str | None:
        other = guild.get_channel_or_thread(entry.key.channel_id)
        if other is None or not visible(entry.key.channel_id):
            return None
        return f"#{other.name}"

    return guild_label
