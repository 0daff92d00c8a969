"""Who may run which command (one decorator hides a command *and* enforces it), and
the option values a command accepts.

``default_permissions`` only tells Discord whom to show a top-level command to (admins
can change it, and it is ignored on subcommands), so every decorator here also adds a
runtime ``app_commands.check``. The bot's owners (``bot.owner_ids``, filled from
``settings.owner_ids``) pass every permission check, though a guild-only command still
needs a guild.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import discord
from discord import app_commands

T = TypeVar("T")

MANAGE_MESSAGES = "Manage Messages"
MANAGE_SERVER = "Manage Server"


class MissingMemoryPermission(app_commands.CheckFailure):
    """The user lacks the permission a memory command needs; the message names it."""

    def __init__(self, permission: str) -> None:
        self.permission = permission
        super().__init__(
            f"You need the **{permission}** permission to use this command "
            "(or ask someone who has it)."
        )


def is_bot_owner(interaction: discord.Interaction[Any]) -> bool:
    """Whether the user is one of the bot's operators."""
    client = interaction.client
    owners: set[int] = set(getattr(client, "owner_ids", None) or ())
    owner_id = getattr(client, "owner_id", None)
    if owner_id is not None:
        owners.add(owner_id)
    return interaction.user.id in owners


def _permission_check(
    flag: str, label: str, *, dm_allowed: bool
) -> Callable[[discord.Interaction[Any]], bool]:
    def predicate(interaction: discord.Interaction[Any]) -> bool:
        if interaction.guild_id is None:
            # In a DM the only memory at stake is the user's own.
            if dm_allowed:
                return True
            raise app_commands.NoPrivateMessage()
        if is_bot_owner(interaction):
            return True
        permissions = interaction.permissions
        if permissions.administrator or getattr(permissions, flag):
            return True
        raise MissingMemoryPermission(label)

    return predicate


def _memory_permission(flag: str, label: str, *, dm_allowed: bool) -> Callable[[T], T]:
    visible_to = app_commands.default_permissions(**{flag: True})
    enforce = app_commands.check(_permission_check(flag, label, dm_allowed=dm_allowed))

    def decorator(func: T) -> T:
        func = enforce(visible_to(func))
        if not dm_allowed:
            func = app_commands.guild_only()(func)
        return func

    return decorator


def moderator_only(*, dm_allowed: bool = False) -> Callable[[T], T]:
    """Manage Messages in a guild. ``dm_allowed``: in a DM the user may run it (their own
    conversation); otherwise the command is guild-only."""
    return _memory_permission("manage_messages", MANAGE_MESSAGES, dm_allowed=dm_allowed)


def admin_only() -> Callable[[T], T]:
    """Manage Server, guild-only."""
    return _memory_permission("manage_guild", MANAGE_SERVER, dm_allowed=False)


_admin_check = _permission_check("manage_guild", MANAGE_SERVER, dm_allowed=False)


def require_admin(interaction: discord.Interaction[Any]) -> None:
    """The runtime check of :func:`admin_only`, for a form or a button a command left
    open: Manage Server may be taken away before it is used, so its submit or click is
    checked again. Raises :class:`MissingMemoryPermission` (or ``NoPrivateMessage``)."""
    _admin_check(interaction)


class IntRange(app_commands.Transformer):
    """An integer option Discord bounds in its UI and the bot re-checks, so an
    out-of-range value (an outdated client, a hand-made request) is refused with a
    clear message instead of being stored. (``app_commands.Range`` only does the first.)"""

    def __init__(self, low: int, high: int) -> None:
        self.low = low
        self.high = high

    @property
    def type(self) -> discord.AppCommandOptionType:
        return discord.AppCommandOptionType.integer

    @property
    def min_value(self) -> int:
        return self.low

    @property
    def max_value(self) -> int:
        return self.high

    async def transform(self, interaction: discord.Interaction[Any], value: Any, /) -> int:
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or not (self.low <= value <= self.high)
        ):
            raise app_commands.TransformerError(value, self.type, self)
        return value
