"""The gatherer (seed 000): the raw messages a memory does not cover yet.

A memory's marker names the last Discord message its text covers, with a sha256 of that
message's author id and content. Everything newer than the marker is new material for
the prompt (as raw history) and for the summarizer (as ``Name: text`` lines). Discord
snowflakes are time-ordered, so "newer" is a plain comparison of message ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from bot.vocabulary import Marker, RawMessage

DEFAULT_MAX_TURNS_TO_PULL = 20


def messages_after_marker(window: Sequence[RawMessage], marker: Marker | None) -> list[RawMessage]:
    """The messages of ``window`` (oldest first) that the marker does not cover.

    With no marker, every message. Otherwise the messages whose id is greater than the
    marker's, plus the marker's own message when it was edited after it was summarised
    (its content no longer matches the marker's hash). Order is preserved.
    """
    if marker is None:
        return list(window)
    marker_id = marker.message_id
    return [
        message
        for message in window
        if message.message_id > marker_id
        or (message.message_id == marker_id and _edited_since(message, marker))
    ]


def _edited_since(message: RawMessage, marker: Marker) -> bool:
    return message.content_hash() != marker.content_hash


def count_new_messages(window: Sequence[RawMessage], marker: Marker | None) -> int:
    """How many messages of ``window`` the marker does not cover (for the nudge)."""
    return len(messages_after_marker(window, marker))


def gather_new_messages(
    window: Sequence[RawMessage],
    marker: Marker | None,
    max_turns_to_pull: int = DEFAULT_MAX_TURNS_TO_PULL,
) -> str:
    """The new material for the summarizer: ``Name: text`` lines joined by newlines.

    At most the newest ``max_turns_to_pull`` messages after the marker, oldest first;
    an empty string when nothing is new (or ``max_turns_to_pull`` is 0).
    """
    if max_turns_to_pull < 0:
        raise ValueError(f"max_turns_to_pull must be >= 0, got {max_turns_to_pull}")
    new = messages_after_marker(window, marker)
    if not new or max_turns_to_pull == 0:
        return ""
    return "\n".join(message.line() for message in new[-max_turns_to_pull:])


def day_header(moment: datetime) -> str:
    """The line that opens a day in a dated transcript: ``--- 2026-11-27 (Friday) ---``."""
    return f"--- {moment.strftime('%Y-%m-%d (%A)')} ---"


def dated_lines(messages: Sequence[RawMessage]) -> list[str]:
    """Each message as ``HH:MM Name: text`` (UTC), a day header before each new day's first.

    The summarizer reads these, so that "yesterday" and "last Friday" can be resolved to
    dates; one string per message, its header included."""
    lines: list[str] = []
    day = None
    for message in messages:
        moment = message.created_at.astimezone(UTC)
        line = f"{moment.strftime('%H:%M')} {message.line()}"
        if moment.date() != day:
            day = moment.date()
            line = f"{day_header(moment)}\n{line}"
        lines.append(line)
    return lines
