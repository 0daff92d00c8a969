"""The lines of ``/stm history``: one per audit event, a write's two rows on one line."""

from __future__ import annotations

from collections.abc import Sequence

import discord

from bot.cogs.stm.answers import ORIGINS
from bot.vocabulary import AuditEvent

# What each kind of audit event (`AuditEvent.event`) is called.
EVENTS = {
    "update": "Memory updated",
    "refresh": "Wiped (/refresh)",
    "forget": "Forgotten (/forget-me)",
    "expire": "Expired",
    "settings": "Settings changed",
    "categories": "Categories changed",
}


def describe_events(events: Sequence[AuditEvent]) -> list[str]:
    """The lines of ``/stm history``: a write's channel memory and member's copy on one."""
    lines: list[str] = []
    index = 0
    while index < len(events):
        pair = _pair(events[index], events[index + 1]) if index + 1 < len(events) else None
        if pair is not None:
            lines.append(describe_event(*pair))
            index += 2
        else:
            lines.append(describe_event(events[index]))
            index += 1
    return lines


def describe_event(event: AuditEvent, copy: AuditEvent | None = None) -> str:
    """One line: ``event``, with ``copy``, the member's copy written with it, if any."""
    head = f"**{EVENTS.get(event.event, event.event)}**"
    author = _event_author(event)
    if event.event == "update" and author:
        head, author = f"{head} {author}", None
    parts = [head]
    scope = _scope(event)
    if copy is not None and scope:
        copy_scope = _scope(copy)
        if _chars(event) == _chars(copy):
            scope = f"{scope} and {copy_scope}"
        else:
            scope = f"{scope} ({_chars(event)}) and {copy_scope} ({_chars(copy)})"
    if scope:
        parts.append(scope)
    if event.channel_id:
        parts.append(f"<#{event.channel_id}>")
    parts.append(discord.utils.format_dt(event.created_at, "R"))
    chars = _chars(event)
    if chars and (copy is None or _chars(copy) == chars):
        parts.append(chars)
    if author:
        parts.append(author)
    return "• " + " · ".join(parts)


def _pair(first: AuditEvent, second: AuditEvent) -> tuple[AuditEvent, AuditEvent] | None:
    """(channel memory, member's copy) when the two are the rows of one write."""
    # An update stores the channel's memory and the copy of the member it answered together.
    if first.event != "update" or second.event != "update":
        return None
    same = ("channel_id", "origin", "actor_user_id", "message_id", "created_at")
    if any(getattr(first, name) != getattr(second, name) for name in same):
        return None
    kinds = (first.scope_kind, second.scope_kind)
    if kinds == ("server", "user"):
        return first, second
    if kinds == ("user", "server"):
        return second, first
    return None


def _event_author(event: AuditEvent) -> str | None:
    """Who made an update (the origin, with the member it was for), or who acted."""
    actor = f"<@{event.actor_user_id}>" if event.actor_user_id else None
    if event.event != "update" or not event.origin:
        return f"by {actor}" if actor else None
    who = ORIGINS.get(event.origin, event.origin)
    if actor is None:
        return f"by {who}"
    if event.origin == "model_tool":
        return f"by {who}, answering {actor}"
    return f"by {who} ({actor})"


def _chars(event: AuditEvent) -> str | None:
    if event.chars_before is None and event.chars_after is None:
        return None
    return f"{event.chars_before or 0} → {event.chars_after or 0} chars"


def _scope(event: AuditEvent) -> str | None:
    if event.scope_kind == "server":
        return "channel memory"
    if event.scope_kind == "user":
        return f"<@{event.user_id}>'s copy" if event.user_id else "a member's copy"
    if event.event == "refresh":
        return "channel memory and every copy"
    if event.event == "forget" and event.channel_id:
        return "what a member's messages made of it"  # never whose
    if event.event == "expire" and event.channel_id:
        return "memories left unused for the retention period"
    return None
