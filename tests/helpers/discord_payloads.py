"""Discord's JSON as discord.py parses it: ids and user, member, role, channel, message payloads."""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from enum import Enum
from typing import Any

import discord

_DISCORD_EPOCH_MS = 1_420_070_400_000
FIXED_JOINED_AT = "2024-01-01T00:00:00+00:00"

_last_snowflake = 0


def snowflake() -> int:
    """A fresh, strictly increasing, time-based snowflake (messages, interactions)."""
    global _last_snowflake
    now = (time.time_ns() // 1_000_000 - _DISCORD_EPOCH_MS) << 22
    _last_snowflake = max(now, _last_snowflake + 1)
    return _last_snowflake


class IdAllocator:
    """Ids ``base + 1, base + 2...`` (the same world twice gets the same ids), or time based."""

    def __init__(self, base: int | None) -> None:
        self.base = base
        self._counter = itertools.count(1)

    def next(self) -> int:
        return snowflake() if self.base is None else self.base + next(self._counter)


def iso(value: dt.datetime | None = None) -> str:
    return (value or dt.datetime.now(dt.UTC)).isoformat()


def new_user_payload(
    user_id: int,
    name: str,
    *,
    bot: bool = False,
    discriminator: str = "0",
    global_name: str | None = None,
) -> dict[str, Any]:
    return {
        "id": str(user_id),
        "username": name,
        "discriminator": discriminator,
        "global_name": global_name,
        "avatar": None,
        "bot": bot,
        "system": False,
        "public_flags": 0,
    }


def user_payload(user: discord.abc.User) -> dict[str, Any]:
    base = getattr(user, "_user", user)  # Member -> User
    return new_user_payload(
        base.id,
        base.name,
        bot=base.bot,
        discriminator=base.discriminator,
        global_name=base.global_name,
    )


def new_member_payload(
    user: dict[str, Any],
    role_ids: Sequence[int],
    *,
    nick: str | None = None,
    joined_at: str = FIXED_JOINED_AT,
) -> dict[str, Any]:
    return {
        "user": user,
        "roles": [str(r) for r in role_ids],
        "joined_at": joined_at,
        "deaf": False,
        "mute": False,
        "flags": 0,
        "pending": False,
        "nick": nick,
    }


def member_payload(member: discord.Member, *, with_user: bool = True) -> dict[str, Any]:
    data = new_member_payload(
        user_payload(member),
        [r.id for r in member.roles if not r.is_default()],
        nick=member.nick,
        joined_at=iso(member.joined_at) if member.joined_at else FIXED_JOINED_AT,
    )
    data.update(avatar=None, premium_since=None, communication_disabled_until=None)
    if not with_user:
        del data["user"]
    return data


def new_role_payload(
    role_id: int,
    name: str,
    permissions: discord.Permissions,
    position: int,
    *,
    managed: bool = False,
) -> dict[str, Any]:
    return {
        "id": str(role_id),
        "name": name,
        "permissions": str(permissions.value),
        "position": position,
        "color": 0,
        "hoist": False,
        "managed": managed,
        "mentionable": False,
        "flags": 0,
    }


def role_payload(role: discord.Role) -> dict[str, Any]:
    data = new_role_payload(
        role.id, role.name, role.permissions, role.position, managed=role.managed
    )
    data.update(color=role.colour.value, hoist=role.hoist, mentionable=role.mentionable)
    return data


def overwrite_payload(
    target: discord.abc.Snowflake, allow: discord.Permissions, deny: discord.Permissions
) -> dict[str, Any]:
    # Type 0 = role, 1 = member: dpytest writes "role"/"member", which discord.py 2.x ignores.
    kind = 0 if isinstance(target, discord.Role) else 1
    return {"id": str(target.id), "type": kind, "allow": str(allow.value), "deny": str(deny.value)}


def channel_payload(channel: Any, *, permissions: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"id": str(channel.id), "type": channel.type.value, "flags": 0}
    guild = getattr(channel, "guild", None)
    if guild is not None:
        data["guild_id"] = str(guild.id)
        data["name"] = channel.name
        data["parent_id"] = str(channel.parent_id) if getattr(channel, "parent_id", None) else None
        data["nsfw"] = False
        data["position"] = getattr(channel, "position", 0)
        data["last_message_id"] = None
        data["rate_limit_per_user"] = 0
        data["topic"] = getattr(channel, "topic", None)
    if isinstance(channel, discord.Thread):
        data["owner_id"] = str(channel.owner_id)
        data["thread_metadata"] = {
            "archived": channel.archived,
            "auto_archive_duration": channel.auto_archive_duration,
            "archive_timestamp": iso(channel.archive_timestamp),
            "locked": channel.locked,
            "invitable": channel.invitable,
        }
        data["message_count"] = 0
        data["member_count"] = 1
    if permissions is not None:
        data["permissions"] = str(permissions)
    return data


def dm_channel_payload(channel_id: int, user: discord.abc.User) -> dict[str, Any]:
    return {
        "id": str(channel_id),
        "type": 1,
        "recipients": [user_payload(user)],
        "last_message_id": None,
        "flags": 0,
    }


def complete_message_payload(data: dict[str, Any], state: Any) -> dict[str, Any]:
    """Fill in place the message fields discord.py 2.7 reads but dpytest does not write."""
    for key, default in (
        ("components", []),
        ("flags", 0),
        ("mentions", []),
        ("mention_roles", []),
        ("attachments", []),
        ("embeds", []),
        ("pinned", False),
        ("tts", False),
        ("mention_everyone", False),
        ("edited_timestamp", None),
        ("content", ""),
        ("type", 0),
    ):
        if data.get(key) is None:
            data[key] = default
    if isinstance(data["type"], Enum):
        data["type"] = data["type"].value
    if isinstance(data.get("edited_timestamp"), dt.datetime):
        data["edited_timestamp"] = iso(data["edited_timestamp"])
    timestamp = data.get("timestamp")
    if isinstance(timestamp, dt.datetime):
        data["timestamp"] = iso(timestamp)
    elif timestamp is None:
        data["timestamp"] = iso(discord.utils.snowflake_time(int(data["id"])))
    data["mention_roles"] = [str(r) for r in data["mention_roles"]]
    # dpytest puts a *user* under "member", which resets the cached member's joined_at.
    data.pop("member", None)
    guild_id = data.get("guild_id")
    author = data.get("author") or {}
    if guild_id and state is not None and author.get("id") is not None:
        guild = state._get_guild(int(guild_id))
        member = guild.get_member(int(author["id"])) if guild else None
        if member is not None:
            data["member"] = member_payload(member, with_user=False)
    return data


def walk_components(components: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for component in components or ():
        yield component
        yield from walk_components(component.get("components", ()))
        for key in ("component", "accessory"):
            if isinstance(component.get(key), Mapping):
                yield from walk_components([component[key]])


def custom_ids(components: Sequence[Mapping[str, Any]]) -> list[str]:
    return [c["custom_id"] for c in walk_components(components) if c.get("custom_id")]


class SentBody:
    """What a message body the bot sent (``payload``, its JSON) shows."""

    payload: dict[str, Any]

    @property
    def embeds(self) -> list[discord.Embed]:
        return [discord.Embed.from_dict(e) for e in self.payload.get("embeds") or []]

    @property
    def components(self) -> list[dict[str, Any]]:
        return self.payload.get("components") or []

    @property
    def custom_ids(self) -> list[str]:
        return custom_ids(self.components)

    @property
    def allowed_mentions(self) -> dict[str, Any] | None:
        return self.payload.get("allowed_mentions")


def read_files(files: Sequence[discord.File] | None) -> list[tuple[str, bytes]]:
    out = []
    for file in files or ():
        with contextlib.suppress(Exception):
            file.fp.seek(0)
        out.append((file.filename or "file", file.fp.read()))
    return out


def request_body(
    payload: Mapping[str, Any] | None, multipart: Sequence[Mapping[str, Any]] | None
) -> dict[str, Any]:
    """The JSON body of a request discord.py made, plain or inside a multipart upload."""
    if payload is not None:
        return dict(payload)
    for part in multipart or ():
        if part.get("name") == "payload_json":
            return dict(json.loads(part["value"]))
    return {}


class FakeResponse:
    """Enough of an aiohttp response for ``discord.HTTPException``."""

    def __init__(self, status: int, reason: str) -> None:
        self.status = status
        self.reason = reason


def not_found(what: str) -> discord.NotFound:
    return discord.NotFound(FakeResponse(404, "Not Found"), {"code": 10008, "message": what})


def forbidden(what: str) -> discord.Forbidden:
    return discord.Forbidden(FakeResponse(403, "Forbidden"), {"code": 50013, "message": what})
