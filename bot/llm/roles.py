"""Chat messages in the role order strict chat templates accept (Llama 2, Mistral, some APIs).

That order is one system message, then user and assistant alternating. Kioku's ordinary turns
break it: a system message per memory note, members' messages in a row, a history that
starts with the bot's own message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["OPENING_USER_LINE", "alternate_roles"]

OPENING_USER_LINE = "(The conversation continues.)"
"""The user message put before a conversation that would start with the assistant."""

_JOINER = "\n\n"


def alternate_roles(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` (left unmodified) merged into the strict order; nothing is dropped."""
    notes = [message for message in messages if message.get("role") == "system"]
    chat: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "system":
            continue
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
    if not all(text is None or isinstance(text, str) for text in texts):
        return None  # only text joins: parts such as images are never merged
    # The later message's fields (its tool calls) stay; the earlier text comes first.
    return {**message, "content": _joined(texts)}


def _joined(texts: Sequence[object]) -> str | None:
    """The texts that are not empty, joined by blank lines (``None`` when none is)."""
    kept = [text for text in texts if isinstance(text, str) and text]
    return _JOINER.join(kept) if kept else None
