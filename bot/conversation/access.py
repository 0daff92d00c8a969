"""Whether a message may start a turn: the bot's owners, the DM switch and a server's
allow and block lists (``/kioku access``), decided before any model call."""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from bot.vocabulary import GuildAccess

Refusal = Literal[
    "direct_messages_off", "blocked_user", "blocked_role", "not_allowed", "blocked_in_server"
]


def refusal(
    access: GuildAccess | None,
    *,
    user_id: int,
    role_ids: Collection[int],
    owner: bool,
    direct_messages: bool,
) -> Refusal | None:
    """Why the message of ``user_id`` (holding ``role_ids``) gets no turn, or None to answer
    it. ``access``: the server's lists, None in a DM. The bot's owners always pass; a block
    (of the user or of one of their roles) beats any allow; with an allow list, only the
    users on it and the holders of its roles pass."""
    if owner:
        return None
    if access is None:
        return None if direct_messages else "direct_messages_off"
    if user_id in access.blocked_users:
        return "blocked_user"
    if not access.blocked_roles.isdisjoint(role_ids):
        return "blocked_role"
    if (
        access.restricted
        and user_id not in access.allowed_users
        and access.allowed_roles.isdisjoint(role_ids)
    ):
        return "not_allowed"
    return None
