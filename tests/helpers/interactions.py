"""Raw INTERACTION_CREATE payloads (commands, autocomplete, clicks, modals) fed to the real tree."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

import discord
from discord import app_commands

from tests.helpers.discord_payloads import (
    channel_payload,
    custom_ids,
    dm_channel_payload,
    member_payload,
    role_payload,
    snowflake,
    user_payload,
    walk_components,
)
from tests.helpers.dpytest_env import get_env
from tests.helpers.interaction_responses import (
    InteractionResult,
    RecordedCall,
    RecordedModal,
    ResponseRecorder,
)
from tests.helpers.messages import SentMessage

# Option types (AppCommandOptionType) of values given without a known parameter.
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

Permissions = discord.Permissions | int | str | None


class InteractionHarness:
    """Feeds interactions to an attached bot; each call returns once its handlers have finished."""

    # By default the env's first member acts in its first text channel (``dm=True``: in their
    # DM with the bot) with their permissions there. ``gate=True`` (or simulate_discord_gating)
    # first applies Discord's own gating; a blocked interaction sets ``result.blocked``.

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
        self.results: list[InteractionResult] = []
        self._command_ids: dict[str, int] = {}
        self._recorder = ResponseRecorder(env, echo_messages=echo_messages)
        self._closed = False
        env.on_detach.append(self.close)

    def close(self) -> None:
        """Stop recording (idempotent; detach() closes every harness of its bot)."""
        if not self._closed:
            self._closed = True
            self._recorder.close()

    @property
    def state(self) -> Any:
        return self.bot._connection

    def _context(
        self, user: discord.abc.User | None, channel: Any, dm: bool
    ) -> tuple[discord.abc.User, Any, discord.Guild | None]:
        who = user or self.env.member
        if dm or isinstance(channel, discord.DMChannel):
            base = getattr(who, "_user", who)
            return base, channel or self.env.dm_channel(base), None
        channel = channel or self.env.channel
        guild = channel.guild
        if not isinstance(who, discord.Member) or who.guild.id != guild.id:
            member = guild.get_member(who.id)
            if member is None:
                raise ValueError(f"{who!r} is not a member of {guild!r}")
            who = member
        return who, channel, guild

    def _payload(
        self,
        interaction_type: int,
        data: dict[str, Any],
        *,
        user: discord.abc.User,
        channel: Any,
        guild: discord.Guild | None,
        permissions: Permissions,
        message: dict[str, Any] | None = None,
        locale: str = "en-US",
    ) -> dict[str, Any]:
        interaction_id = snowflake()
        payload: dict[str, Any] = {
            "id": str(interaction_id),
            "application_id": str(self.bot.application_id),
            "type": interaction_type,
            "token": f"kioku-harness-{interaction_id}",
            "version": 1,
            "locale": locale,
            "entitlements": [],
            "attachment_size_limit": 10 * 1024 * 1024,
            "data": data,
            "channel_id": str(channel.id),
        }
        if message is not None:
            payload["message"] = copy.deepcopy(message)
        if guild is None:
            payload["user"] = user_payload(user)
            payload["channel"] = dm_channel_payload(channel.id, user)
            payload["context"] = 1
            payload["authorizing_integration_owners"] = {"0": "0"}
            payload["app_permissions"] = str(discord.Permissions._dm_permissions().value)
            return payload
        assert isinstance(user, discord.Member)
        if permissions is None:
            perms = channel.permissions_for(user).value
        elif isinstance(permissions, discord.Permissions):
            perms = permissions.value
        else:
            perms = int(permissions)
        member = member_payload(user)
        member["permissions"] = str(perms)
        payload["guild_id"] = str(guild.id)
        payload["guild"] = {"id": str(guild.id), "locale": "en-US", "features": []}
        payload["guild_locale"] = "en-US"
        payload["member"] = member
        payload["channel"] = channel_payload(channel, permissions=perms)
        payload["context"] = 0
        payload["authorizing_integration_owners"] = {"0": str(guild.id)}
        payload["app_permissions"] = str(channel.permissions_for(guild.me).value)
        return payload

    # -- application commands -------------------------------------------------------------------

    def _find_root(self, name: str, guild: discord.Guild | None) -> tuple[Any, bool]:
        """The top-level command and whether it is registered for ``guild`` only."""
        tree = getattr(self.bot, "tree", None)
        if tree is None:
            return None, False
        if guild is not None:
            command = tree.get_command(name, guild=guild)
            if command is not None:
                return command, True
        return tree.get_command(name), False

    def block_reason(
        self, root: Any, *, guild: discord.Guild | None, guild_scoped: bool, permissions: int
    ) -> str | None:
        """Why Discord would not deliver ``root`` here (``None`` if it would)."""
        if root is None:
            return "unknown command (not registered in the tree)"
        spec = root.to_dict(self.bot.tree)  # type: ignore[attr-defined]
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
        channel: Any,
    ) -> dict[str, Any]:
        """One option; users, roles and channels become ids with their ``resolved`` objects."""
        if isinstance(value, app_commands.Choice):
            value = value.value
        if isinstance(value, Enum):
            value = value.value
        if param is not None:
            option_type = param.type.value
        else:
            option_type = next((t for cls, t in _OPTION_TYPES_BY_PY if isinstance(value, cls)), 3)
        if option_type not in (6, 7, 8, 9, 11):
            return {"name": name, "type": option_type, "value": value}
        object_id = str(value["id"] if isinstance(value, Mapping) else getattr(value, "id", value))
        if isinstance(value, discord.Member):
            resolved.setdefault("users", {})[object_id] = user_payload(value)
            member = member_payload(value, with_user=False)
            in_guild = getattr(channel, "guild", None) is not None
            perms = channel.permissions_for(value) if in_guild else discord.Permissions.none()
            member["permissions"] = str(perms.value)
            resolved.setdefault("members", {})[object_id] = member
        elif isinstance(value, discord.abc.User):
            resolved.setdefault("users", {})[object_id] = user_payload(value)
        elif isinstance(value, discord.Role):
            resolved.setdefault("roles", {})[object_id] = role_payload(value)
        elif isinstance(value, discord.abc.GuildChannel | discord.Thread):
            resolved.setdefault("channels", {})[object_id] = channel_payload(
                value, permissions=value.permissions_for(value.guild.me).value
            )
        elif isinstance(value, Mapping) and option_type == 11:
            resolved.setdefault("attachments", {})[object_id] = dict(value)
        return {"name": name, "type": option_type, "value": object_id}

    def _options(
        self,
        command: Any,
        options: Mapping[str, Any],
        resolved: dict[str, dict[str, Any]],
        channel: Any,
        focused: str | None,
    ) -> list[dict[str, Any]]:
        params: dict[str, Any] = {}
        if isinstance(command, app_commands.Command):
            for param in command._params.values():
                params[param.name] = param
                params[param.display_name] = param
        out = []
        for key, value in options.items():
            param = params.get(key)
            if isinstance(command, app_commands.Command) and not param:
                raise ValueError(f"/{command.qualified_name} has no option {key!r}")
            api_name = param.display_name if param is not None else key
            option = self._option(api_name, value, param, resolved, channel)
            if focused is not None and key in (focused, api_name):
                option["focused"] = True
                option["value"] = value if isinstance(value, str) else str(value)
            out.append(option)
        return out

    def _command_data(
        self,
        path: str,
        options: Mapping[str, Any] | None,
        guild: discord.Guild | None,
        channel: Any,
        focused: str | None = None,
    ) -> tuple[dict[str, Any], Any, bool]:
        """The ``data`` of ``/path``, its top-level command, and whether that is guild-scoped."""
        parts = path.split()
        if not parts:
            raise ValueError("empty command name")
        root, guild_scoped = self._find_root(parts[0], guild)
        leaf = root
        for part in parts[1:]:
            leaf = leaf.get_command(part) if isinstance(leaf, app_commands.Group) else None
        resolved: dict[str, dict[str, Any]] = {}
        nested = self._options(leaf, options or {}, resolved, channel, focused)
        for depth in range(len(parts) - 1, 0, -1):
            option_type = 1 if depth == len(parts) - 1 else 2  # subcommand, then groups
            nested = [{"name": parts[depth], "type": option_type, "options": nested}]
        data: dict[str, Any] = {
            "id": str(self._command_ids.setdefault(parts[0], snowflake())),
            "name": parts[0],
            "type": 1,
            "options": nested,
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
        permissions: Permissions = None,
        gate: bool | None = None,
        locale: str = "en-US",
    ) -> InteractionResult:
        """Invoke ``/command`` (``"group sub"``: a subcommand); ``options`` by parameter name."""
        who, where, guild = self._context(user, channel, dm)
        data, root, guild_scoped = self._command_data(command, options, guild, where)
        payload = self._payload(
            2, data, user=who, channel=where, guild=guild, permissions=permissions, locale=locale
        )
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
        permissions: Permissions = None,
    ) -> InteractionResult:
        """Autocomplete option ``focused`` typed as ``value``; ``result.choices`` is the answer."""
        who, where, guild = self._context(user, channel, dm)
        all_options = {**(options or {}), focused: value}
        data, _, _ = self._command_data(command, all_options, guild, where, focused=focused)
        payload = self._payload(
            4, data, user=who, channel=where, guild=guild, permissions=permissions
        )
        return await self.dispatch(payload)

    # -- components and modals ------------------------------------------------------------------

    def _message_of(self, target: Any) -> dict[str, Any]:
        """The stored payload of a Message, id, SentMessage, RecordedCall or InteractionResult."""
        if isinstance(target, discord.Message):
            return self.env.payload_for(target)
        if isinstance(target, InteractionResult):
            message_id = target.original_message_id
            if message_id is None:
                raise ValueError("that interaction produced no message")
        elif isinstance(target, RecordedCall):
            message_id = target.message_id
        elif isinstance(target, SentMessage):
            message_id = target.message.id
        else:
            message_id = int(target)
        data = self.env.message_payload(message_id)  # type: ignore[arg-type]
        if data is None:
            raise KeyError(f"no stored message {message_id}")
        return data

    def _channel_of(self, message: Mapping[str, Any]) -> Any:
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
        permissions: Permissions = None,
        values: Sequence[str] | None = None,
    ) -> InteractionResult:
        """Click a button (or pick ``values`` in a select), found by custom_id or label."""
        data = self._message_of(message)

        def wanted(component: Mapping[str, Any]) -> bool:
            if custom_id is not None:
                return component.get("custom_id") == custom_id
            return label is not None and component.get("label") == label

        component = next(filter(wanted, walk_components(data.get("components") or [])), None)
        if component is None:
            raise LookupError(
                f"no component custom_id={custom_id!r} label={label!r} on message {data['id']};"
                f" has {custom_ids(data.get('components') or [])}"
            )
        channel = self._channel_of(data)
        who, where, guild = self._context(user, channel, False)
        inner: dict[str, Any] = {
            "custom_id": component["custom_id"],
            "component_type": component["type"],
        }
        if component["type"] != 2:
            inner["values"] = list(values or [])
        payload = self._payload(
            3, inner, user=who, channel=where, guild=guild, permissions=permissions, message=data
        )
        return await self.dispatch(payload)

    async def expire_view(self, message: Any) -> None:
        """Time out the view on ``message`` now: later clicks go unanswered, ``on_timeout`` runs."""
        data = self._message_of(message)
        view = self.state._view_store._synced_message_views.get(int(data["id"]))
        if view is None:
            raise LookupError(f"no live view on message {data['id']}")
        await self.env.run_parser(view._dispatch_timeout)

    def _modal_aliases(self, live: discord.ui.Modal | None) -> dict[str, str]:
        """Attribute name -> custom_id of the inputs of an open modal."""
        if live is None:
            return {}
        names = {
            **getattr(type(live), "__view_children_items__", {}),
            **getattr(type(live), "__modal_children_items__", {}),
        }
        aliases = {}
        for attr in names:
            item = getattr(live, attr, None)
            if getattr(item, "custom_id", None):
                aliases[attr] = item.custom_id  # type: ignore[union-attr]
        return aliases

    async def submit_modal(
        self,
        modal: RecordedModal | discord.ui.Modal | InteractionResult | str,
        values: Mapping[str, str | Sequence[str]],
        *,
        user: discord.abc.User | None = None,
        channel: Any = None,
        dm: bool = False,
        permissions: Permissions = None,
        message: Any = None,
    ) -> InteractionResult:
        """Submit a modal, ``values`` by custom_id, label or attribute (the rest sent empty)."""
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
        aliases = self._modal_aliases(live)
        remaining = dict(values)

        def submitted_input(component: Mapping[str, Any], label: str | None) -> dict[str, Any]:
            keys = [component.get("custom_id"), component.get("label"), label]
            keys += [a for a, cid in aliases.items() if cid == component.get("custom_id")]
            value: Any = next(
                (remaining.pop(k) for k in keys if k is not None and k in remaining), ""
            )
            out = {"type": component["type"], "custom_id": component["custom_id"]}
            if "id" in component:
                out["id"] = component["id"]
            if component["type"] == 4:
                out["value"] = value
            else:
                out["values"] = [value] if isinstance(value, str) and value else list(value)
            return out

        submitted: list[dict[str, Any]] = []
        for top in components:
            if top.get("type") == 1:  # an action row
                inner = [
                    submitted_input(c, None)
                    for c in top.get("components", [])
                    if c.get("custom_id")
                ]
                submitted.append({"type": 1, "components": inner})
            elif top.get("type") == 18 and top.get("component", {}).get("custom_id"):  # a label
                entry = {
                    "type": 18,
                    "component": submitted_input(top["component"], top.get("label")),
                }
                if "id" in top:
                    entry["id"] = top["id"]
                submitted.append(entry)
        if remaining:
            raise ValueError(f"modal {custom_id!r} has no inputs {sorted(remaining)}")
        from_message = self._message_of(message) if message is not None else None
        if from_message is not None and channel is None:
            channel = self._channel_of(from_message)
        who, where, guild = self._context(user, channel, dm)
        payload = self._payload(
            5,
            {"custom_id": custom_id, "components": submitted},
            user=who,
            channel=where,
            guild=guild,
            permissions=permissions,
            message=from_message,
        )
        return await self.dispatch(payload)

    async def dispatch(self, payload: dict[str, Any]) -> InteractionResult:
        """Feed a raw INTERACTION_CREATE payload; return once the tasks it started have finished."""
        if self._closed:
            raise RuntimeError("harness is closed")
        state = self.state
        channel_id = int(payload["channel"]["id"]) if payload.get("channel") else None
        channel = state.get_channel(channel_id) if channel_id else None
        result = self._recorder.expect(payload, channel)
        self.results.append(result)
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
