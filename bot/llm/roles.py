"""Chat messages in the role order strict chat templates accept (Llama 2, Mistral, some APIs).

That order is one system message, then user and assistant alternating. Kioku's ordinary turns
break it: a system message per memory note, members' messages in a row, a history that
starts with the bot's own message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["LATE_NOTE_LINE", "OPENING_USER_LINE", "alternate_roles"]

OPENING_USER_LINE = "(The conversation continues.)"
"""The user message put before a conversation that would start with the assistant."""
LATE_NOTE_LINE = "(A note from Kioku, not from the user:)"
"""What opens a system note of the conversation's end once it joins a user message."""

_JOINER = "\n\n"


def alternate_roles(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` (left unmodified) merged into the strict order; nothing is dropped.

    The system messages before the conversation become the one system message; those
    within it (a turn's own notes, placed late for a prompt cache) join the user message
    beside them, so the system message stays the same from turn to turn.
    """
    notes: list[Mapping[str, Any]] = []
    chat: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "system":
            if not chat:
                notes.append(message)
                continue
            message = {"role": "user", "content": _joined([LATE_NOTE_LINE, message.get("content")])}
        merged = _merged(chat[-1], message) if chat else None
        if merged is not None:
            chat[-1] = merged
        else:
            chat.append(dict(message))
    if chat and chat[0].get("role") != "user":
        chat.insert(0, {"role": "user", "content": OPENING_USER_LINE})
    if not notes:
        return chat
    leading = dict(notes[0])
    if len(notes) > 1:
        leading["content"] = _joined([note.get("content") for note in notes])
    return [leading, *chat]


def _merged(previous: Mapping[str, Any], message: Mapping[str, Any]) -> dict[str, Any] | None:
    """``previous`` and ``message`` as one message, or ``None`` when they stay apart."""
    role = message.get("role")
    if role not in ("user", "assistant") or previous.get("role") != role:
        return None
    if previous.get("tool_calls"):
        return None  # its tool results must follow it: nothing joins it from behind
    texts = [previous.get("content"), message.get("content")]
    if all(text is None or isinstance(text, str) for text in texts):
        # The later message's fields (its tool calls) stay; the earlier text comes first.
        return {**message, "content": _joined(texts)}
    if role != "user":
        return None  # only user messages carry parts (images)
    # A message with image parts: both become parts, the texts joined, images in order.
    return {**message, "content": _joined_parts([_as_parts(text) for text in texts])}


def _as_parts(content: object) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [dict(part) for part in content]
    return [{"type": "text", "text": content}] if isinstance(content, str) and content else []


def _joined_parts(groups: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The parts of ``groups`` in order, consecutive text parts joined by blank lines."""
    joined: list[dict[str, Any]] = []
    for part in (part for group in groups for part in group):
        if part.get("type") == "text" and joined and joined[-1].get("type") == "text":
            joined[-1] = {"type": "text", "text": _JOINER.join([joined[-1]["text"], part["text"]])}
        else:
            joined.append(part)
    return joined


def _joined(texts: Sequence[object]) -> str | None:
    """The texts that are not empty, joined by blank lines (``None`` when none is)."""
    kept = [text for text in texts if isinstance(text, str) and text]
    return _JOINER.join(kept) if kept else None
