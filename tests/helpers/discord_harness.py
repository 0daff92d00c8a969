"""Test harness that drives discord.py's *real* state (``ConnectionState``, ``CommandTree``,
``ViewStore``) on top of dpytest's fake backend.

Layers
------
* :func:`attach_dpytest` / :func:`detach` put an already-built ``commands.Bot`` (any
  ``discord.Client`` subclass, cogs and app commands already registered) on dpytest's fake
  backend and return a :class:`DpytestEnv`.  The env builds the world (guilds, public and
  private channels, threads, members with roles, DM channels), posts messages as a member
  (mentions, replies) and records what the bot sent, with the ``allowed_mentions`` it used.
* :class:`InteractionHarness` builds raw ``INTERACTION_CREATE`` payloads (slash commands with
  options / subcommands / groups, autocomplete, context menus, component clicks, modal
  submits) and feeds them through ``ConnectionState.parse_interaction_create``.  Responses are
  intercepted at the webhook HTTP layer (``AsyncWebhookAdapter.request``), so the real
  ``Interaction.response.*`` / ``followup`` / ``edit_original_response`` code runs and every
  call is recorded in an :class:`InteractionResult`.

Synchronisation
---------------
Every helper that feeds an event is a coroutine that returns once the asyncio tasks discord.py
created *for that event* have finished: event handlers (``_run_event``), the
``CommandTree-invoker`` task, view/modal dispatch tasks, plus the gateway echoes (MESSAGE_CREATE
/ MESSAGE_UPDATE) of messages the bot sent while handling it.  The tasks are found by diffing
``asyncio.all_tasks()`` around the synchronous ``parse_*`` call -- no sleeps.  Tasks that the
code under test spawns itself (``asyncio.create_task``) are *not* awaited.  A safety timeout
(default 10 s) raises :class:`HarnessTimeoutError` instead of hanging.

Using it with the real bot::

    bot = build_bot(settings)
    env = await attach_dpytest(bot, base_id=DEFAULT_BASE_ID)   # deterministic ids
    ih = InteractionHarness(bot)
    mod = await env.create_member("mod", kind="moderator")
    result = await ih.slash("memory show", {"limit": 3}, user=mod)   # waits for the handler
    assert result.ephemeral and "..." in result.content
    ih.close()
    await detach(bot)

Pitfalls handled here (dpytest 0.7 on discord.py 2.7): dpytest's ``FakeState`` loses the
command tree, view store, ``allowed_mentions`` and loop of the original state (transferred);
its member cache needs the members intent (forced on); its ids are time based (use
``base_id``); its message payloads lack ``components``/``flags``/proper ``member`` objects
(completed); several of its ``FakeHttp`` methods inspect caller frames or compare ``str`` and
``int`` ids (the ones the bot normally uses are replaced); closing needs ``bot.ws = None``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import datetime as dt
import itertools
import json
import re
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import discord
import pytest_asyncio
from discord import app_commands
from discord.client import _LoopSentinel
from discord.ext import commands
from discord.ext.test import backend as dpy_backend
from discord.ext.test import callbacks as dpy_callbacks
from discord.ext.test import factories as dpy_factories
from discord.ext.test import runner as dpy_runner
from discord.webhook.async_ import AsyncWebhookAdapter

__all__ = [
    "DEFAULT_BASE_ID",
    "DpytestEnv",
    "EventHandlerError",
    "HarnessTimeoutError",
    "IdAllocator",
    "InteractionHarness",
    "InteractionResult",
    "RecordedCall",
    "RecordedModal",
    "SentMessage",
    "attach_dpytest",
    "detach",
    "get_env",
    "make_harness_bot",
]

#: Default first snowflake for deterministic ids (early 2024).  Ids are ``base_id + n`` in
#: creation order, so two attaches that build the same world get the same ids.
DEFAULT_BASE_ID = 1_200_000_000_000_000_000

DEFAULT_TIMEOUT = 10.0

#: Interaction callback types (``InteractionResponseType``).
PONG, CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE = 1, 4, 5, 6, 7
AUTOCOMPLETE_RESULT, MODAL = 8, 9

EPHEMERAL = 64
LOADING = 128

_DISCORD_EPOCH_MS = 1_420_070_400_000
_FIXED_JOINED_AT = "2024-01-01T00:00:00+00:00"
_ENV_ATTR = "_kioku_dpytest_env"

_DEFAULT_EVERYONE = discord.Permissions(
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
_DEFAULT_BOT = discord.Permissions(
    view_channel=True,
    send_messages=True,
    send_messages_in_threads=True,
    read_message_history=True,
    embed_links=True,
    attach_files=True,
    add_reactions=True,
    use_application_commands=True,
)
#: ``kind`` presets of :meth:`DpytestEnv.create_member`: role name and permissions.
MEMBER_KINDS: dict[str, tuple[str, discord.Permissions] | None] = {
    "member": None,
    "moderator": ("Moderator", discord.Permissions(manage_messages=True)),
    "admin": ("Admin", discord.Permissions(manage_guild=True)),
    "owner": None,
}


class HarnessTimeoutError(TimeoutError):
    """The tasks dispatched for an event did not finish within the safety timeout."""


class EventHandlerError(RuntimeError):
    """An event handler raised (discord.py routed it to ``Client.on_error``)."""


# ---------------------------------------------------------------------------------------------
# ids and small payload helpers
# ---------------------------------------------------------------------------------------------


class _Snowflakes:
    last = 0


def snowflake() -> int:
    """A fresh, strictly increasing, time-based snowflake (messages, interactions)."""
    now = (time.time_ns() // 1_000_000 - _DISCORD_EPOCH_MS) << 22
    _Snowflakes.last = max(now, _Snowflakes.last + 1)
    return _Snowflakes.last


class IdAllocator:
    """Ids for guilds/roles/channels/users: ``base + 1, base + 2, ...`` or time based."""

    def __init__(self, base: int | None) -> None:
        self.base = base
        self._counter = itertools.count(1)

    @property
    def deterministic(self) -> bool:
        return self.base is not None

    def next(self) -> int:
        if self.base is None:
            return snowflake()
        return self.base + next(self._counter)


def _iso(value: dt.datetime | None = None) -> str:
    return (value or dt.datetime.now(dt.UTC)).isoformat()


def _user_payload(user: discord.abc.User) -> dict[str, Any]:
    base = getattr(user, "_user", user)  # Member -> User
    return {
        "id": str(base.id),
        "username": base.name,
        "discriminator": base.discriminator,
        "global_name": base.global_name,
        "avatar": None,
        "bot": base.bot,
        "system": False,
        "public_flags": 0,
    }


def _member_payload(member: discord.Member, *, with_user: bool = True) -> dict[str, Any]:
    data: dict[str, Any] = {
        "roles": [str(r.id) for r in member.roles if not r.is_default()],
        "joined_at": _iso(member.joined_at) if member.joined_at else _FIXED_JOINED_AT,
        "deaf": False,
        "mute": False,
        "flags": 0,
        "pending": False,
        "nick": member.nick,
        "avatar": None,
        "premium_since": None,
        "communication_disabled_until": None,
    }
    if with_user:
        data["user"] = _user_payload(member)
    return data


def _role_payload(role: discord.Role) -> dict[str, Any]:
    return {
        "id": str(role.id),
        "name": role.name,
        "color": role.colour.value,
        "hoist": role.hoist,
        "position": role.position,
        "permissions": str(role.permissions.value),
        "managed": role.managed,
        "mentionable": role.mentionable,
        "flags": 0,
    }


def _overwrite_payload(
    target: discord.abc.Snowflake, allow: discord.Permissions, deny: discord.Permissions
) -> dict[str, Any]:
    # Overwrite type: 0 = role, 1 = member.  (dpytest writes "role"/"member", which 2.x
    # no longer understands.)
    kind = 0 if isinstance(target, discord.Role) else 1
    return {"id": str(target.id), "type": kind, "allow": str(allow.value), "deny": str(deny.value)}


def _channel_payload(channel: Any, *, permissions: int | None = None) -> dict[str, Any]:
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
            "archive_timestamp": _iso(channel.archive_timestamp),
            "locked": channel.locked,
            "invitable": channel.invitable,
        }
        data["message_count"] = 0
        data["member_count"] = 1
    if permissions is not None:
        data["permissions"] = str(permissions)
    return data


def _walk_components(components: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for comp in components or ():
        yield comp
        yield from _walk_components(comp.get("components", ()))
        for key in ("component", "accessory"):
            if isinstance(comp.get(key), Mapping):
                yield from _walk_components([comp[key]])


def _custom_ids(components: Sequence[Mapping[str, Any]]) -> list[str]:
    return [c["custom_id"] for c in _walk_components(components) if c.get("custom_id")]


def _read_files(files: Sequence[discord.File] | None) -> list[tuple[str, bytes]]:
    out = []
    for f in files or ():
        with contextlib.suppress(Exception):
            f.fp.seek(0)
        out.append((f.filename or "file", f.fp.read()))
    return out


def _body_of(payload: Mapping[str, Any] | None, multipart: Sequence[Mapping[str, Any]] | None):
    if payload is not None:
        return dict(payload)
    for part in multipart or ():
        if part.get("name") == "payload_json":
            return json.loads(part["value"])
    return {}


_USER_MENTION = re.compile(r"<@!?([0-9]{15,21})>")
_ROLE_MENTION = re.compile(r"<@&([0-9]{15,21})>")


class FakeResponse:
    """Enough of an aiohttp response for ``discord.HTTPException``."""

    def __init__(self, status: int, reason: str) -> None:
        self.status = status
        self.reason = reason


def _not_found(what: str) -> discord.NotFound:
    return discord.NotFound(FakeResponse(404, "Not Found"), {"code": 10008, "message": what})


def _forbidden(what: str) -> discord.Forbidden:
    return discord.Forbidden(FakeResponse(403, "Forbidden"), {"code": 50013, "message": what})


# ---------------------------------------------------------------------------------------------
# task tracking
# ---------------------------------------------------------------------------------------------


class _TaskTracker:
    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[Any]] = []

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        before = asyncio.all_tasks()
        try:
            yield
        finally:
            self.tasks.extend(asyncio.all_tasks() - before)

    async def wait(self, limit: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        finished: set[asyncio.Task[Any]] = set()
        errors: list[BaseException] = []
        while True:
            pending = [t for t in self.tasks if t not in finished]
            if not pending:
                break
            remaining = deadline - loop.time()
            done, not_done = await asyncio.wait(pending, timeout=max(remaining, 0))
            for task in done:
                finished.add(task)
                if not task.cancelled() and task.exception() is not None:
                    errors.append(task.exception())  # type: ignore[arg-type]
            if not_done:
                names = ", ".join(sorted(t.get_name() for t in not_done))
                raise HarnessTimeoutError(f"still running after {limit}s: {names}")
        if errors:
            raise errors[0]


_TRACKER: contextvars.ContextVar[_TaskTracker | None] = contextvars.ContextVar(
    "kioku_discord_harness_tracker", default=None
)


@contextlib.contextmanager
def _tracked() -> Iterator[None]:
    """Add the tasks created in this block to the tracker of the current event, if any."""
    tracker = _TRACKER.get()
    if tracker is None:
        yield
        return
    with tracker.capture():
        yield


# ---------------------------------------------------------------------------------------------
# dpytest patches (idempotent, process wide)
# ---------------------------------------------------------------------------------------------


def _complete_message_payload(data: dict[str, Any], state: Any) -> dict[str, Any]:
    """Fill the fields discord.py 2.7 reads but dpytest does not write (in place)."""
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
        data["edited_timestamp"] = _iso(data["edited_timestamp"])
    ts = data.get("timestamp")
    if isinstance(ts, dt.datetime):
        data["timestamp"] = _iso(ts)
    elif ts is None:
        data["timestamp"] = _iso(discord.utils.snowflake_time(int(data["id"])))
    data["mention_roles"] = [str(r) for r in data["mention_roles"]]
    # dpytest puts a *user* dict under "member"; discord.py then resets the cached member's
    # joined_at.  Replace it by a real partial member (or drop it outside guilds).
    data.pop("member", None)
    guild_id = data.get("guild_id")
    author = data.get("author") or {}
    if guild_id and state is not None and author.get("id") is not None:
        guild = state._get_guild(int(guild_id))
        member = guild.get_member(int(author["id"])) if guild else None
        if member is not None:
            data["member"] = _member_payload(member, with_user=False)
    return data


def _install_dpytest_patches() -> None:
    if getattr(dpy_factories, "_kioku_patched", False):
        return
    original_make = dpy_factories.make_message_dict
    original_from = dpy_factories.dict_from_message

    def make_message_dict(*args: Any, **kwargs: Any) -> dict[str, Any]:
        data = original_make(*args, **kwargs)
        state = dpy_backend._cur_config.state if dpy_backend._cur_config else None
        return _complete_message_payload(data, state)

    def dict_from_message(message: discord.Message) -> dict[str, Any]:
        data = original_from(message)
        data["channel_id"] = message.channel.id
        if message.guild is not None:
            data["guild_id"] = message.guild.id
        data["components"] = [c.to_dict() for c in getattr(message, "components", [])]
        data["flags"] = message.flags.value
        return _complete_message_payload(data, message._state)

    dpy_factories.make_message_dict = make_message_dict
    dpy_factories.dict_from_message = dict_from_message
    dpy_factories._kioku_patched = True


# ---------------------------------------------------------------------------------------------
# records
# ---------------------------------------------------------------------------------------------


@dataclass
class SentMessage:
    """A message the bot sent through ``Messageable.send`` (channel, thread or DM).

    ``message`` is the cached ``discord.Message`` (kept up to date by MESSAGE_UPDATE echoes);
    ``payload`` the JSON discord.py sent; ``edits`` the bodies of later ``Message.edit`` calls.
    """

    message: discord.Message
    payload: dict[str, Any]
    """The JSON body discord.py sent (content, embeds, components, allowed_mentions, ...)."""
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
    def embeds(self) -> list[discord.Embed]:
        return [discord.Embed.from_dict(e) for e in self.payload.get("embeds") or []]

    @property
    def allowed_mentions(self) -> dict[str, Any] | None:
        return self.payload.get("allowed_mentions")

    @property
    def reference_id(self) -> int | None:
        ref = self.payload.get("message_reference")
        return int(ref["message_id"]) if ref and ref.get("message_id") else None

    @property
    def components(self) -> list[dict[str, Any]]:
        return self.payload.get("components") or []

    @property
    def custom_ids(self) -> list[str]:
        return _custom_ids(self.components)


@dataclass
class RecordedModal:
    custom_id: str
    title: str
    components: list[dict[str, Any]]

    @property
    def text_inputs(self) -> list[dict[str, Any]]:
        """Flattened text inputs; ``label`` is taken from a wrapping Label component."""
        out = []
        for top in self.components:
            inner = [top["component"]] if top.get("type") == 18 else top.get("components", [])
            for comp in inner:
                if comp.get("type") == 4:
                    item = dict(comp)
                    if top.get("type") == 18:
                        item.setdefault("label", top.get("label"))
                    out.append(item)
        return out


@dataclass
class RecordedCall:
    """One HTTP call the bot made for an interaction.

    ``kind`` is one of ``response`` (the initial callback; ``type`` is the callback type),
    ``followup``, ``edit_original``, ``delete_original``, ``fetch_original``,
    ``edit_message`` (a follow-up edited by id), ``delete_message``, ``fetch_message``.
    ``payload`` is the JSON the bot sent (for responses: the callback's ``data``).
    """

    kind: str
    type: int | None
    payload: dict[str, Any]
    message_id: int | None = None
    files: list[tuple[str, bytes]] = field(default_factory=list)

    @property
    def content(self) -> str | None:
        return self.payload.get("content")

    @property
    def flags(self) -> int:
        return int(self.payload.get("flags") or 0)

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & EPHEMERAL)

    @property
    def embeds(self) -> list[discord.Embed]:
        return [discord.Embed.from_dict(e) for e in self.payload.get("embeds") or []]

    @property
    def components(self) -> list[dict[str, Any]]:
        return self.payload.get("components") or []

    @property
    def custom_ids(self) -> list[str]:
        return _custom_ids(self.components)

    @property
    def buttons(self) -> list[Mapping[str, Any]]:
        return [c for c in _walk_components(self.components) if c.get("type") == 2]

    @property
    def allowed_mentions(self) -> dict[str, Any] | None:
        return self.payload.get("allowed_mentions")

    @property
    def modal(self) -> RecordedModal | None:
        if self.kind != "response" or self.type != MODAL:
            return None
        return RecordedModal(
            custom_id=self.payload["custom_id"],
            title=self.payload.get("title", ""),
            components=list(self.payload.get("components") or []),
        )

    @property
    def choices(self) -> list[dict[str, Any]] | None:
        if self.kind != "response" or self.type != AUTOCOMPLETE_RESULT:
            return None
        return list(self.payload.get("choices") or [])


@dataclass
class InteractionResult:
    """Everything recorded for one interaction.  Calls made later with the same token (e.g.
    from a view callback or ``on_timeout``) keep being appended to ``calls``."""

    payload: dict[str, Any] = field(repr=False)
    env: DpytestEnv = field(repr=False)
    interaction: discord.Interaction | None = field(default=None, repr=False)
    calls: list[RecordedCall] = field(default_factory=list)
    blocked: str | None = None
    """Why Discord would not have delivered this interaction (only with ``gate=True``)."""
    original_message_id: int | None = None

    @property
    def response(self) -> RecordedCall | None:
        return next((c for c in self.calls if c.kind == "response"), None)

    @property
    def responded(self) -> bool:
        return self.response is not None

    @property
    def response_type(self) -> int | None:
        return self.response.type if self.response else None

    @property
    def deferred(self) -> bool:
        return self.response_type in (DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE)

    @property
    def followups(self) -> list[RecordedCall]:
        return [c for c in self.calls if c.kind == "followup"]

    @property
    def edits(self) -> list[RecordedCall]:
        return [c for c in self.calls if c.kind == "edit_original"]

    @property
    def original_message(self) -> dict[str, Any] | None:
        """Current payload of the original response message (after edits), if any."""
        if self.original_message_id is None:
            return None
        return self.env.message_payload(self.original_message_id)

    @property
    def ephemeral(self) -> bool:
        """Whether the initial response (or, without one, the first follow-up) is ephemeral."""
        first = self.response or next(iter(self.followups), None)
        return bool(first and first.ephemeral)

    @property
    def content(self) -> str | None:
        """Visible text of the original response (after edits); else the first follow-up."""
        original = self.original_message
        if original is not None and (original.get("content") or not self.followups):
            return original.get("content")
        if self.response is not None and self.response.content is not None:
            return self.response.content
        return self.followups[0].content if self.followups else None

    @property
    def embeds(self) -> list[discord.Embed]:
        original = self.original_message
        if original is not None and original.get("embeds"):
            return [discord.Embed.from_dict(e) for e in original["embeds"]]
        for call in self.calls:
            if call.embeds:
                return call.embeds
        return []

    @property
    def components(self) -> list[dict[str, Any]]:
        original = self.original_message
        if original is not None:
            return list(original.get("components") or [])
        return self.response.components if self.response else []

    @property
    def custom_ids(self) -> list[str]:
        return _custom_ids(self.components)

    @property
    def modal(self) -> RecordedModal | None:
        return self.response.modal if self.response else None

    @property
    def choices(self) -> list[dict[str, Any]] | None:
        return self.response.choices if self.response else None

    @property
    def command_failed(self) -> bool:
        return bool(self.interaction and self.interaction.command_failed)

    def texts(self) -> list[str]:
        """Every non-empty ``content`` the bot sent for this interaction, in order."""
        return [c.content for c in self.calls if c.content]


# ---------------------------------------------------------------------------------------------
# the dpytest environment
# ---------------------------------------------------------------------------------------------


def get_env(bot: discord.Client) -> DpytestEnv | None:
    return getattr(bot, _ENV_ATTR, None)


class DpytestEnv:
    """World builder and recorder for a bot attached with :func:`attach_dpytest`.

    Attributes: ``bot``, ``state`` (the FakeState), ``ids`` (:class:`IdAllocator`),
    ``guilds``/``guild``, ``channels``/``channel`` (text channels created at attach),
    ``members``/``member`` (plain members created at attach), ``sent`` (every
    :class:`SentMessage`), ``errors`` (``(event, exception)`` from ``on_error``),
    ``command_errors`` (prefix-command errors), ``typing`` (channel ids), ``synced_commands``.
    """

    def __init__(self, bot: discord.Client, ids: IdAllocator, timeout: float) -> None:
        self.bot = bot
        self.ids = ids
        self.timeout = timeout
        self.guilds: list[discord.Guild] = []
        self.channels: list[discord.TextChannel] = []
        self.members: list[discord.Member] = []
        self.sent: list[SentMessage] = []
        self.errors: list[tuple[str, BaseException | None]] = []
        self.command_errors: list[tuple[Any, BaseException]] = []
        self.typing: list[int] = []
        self.synced_commands: dict[int | None, list[dict[str, Any]]] = {}
        self._messages: dict[int, dict[str, Any]] = {}
        self._cdn: dict[str, bytes] = {}
        self._roles: dict[tuple[int, str], discord.Role] = {}
        self._saved_attrs: dict[str, Any] = {}

    # -- basic accessors --------------------------------------------------------------------

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

    def message_payload(self, message_id: int) -> dict[str, Any] | None:
        """The (complete) gateway payload stored for a message id, or ``None``."""
        return self._messages.get(int(message_id))

    # -- running parsers with tracking ------------------------------------------------------

    async def run_parser(self, fn: Any, *args: Any, raise_errors: bool = True) -> Any:
        """Call a synchronous ``state.parse_*``-style function and wait for the tasks it
        dispatched (and their message echoes).  Raises :class:`EventHandlerError` if an
        event handler raised meanwhile (unless ``raise_errors=False``)."""
        tracker = _TaskTracker()
        token = _TRACKER.set(tracker)
        errors_before = len(self.errors)
        try:
            with tracker.capture():
                result = fn(*args)
            await tracker.wait(self.timeout)
        finally:
            _TRACKER.reset(token)
        if raise_errors and len(self.errors) > errors_before:
            event, exc = self.errors[errors_before]
            raise EventHandlerError(f"handler for {event!r} raised: {exc!r}") from exc
        return result

    # -- world building ---------------------------------------------------------------------

    def _create_guild(
        self,
        name: str,
        everyone: discord.Permissions,
        bot_permissions: discord.Permissions,
        bot_name: str,
    ) -> discord.Guild:
        state = self.state
        gid = self.ids.next()
        role_id = self.ids.next()
        roles = [
            {
                "id": str(gid),
                "name": "@everyone",
                "permissions": str(everyone.value),
                "position": 0,
                "color": 0,
                "hoist": False,
                "managed": False,
                "mentionable": False,
                "flags": 0,
            },
            {
                "id": str(role_id),
                "name": bot_name,
                "permissions": str(bot_permissions.value),
                "position": 1,
                "color": 0,
                "hoist": False,
                "managed": True,
                "mentionable": False,
                "flags": 0,
                "tags": {"bot_id": str(state.user.id)},
            },
        ]
        data = dpy_factories.make_guild_dict(
            name, 0, roles, id_num=gid, member_count=1, members=[], channels=[]
        )
        data["preferred_locale"] = "en-US"
        state.parse_guild_create(data)
        guild = state._get_guild(gid)
        me = {"guild_id": str(gid), **_member_payload_raw(state.user, [role_id])}
        state.parse_guild_member_add(me)
        return guild

    def _channel_create_payload(
        self,
        guild: discord.Guild,
        name: str,
        *,
        overwrites: list[dict[str, Any]],
        category: discord.CategoryChannel | None,
        topic: str | None,
        ctype: int = 0,
    ) -> dict[str, Any]:
        return {
            "id": str(self.ids.next()),
            "type": ctype,
            "guild_id": str(guild.id),
            "name": name,
            "position": len(guild.channels),
            "permission_overwrites": overwrites,
            "parent_id": str(category.id) if category else None,
            "topic": topic,
            "nsfw": False,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "flags": 0,
        }

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
        category: discord.CategoryChannel | None = None,
        topic: str | None = None,
    ) -> discord.TextChannel:
        """Create a text channel.  ``private=True`` adds an overwrite denying @everyone
        ``view_channel`` and allowing view/send/history to ``allow`` (and the bot unless
        ``include_bot=False``).  ``overwrites`` adds arbitrary ones."""
        guild = guild or self.guild
        raw: list[dict[str, Any]] = []
        if private:
            raw.append(
                _overwrite_payload(
                    guild.default_role,
                    discord.Permissions.none(),
                    discord.Permissions(view_channel=True),
                )
            )
            targets = [*allow, *([guild.me] if include_bot else [])]
            grant = discord.Permissions(
                view_channel=True, send_messages=True, read_message_history=True
            )
            raw.extend(_overwrite_payload(t, grant, discord.Permissions.none()) for t in targets)
        for target, ow in (overwrites or {}).items():
            allow_p, deny_p = ow.pair()
            raw.append(_overwrite_payload(target, allow_p, deny_p))
        data = self._channel_create_payload(
            guild, name, overwrites=raw, category=category, topic=topic
        )
        await self.run_parser(self.state.parse_channel_create, data)
        return guild.get_channel(int(data["id"]))  # type: ignore[return-value]

    async def set_overwrite(
        self,
        channel: discord.abc.GuildChannel,
        target: discord.Member | discord.Role,
        overwrite: discord.PermissionOverwrite | None,
    ) -> None:
        """Set (or with ``None`` remove) one permission overwrite via CHANNEL_UPDATE.  (dpytest's
        ``set_permission_overrides`` writes ``"role"``/``"member"`` overwrite types, which
        discord.py 2.x silently ignores.)"""
        raw = [
            _overwrite_payload(t, *ow.pair())
            for t, ow in channel.overwrites.items()
            if t.id != target.id
        ]
        if overwrite is not None:
            raw.append(_overwrite_payload(target, *overwrite.pair()))
        data = {**_channel_payload(channel), "permission_overwrites": raw}
        await self.run_parser(self.state.parse_channel_update, data)

    async def create_category(
        self, name: str, *, guild: discord.Guild | None = None
    ) -> discord.CategoryChannel:
        guild = guild or self.guild
        data = self._channel_create_payload(
            guild, name, overwrites=[], category=None, topic=None, ctype=4
        )
        await self.run_parser(self.state.parse_channel_create, data)
        return guild.get_channel(int(data["id"]))  # type: ignore[return-value]

    async def create_thread(
        self,
        channel: discord.TextChannel | None = None,
        name: str = "thread",
        *,
        private: bool = False,
        owner: discord.abc.User | None = None,
        locked: bool = False,
    ) -> discord.Thread:
        """Create a (public or private) thread under ``channel`` via THREAD_CREATE;
        ``locked``: only members with Manage Threads may post in it."""
        channel = channel or self.channel
        tid = self.ids.next()
        now = _iso()
        data = {
            "id": str(tid),
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
        return channel.guild.get_thread(tid)  # type: ignore[return-value]

    async def create_role(
        self,
        name: str,
        permissions: discord.Permissions,
        *,
        guild: discord.Guild | None = None,
    ) -> discord.Role:
        guild = guild or self.guild
        rid = self.ids.next()
        data = {
            "guild_id": str(guild.id),
            "role": {
                "id": str(rid),
                "name": name,
                "permissions": str(permissions.value),
                "position": len(guild.roles),
                "color": 0,
                "hoist": False,
                "managed": False,
                "mentionable": False,
                "flags": 0,
            },
        }
        await self.run_parser(self.state.parse_guild_role_create, data)
        return guild.get_role(rid)  # type: ignore[return-value]

    async def _preset_role(self, guild: discord.Guild, kind: str) -> discord.Role | None:
        preset = MEMBER_KINDS[kind]
        if preset is None:
            return None
        key = (guild.id, kind)
        if key not in self._roles:
            self._roles[key] = await self.create_role(preset[0], preset[1], guild=guild)
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
        """Join a new member.  ``kind``: ``member`` (no role), ``moderator`` (role with
        ``manage_messages``), ``admin`` (role with ``manage_guild``) or ``owner`` (becomes
        ``guild.owner``).  ``permissions`` adds a dedicated role with exactly those."""
        if kind not in MEMBER_KINDS:
            raise ValueError(f"unknown member kind {kind!r}; use one of {sorted(MEMBER_KINDS)}")
        guild = guild or self.guild
        all_roles = list(roles)
        preset = await self._preset_role(guild, kind)
        if preset is not None:
            all_roles.append(preset)
        if permissions is not None:
            all_roles.append(await self.create_role(f"{name}-perms", permissions, guild=guild))
        uid = self.ids.next()
        user_data = {
            "id": str(uid),
            "username": name,
            "discriminator": "0",
            "global_name": None,
            "avatar": None,
            "bot": bot,
        }
        data = {
            "guild_id": str(guild.id),
            "user": user_data,
            "roles": [str(r.id) for r in all_roles],
            "joined_at": _FIXED_JOINED_AT,
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
            "nick": nick,
        }
        await self.run_parser(self.state.parse_guild_member_add, data)
        if kind == "owner":
            guild.owner_id = uid
        member = guild.get_member(uid)
        assert member is not None, "member not cached: is the members intent enabled?"
        return member

    async def set_roles(self, member: discord.Member, roles: Sequence[discord.Role]) -> None:
        """Replace a member's roles via GUILD_MEMBER_UPDATE."""
        data = {
            "guild_id": str(member.guild.id),
            **_member_payload(member),
            "roles": [str(r.id) for r in roles],
        }
        await self.run_parser(self.state.parse_guild_member_update, data)

    def dm_channel(self, user: discord.abc.User) -> discord.DMChannel:
        """The bot's DM channel with ``user`` (created and cached on first use; the bot's
        ``user.create_dm()`` returns the same one)."""
        state = self.state
        base = getattr(user, "_user", user)
        existing = state._get_private_channel_by_user(base.id)
        if existing is not None:
            return existing
        data = {
            "id": str(self.ids.next()),
            "type": 1,
            "recipients": [_user_payload(base)],
            "last_message_id": None,
            "flags": 0,
        }
        return state.add_dm_channel(data)

    # -- messages ---------------------------------------------------------------------------

    def _resolve_mentions(
        self,
        content: str,
        guild: discord.Guild | None,
        allowed: Mapping[str, Any] | None,
    ) -> tuple[list[dict[str, Any]], list[str], bool]:
        """Users/roles/everyone a message pings, honouring an allowed_mentions payload."""
        parse = None if allowed is None else set(allowed.get("parse") or ())
        allowed_users = {int(u) for u in (allowed or {}).get("users") or ()}
        allowed_roles = {int(r) for r in (allowed or {}).get("roles") or ()}
        users: list[dict[str, Any]] = []
        for raw in dict.fromkeys(int(x) for x in _USER_MENTION.findall(content or "")):
            if parse is not None and "users" not in parse and raw not in allowed_users:
                continue
            member = guild.get_member(raw) if guild else None
            user = member or self.state.get_user(raw)
            if raw == self.bot.user.id:  # type: ignore[union-attr]
                user = member or self.bot.user
            if user is None:
                continue
            payload = _user_payload(user)
            if member is not None:
                payload["member"] = _member_payload(member, with_user=False)
            users.append(payload)
        roles = [
            r
            for r in dict.fromkeys(_ROLE_MENTION.findall(content or ""))
            if guild
            and guild.get_role(int(r))
            and (parse is None or "roles" in parse or int(r) in allowed_roles)
        ]
        everyone = ("@everyone" in (content or "") or "@here" in (content or "")) and (
            parse is None or "everyone" in parse
        )
        return users, roles, everyone

    def _store(self, data: dict[str, Any], *, in_history: bool = True) -> None:
        """Keep a message for fetches and edits; ``in_history``: also in its channel's
        history (Discord never lists ephemeral messages there)."""
        mid = int(data["id"])
        self._messages[mid] = data
        cfg = dpy_backend._cur_config
        if cfg is not None and in_history:
            cfg.messages.setdefault(int(data["channel_id"]), []).append(data)

    def _message_obj(self, data: dict[str, Any], channel: Any) -> discord.Message:
        cached = self.state._get_message(int(data["id"]))
        if cached is not None:
            return cached
        return discord.Message(state=self.state, channel=channel, data=copy.deepcopy(data))

    def _payload_for(self, message: discord.Message | int) -> dict[str, Any]:
        mid = message if isinstance(message, int) else message.id
        data = self._messages.get(int(mid))
        if data is None:
            if isinstance(message, int):
                raise KeyError(f"unknown message id {mid}")
            data = dpy_factories.dict_from_message(message)
        return data

    def _apply_reference(
        self,
        data: dict[str, Any],
        reference: Mapping[str, Any],
        guild: discord.Guild | None,
        ping_author: bool,
    ) -> None:
        ref_id = int(reference["message_id"])
        referenced = self._messages.get(ref_id)
        data["type"] = 19
        data["message_reference"] = {
            "type": 0,
            "message_id": str(ref_id),
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
                    payload["member"] = _member_payload(member, with_user=False)
                data["mentions"].append(payload)

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
        raise_errors: bool = True,
    ) -> discord.Message:
        """Post a message as ``author`` (default: first member) in ``channel`` (default: first
        text channel; may be a thread or a DM channel) via MESSAGE_CREATE and wait for the
        handlers.  ``mention_bot`` prefixes ``<@bot>``; ``reply_to`` makes it a reply (which
        pings the replied author unless ``mention_author=False``).  Returns the message."""
        channel = channel or self.channel
        author = author or self.member
        bot_user = self.bot.user
        assert bot_user is not None
        if mention_bot:
            content = f"{bot_user.mention} {content}"
        guild = getattr(channel, "guild", None)
        mid = snowflake()
        users, roles, everyone = self._resolve_mentions(content, guild, None)
        data: dict[str, Any] = {
            "id": mid,
            "channel_id": channel.id,
            "author": _user_payload(author),
            "content": content,
            "timestamp": _iso(discord.utils.snowflake_time(mid)),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": everyone,
            "mentions": users,
            "mention_roles": roles,
            "attachments": [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }
        if guild is not None:
            data["guild_id"] = guild.id
        for filename, blob in attachments:
            aid = snowflake()
            url = f"https://cdn.discordapp.com/attachments/{channel.id}/{aid}/{filename}"
            self._cdn[url] = blob
            data["attachments"].append(
                {
                    "id": str(aid),
                    "filename": filename,
                    "size": len(blob),
                    "url": url,
                    "proxy_url": url,
                }
            )
        if reply_to is not None:
            ref = reply_to if isinstance(reply_to, int) else reply_to.id
            self._apply_reference(data, {"message_id": ref}, guild, mention_author)
        mentioned = {int(u["id"]) for u in data["mentions"]}
        if (
            not self.state._intents.message_content
            and guild is not None
            and bot_user.id not in mentioned
            and author.id != bot_user.id
        ):
            # What Discord does without the privileged intent.
            data.update(content="", embeds=[], attachments=[], components=[])
        _complete_message_payload(data, self.state)
        self._store(data)
        await self.run_parser(
            self.state.parse_message_create, copy.deepcopy(data), raise_errors=raise_errors
        )
        return self._message_obj(data, channel)

    def _reaction_event(
        self, channel_id: int, message_id: int, emoji: str, user_id: int, add: bool
    ) -> None:
        """Emit MESSAGE_REACTION_ADD/REMOVE (dpytest's payloads lack ``type`` for 2.7) and
        keep the stored message's ``reactions`` in step."""
        partial = discord.PartialEmoji.from_str(emoji).to_dict()
        data = self._messages.get(int(message_id))
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
            is_me = int(user_id) == self.bot.user.id  # type: ignore[union-attr]
            reactions = data.setdefault("reactions", [])
            entry = next((r for r in reactions if r["emoji"] == partial), None)
            if add:
                if entry is None:
                    entry = {"emoji": partial, "count": 0, "me": False, "count_details": {}}
                    reactions.append(entry)
                entry["count"] += 1
                entry["count_details"] = {"normal": entry["count"], "burst": 0}
                entry["me"] = entry["me"] or is_me
            elif entry is not None:
                entry["count"] -= 1
                entry["count_details"] = {"normal": entry["count"], "burst": 0}
                entry["me"] = entry["me"] and not is_me
                if entry["count"] <= 0:
                    reactions.remove(entry)
        if add and guild is not None:
            member = guild.get_member(int(user_id))
            if member is not None:
                event["member"] = _member_payload(member)
        parser = (
            self.state.parse_message_reaction_add
            if add
            else self.state.parse_message_reaction_remove
        )
        with _tracked():
            parser(event)

    async def react(
        self, message: discord.Message, emoji: str, user: discord.abc.User | None = None
    ) -> None:
        """``user`` (default: first member) adds a reaction; waits for the handlers."""
        user = user or self.member
        await self.run_parser(
            self._reaction_event, message.channel.id, message.id, emoji, user.id, True
        )

    async def unreact(
        self, message: discord.Message, emoji: str, user: discord.abc.User | None = None
    ) -> None:
        user = user or self.member
        await self.run_parser(
            self._reaction_event, message.channel.id, message.id, emoji, user.id, False
        )

    def sent_to(self, channel: Any) -> list[SentMessage]:
        return [s for s in self.sent if s.message.channel.id == channel.id]

    def last_sent(self) -> SentMessage:
        if not self.sent:
            raise AssertionError("the bot sent no message")
        return self.sent[-1]

    def clear_sent(self) -> None:
        self.sent.clear()
        while not dpy_runner.sent_queue.empty():
            dpy_runner.sent_queue.get_nowait()

    # -- bot -> "Discord" (FakeHttp replacements) --------------------------------------------

    def _bot_message_payload(
        self,
        channel: Any,
        body: Mapping[str, Any],
        files: list[tuple[str, bytes]],
        *,
        msg_type: int = 0,
        flags: int | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        guild = getattr(channel, "guild", None)
        mid = snowflake()
        allowed = body.get("allowed_mentions")
        users, roles, everyone = self._resolve_mentions(body.get("content") or "", guild, allowed)
        data: dict[str, Any] = {
            "id": mid,
            "channel_id": channel.id if channel is not None else int(body["channel_id"]),
            "author": _user_payload(self.bot.user),  # type: ignore[arg-type]
            "content": body.get("content") or "",
            "timestamp": _iso(discord.utils.snowflake_time(mid)),
            "edited_timestamp": None,
            "tts": bool(body.get("tts")),
            "mention_everyone": everyone,
            "mentions": users,
            "mention_roles": roles,
            "attachments": self._attachments(mid, files, channel),
            "embeds": list(body.get("embeds") or []),
            "components": list(body.get("components") or []),
            "pinned": False,
            "type": msg_type,
            "flags": int(body.get("flags") or 0) if flags is None else flags,
        }
        if guild is not None:
            data["guild_id"] = guild.id
        if body.get("poll"):
            data["poll"] = body["poll"]
        data.update(extra or {})
        ref = body.get("message_reference")
        if ref and ref.get("message_id"):
            # Discord: replies ping by default; with allowed_mentions only if replied_user.
            replied = allowed.get("replied_user", False) if allowed is not None else True
            self._apply_reference(data, ref, guild, bool(replied))
        return _complete_message_payload(data, self.state)

    def _attachments(self, mid: int, files: list[tuple[str, bytes]], channel: Any) -> list[Any]:
        out = []
        for index, (filename, blob) in enumerate(files):
            cid = getattr(channel, "id", 0)
            url = f"https://cdn.discordapp.com/attachments/{cid}/{mid}{index}/{filename}"
            self._cdn[url] = blob
            out.append(
                {
                    "id": str(mid + index + 1),
                    "filename": filename,
                    "size": len(blob),
                    "url": url,
                    "proxy_url": url,
                }
            )
        return out

    def _echo_create(self, data: dict[str, Any]) -> None:
        with _tracked():
            self.state.parse_message_create(copy.deepcopy(data))

    def _echo_update(self, data: dict[str, Any]) -> None:
        with _tracked():
            self.state.parse_message_update(copy.deepcopy(data))

    def _apply_edit(
        self, data: dict[str, Any], body: Mapping[str, Any], files: list[tuple[str, bytes]]
    ) -> None:
        for key in ("content", "embeds", "components", "flags", "poll"):
            if key in body:
                data[key] = body[key] if body[key] is not None else _EDIT_DEFAULTS[key]
        if "attachments" in body or files:
            kept = {str(a.get("id")) for a in body.get("attachments") or []}
            data["attachments"] = [a for a in data["attachments"] if str(a["id"]) in kept]
            data["attachments"] += self._attachments(snowflake(), files, None)
        if "content" in body:
            users, roles, everyone = self._resolve_mentions(
                data["content"],
                self.state._get_guild(int(data["guild_id"])) if data.get("guild_id") else None,
                body.get("allowed_mentions"),
            )
            data.update(mentions=users, mention_roles=roles, mention_everyone=everyone)
        data["edited_timestamp"] = _iso()

    async def _http_send_message(self, channel_id: int, *, params: Any) -> dict[str, Any]:
        state = self.state
        channel = state.get_channel(int(channel_id))
        if channel is None:
            raise _not_found("Unknown Channel")
        body = _body_of(params.payload, params.multipart)
        files = _read_files(params.files)
        guild = getattr(channel, "guild", None)
        if guild is not None:
            perms = channel.permissions_for(guild.me)
            can = (
                perms.send_messages_in_threads
                if isinstance(channel, discord.Thread)
                else perms.send_messages
            )
            # Discord: in a locked thread only Manage Threads may post (since 2023).
            locked = isinstance(channel, discord.Thread) and channel.locked
            if not (perms.view_channel and can) or (locked and not perms.manage_threads):
                raise _forbidden("Missing Permissions")
        data = self._bot_message_payload(channel, body, files)
        self._store(data)
        self._echo_create(data)
        message = self._message_obj(data, channel)
        self.sent.append(SentMessage(message=message, payload=body, files=files))
        await dpy_callbacks.dispatch_event("send_message", message)
        return copy.deepcopy(data)

    async def _http_edit_message(
        self, channel_id: int, message_id: int, *, params: Any
    ) -> dict[str, Any]:
        data = self._messages.get(int(message_id))
        if data is None:
            raise _not_found("Unknown Message")
        body = _body_of(params.payload, params.multipart)
        self._apply_edit(data, body, _read_files(params.files))
        for record in self.sent:
            if record.message.id == int(message_id):
                record.edits.append(body)
        self._echo_update(data)
        return copy.deepcopy(data)

    async def _http_delete_message(
        self, channel_id: int, message_id: int, *, reason: str | None = None
    ) -> None:
        data = self._messages.pop(int(message_id), None)
        if data is None:
            raise _not_found("Unknown Message")
        cfg = dpy_backend._cur_config
        if cfg is not None:
            history = cfg.messages.get(int(channel_id), [])
            history[:] = [m for m in history if int(m["id"]) != int(message_id)]
        for record in self.sent:
            if record.message.id == int(message_id):
                record.deleted = True
        payload = {"id": str(message_id), "channel_id": str(channel_id)}
        if data.get("guild_id"):
            payload["guild_id"] = str(data["guild_id"])
        with _tracked():
            self.state.parse_message_delete(payload)

    async def _http_get_member(self, guild_id: int, member_id: int) -> dict[str, Any]:
        """GET /guilds/{guild}/members/{user}: the member as Discord sends it, or 404 once
        they left (what the bot sees when it fetches a member it has not cached)."""
        guild = self.bot.get_guild(int(guild_id))
        member = guild.get_member(int(member_id)) if guild is not None else None
        if member is None:
            raise _not_found("Unknown Member")
        return _member_payload(member)

    async def _http_get_message(self, channel_id: int, message_id: int) -> dict[str, Any]:
        data = self._messages.get(int(message_id))
        if data is None or int(data["channel_id"]) != int(channel_id):
            raise _not_found("Unknown Message")
        return copy.deepcopy(data)

    async def _http_logs_from(
        self,
        channel_id: int,
        limit: int,
        before: int | None = None,
        after: int | None = None,
        around: int | None = None,
    ) -> list[dict[str, Any]]:
        # Discord returns newest first, whatever the strategy.
        cfg = dpy_backend._cur_config
        history = sorted(
            (m for m in (cfg.messages.get(int(channel_id), []) if cfg else [])),
            key=lambda m: int(m["id"]),
        )
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
        return [copy.deepcopy(m) for m in reversed(picked)]

    async def _http_start_private_message(self, user_id: int) -> dict[str, Any]:
        user = self.state.get_user(int(user_id))
        if user is None:
            raise _not_found("Unknown User")
        channel = self.dm_channel(user)
        return {
            "id": str(channel.id),
            "type": 1,
            "recipients": [_user_payload(user)],
            "last_message_id": None,
            "flags": 0,
        }

    async def _http_send_typing(self, channel_id: int) -> None:
        self.typing.append(int(channel_id))

    async def _http_get_from_cdn(self, url: str) -> bytes:
        try:
            return self._cdn[url]
        except KeyError:
            raise _not_found("Unknown Attachment") from None

    async def _http_add_reaction(self, channel_id: int, message_id: int, emoji: str) -> None:
        self._reaction_event(channel_id, message_id, emoji, self.bot.user.id, True)  # type: ignore[union-attr]

    async def _http_remove_own_reaction(self, channel_id: int, message_id: int, emoji: str) -> None:
        self._reaction_event(channel_id, message_id, emoji, self.bot.user.id, False)  # type: ignore[union-attr]

    async def _http_remove_reaction(
        self, channel_id: int, message_id: int, emoji: str, member_id: int
    ) -> None:
        self._reaction_event(channel_id, message_id, emoji, member_id, False)

    async def _http_clear_reactions(self, channel_id: int, message_id: int) -> None:
        data = self._messages.get(int(message_id))
        event = {"message_id": str(message_id), "channel_id": str(channel_id)}
        if data is not None:
            data["reactions"] = []
            if data.get("guild_id"):
                event["guild_id"] = str(data["guild_id"])
        with _tracked():
            self.state.parse_message_reaction_remove_all(event)

    def _command_payloads(self, payload: list[dict[str, Any]], guild_id: int | None) -> list[Any]:
        out = []
        for cmd in payload:
            data = {
                "id": str(self.ids.next()),
                "application_id": str(self.bot.application_id),
                "version": "1",
                "description": "",
                "options": [],
                "default_member_permissions": None,
                "dm_permission": True,
                "nsfw": False,
                **cmd,
            }
            if guild_id is not None:
                data["guild_id"] = str(guild_id)
            out.append(data)
        self.synced_commands[guild_id] = out
        return copy.deepcopy(out)

    async def _http_bulk_upsert_global_commands(
        self, application_id: int, payload: list[dict[str, Any]]
    ) -> list[Any]:
        return self._command_payloads(payload, None)

    async def _http_bulk_upsert_guild_commands(
        self, application_id: int, guild_id: int, payload: list[dict[str, Any]]
    ) -> list[Any]:
        return self._command_payloads(payload, int(guild_id))

    async def _http_get_global_commands(self, application_id: int) -> list[Any]:
        return copy.deepcopy(self.synced_commands.get(None, []))

    async def _http_get_guild_commands(self, application_id: int, guild_id: int) -> list[Any]:
        return copy.deepcopy(self.synced_commands.get(int(guild_id), []))

    def _install_http(self) -> None:
        http = self.bot.http
        for name in (
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
        ):
            setattr(http, name, getattr(self, f"_http_{name}"))

    # -- error hooks --------------------------------------------------------------------------

    def _install_hooks(self) -> None:
        bot = self.bot
        for attr in ("on_error", "on_command_error"):
            if attr in vars(bot):
                self._saved_attrs[attr] = vars(bot)[attr]
        original_on_error = bot.on_error

        async def on_error(event_method: str, /, *args: Any, **kwargs: Any) -> None:
            self.errors.append((event_method, sys.exc_info()[1]))
            await original_on_error(event_method, *args, **kwargs)

        bot.on_error = on_error  # type: ignore[method-assign]
        original_cmd_error = getattr(bot, "on_command_error", None)
        if original_cmd_error is not None:

            async def on_command_error(ctx: Any, error: BaseException) -> None:
                self.command_errors.append((ctx, error))
                await original_cmd_error(ctx, error)

            bot.on_command_error = on_command_error  # type: ignore[attr-defined]

    def _restore_hooks(self) -> None:
        for attr in ("on_error", "on_command_error"):
            vars(self.bot).pop(attr, None)
            if attr in self._saved_attrs:
                setattr(self.bot, attr, self._saved_attrs[attr])


_EDIT_DEFAULTS: dict[str, Any] = {"content": "", "embeds": [], "components": [], "flags": 0}


def _member_payload_raw(user: discord.abc.User, role_ids: Sequence[int]) -> dict[str, Any]:
    return {
        "user": _user_payload(user),
        "roles": [str(r) for r in role_ids],
        "joined_at": _FIXED_JOINED_AT,
        "deaf": False,
        "mute": False,
        "flags": 0,
        "pending": False,
        "nick": None,
    }


_TRANSFERRED_STATE_ATTRS = (
    "_command_tree",
    "_translator",
    "allowed_mentions",
    "application_id",
    "application_flags",
    "handlers",
    "hooks",
    "heartbeat_timeout",
    "guild_ready_timeout",
    "_activity",
    "_status",
    "_chunk_guilds",
    "raw_presence_flag",
)


def _transfer_state(old: Any, new: Any, bot: discord.Client) -> None:
    for attr in _TRANSFERRED_STATE_ATTRS:
        if hasattr(old, attr):
            setattr(new, attr, getattr(old, attr))
    tree = getattr(bot, "tree", None)
    if tree is not None:
        # CommandTree caches the http client and state it was built with (sync/fetch use them).
        new._command_tree = tree
        tree._http = bot.http
        tree._state = new
    # Views/modals registered before attaching (persistent views) survive.
    new._view_store = old._view_store
    new._view_store._state = new
    if old.max_messages != new.max_messages:
        new.max_messages = old.max_messages
        new._messages = deque(maxlen=old.max_messages) if old.max_messages else None


def _force_members_intent(state: Any) -> None:
    if not state._intents.members:
        state._intents.members = True
    if not state.member_cache_flags.joined:
        state.member_cache_flags = discord.MemberCacheFlags.from_intents(state._intents)
    vars(state).pop("store_user", None)  # undo ``store_user = store_user_no_intents``


def _names(spec: int | Sequence[str], fmt: str) -> list[str]:
    if isinstance(spec, int):
        return [fmt.format(n) for n in range(spec)]
    return list(spec)


async def attach_dpytest(
    bot: discord.Client,
    *,
    guilds: int | Sequence[str] = 1,
    text_channels: int | Sequence[str] = 1,
    members: int | Sequence[str] = 1,
    base_id: int | None = DEFAULT_BASE_ID,
    bot_name: str = "Kioku",
    bot_permissions: discord.Permissions | None = None,
    everyone_permissions: discord.Permissions | None = None,
    run_setup_hook: bool = False,
    event_timeout: float = DEFAULT_TIMEOUT,
) -> DpytestEnv:
    """Put ``bot`` on dpytest's fake backend and build the initial world.

    * ``guilds``/``text_channels``/``members``: counts or names (channels and members per guild).
    * ``base_id``: ids of the bot user, guilds, roles, channels and members are
      ``base_id + 1, + 2, ...`` in creation order -- the same world twice gives the same ids
      (a "restart").  ``None`` uses time-based ids.  Message/interaction ids are always time
      based.
    * The bot gets a managed role with ``bot_permissions``; @everyone gets
      ``everyone_permissions`` (neither includes manage_* permissions).
    * ``run_setup_hook``: await ``bot.setup_hook()`` after the state swap, before the world
      exists (as in production).  Attaching never connects, syncs or dispatches ``on_ready``.
    """
    if get_env(bot) is not None:
        raise RuntimeError("bot is already attached; call detach() first")
    _install_dpytest_patches()
    old_state = bot._connection
    dpy_backend.configure(bot)
    state = bot._connection
    _transfer_state(old_state, state, bot)
    _force_members_intent(state)
    if isinstance(bot.loop, _LoopSentinel) or bot.loop is discord.utils.MISSING:
        await bot._async_setup_hook()
    else:
        state.loop = bot.loop
        bot.http.loop = bot.loop

    ids = IdAllocator(base_id)
    user_id = ids.next()
    state.user = discord.ClientUser(
        state=state,
        data={
            "id": str(user_id),
            "username": bot_name,
            "discriminator": "0",
            "global_name": None,
            "avatar": None,
            "bot": True,
        },
    )
    if state.application_id is None:
        state.application_id = user_id

    env = DpytestEnv(bot, ids, event_timeout)
    setattr(bot, _ENV_ATTR, env)
    env._install_http()
    env._install_hooks()
    dpy_callbacks.set_callback(dpy_runner._message_callback, "send_message")
    dpy_callbacks.set_callback(dpy_runner._edit_member_callback, "edit_member")
    for queue in (dpy_runner.sent_queue, dpy_runner.error_queue):
        while not queue.empty():
            queue.get_nowait()

    if run_setup_hook:
        await bot.setup_hook()

    everyone = everyone_permissions or _DEFAULT_EVERYONE
    bot_perms = bot_permissions or _DEFAULT_BOT
    state.stop_dispatch()  # the world already exists when the bot "connects"
    try:
        for guild_name in _names(guilds, "Test Guild {}"):
            guild = env._create_guild(guild_name, everyone, bot_perms, bot_name)
            env.guilds.append(guild)
            for channel_name in _names(text_channels, "channel-{}"):
                data = env._channel_create_payload(
                    guild, channel_name, overwrites=[], category=None, topic=None
                )
                state.parse_channel_create(data)
                env.channels.append(guild.get_channel(int(data["id"])))  # type: ignore[arg-type]
            for member_name in _names(members, "TestUser{}"):
                uid = ids.next()
                payload = {
                    "guild_id": str(guild.id),
                    "user": {
                        "id": str(uid),
                        "username": member_name,
                        "discriminator": "0",
                        "global_name": None,
                        "avatar": None,
                        "bot": False,
                    },
                    "roles": [],
                    "joined_at": _FIXED_JOINED_AT,
                    "deaf": False,
                    "mute": False,
                    "flags": 0,
                    "pending": False,
                    "nick": None,
                }
                state.parse_guild_member_add(payload)
                member = guild.get_member(uid)
                assert member is not None
                env.members.append(member)
    finally:
        state.start_dispatch()
    dpy_runner._cur_config = dpy_runner.RunnerConfig(bot, env.guilds, env.channels, env.members)
    bot._ready.set()
    return env


def _stop_views(state: Any) -> None:
    store = state._view_store
    views = {item.view for items in store._views.values() for item in items.values() if item.view}
    views.update(store._modals.values())
    for view in views:
        with contextlib.suppress(Exception):
            view.stop()


async def detach(bot: discord.Client) -> None:
    """Stop views, restore hooks and close ``bot`` (clearing dpytest's fake websocket first,
    whose ``open`` check fails in ``Client.close``)."""
    env = get_env(bot)
    _stop_views(bot._connection)
    for token, session in list(_SESSIONS.items()):
        if session.harness.bot is bot:
            del _SESSIONS[token]
    if env is not None:
        env._restore_hooks()
    bot.ws = None  # type: ignore[assignment]
    await bot.close()
    if env is not None:
        delattr(bot, _ENV_ATTR)
    if dpy_runner._cur_config is not None and dpy_runner._cur_config.client is bot:
        dpy_runner._cur_config = None
        dpy_backend._cur_config = None


# ---------------------------------------------------------------------------------------------
# interactions
# ---------------------------------------------------------------------------------------------


@dataclass
class _Session:
    harness: InteractionHarness
    result: InteractionResult
    channel: Any
    guild: discord.Guild | None
    component_message_id: int | None = None


_SESSIONS: dict[str, _Session] = {}
_ORIGINAL_WEBHOOK_REQUEST = AsyncWebhookAdapter.request


async def _recording_request(
    self: AsyncWebhookAdapter,
    route: Any,
    session: Any = None,
    *,
    payload: dict[str, Any] | None = None,
    multipart: list[dict[str, Any]] | None = None,
    files: Sequence[discord.File] | None = None,
    **kwargs: Any,
) -> Any:
    sess = _SESSIONS.get(route.webhook_token) if route.webhook_token else None
    if sess is None:
        return await _ORIGINAL_WEBHOOK_REQUEST(
            self, route, session, payload=payload, multipart=multipart, files=files, **kwargs
        )
    body = _body_of(payload, multipart)
    return sess.harness._handle_request(sess, route, body, _read_files(files))


class _AdapterPatch:
    users = 0

    @classmethod
    def acquire(cls) -> None:
        if cls.users == 0:
            AsyncWebhookAdapter.request = _recording_request  # type: ignore[method-assign]
        cls.users += 1

    @classmethod
    def release(cls) -> None:
        cls.users -= 1
        if cls.users == 0:
            AsyncWebhookAdapter.request = _ORIGINAL_WEBHOOK_REQUEST  # type: ignore[method-assign]


_OPTION_TYPES_BY_PY: tuple[tuple[type, int], ...] = (
    (bool, 5),
    (int, 4),
    (float, 10),
    (str, 3),
    (discord.Member, 6),
    (discord.User, 6),
    (discord.Role, 8),
    (discord.abc.GuildChannel, 7),
    (discord.Thread, 7),
)


class InteractionHarness:
    """Feed interactions through the real ``ConnectionState``/``CommandTree``/``ViewStore``
    of a bot attached with :func:`attach_dpytest`, and record the responses.

    All ``slash``/``autocomplete``/``context_menu``/``click``/``select``/``submit_modal``/
    ``dispatch`` coroutines return an :class:`InteractionResult` once the command handler (and
    every task discord.py dispatched for the interaction) has finished.

    Defaults: ``user`` is the env's first member, ``channel`` the env's first text channel.
    The member's ``permissions`` in the payload are ``channel.permissions_for(member)``
    unless given (``discord.Permissions``, int or str).  ``dm=True`` (or a ``DMChannel`` as
    ``channel``) sends the interaction from the user's DM with the bot instead.

    ``gate=True`` (per call, or ``simulate_discord_gating`` for all) applies what Discord does
    before delivering a command: ``default_permissions`` (unless the member is an
    administrator/owner), guild-only / ``allowed_contexts``.  A blocked interaction is not
    dispatched; ``result.blocked`` says why.

    ``echo_messages``: non-ephemeral response/follow-up messages are also fed back as
    MESSAGE_CREATE/MESSAGE_UPDATE (as Discord does), so they reach ``on_message`` and the
    message cache; those handlers are awaited too.
    """

    def __init__(
        self,
        bot: discord.Client,
        *,
        simulate_discord_gating: bool = False,
        echo_messages: bool = True,
    ) -> None:
        env = get_env(bot)
        if env is None:
            raise RuntimeError("attach the bot with attach_dpytest() first")
        self.bot = bot
        self.env = env
        self.gate = simulate_discord_gating
        self.echo_messages = echo_messages
        self.results: list[InteractionResult] = []
        self._command_ids: dict[str, int] = {}
        self._tokens: list[str] = []
        self._closed = False
        _AdapterPatch.acquire()

    def close(self) -> None:
        """Forget recorded sessions and release the webhook-adapter patch (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for token in self._tokens:
            _SESSIONS.pop(token, None)
        _AdapterPatch.release()

    # -- context ------------------------------------------------------------------------------

    @property
    def state(self) -> Any:
        return self.bot._connection

    def _context(
        self,
        user: discord.abc.User | None,
        channel: Any,
        dm: bool,
    ) -> tuple[discord.abc.User, Any, discord.Guild | None]:
        if isinstance(channel, discord.DMChannel):
            dm = True
        if dm:
            who = user or self.env.member
            base = getattr(who, "_user", who)
            return base, channel or self.env.dm_channel(base), None
        channel = channel or self.env.channel
        guild = channel.guild
        who = user or self.env.member
        if not isinstance(who, discord.Member) or who.guild.id != guild.id:
            member = guild.get_member(who.id)
            if member is None:
                raise ValueError(f"{who!r} is not a member of {guild!r}")
            who = member
        return who, channel, guild

    def _base_payload(
        self,
        itype: int,
        data: dict[str, Any] | None,
        *,
        user: discord.abc.User,
        channel: Any,
        guild: discord.Guild | None,
        permissions: discord.Permissions | int | str | None,
        message: dict[str, Any] | None = None,
        locale: str = "en-US",
    ) -> dict[str, Any]:
        iid = snowflake()
        payload: dict[str, Any] = {
            "id": str(iid),
            "application_id": str(self.bot.application_id),
            "type": itype,
            "token": f"kioku-harness-{iid}",
            "version": 1,
            "locale": locale,
            "entitlements": [],
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        if data is not None:
            payload["data"] = data
        if message is not None:
            payload["message"] = copy.deepcopy(message)
        if guild is None:
            payload["user"] = _user_payload(user)
            payload["channel"] = {
                "id": str(channel.id),
                "type": 1,
                "recipients": [_user_payload(user)],
                "flags": 0,
            }
            payload["channel_id"] = str(channel.id)
            payload["context"] = 1
            payload["authorizing_integration_owners"] = {"0": "0"}
            payload["app_permissions"] = str(discord.Permissions._dm_permissions().value)
        else:
            assert isinstance(user, discord.Member)
            if permissions is None:
                perms = channel.permissions_for(user).value
            elif isinstance(permissions, discord.Permissions):
                perms = permissions.value
            else:
                perms = int(permissions)
            member = _member_payload(user)
            member["permissions"] = str(perms)
            payload["guild_id"] = str(guild.id)
            payload["guild"] = {"id": str(guild.id), "locale": "en-US", "features": []}
            payload["guild_locale"] = "en-US"
            payload["member"] = member
            payload["channel"] = _channel_payload(channel, permissions=perms)
            payload["channel_id"] = str(channel.id)
            payload["context"] = 0
            payload["authorizing_integration_owners"] = {"0": str(guild.id)}
            payload["app_permissions"] = str(channel.permissions_for(guild.me).value)
        return payload

    # -- application commands ------------------------------------------------------------------

    def _find_root(
        self, name: str, guild: discord.Guild | None, ctype: int = 1
    ) -> tuple[Any, bool]:
        tree = getattr(self.bot, "tree", None)
        if tree is None:
            return None, False
        kind = discord.AppCommandType(ctype)
        if guild is not None:
            cmd = tree.get_command(name, guild=guild, type=kind)
            if cmd is not None:
                return cmd, True
        return tree.get_command(name, type=kind), False

    def block_reason(
        self, root: Any, *, guild: discord.Guild | None, guild_scoped: bool, permissions: int
    ) -> str | None:
        """Why Discord would not deliver ``root`` here (``None`` if it would)."""
        if root is None:
            return "unknown command (not registered in the tree)"
        tree = self.bot.tree  # type: ignore[attr-defined]
        spec = root.to_dict(tree)
        contexts = spec.get("contexts")
        if guild is None:
            if guild_scoped:
                return "guild command used in a DM"
            if contexts is not None and 1 not in contexts:
                return "command not allowed in bot DMs (allowed_contexts)"
            if contexts is None and spec.get("dm_permission") is False:
                return "guild_only command used in a DM"
            return None
        if contexts is not None and 0 not in contexts:
            return "command not allowed in guilds (allowed_contexts)"
        required = spec.get("default_member_permissions")
        if required is None:
            return None
        perms = discord.Permissions(permissions)
        if perms.administrator:
            return None
        required = int(required)
        if required == 0 or perms.value & required != required:
            return f"member lacks default_permissions {discord.Permissions(required)!r}"
        return None

    def _option(
        self,
        name: str,
        value: Any,
        param: Any,
        resolved: dict[str, dict[str, Any]],
        guild: discord.Guild | None,
        channel: Any,
    ) -> dict[str, Any]:
        if isinstance(value, app_commands.Choice):
            value = value.value
        if isinstance(value, Enum):
            value = value.value
        if param is not None:
            opt_type = param.type.value
        else:
            opt_type = next((t for cls, t in _OPTION_TYPES_BY_PY if isinstance(value, cls)), 3)
        if opt_type in (6, 7, 8, 9, 11):
            oid = str(value["id"] if isinstance(value, Mapping) else getattr(value, "id", value))
            if isinstance(value, discord.Member):
                resolved.setdefault("users", {})[oid] = _user_payload(value)
                member = _member_payload(value, with_user=False)
                member["permissions"] = str(
                    (channel.permissions_for(value) if guild else discord.Permissions.none()).value
                )
                resolved.setdefault("members", {})[oid] = member
            elif isinstance(value, discord.abc.User):
                resolved.setdefault("users", {})[oid] = _user_payload(value)
            elif isinstance(value, discord.Role):
                resolved.setdefault("roles", {})[oid] = _role_payload(value)
            elif isinstance(value, discord.abc.GuildChannel | discord.Thread):
                me = value.guild.me
                resolved.setdefault("channels", {})[oid] = _channel_payload(
                    value, permissions=value.permissions_for(me).value
                )
            elif isinstance(value, Mapping) and opt_type == 11:
                resolved.setdefault("attachments", {})[oid] = dict(value)
            return {"name": name, "type": opt_type, "value": oid}
        return {"name": name, "type": opt_type, "value": value}

    def _options(
        self,
        command: Any,
        options: Mapping[str, Any],
        resolved: dict[str, dict[str, Any]],
        guild: discord.Guild | None,
        channel: Any,
        focused: str | None = None,
    ) -> list[dict[str, Any]]:
        params: dict[str, Any] = {}
        if isinstance(command, app_commands.Command):
            for p in command._params.values():
                params[p.name] = p
                params[p.display_name] = p
        out = []
        for key, value in options.items():
            param = params.get(key)
            if command is not None and isinstance(command, app_commands.Command) and not param:
                raise ValueError(f"/{command.qualified_name} has no option {key!r}")
            api_name = param.display_name if param is not None else key
            opt = self._option(api_name, value, param, resolved, guild, channel)
            if focused is not None and key in (focused, api_name):
                opt["focused"] = True
                opt["value"] = value if isinstance(value, str) else str(value)
            out.append(opt)
        if focused is not None and not any(o.get("focused") for o in out):
            param = params.get(focused)
            api_name = param.display_name if param is not None else focused
            out.append(
                {
                    "name": api_name,
                    "type": param.type.value if param is not None else 3,
                    "value": "",
                    "focused": True,
                }
            )
        return out

    def _command_data(
        self,
        path: str,
        options: Mapping[str, Any] | None,
        guild: discord.Guild | None,
        channel: Any,
        focused: str | None = None,
    ) -> tuple[dict[str, Any], Any, bool]:
        parts = path.split()
        if not parts:
            raise ValueError("empty command name")
        root, guild_scoped = self._find_root(parts[0], guild)
        chain = [root]
        for part in parts[1:]:
            parent = chain[-1]
            chain.append(
                parent.get_command(part) if isinstance(parent, app_commands.Group) else None
            )
        leaf = chain[-1]
        resolved: dict[str, dict[str, Any]] = {}
        leaf_options = self._options(leaf, options or {}, resolved, guild, channel, focused)
        opts = leaf_options
        for depth in range(len(parts) - 1, 0, -1):
            opt_type = 1 if depth == len(parts) - 1 else 2
            opts = [{"name": parts[depth], "type": opt_type, "options": opts}]
        data: dict[str, Any] = {
            "id": str(self._command_ids.setdefault(parts[0], snowflake())),
            "name": parts[0],
            "type": 1,
            "options": opts,
        }
        if resolved:
            data["resolved"] = resolved
        if guild_scoped and guild is not None:
            data["guild_id"] = str(guild.id)
        return data, root, guild_scoped

    async def slash(
        self,
        command: str,
        options: Mapping[str, Any] | None = None,
        *,
        user: discord.abc.User | None = None,
        channel: Any = None,
        dm: bool = False,
        permissions: discord.Permissions | int | str | None = None,
        gate: bool | None = None,
        locale: str = "en-US",
    ) -> InteractionResult:
        """Invoke ``/command`` (``"group sub"`` / ``"group subgroup sub"`` for subcommands).
        ``options`` are keyed by parameter name (or renamed display name); Members, Users,
        Roles and channels become resolved snowflake options."""
        who, chan, guild = self._context(user, channel, dm)
        data, root, guild_scoped = self._command_data(command, options, guild, chan)
        payload = self._base_payload(
            2, data, user=who, channel=chan, guild=guild, permissions=permissions, locale=locale
        )
        return await self._gated(payload, root, guild, guild_scoped, gate)

    async def autocomplete(
        self,
        command: str,
        focused: str,
        value: Any = "",
        options: Mapping[str, Any] | None = None,
        *,
        user: discord.abc.User | None = None,
        channel: Any = None,
        dm: bool = False,
        permissions: discord.Permissions | int | str | None = None,
    ) -> InteractionResult:
        """Autocomplete for option ``focused`` currently typed as ``value``; ``result.choices``
        holds the ``[{"name": ..., "value": ...}]`` the bot answered."""
        who, chan, guild = self._context(user, channel, dm)
        all_options = {**(options or {}), focused: value}
        data, _, _ = self._command_data(command, all_options, guild, chan, focused=focused)
        payload = self._base_payload(
            4, data, user=who, channel=chan, guild=guild, permissions=permissions
        )
        return await self.dispatch(payload)

    async def context_menu(
        self,
        name: str,
        target: discord.abc.User | discord.Message,
        *,
        user: discord.abc.User | None = None,
        channel: Any = None,
        dm: bool = False,
        permissions: discord.Permissions | int | str | None = None,
        gate: bool | None = None,
    ) -> InteractionResult:
        """Invoke a user (target is a User/Member) or message (target is a Message) context
        menu command."""
        who, chan, guild = self._context(user, channel, dm)
        resolved: dict[str, dict[str, Any]] = {}
        if isinstance(target, discord.Message):
            ctype = 3
            resolved["messages"] = {str(target.id): copy.deepcopy(self.env._payload_for(target))}
        else:
            ctype = 2
            self._option("user", target, None, resolved, guild, chan)
        root, guild_scoped = self._find_root(name, guild, ctype)
        data: dict[str, Any] = {
            "id": str(self._command_ids.setdefault(f"{ctype}:{name}", snowflake())),
            "name": name,
            "type": ctype,
            "target_id": str(target.id),
            "resolved": resolved,
        }
        if guild_scoped and guild is not None:
            data["guild_id"] = str(guild.id)
        payload = self._base_payload(
            2, data, user=who, channel=chan, guild=guild, permissions=permissions
        )
        return await self._gated(payload, root, guild, guild_scoped, gate)

    async def _gated(
        self,
        payload: dict[str, Any],
        root: Any,
        guild: discord.Guild | None,
        guild_scoped: bool,
        gate: bool | None,
    ) -> InteractionResult:
        if gate if gate is not None else self.gate:
            perms = int(payload["member"]["permissions"]) if guild is not None else 0
            reason = self.block_reason(
                root, guild=guild, guild_scoped=guild_scoped, permissions=perms
            )
            if reason is not None:
                result = InteractionResult(payload=payload, env=self.env, blocked=reason)
                self.results.append(result)
                return result
        return await self.dispatch(payload)

    # -- components and modals ----------------------------------------------------------------

    def _message_of(self, target: Any) -> dict[str, Any]:
        if isinstance(target, InteractionResult):
            mid = target.original_message_id
            if mid is None:
                raise ValueError("that interaction produced no message")
        elif isinstance(target, RecordedCall | SentMessage):
            mid = target.message_id if isinstance(target, RecordedCall) else target.message.id
        elif isinstance(target, discord.Message):
            return self.env._payload_for(target)
        else:
            mid = int(target)
        data = self.env.message_payload(mid)  # type: ignore[arg-type]
        if data is None:
            raise KeyError(f"no stored message {mid}")
        return data

    def _component_channel(self, message: Mapping[str, Any]) -> Any:
        channel = self.state.get_channel(int(message["channel_id"]))
        if channel is None:
            raise ValueError(f"unknown channel {message['channel_id']} for message")
        return channel

    async def click(
        self,
        message: Any,
        custom_id: str | None = None,
        *,
        label: str | None = None,
        user: discord.abc.User | None = None,
        permissions: discord.Permissions | int | str | None = None,
        values: Sequence[str] | None = None,
    ) -> InteractionResult:
        """Click a button (or pick ``values`` in a select) on a message the bot sent.
        ``message``: a ``discord.Message``, message id, :class:`SentMessage`,
        :class:`RecordedCall` or :class:`InteractionResult` (its original response).  The
        component is found by ``custom_id`` or by ``label``."""
        data = self._message_of(message)
        component = None
        for comp in _walk_components(data.get("components") or []):
            if (custom_id is not None and comp.get("custom_id") == custom_id) or (
                custom_id is None and label is not None and comp.get("label") == label
            ):
                component = comp
                break
        if component is None:
            raise LookupError(
                f"no component custom_id={custom_id!r} label={label!r} on message {data['id']};"
                f" has {_custom_ids(data.get('components') or [])}"
            )
        channel = self._component_channel(data)
        who, chan, guild = self._context(user, channel, isinstance(channel, discord.DMChannel))
        inner: dict[str, Any] = {
            "custom_id": component["custom_id"],
            "component_type": component["type"],
        }
        if component["type"] != 2:
            inner["values"] = list(values or [])
        payload = self._base_payload(
            3,
            inner,
            user=who,
            channel=chan,
            guild=guild,
            permissions=permissions,
            message=data,
        )
        return await self.dispatch(payload)

    async def select(
        self,
        message: Any,
        custom_id: str,
        values: Sequence[str],
        *,
        user: discord.abc.User | None = None,
    ) -> InteractionResult:
        return await self.click(message, custom_id, user=user, values=values)

    async def expire_view(self, message: Any) -> None:
        """Run out the timeout of the view on ``message`` (as for :meth:`click`) now, as
        discord.py does once it passes: the view leaves the store (a later click on it is
        not answered: Discord shows "This interaction failed") and its ``on_timeout`` runs.
        Returns once that has finished."""
        data = self._message_of(message)
        view = self.state._view_store._synced_message_views.get(int(data["id"]))
        if view is None:
            raise LookupError(f"no live view on message {data['id']}")
        await self.env.run_parser(view._dispatch_timeout)

    async def submit_modal(
        self,
        modal: RecordedModal | discord.ui.Modal | InteractionResult | str,
        values: Mapping[str, str | Sequence[str]],
        *,
        user: discord.abc.User | None = None,
        channel: Any = None,
        dm: bool = False,
        permissions: discord.Permissions | int | str | None = None,
        message: Any = None,
    ) -> InteractionResult:
        """Submit a modal the bot opened.  ``values`` are keyed by the input's custom_id, its
        label, or the attribute name on the Modal class.  Inputs not given are sent empty."""
        if isinstance(modal, InteractionResult):
            if modal.modal is None:
                raise ValueError("that interaction did not open a modal")
            modal = modal.modal
        custom_id = modal if isinstance(modal, str) else modal.custom_id
        live = self.state._view_store._modals.get(custom_id)
        if isinstance(modal, RecordedModal):
            components = modal.components
        elif live is not None:
            components = live.to_components()
        else:
            raise LookupError(f"no open modal {custom_id!r}")
        aliases: dict[str, str] = {}
        if live is not None:
            names = {
                **getattr(type(live), "__view_children_items__", {}),
                **getattr(type(live), "__modal_children_items__", {}),
            }
            for attr in names:
                item = getattr(live, attr, None)
                if getattr(item, "custom_id", None):
                    aliases[attr] = item.custom_id  # type: ignore[union-attr]
        remaining = dict(values)

        def pick(comp: Mapping[str, Any], outer_label: str | None) -> dict[str, Any]:
            keys = [comp.get("custom_id"), comp.get("label"), outer_label]
            keys += [a for a, cid in aliases.items() if cid == comp.get("custom_id")]
            value: Any = ""
            for key in keys:
                if key is not None and key in remaining:
                    value = remaining.pop(key)
                    break
            out = {"type": comp["type"], "custom_id": comp["custom_id"]}
            if "id" in comp:
                out["id"] = comp["id"]
            if comp["type"] == 4:
                out["value"] = value
            else:
                out["values"] = [value] if isinstance(value, str) and value else list(value)
            return out

        submitted: list[dict[str, Any]] = []
        for top in components:
            if top.get("type") == 1:
                inner = [pick(c, None) for c in top.get("components", []) if c.get("custom_id")]
                submitted.append({"type": 1, "components": inner})
            elif top.get("type") == 18 and top.get("component", {}).get("custom_id"):
                entry = {"type": 18, "component": pick(top["component"], top.get("label"))}
                if "id" in top:
                    entry["id"] = top["id"]
                submitted.append(entry)
        if remaining:
            raise ValueError(f"modal {custom_id!r} has no inputs {sorted(remaining)}")
        msg = self._message_of(message) if message is not None else None
        if msg is not None and channel is None:
            channel = self._component_channel(msg)
        who, chan, guild = self._context(user, channel, dm)
        payload = self._base_payload(
            5,
            {"custom_id": custom_id, "components": submitted},
            user=who,
            channel=chan,
            guild=guild,
            permissions=permissions,
            message=msg,
        )
        return await self.dispatch(payload)

    # -- dispatch -----------------------------------------------------------------------------

    async def dispatch(self, payload: dict[str, Any]) -> InteractionResult:
        """Feed a raw INTERACTION_CREATE payload through ``parse_interaction_create`` and wait
        until every task it dispatched has finished."""
        if self._closed:
            raise RuntimeError("harness is closed")
        guild = self.state._get_guild(int(payload["guild_id"])) if payload.get("guild_id") else None
        channel_id = int(payload["channel"]["id"]) if payload.get("channel") else None
        channel = self.state.get_channel(channel_id) if channel_id else None
        result = InteractionResult(payload=payload, env=self.env)
        session = _Session(self, result, channel, guild)
        if payload.get("message"):
            session.component_message_id = int(payload["message"]["id"])
        _SESSIONS[payload["token"]] = session
        self._tokens.append(payload["token"])
        self.results.append(result)

        state = self.state
        captured: list[discord.Interaction] = []
        original_dispatch = state.dispatch

        def spy(event: str, *args: Any, **kwargs: Any) -> Any:
            if event == "interaction" and args:
                captured.append(args[0])
            return original_dispatch(event, *args, **kwargs)

        def feed() -> None:
            state.dispatch = spy
            try:
                state.parse_interaction_create(payload)
            finally:
                state.dispatch = original_dispatch

        await self.env.run_parser(feed)
        result.interaction = captured[0] if captured else None
        return result

    # -- webhook HTTP layer -------------------------------------------------------------------

    def _handle_request(
        self,
        session: _Session,
        route: Any,
        body: dict[str, Any],
        files: list[tuple[str, bytes]],
    ) -> Any:
        method, path = route.method, route.path
        result = session.result
        if path.endswith("/callback"):
            return self._on_callback(session, body, files)
        if path == "/webhooks/{webhook_id}/{webhook_token}" and method == "POST":
            if result.response is None:
                raise _not_found("Unknown Webhook (follow-up before the initial response)")
            original = (
                self.env.message_payload(result.original_message_id)
                if result.original_message_id is not None
                else None
            )
            if original is not None and int(original.get("flags") or 0) & LOADING:
                # As Discord does: the first follow-up after a deferred "thinking…"
                # response resolves it: it becomes the original message (keeping its
                # ephemeral flag), not a new one.
                self.env._apply_edit(
                    original, {k: v for k, v in body.items() if k != "flags"}, files
                )
                original["flags"] = int(original.get("flags") or 0) & ~LOADING
                result.calls.append(
                    RecordedCall("followup", None, body, int(original["id"]), files)
                )
                return copy.deepcopy(original)
            data = self._new_message(session, body, files, flags=int(body.get("flags") or 0))
            result.calls.append(RecordedCall("followup", None, body, int(data["id"]), files))
            return copy.deepcopy(data)
        if "/messages/" in path:
            target = route.url.rsplit("/", 1)[-1].split("?", 1)[0]
            is_original = target == "@original"
            mid = result.original_message_id if is_original else int(target)
            suffix = "original" if is_original else "message"
            data = self.env.message_payload(mid) if mid is not None else None
            if data is None:
                raise _not_found("Unknown Message")
            if method == "GET":
                result.calls.append(RecordedCall(f"fetch_{suffix}", None, {}, mid))
                return copy.deepcopy(data)
            if method == "PATCH":
                self.env._apply_edit(data, body, files)
                data["flags"] = int(data.get("flags") or 0) & ~LOADING
                result.calls.append(RecordedCall(f"edit_{suffix}", None, body, mid, files))
                if self.echo_messages and not int(data["flags"]) & EPHEMERAL:
                    self.env._echo_update(data)
                return copy.deepcopy(data)
            if method == "DELETE":
                result.calls.append(RecordedCall(f"delete_{suffix}", None, {}, mid))
                self.env._messages.pop(int(mid), None)  # type: ignore[arg-type]
                return None
        raise NotImplementedError(f"interaction harness: unsupported {method} {route.url}")

    def _new_message(
        self,
        session: _Session,
        body: dict[str, Any],
        files: list[tuple[str, bytes]],
        *,
        flags: int,
    ) -> dict[str, Any]:
        interaction_payload = session.result.payload
        is_command = interaction_payload["type"] == 2
        msg_type = 0
        if is_command:
            msg_type = 23 if interaction_payload["data"].get("type", 1) in (2, 3) else 20
        user = interaction_payload.get("member", {}).get("user") or interaction_payload["user"]
        extra = {
            "webhook_id": str(self.bot.application_id),
            "application_id": str(self.bot.application_id),
            "interaction_metadata": {
                "id": interaction_payload["id"],
                "type": interaction_payload["type"],
                "user": user,
                "authorizing_integration_owners": interaction_payload.get(
                    "authorizing_integration_owners", {}
                ),
            },
        }
        channel = session.channel
        if channel is None:
            channel = discord.Object(int(interaction_payload["channel"]["id"]))
        data = self.env._bot_message_payload(
            channel, body, files, msg_type=msg_type, flags=flags, extra=extra
        )
        self.env._store(data, in_history=not flags & EPHEMERAL)
        if self.echo_messages and not flags & EPHEMERAL:
            self.env._echo_create(data)
        return data

    def _on_callback(
        self, session: _Session, body: dict[str, Any], files: list[tuple[str, bytes]]
    ) -> dict[str, Any]:
        result = session.result
        if result.response is not None:
            raise discord.HTTPException(
                FakeResponse(400, "Bad Request"),
                {"code": 40060, "message": "Interaction has already been acknowledged."},
            )
        rtype = int(body["type"])
        data = dict(body.get("data") or {})
        flags = int(data.get("flags") or 0)
        message: dict[str, Any] | None = None
        if rtype == CHANNEL_MESSAGE:
            message = self._new_message(session, data, files, flags=flags)
            result.original_message_id = int(message["id"])
        elif rtype == DEFERRED_CHANNEL_MESSAGE:
            message = self._new_message(session, {}, [], flags=flags | LOADING)
            result.original_message_id = int(message["id"])
        elif rtype in (DEFERRED_UPDATE, UPDATE_MESSAGE):
            mid = session.component_message_id
            result.original_message_id = mid
            stored = self.env.message_payload(mid) if mid is not None else None
            if rtype == UPDATE_MESSAGE and stored is not None:
                self.env._apply_edit(stored, data, files)
                if self.echo_messages and not int(stored.get("flags") or 0) & EPHEMERAL:
                    self.env._echo_update(stored)
            message = stored
        call_mid = result.original_message_id if rtype not in (PONG, 8, 9) else None
        result.calls.append(RecordedCall("response", rtype, data, call_mid, files))
        interaction_payload = result.payload
        out: dict[str, Any] = {
            "interaction": {
                "id": interaction_payload["id"],
                "type": interaction_payload["type"],
                "response_message_loading": rtype == DEFERRED_CHANNEL_MESSAGE,
                "response_message_ephemeral": bool(flags & EPHEMERAL),
            }
        }
        if message is not None:
            out["interaction"]["response_message_id"] = str(message["id"])
            out["resource"] = {"type": rtype, "message": copy.deepcopy(message)}
        return out


# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------


def make_harness_bot(**kwargs: Any) -> commands.Bot:
    """A minimal ``commands.Bot`` (prefix ``!``, intents default + message_content + members)."""
    intents = discord.Intents.default()
    intents.message_content = True
    intents.members = True
    kwargs.setdefault("command_prefix", "!")
    kwargs.setdefault("help_command", None)
    return commands.Bot(intents=intents, **kwargs)


@pytest_asyncio.fixture
async def harness_env() -> AsyncIterator[DpytestEnv]:
    """A :func:`make_harness_bot` attached with deterministic ids; detached afterwards."""
    bot = make_harness_bot()
    env = await attach_dpytest(bot)
    try:
        yield env
    finally:
        await detach(bot)


@pytest_asyncio.fixture
async def harness_bot(harness_env: DpytestEnv) -> commands.Bot:
    """The bot of :func:`harness_env` (add test cogs with ``await bot.add_cog(...)``)."""
    return harness_env.bot  # type: ignore[return-value]


@pytest_asyncio.fixture
async def interaction_harness(harness_env: DpytestEnv) -> AsyncIterator[InteractionHarness]:
    harness = InteractionHarness(harness_env.bot)
    try:
        yield harness
    finally:
        harness.close()
