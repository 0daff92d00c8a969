"""A bot put on dpytest's fake backend, with the fixes dpytest 0.7 needs on discord.py 2.7."""

from __future__ import annotations

import contextlib
import sys
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import discord
from discord.client import _LoopSentinel
from discord.ext import commands
from discord.ext.test import backend as dpy_backend
from discord.ext.test import callbacks as dpy_callbacks
from discord.ext.test import factories as dpy_factories
from discord.ext.test import runner as dpy_runner

from tests.helpers.discord_http import FakeDiscordHttp
from tests.helpers.discord_payloads import IdAllocator, complete_message_payload, new_user_payload
from tests.helpers.discord_world import (
    DEFAULT_BOT_PERMISSIONS,
    DEFAULT_EVERYONE_PERMISSIONS,
    DEFAULT_TIMEOUT,
)
from tests.helpers.messages import MessageTraffic

# Ids of the world are DEFAULT_BASE_ID + 1, + 2... in creation order (early 2024).
DEFAULT_BASE_ID = 1_200_000_000_000_000_000
_ENV_ATTR = "_kioku_dpytest_env"


class DpytestEnv(MessageTraffic):
    """A bot's world on dpytest: messages, what it sent, its handlers' errors, its fake REST."""

    def __init__(self, bot: discord.Client, ids: IdAllocator, timeout: float) -> None:
        super().__init__(bot, ids, timeout)
        self.fake_http = FakeDiscordHttp(self)
        self.typing = self.fake_http.typing
        self.synced_commands = self.fake_http.synced_commands
        self.on_detach: list[Callable[[], None]] = []  # run by detach() (interaction harnesses)
        self._saved_on_error: Any = None

    def _record_errors(self) -> None:
        bot = self.bot
        self._saved_on_error = vars(bot).get("on_error")
        original = bot.on_error

        async def on_error(event_method: str, /, *args: Any, **kwargs: Any) -> None:
            self.errors.append((event_method, sys.exc_info()[1]))
            await original(event_method, *args, **kwargs)

        bot.on_error = on_error  # type: ignore[method-assign]

    def _restore_on_error(self) -> None:
        vars(self.bot).pop("on_error", None)
        if self._saved_on_error is not None:
            self.bot.on_error = self._saved_on_error  # type: ignore[method-assign]


def get_env(bot: discord.Client) -> DpytestEnv | None:
    return getattr(bot, _ENV_ATTR, None)


def _complete_dpytest_messages() -> None:
    """Make dpytest's message payloads complete for discord.py 2.7 (once per process)."""
    if getattr(dpy_factories, "_kioku_patched", False):
        return
    original_make = dpy_factories.make_message_dict
    original_from = dpy_factories.dict_from_message

    def make_message_dict(*args: Any, **kwargs: Any) -> dict[str, Any]:
        data = original_make(*args, **kwargs)
        state = dpy_backend._cur_config.state if dpy_backend._cur_config else None
        return complete_message_payload(data, state)

    def dict_from_message(message: discord.Message) -> dict[str, Any]:
        data = original_from(message)
        data["channel_id"] = message.channel.id
        if message.guild is not None:
            data["guild_id"] = message.guild.id
        data["components"] = [c.to_dict() for c in getattr(message, "components", [])]
        data["flags"] = message.flags.value
        return complete_message_payload(data, message._state)

    dpy_factories.make_message_dict = make_message_dict
    dpy_factories.dict_from_message = dict_from_message
    dpy_factories._kioku_patched = True


# What dpytest's FakeState drops of the bot's own state.
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
        # The tree keeps the http client and state it was built with (sync and fetch use them).
        new._command_tree = tree
        tree._http = bot.http
        tree._state = new
    # Views and modals registered before attaching (persistent views) survive.
    new._view_store = old._view_store
    new._view_store._state = new
    if old.max_messages != new.max_messages:
        new.max_messages = old.max_messages
        new._messages = deque(maxlen=old.max_messages) if old.max_messages else None


def _force_members_intent(state: Any) -> None:
    """dpytest's members live in the member cache, which needs the members intent."""
    state._intents.members = True
    if not state.member_cache_flags.joined:
        state.member_cache_flags = discord.MemberCacheFlags.from_intents(state._intents)
    vars(state).pop("store_user", None)  # undo ``store_user = store_user_no_intents``


def _names(spec: int | Sequence[str], pattern: str) -> list[str]:
    return [pattern.format(n) for n in range(spec)] if isinstance(spec, int) else list(spec)


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
    """Put ``bot`` on dpytest's backend and build guilds, channels and members (counts or names)."""
    if get_env(bot) is not None:
        raise RuntimeError("bot is already attached; call detach() first")
    _complete_dpytest_messages()
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
    state.user = discord.ClientUser(state=state, data=new_user_payload(user_id, bot_name, bot=True))
    if state.application_id is None:
        state.application_id = user_id

    env = DpytestEnv(bot, ids, event_timeout)
    setattr(bot, _ENV_ATTR, env)
    env.fake_http.install(bot.http)
    env._record_errors()
    dpy_callbacks.set_callback(dpy_runner._message_callback, "send_message")
    dpy_callbacks.set_callback(dpy_runner._edit_member_callback, "edit_member")
    for queue in (dpy_runner.sent_queue, dpy_runner.error_queue):
        while not queue.empty():
            queue.get_nowait()

    if run_setup_hook:  # as in production: before the world exists
        await bot.setup_hook()

    everyone = everyone_permissions or DEFAULT_EVERYONE_PERMISSIONS
    bot_perms = bot_permissions or DEFAULT_BOT_PERMISSIONS
    state.stop_dispatch()  # the world already exists when the bot "connects"
    try:
        for guild_name in _names(guilds, "Test Guild {}"):
            guild = env._add_guild(guild_name, everyone, bot_perms, bot_name)
            env.guilds.append(guild)
            for channel_name in _names(text_channels, "channel-{}"):
                env.channels.append(await env.create_text_channel(channel_name, guild=guild))
            for member_name in _names(members, "TestUser{}"):
                env.members.append(await env.create_member(member_name, guild=guild))
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
    """Stop views, close interaction harnesses and close ``bot``."""
    env = get_env(bot)
    _stop_views(bot._connection)
    if env is not None:
        for close in env.on_detach:
            close()
        env._restore_on_error()
    bot.ws = None  # type: ignore[assignment]  # dpytest's fake websocket fails Client.close
    await bot.close()
    if env is not None:
        delattr(bot, _ENV_ATTR)
    if dpy_runner._cur_config is not None and dpy_runner._cur_config.client is bot:
        dpy_runner._cur_config = None
        dpy_backend._cur_config = None


def make_harness_bot(**kwargs: Any) -> commands.Bot:
    """A minimal ``commands.Bot`` (prefix ``!``, intents default + message_content + members)."""
    intents = discord.Intents.default()
    intents.message_content = True
    intents.members = True
    kwargs.setdefault("command_prefix", "!")
    kwargs.setdefault("help_command", None)
    return commands.Bot(intents=intents, **kwargs)
