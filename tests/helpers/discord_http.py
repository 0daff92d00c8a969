"""The REST calls the bot makes (messages, history, reactions, DMs), answered from the world."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import discord
from discord.ext.test import backend as dpy_backend
from discord.ext.test import callbacks as dpy_callbacks

from tests.helpers.discord_payloads import (
    dm_channel_payload,
    forbidden,
    member_payload,
    not_found,
    read_files,
    request_body,
)
from tests.helpers.event_tasks import tracked
from tests.helpers.messages import MessageTraffic, SentMessage


def _history(channel_id: int) -> list[dict[str, Any]]:
    config = dpy_backend._cur_config
    return config.messages.get(int(channel_id), []) if config else []


class FakeDiscordHttp:
    """Stands in for the ``HTTPClient`` methods the bot calls."""

    # dpytest's own inspect caller frames or compare str and int ids.

    ENDPOINTS = (
        "send_message",
        "edit_message",
        "delete_message",
        "get_message",
        "logs_from",
        "start_private_message",
        "send_typing",
        "get_from_cdn",
        "add_reaction",
        "remove_own_reaction",
        "remove_reaction",
        "clear_reactions",
        "bulk_upsert_global_commands",
        "bulk_upsert_guild_commands",
        "get_global_commands",
        "get_guild_commands",
        "get_member",
    )

    def __init__(self, world: MessageTraffic) -> None:
        self.world = world
        self.typing: list[int] = []  # ids of the channels the bot typed in
        self.synced_commands: dict[int | None, list[dict[str, Any]]] = {}  # by guild id

    def install(self, http: Any) -> None:
        for name in self.ENDPOINTS:
            setattr(http, name, getattr(self, name))

    @property
    def _me(self) -> int:
        return self.world.bot.user.id  # type: ignore[union-attr]

    # -- messages --------------------------------------------------------------------------------

    async def send_message(self, channel_id: int, *, params: Any) -> dict[str, Any]:
        world = self.world
        channel = world.state.get_channel(int(channel_id))
        if channel is None:
            raise not_found("Unknown Channel")
        body = request_body(params.payload, params.multipart)
        files = read_files(params.files)
        guild = getattr(channel, "guild", None)
        if guild is not None:
            perms = channel.permissions_for(guild.me)
            in_thread = isinstance(channel, discord.Thread)
            can = perms.send_messages_in_threads if in_thread else perms.send_messages
            # In a locked thread only Manage Threads may post (Discord, since 2023).
            locked = in_thread and channel.locked
            if not (perms.view_channel and can) or (locked and not perms.manage_threads):
                raise forbidden("Missing Permissions")
        data = world.bot_message_payload(channel, body, files)
        world.store(data)
        world.echo(data, created=True)
        message = world.message_object(data, channel)
        world.sent.append(SentMessage(message=message, payload=body, files=files))
        await dpy_callbacks.dispatch_event("send_message", message)  # dpytest's sent queue
        return copy.deepcopy(data)

    async def edit_message(
        self, channel_id: int, message_id: int, *, params: Any
    ) -> dict[str, Any]:
        data = self.world.message_payload(message_id)
        if data is None:
            raise not_found("Unknown Message")
        body = request_body(params.payload, params.multipart)
        self.world.apply_edit(data, body, read_files(params.files))
        for record in self.world.sent:
            if record.message.id == int(message_id):
                record.edits.append(body)
        self.world.echo(data, created=False)
        return copy.deepcopy(data)

    async def delete_message(
        self, channel_id: int, message_id: int, *, reason: str | None = None
    ) -> None:
        data = self.world.forget_message(message_id)
        if data is None:
            raise not_found("Unknown Message")
        history = _history(channel_id)
        history[:] = [m for m in history if int(m["id"]) != int(message_id)]
        for record in self.world.sent:
            if record.message.id == int(message_id):
                record.deleted = True
        payload = {"id": str(message_id), "channel_id": str(channel_id)}
        if data.get("guild_id"):
            payload["guild_id"] = str(data["guild_id"])
        with tracked():
            self.world.state.parse_message_delete(payload)

    async def get_message(self, channel_id: int, message_id: int) -> dict[str, Any]:
        data = self.world.message_payload(message_id)
        if data is None or int(data["channel_id"]) != int(channel_id):
            raise not_found("Unknown Message")
        return copy.deepcopy(data)

    async def logs_from(
        self,
        channel_id: int,
        limit: int,
        before: int | None = None,
        after: int | None = None,
        around: int | None = None,
    ) -> list[dict[str, Any]]:
        history = sorted(_history(channel_id), key=lambda m: int(m["id"]))
        if before is not None:
            picked = [m for m in history if int(m["id"]) < int(before)][-limit:]
        elif after is not None:
            picked = [m for m in history if int(m["id"]) > int(after)][:limit]
        elif around is not None:
            older = [m for m in history if int(m["id"]) <= int(around)][-(limit // 2 + 1) :]
            newer = [m for m in history if int(m["id"]) > int(around)][: limit // 2]
            picked = older + newer
        else:
            picked = history[-limit:]
        # Discord answers newest first, whatever the strategy.
        return [copy.deepcopy(m) for m in reversed(picked)]

    async def send_typing(self, channel_id: int) -> None:
        self.typing.append(int(channel_id))

    async def get_from_cdn(self, url: str) -> bytes:
        self.world.cdn_asked.append(url)
        if self.world.cdn_stalls(url):
            await asyncio.Event().wait()  # never set: a download that never ends
        try:
            return self.world.cdn[url]
        except KeyError:
            raise not_found("Unknown Attachment") from None

    # -- reactions -------------------------------------------------------------------------------

    async def add_reaction(self, channel_id: int, message_id: int, emoji: str) -> None:
        self.world.reaction_event(channel_id, message_id, emoji, self._me, True)

    async def remove_own_reaction(self, channel_id: int, message_id: int, emoji: str) -> None:
        self.world.reaction_event(channel_id, message_id, emoji, self._me, False)

    async def remove_reaction(
        self, channel_id: int, message_id: int, emoji: str, member_id: int
    ) -> None:
        self.world.reaction_event(channel_id, message_id, emoji, member_id, False)

    async def clear_reactions(self, channel_id: int, message_id: int) -> None:
        data = self.world.message_payload(message_id)
        event = {"message_id": str(message_id), "channel_id": str(channel_id)}
        if data is not None:
            data["reactions"] = []
            if data.get("guild_id"):
                event["guild_id"] = str(data["guild_id"])
        with tracked():
            self.world.state.parse_message_reaction_remove_all(event)

    # -- users and members -----------------------------------------------------------------------

    async def start_private_message(self, user_id: int) -> dict[str, Any]:
        user = self.world.state.get_user(int(user_id))
        if user is None:
            raise not_found("Unknown User")
        return dm_channel_payload(self.world.dm_channel(user).id, user)

    async def get_member(self, guild_id: int, member_id: int) -> dict[str, Any]:
        """The member as Discord sends it, or 404 once they left."""
        guild = self.world.bot.get_guild(int(guild_id))
        member = guild.get_member(int(member_id)) if guild is not None else None
        if member is None:
            raise not_found("Unknown Member")
        return member_payload(member)

    # -- application commands --------------------------------------------------------------------

    def _synced(self, payload: list[dict[str, Any]], guild_id: int | None) -> list[Any]:
        commands = []
        for command in payload:
            data = {
                "id": str(self.world.ids.next()),
                "application_id": str(self.world.bot.application_id),
                "version": "1",
                "description": "",
                "options": [],
                "default_member_permissions": None,
                "dm_permission": True,
                "nsfw": False,
                **command,
            }
            if guild_id is not None:
                data["guild_id"] = str(guild_id)
            commands.append(data)
        self.synced_commands[guild_id] = commands
        return copy.deepcopy(commands)

    async def bulk_upsert_global_commands(
        self, application_id: int, payload: list[dict[str, Any]]
    ) -> list[Any]:
        return self._synced(payload, None)

    async def bulk_upsert_guild_commands(
        self, application_id: int, guild_id: int, payload: list[dict[str, Any]]
    ) -> list[Any]:
        return self._synced(payload, int(guild_id))

    async def get_global_commands(self, application_id: int) -> list[Any]:
        return copy.deepcopy(self.synced_commands.get(None, []))

    async def get_guild_commands(self, application_id: int, guild_id: int) -> list[Any]:
        return copy.deepcopy(self.synced_commands.get(int(guild_id), []))
