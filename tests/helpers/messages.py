"""Messages members post and the bot sends, stored, edited, reacted to and echoed as by Discord."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import discord
from discord.ext.test import backend as dpy_backend
from discord.ext.test import factories as dpy_factories

from tests.helpers.discord_payloads import (
    IdAllocator,
    SentBody,
    complete_message_payload,
    iso,
    member_payload,
    snowflake,
    user_payload,
)
from tests.helpers.discord_world import DiscordWorld
from tests.helpers.event_tasks import tracked

_USER_MENTION = re.compile(r"<@!?([0-9]{15,21})>")
_ROLE_MENTION = re.compile(r"<@&([0-9]{15,21})>")
_EDIT_DEFAULTS: dict[str, Any] = {"content": "", "embeds": [], "components": [], "flags": 0}


@dataclass
class SentMessage(SentBody):
    """A message the bot sent with ``Messageable.send``: the message, the JSON sent, edits."""

    message: discord.Message  # kept up to date by the MESSAGE_UPDATE echoes of edits
    payload: dict[str, Any]
    files: list[tuple[str, bytes]] = field(default_factory=list)
    edits: list[dict[str, Any]] = field(default_factory=list)
    deleted: bool = False

    @property
    def channel(self) -> Any:
        return self.message.channel

    @property
    def content(self) -> str:
        """Content as first sent (``message.content`` follows later edits)."""
        return self.payload.get("content") or ""

    @property
    def reference_id(self) -> int | None:
        ref = self.payload.get("message_reference")
        return int(ref["message_id"]) if ref and ref.get("message_id") else None


class MessageTraffic(DiscordWorld):
    """The world and its messages, each change fed back to the bot as Discord would."""

    def __init__(self, bot: discord.Client, ids: IdAllocator, timeout: float) -> None:
        super().__init__(bot, ids, timeout)
        self.sent: list[SentMessage] = []
        self._messages: dict[int, dict[str, Any]] = {}
        self.cdn: dict[str, bytes] = {}  # attachment url -> content
        self.cdn_asked: list[str] = []  # every URL the bot asked the CDN for, in order
        # File names whose download never ends (a stalled host): only a timeout stops it.
        self.cdn_stalled: set[str] = set()

    def cdn_stalls(self, url: str) -> bool:
        """Whether the download of ``url`` never ends (its file name is in ``cdn_stalled``)."""
        return url.split("?", 1)[0].rsplit("/", 1)[-1] in self.cdn_stalled

    def message_payload(self, message_id: int) -> dict[str, Any] | None:
        """The stored gateway payload of a message, or ``None``."""
        return self._messages.get(int(message_id))

    def forget_message(self, message_id: int) -> dict[str, Any] | None:
        return self._messages.pop(int(message_id), None)

    def store(self, data: dict[str, Any], *, in_history: bool = True) -> None:
        """Keep a message for fetches and edits, and in its channel's history if ``in_history``."""
        self._messages[int(data["id"])] = data
        config = dpy_backend._cur_config
        if config is not None and in_history:
            config.messages.setdefault(int(data["channel_id"]), []).append(data)

    _store = store  # the name tests/discord/test_window.py and test_turn_edges.py call

    def message_object(self, data: dict[str, Any], channel: Any) -> discord.Message:
        cached = self.state._get_message(int(data["id"]))
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        return discord.Message(state=self.state, channel=channel, data=copy.deepcopy(data))

    def payload_for(self, message: discord.Message) -> dict[str, Any]:
        return self._messages.get(message.id) or dpy_factories.dict_from_message(message)

    def echo(self, data: dict[str, Any], *, created: bool) -> None:
        """Feed a message back as MESSAGE_CREATE or MESSAGE_UPDATE, as part of the current event."""
        parse = self.state.parse_message_create if created else self.state.parse_message_update
        with tracked():
            parse(copy.deepcopy(data))

    # -- payloads -----------------------------------------------------------------------------

    def _mention(self, user: discord.abc.User, guild: discord.Guild | None) -> dict[str, Any]:
        payload = user_payload(user)
        member = guild.get_member(user.id) if guild else None
        if member is not None:
            payload["member"] = member_payload(member, with_user=False)
        return payload

    def _resolve_mentions(
        self, content: str, guild: discord.Guild | None, allowed: Mapping[str, Any] | None
    ) -> tuple[list[dict[str, Any]], list[str], bool]:
        """The users, roles and @everyone a message pings, as its ``allowed_mentions`` permit."""
        parse = None if allowed is None else set(allowed.get("parse") or ())
        allowed_users = {int(u) for u in (allowed or {}).get("users") or ()}
        allowed_roles = {int(r) for r in (allowed or {}).get("roles") or ()}
        me = self.bot.user
        assert me is not None
        users: list[dict[str, Any]] = []
        for user_id in dict.fromkeys(int(x) for x in _USER_MENTION.findall(content)):
            if parse is not None and "users" not in parse and user_id not in allowed_users:
                continue
            user = (guild.get_member(user_id) if guild else None) or self.state.get_user(user_id)
            if user is None and user_id == me.id:
                user = me
            if user is not None:
                users.append(self._mention(user, guild))
        roles = [
            r
            for r in dict.fromkeys(_ROLE_MENTION.findall(content))
            if guild
            and guild.get_role(int(r))
            and (parse is None or "roles" in parse or int(r) in allowed_roles)
        ]
        everyone = ("@everyone" in content or "@here" in content) and (
            parse is None or "everyone" in parse
        )
        return users, roles, everyone

    def _attachments(
        self, channel_id: int, files: Sequence[tuple[str, bytes]]
    ) -> list[dict[str, Any]]:
        out = []
        for filename, blob in files:
            attachment_id = snowflake()
            url = f"https://cdn.discordapp.com/attachments/{channel_id}/{attachment_id}/{filename}"
            self.cdn[url] = blob
            out.append(
                {
                    "id": str(attachment_id),
                    "filename": filename,
                    "size": len(blob),
                    "url": url,
                    "proxy_url": url,
                }
            )
        return out

    def _new_message(
        self,
        channel_id: int,
        guild: discord.Guild | None,
        author: discord.abc.User,
        content: str,
        *,
        allowed_mentions: Mapping[str, Any] | None = None,
        files: Sequence[tuple[str, bytes]] = (),
    ) -> dict[str, Any]:
        message_id = snowflake()
        users, roles, everyone = self._resolve_mentions(content, guild, allowed_mentions)
        data: dict[str, Any] = {
            "id": message_id,
            "channel_id": channel_id,
            "author": user_payload(author),
            "content": content,
            "timestamp": iso(discord.utils.snowflake_time(message_id)),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": everyone,
            "mentions": users,
            "mention_roles": roles,
            "attachments": self._attachments(channel_id, files),
            "embeds": [],
            "components": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }
        if guild is not None:
            data["guild_id"] = guild.id
        return data

    def _apply_reference(
        self,
        data: dict[str, Any],
        reference: Mapping[str, Any],
        guild: discord.Guild | None,
        ping_author: bool,
    ) -> None:
        referenced_id = int(reference["message_id"])
        referenced = self._messages.get(referenced_id)
        data["type"] = 19
        data["message_reference"] = {
            "type": 0,
            "message_id": str(referenced_id),
            "channel_id": str(reference.get("channel_id") or data["channel_id"]),
        }
        if guild is not None:
            data["message_reference"]["guild_id"] = str(guild.id)
        data["referenced_message"] = copy.deepcopy(referenced) if referenced else None
        if referenced and ping_author:
            author_id = int(referenced["author"]["id"])
            if all(int(u["id"]) != author_id for u in data["mentions"]):
                member = guild.get_member(author_id) if guild else None
                payload = dict(referenced["author"])
                if member is not None:
                    payload["member"] = member_payload(member, with_user=False)
                data["mentions"].append(payload)

    def bot_message_payload(
        self,
        channel: Any,
        body: Mapping[str, Any],
        files: Sequence[tuple[str, bytes]],
        *,
        msg_type: int = 0,
        flags: int | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The message Discord makes of a body the bot sent (``channel`` may be an Object)."""
        guild = getattr(channel, "guild", None)
        allowed = body.get("allowed_mentions")
        author = self.bot.user
        assert author is not None
        data = self._new_message(
            channel.id,
            guild,
            author,
            body.get("content") or "",
            allowed_mentions=allowed,
            files=files,
        )
        data.update(
            tts=bool(body.get("tts")),
            embeds=list(body.get("embeds") or []),
            components=list(body.get("components") or []),
            type=msg_type,
            flags=int(body.get("flags") or 0) if flags is None else flags,
        )
        if body.get("poll"):
            data["poll"] = body["poll"]
        data.update(extra or {})
        ref = body.get("message_reference")
        if ref and ref.get("message_id"):
            # Replies ping their author by default; with allowed_mentions only if replied_user.
            replied = allowed.get("replied_user", False) if allowed is not None else True
            self._apply_reference(data, ref, guild, bool(replied))
        return complete_message_payload(data, self.state)

    def apply_edit(
        self, data: dict[str, Any], body: Mapping[str, Any], files: Sequence[tuple[str, bytes]]
    ) -> None:
        """Apply in place an edit of a stored message, as Discord does."""
        for key in ("content", "embeds", "components", "flags", "poll"):
            if key in body:
                data[key] = body[key] if body[key] is not None else _EDIT_DEFAULTS[key]
        if "attachments" in body or files:
            kept = {str(a.get("id")) for a in body.get("attachments") or []}
            data["attachments"] = [a for a in data["attachments"] if str(a["id"]) in kept]
            data["attachments"] += self._attachments(int(data["channel_id"]), files)
        if "content" in body:
            guild = self.state._get_guild(int(data["guild_id"])) if data.get("guild_id") else None
            users, roles, everyone = self._resolve_mentions(
                data["content"], guild, body.get("allowed_mentions")
            )
            data.update(mentions=users, mention_roles=roles, mention_everyone=everyone)
        data["edited_timestamp"] = iso()

    # -- what members do ------------------------------------------------------------------------

    async def send(
        self,
        content: str,
        *,
        channel: Any = None,
        author: discord.abc.User | None = None,
        reply_to: discord.Message | int | None = None,
        mention_author: bool = True,
        mention_bot: bool = False,
        attachments: Sequence[tuple[str, bytes]] = (),
        embeds: Sequence[dict[str, Any]] = (),
        raise_errors: bool = True,
    ) -> discord.Message:
        """Post as ``author`` (first member) in ``channel`` (first text channel); await handlers."""
        channel = channel or self.channel
        author = author or self.member
        me = self.bot.user
        assert me is not None
        if mention_bot:
            content = f"{me.mention} {content}"
        guild = getattr(channel, "guild", None)
        data = self._new_message(channel.id, guild, author, content, files=attachments)
        data["embeds"] = [dict(e) for e in embeds]
        if reply_to is not None:
            ref = reply_to if isinstance(reply_to, int) else reply_to.id
            self._apply_reference(data, {"message_id": ref}, guild, mention_author)
        mentioned = {int(u["id"]) for u in data["mentions"]}
        if (
            not self.state._intents.message_content
            and guild is not None
            and me.id not in mentioned
            and author.id != me.id
        ):
            # What Discord does without the privileged intent.
            data.update(content="", embeds=[], attachments=[], components=[])
        complete_message_payload(data, self.state)
        self.store(data)
        await self.run_parser(
            self.state.parse_message_create, copy.deepcopy(data), raise_errors=raise_errors
        )
        return self.message_object(data, channel)

    def reaction_event(
        self, channel_id: int, message_id: int, emoji: str, user_id: int, add: bool
    ) -> None:
        """Feed MESSAGE_REACTION_ADD/REMOVE, keeping the stored message's ``reactions`` in step."""
        partial = discord.PartialEmoji.from_str(emoji).to_dict()
        data = self._messages.get(int(message_id))
        # dpytest's reaction payloads lack the ``type`` discord.py 2.7 reads.
        event: dict[str, Any] = {
            "message_id": str(message_id),
            "channel_id": str(channel_id),
            "user_id": str(user_id),
            "emoji": partial,
            "type": 0,
            "burst": False,
            "burst_colors": [],
        }
        guild = None
        if data is not None:
            event["message_author_id"] = str(data["author"]["id"])
            if data.get("guild_id"):
                guild = self.state._get_guild(int(data["guild_id"]))
                event["guild_id"] = str(data["guild_id"])
            self._count_reaction(data, partial, int(user_id), add)
        if add and guild is not None:
            member = guild.get_member(int(user_id))
            if member is not None:
                event["member"] = member_payload(member)
        parse = (
            self.state.parse_message_reaction_add
            if add
            else self.state.parse_message_reaction_remove
        )
        with tracked():
            parse(event)

    def _count_reaction(
        self, data: dict[str, Any], emoji: dict[str, Any], user_id: int, add: bool
    ) -> None:
        is_me = user_id == self.bot.user.id  # type: ignore[union-attr]
        reactions = data.setdefault("reactions", [])
        entry = next((r for r in reactions if r["emoji"] == emoji), None)
        if entry is None:
            if not add:
                return
            entry = {"emoji": emoji, "count": 0, "me": False}
            reactions.append(entry)
        if add:
            entry["count"] += 1
            entry["me"] = entry["me"] or is_me
        else:
            entry["count"] -= 1
            entry["me"] = entry["me"] and not is_me
        entry["count_details"] = {"normal": entry["count"], "burst": 0}
        if entry["count"] <= 0:
            reactions.remove(entry)

    async def react(
        self, message: discord.Message, emoji: str, user: discord.abc.User | None = None
    ) -> None:
        """``user`` (default: first member) adds a reaction; waits for the handlers."""
        user = user or self.member
        await self.run_parser(
            self.reaction_event, message.channel.id, message.id, emoji, user.id, True
        )

    def sent_to(self, channel: Any) -> list[SentMessage]:
        return [s for s in self.sent if s.message.channel.id == channel.id]

    def last_sent(self) -> SentMessage:
        if not self.sent:
            raise AssertionError("the bot sent no message")
        return self.sent[-1]
