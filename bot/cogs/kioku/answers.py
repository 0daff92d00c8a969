"""What ``/kioku`` answers: the server's access lists, persona and model, and the one-line
refusals of bad input."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

from bot.cogs.errors import plural
from bot.cogs.stm import quoted
from bot.config import Settings
from bot.conversation import server_model
from bot.vocabulary import GuildConfig

Rule = Literal["allow", "block"]
Kind = Literal["role", "user"]

# Per list: one answer must stay within Discord's 2,000 characters.
LIST_SHOWN = 20
# Per list: enough for any real server, and every turn scans them.
LIST_MAX = 100

COLUMNS: dict[tuple[Rule, Kind], str] = {
    ("allow", "role"): "allowed_role_ids",
    ("block", "role"): "blocked_role_ids",
    ("allow", "user"): "allowed_user_ids",
    ("block", "user"): "blocked_user_ids",
}
ONE_TARGET = "Name one role or one member (not both), e.g. `/kioku access allow role:@Members`."
UNKNOWN_ROLE = "I can't find that role in this server; name one of this server's roles."
EVERYONE_ROLE = (
    "@everyone can't be listed: name another role (to answer everyone, use `/kioku access clear`)."
)
BOT_USER = "That is a bot; bots never start a conversation, so it can't be listed. Name a member."
LISTS_EMPTY = "The access lists are already empty: everyone in this server is answered."
LISTS_CLEARED = "Access lists cleared: everyone in this server is answered again."
NO_PERSONA = "This server has no persona of its own; nothing to clear."
PERSONA_CLEARED = "Persona cleared: the bot uses only the operator's persona here."
NO_MODEL = "This server already uses the default model, `{model}`."
MODEL_RESET = "Model reset: this server uses the default model, `{model}`."


def mention(kind: Kind, item_id: int) -> str:
    return f"<@&{item_id}>" if kind == "role" else f"<@{item_id}>"


def shown_name(text: str, limit: int = 100) -> str:
    """An admin's text in one line of an answer: no backticks (it is shown in code), capped."""
    flat = " ".join(text.replace("`", "'").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def model_refused(name: str, allowed: Sequence[str]) -> str:
    """The answer to ``/kioku model set`` with a model the operator does not allow."""
    names = ", ".join(f"`{m}`" for m in allowed)
    return f"`{shown_name(name)}` is not a model this bot allows. Allowed: {names}."


def list_full(rule: Rule, kind: Kind) -> str:
    what = f"{'allowed' if rule == 'allow' else 'blocked'} {kind}s"
    return f"The list of {what} is full ({LIST_MAX}); remove one with `/kioku access remove` first."


def describe_change(rule: Rule | None, kind: Kind, item_id: int, config: GuildConfig) -> str:
    """The answer to ``/kioku access allow|block|remove``, from the configuration saved."""
    who = mention(kind, item_id)
    if rule == "allow":
        head = f"Allowed {who}."
    elif rule == "block":
        head = f"Blocked {who}: their messages get no reply and cost no model call."
    else:
        head = f"Removed {who} from the access lists."
    if config.access.restricted:
        return f"{head} Only allowed roles and members (and the bot's owners) are answered here."
    return f"{head} Everyone not blocked is answered here."


def _listed(ids: Collection[int], kind: Kind) -> str:
    shown = sorted(ids)[:LIST_SHOWN]
    text = ", ".join(mention(kind, i) for i in shown)
    if len(ids) > LIST_SHOWN:
        text += f" and {len(ids) - LIST_SHOWN} more"
    return text


def _rule_line(label: str, roles: Collection[int], users: Collection[int], empty: str) -> str:
    parts = []
    if roles:
        parts.append(f"{plural(len(roles), 'role')}: {_listed(roles, 'role')}")
    if users:
        parts.append(f"{plural(len(users), 'member')}: {_listed(users, 'user')}")
    return f"{label}: {'; '.join(parts) if parts else empty}"


def describe_kioku(config: GuildConfig, settings: Settings) -> list[str]:
    """The blocks of ``/kioku settings``."""
    access = config.access
    dms = "answered" if settings.access.direct_messages else "not answered"
    model = server_model(settings, config)
    model_line = f"Model: `{model}`" + (" (the default)" if model == settings.model else "")
    if config.model is not None and config.model != model:
        model_line += f" — `{shown_name(config.model)}` was chosen, but is no longer allowed"
    lines = [
        "**Kioku in this server**",
        _rule_line(
            "Allowed",
            access.allowed_roles,
            access.allowed_users,
            "everyone (no allow list)",
        ),
        _rule_line("Blocked", access.blocked_roles, access.blocked_users, "nobody"),
        "The bot's owners are always answered; a block beats an allow.",
        f"Direct messages: {dms} (the bot owner's setting)",
        model_line,
        "Models allowed: " + ", ".join(f"`{m}`" for m in settings.server_models),
    ]
    blocks = ["\n".join(lines)]
    if config.persona:
        blocks.append(f"Persona ({len(config.persona)} characters):")
        blocks.append(quoted(config.persona))
    else:
        blocks.append("Persona: none (the operator's persona only)")
    return blocks
