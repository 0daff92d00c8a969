"""The world a test builds on dpytest (guilds, channels, threads, roles, members) through events."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import discord
from discord.ext.test import factories as dpy_factories

from tests.helpers.discord_payloads import (
    IdAllocator,
    channel_payload,
    dm_channel_payload,
    iso,
    member_payload,
    new_member_payload,
    new_role_payload,
    new_user_payload,
    overwrite_payload,
    user_payload,
)
from tests.helpers.event_tasks import run_tracked

DEFAULT_TIMEOUT = 10.0

DEFAULT_EVERYONE_PERMISSIONS = discord.Permissions(
    view_channel=True,
    send_messages=True,
    send_messages_in_threads=True,
    create_public_threads=True,
    read_message_history=True,
    embed_links=True,
    attach_files=True,
    add_reactions=True,
    external_emojis=True,
    use_application_commands=True,
    change_nickname=True,
    create_instant_invite=True,
)
DEFAULT_BOT_PERMISSIONS = discord.Permissions(
    view_channel=True,
    send_messages=True,
    send_messages_in_threads=True,
    read_message_history=True,
    embed_links=True,
    attach_files=True,
    add_reactions=True,
    use_application_commands=True,
)
# The ``kind``s of create_member: the role (name, permissions) each gets; an owner owns the guild.
MEMBER_KINDS: dict[str, tuple[str, discord.Permissions] | None] = {
    "member": None,
    "moderator": ("Moderator", discord.Permissions(manage_messages=True)),
    "admin": ("Admin", discord.Permissions(manage_guild=True)),
    "owner": None,
}


class EventHandlerError(RuntimeError):
    """An event handler raised (discord.py routed it to ``Client.on_error``)."""


class DiscordWorld:
    """The bot's dpytest state, the events fed to it, and the guilds, channels and members on it."""

    def __init__(self, bot: discord.Client, ids: IdAllocator, timeout: float) -> None:
        self.bot = bot
        self.ids = ids
        self.timeout = timeout
        self.guilds: list[discord.Guild] = []
        self.channels: list[discord.TextChannel] = []  # the text channels made at attach
        self.members: list[discord.Member] = []  # the plain members made at attach
        self.errors: list[tuple[str, BaseException | None]] = []  # (event, error) of on_error
        self._roles: dict[tuple[int, str], discord.Role] = {}

    @property
    def state(self) -> Any:
        return self.bot._connection

    @property
    def guild(self) -> discord.Guild:
        return self.guilds[0]

    @property
    def channel(self) -> discord.TextChannel:
        return self.channels[0]

    @property
    def member(self) -> discord.Member:
        return self.members[0]

    async def run_parser(
        self, fn: Callable[..., Any], *args: Any, raise_errors: bool = True
    ) -> Any:
        """Call a ``state.parse_*``-style function and wait for its handlers; raise if one did."""
        errors_before = len(self.errors)
        result = await run_tracked(fn, *args, limit=self.timeout)
        if raise_errors and len(self.errors) > errors_before:
            event, exc = self.errors[errors_before]
            raise EventHandlerError(f"handler for {event!r} raised: {exc!r}") from exc
        return result

    def _add_guild(
        self,
        name: str,
        everyone: discord.Permissions,
        bot_permissions: discord.Permissions,
        bot_name: str,
    ) -> discord.Guild:
        """A guild holding the bot with its managed role (parsed directly: only at attach)."""
        state = self.state
        guild_id, role_id = self.ids.next(), self.ids.next()
        bot_role = new_role_payload(role_id, bot_name, bot_permissions, 1, managed=True)
        bot_role["tags"] = {"bot_id": str(state.user.id)}
        roles = [new_role_payload(guild_id, "@everyone", everyone, 0), bot_role]
        data = dpy_factories.make_guild_dict(
            name, 0, roles, id_num=guild_id, member_count=1, members=[], channels=[]
        )
        data["preferred_locale"] = "en-US"
        state.parse_guild_create(data)
        me = new_member_payload(user_payload(state.user), [role_id])
        state.parse_guild_member_add({"guild_id": str(guild_id), **me})
        return state._get_guild(guild_id)  # type: ignore[no-any-return]

    async def _create_channel(
        self, guild: discord.Guild, name: str, overwrites: list[dict[str, Any]], kind: int = 0
    ) -> Any:
        data = {
            "id": str(self.ids.next()),
            "type": kind,
            "guild_id": str(guild.id),
            "name": name,
            "position": len(guild.channels),
            "permission_overwrites": overwrites,
            "parent_id": None,
            "topic": None,
            "nsfw": False,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "flags": 0,
        }
        await self.run_parser(self.state.parse_channel_create, data)
        return guild.get_channel(int(data["id"]))

    async def create_text_channel(
        self,
        name: str,
        *,
        guild: discord.Guild | None = None,
        private: bool = False,
        allow: Sequence[discord.Member | discord.Role] = (),
        include_bot: bool = True,
        overwrites: Mapping[discord.Member | discord.Role, discord.PermissionOverwrite]
        | None = None,
    ) -> discord.TextChannel:
        """A text channel; ``private``: seen only by ``allow`` (and the bot if ``include_bot``)."""
        guild = guild or self.guild
        raw: list[dict[str, Any]] = []
        if private:
            hidden = discord.Permissions(view_channel=True)
            raw.append(overwrite_payload(guild.default_role, discord.Permissions.none(), hidden))
            grant = discord.Permissions(
                view_channel=True, send_messages=True, read_message_history=True
            )
            targets = [*allow, *([guild.me] if include_bot else [])]
            raw.extend(overwrite_payload(t, grant, discord.Permissions.none()) for t in targets)
        for target, overwrite in (overwrites or {}).items():
            raw.append(overwrite_payload(target, *overwrite.pair()))
        return await self._create_channel(guild, name, raw)  # type: ignore[no-any-return]

    async def set_overwrite(
        self,
        channel: discord.abc.GuildChannel,
        target: discord.Member | discord.Role,
        overwrite: discord.PermissionOverwrite | None,
    ) -> None:
        """Set (``None``: remove) one permission overwrite through CHANNEL_UPDATE."""
        # dpytest's set_permission_overrides writes overwrite types discord.py 2.x ignores.
        raw = [
            overwrite_payload(t, *ow.pair())
            for t, ow in channel.overwrites.items()
            if t.id != target.id
        ]
        if overwrite is not None:
            raw.append(overwrite_payload(target, *overwrite.pair()))
        data = {**channel_payload(channel), "permission_overwrites": raw}
        await self.run_parser(self.state.parse_channel_update, data)

    async def create_thread(
        self,
        channel: discord.TextChannel | None = None,
        name: str = "thread",
        *,
        private: bool = False,
        owner: discord.abc.User | None = None,
        locked: bool = False,
        from_message: discord.Message | None = None,
    ) -> discord.Thread:
        """A thread under ``channel``; ``locked``: only members with Manage Threads may post;
        ``from_message``: started from that message (Discord gives the thread its id)."""
        channel = channel or self.channel
        thread_id = from_message.id if from_message is not None else self.ids.next()
        now = iso()
        data = {
            "id": str(thread_id),
            "guild_id": str(channel.guild.id),
            "parent_id": str(channel.id),
            "owner_id": str((owner or self.bot.user).id),  # type: ignore[union-attr]
            "name": name,
            "type": 12 if private else 11,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 1,
            "total_message_sent": 0,
            "flags": 0,
            "applied_tags": [],
            "newly_created": True,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": now,
                "locked": locked,
                "invitable": not private,
                "create_timestamp": now,
            },
        }
        await self.run_parser(self.state.parse_thread_create, data)
        return channel.guild.get_thread(thread_id)  # type: ignore[return-value]

    async def create_role(
        self, name: str, permissions: discord.Permissions, *, guild: discord.Guild | None = None
    ) -> discord.Role:
        guild = guild or self.guild
        role_id = self.ids.next()
        role = new_role_payload(role_id, name, permissions, len(guild.roles))
        await self.run_parser(
            self.state.parse_guild_role_create, {"guild_id": str(guild.id), "role": role}
        )
        return guild.get_role(role_id)  # type: ignore[return-value]

    async def _kind_role(self, guild: discord.Guild, kind: str) -> discord.Role | None:
        preset = MEMBER_KINDS[kind]
        if preset is None:
            return None
        key = (guild.id, kind)
        if key not in self._roles:
            self._roles[key] = await self.create_role(*preset, guild=guild)
        return self._roles[key]

    async def create_member(
        self,
        name: str = "member",
        *,
        kind: str = "member",
        guild: discord.Guild | None = None,
        permissions: discord.Permissions | None = None,
        roles: Sequence[discord.Role] = (),
        nick: str | None = None,
        bot: bool = False,
    ) -> discord.Member:
        """A member of a MEMBER_KINDS ``kind``; ``permissions`` adds a role with exactly those."""
        if kind not in MEMBER_KINDS:
            raise ValueError(f"unknown member kind {kind!r}; use one of {sorted(MEMBER_KINDS)}")
        guild = guild or self.guild
        all_roles = list(roles)
        kind_role = await self._kind_role(guild, kind)
        if kind_role is not None:
            all_roles.append(kind_role)
        if permissions is not None:
            all_roles.append(await self.create_role(f"{name}-perms", permissions, guild=guild))
        user_id = self.ids.next()
        data = new_member_payload(
            new_user_payload(user_id, name, bot=bot), [r.id for r in all_roles], nick=nick
        )
        await self.run_parser(
            self.state.parse_guild_member_add, {"guild_id": str(guild.id), **data}
        )
        if kind == "owner":
            guild.owner_id = user_id
        member = guild.get_member(user_id)
        assert member is not None, "member not cached: is the members intent enabled?"
        return member

    async def set_roles(self, member: discord.Member, roles: Sequence[discord.Role]) -> None:
        """Replace a member's roles through GUILD_MEMBER_UPDATE."""
        data = {
            "guild_id": str(member.guild.id),
            **member_payload(member),
            "roles": [str(r.id) for r in roles],
        }
        await self.run_parser(self.state.parse_guild_member_update, data)

    def dm_channel(self, user: discord.abc.User) -> discord.DMChannel:
        """The bot's DM channel with ``user``, the one ``user.create_dm()`` returns."""
        base = getattr(user, "_user", user)
        existing = self.state._get_private_channel_by_user(base.id)
        if existing is not None:
            return existing  # type: ignore[no-any-return]
        return self.state.add_dm_channel(dm_channel_payload(self.ids.next(), base))  # type: ignore[no-any-return]
