"""A chat request split into the parts of a Kioku prompt, counted; the llmcord-shaped
baseline; the share of a prompt kept from the previous one (benchmarks/prompt_tokens.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from bot.llm.tokens import REPLY_TOKENS, TokenCounter

COUNTER = TokenCounter.for_encoding("cl100k_base")
"""The issue's measure, whatever the model: figures compare across runs and branches."""
PARTS = ("tools", "persona", "memory", "other channels", "recall", "raw window", "notes")
# llmcord's default system prompt is a sentence or two, with the date and time added.
LLMCORD_PROMPT = (
    "You are a helpful Discord chatbot. Reply conversationally and keep it brief.\n"
    "Today's date: {date}. Current time: {time}."
)
LLMCORD_MESSAGES = 25

_FENCE = re.compile(r'<memory source="([^"]*)"[^>]*>.*?</memory>', re.DOTALL)
# Per-turn notes that carry no fence (recognised wherever they are; the rest of the first
# system message is the persona).
_NOTE_OPENING = re.compile(r"The user asked you to remember|Memory upkeep:|\(From Kioku")
_OTHER_OPENING = re.compile(r"Memory from |No memory yet from |The last \d+ messages? in ")


def note_part(text: str) -> str | None:
    """The part a note of the prompt belongs to, from its fence's ``source`` or its
    heading (None: not a note). Content, not position: the layout may move."""
    fence = _FENCE.search(text)
    source = fence[1] if fence else None
    if source == "this channel":
        return "memory"
    if source == "long-term memory":
        return "recall"
    if source in ("replied-to messages", "thread starter"):
        return "notes"
    if source is not None or _OTHER_OPENING.match(text):
        return "other channels"  # any other source is a channel's label ("#general")
    if _NOTE_OPENING.match(text):
        return "notes"
    return None


def split_content(content: str, default: str) -> list[tuple[str, str]]:
    """``content`` as (part, text) pieces: each fenced note with its heading (the lines
    before it, back to a blank line), each known note, the rest ``default``."""
    pieces: list[tuple[str, str]] = []
    done = 0
    for fence in _FENCE.finditer(content):
        start = content.rfind("\n\n", done, fence.start())
        start = done if start < 0 else start + 2
        if start > done:
            pieces.extend(_paragraphs(content[done:start], default))
        pieces.append(
            (note_part(content[start : fence.end()]) or default, content[start : fence.end()])
        )
        done = fence.end()
    pieces.extend(_paragraphs(content[done:], default))
    return [(part, text) for part, text in pieces if text.strip()]


def _paragraphs(text: str, default: str) -> Iterator[tuple[str, str]]:
    for paragraph in text.split("\n\n"):
        yield (note_part(paragraph.strip()) or default, paragraph)


def content_text(content: object) -> str:
    """The text of a message's content (its text parts, for a list of parts)."""
    if isinstance(content, list):  # content parts: images cost their fixed price in the total
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return content if isinstance(content, str) else ""


def prompt_parts(body: Mapping[str, Any]) -> dict[str, int]:
    """Tokens of a chat request by part; they add up to its :data:`COUNTER` count."""
    parts = dict.fromkeys(PARTS, 0)
    tools = body.get("tools") or []
    parts["tools"] = COUNTER.count(json.dumps(tools, ensure_ascii=False)) if tools else 0
    parts["raw window"] = REPLY_TOKENS  # the answer's opening closes the conversation
    for position, message in enumerate(body.get("messages") or []):
        role = message.get("role")
        default = "raw window" if role != "system" else "persona" if position == 0 else "notes"
        pieces = split_content(content_text(message.get("content")), default)
        counted = {part: 0 for part, _ in pieces} or {default: 0}
        for part, text in pieces:
            counted[part] += COUNTER.count(text)
        # The message's framing, and what joining its pieces adds or saves, go to its
        # largest part: each message's tokens stay exactly what the whole counts.
        whole = COUNTER.count_messages([message]) - REPLY_TOKENS
        largest = max(counted, key=lambda part: counted[part])
        counted[largest] += whole - sum(counted.values())
        for part, tokens in counted.items():
            parts[part] += tokens
    return parts


def llmcord_tokens(transcript: Sequence[dict[str, str]], now: datetime) -> int:
    """The llmcord-shaped baseline's prompt: its short system prompt and the last 25 messages."""
    system = LLMCORD_PROMPT.format(date=now.strftime("%Y-%m-%d"), time=now.strftime("%H:%M"))
    messages = [{"role": "system", "content": system}, *transcript[-LLMCORD_MESSAGES:]]
    return COUNTER.count_messages(messages)


def serialized(body: Mapping[str, Any]) -> str:
    """A request as a server reads it for its prefix cache: the tools, then each message."""
    tools = json.dumps(body.get("tools") or [], ensure_ascii=False)
    return tools + "".join(json.dumps(m, ensure_ascii=False) for m in body.get("messages") or [])


def kept_prefix(previous: str, current: str) -> float:
    """The share of ``current`` that is an exact prefix of ``previous``."""
    low, high = 0, min(len(previous), len(current))
    while low < high:  # the longest common prefix, by halving (slices compare in C)
        middle = (low + high + 1) // 2
        if previous[:middle] == current[:middle]:
            low = middle
        else:
            high = middle - 1
    return low / len(current) if current else 1.0
