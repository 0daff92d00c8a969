"""Chat messages in the role order strict chat templates accept.

Many OpenAI-compatible servers render the conversation through the model's chat
template, and the templates of Llama 2 and Mistral (on vLLM, llama.cpp, LM
Studio, LocalAI), like some hosted APIs (Perplexity, DeepSeek's reasoner, Mistral's),
refuse a conversation whose roles do not alternate user/assistant after one optional
system message: "Conversation roles must alternate user/assistant/user/assistant/...".
Kioku's requests break that rule in ordinary turns: the persona and each memory note are
system messages of their own, members' messages in a row are user messages in a row, the
history may start with the bot's own message, and a turn that loses its tools keeps the
texts written beside the tool calls as assistant messages in a row.

:func:`alternate_roles` rewrites such a list for a provider that needs it (see
``strict_roles`` in :mod:`bot.vocabulary.providers`); the one place requests are sent applies
it (:func:`bot.llm.client.chat_completion`). Nothing is dropped: notes keep their labels
and ``<memory>`` fences (they stay data, fenced), and each member's ``Name: text`` line
stays as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["OPENING_USER_LINE", "alternate_roles"]

OPENING_USER_LINE = "(The conversation continues.)"
"""The user message put before a conversation that would start with the assistant."""

_JOINER = "\n\n"


def alternate_roles(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` in the order strict chat templates accept; the input is not modified.

    * Every system message is folded into one leading system message, their texts joined
      by blank lines in their order.
    * Consecutive user messages become one, and so do consecutive assistant messages,
      their texts joined by blank lines; text written before an assistant message that
      calls tools joins that message. An assistant message calling tools followed by its
      ``tool`` results is a valid sequence and stays as it is.
    * A conversation that would start with an assistant (or tool) message starts with
      :data:`OPENING_USER_LINE` as a user message.

    Only text is joined: a message whose content is not a string (or ``None``) is never
    merged, so parts such as images are not lost.
    """
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
        return None
    # The later message's fields (its tool calls) stay; the earlier text comes first.
    return {**message, "content": _joined(texts)}


def _joined(texts: Sequence[object]) -> str | None:
    """The texts that are not empty, joined by blank lines (``None`` when none is)."""
    kept = [text for text in texts if isinstance(text, str) and text]
    return _JOINER.join(kept) if kept else None
