"""Replies longer than Discord allows, cut into messages that each render right."""

from __future__ import annotations

import re

import regex

DISCORD_LIMIT = 2000


_FENCE = re.compile(r"```([\w+#.-]*)")
_CLOSE_FENCE = "\n```"
# A longer "language" is a word glued to the fence, not a language: reopened without it.
_LANGUAGE_MAX = 32


def _open_fence(text: str) -> str | None:
    """The opening line (```` ``` ```` plus its language) of a code block ``text`` leaves
    open, or None when every block is closed."""
    opener: str | None = None
    for match in _FENCE.finditer(text):
        language = match.group(1) if len(match.group(1)) <= _LANGUAGE_MAX else ""
        opener = None if opener is not None else f"```{language}"
    return opener


def _grapheme_boundary(window: str) -> int:
    """The last cut in ``window`` that splits no grapheme (an emoji family, a flag, a
    letter with its accents), so a hard cut shows no broken characters."""
    cut = 0
    for match in regex.finditer(r"\X", window):
        if match.end() == len(window) and len(window) > 1:
            break  # the last cluster may continue past the window
        cut = match.end()
    return cut or len(window)


def _outside_fence_opener(text: str, cut: int) -> int:
    """``cut``, or the start of the code fence opener (```` ```lang ````) it falls in, so
    the language tag is not split between two messages."""
    for match in _FENCE.finditer(text, 0, cut + 32):
        if match.start() < cut <= match.end() and match.start() > 0:
            return match.start()
    return cut


def split_reply(text: str, limit: int = DISCORD_LIMIT) -> list[str]:
    """Split at Discord's limit, preferring paragraph, line, then word boundaries. A code
    block cut in two is closed at the end of one part and reopened (same language) at
    the start of the next, so both render as code."""
    chunks: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        budget = limit - len(_CLOSE_FENCE)
        window = rest[:budget]
        cut = max(window.rfind("\n\n"), window.rfind("\n"))
        if cut < budget // 2:
            cut = window.rfind(" ")
        if cut < budget // 2:
            cut = _grapheme_boundary(window)
        cut = _outside_fence_opener(rest, cut)
        chunk, after = rest[:cut].rstrip(), rest[cut:]
        opener = _open_fence(chunk)
        if opener is None:
            after = after.lstrip()
        else:
            # Inside code, indentation is content: drop only the line break we cut at.
            chunk += _CLOSE_FENCE
            after = f"{opener}\n{after.removeprefix(chr(10))}"
        if not chunk.strip() or len(after) >= len(rest):
            # No cut that makes progress (the reopened fence gives back what was cut):
            # a plain cut, code block or not, so every pass shortens the text.
            cut = _grapheme_boundary(window)
            chunk, after = rest[:cut], rest[cut:]
        chunks.append(chunk)
        rest = after
    if rest:
        chunks.append(rest)
    return chunks


CUT_PARTS_NOTE = "\n\n(The answer was cut here: it ran past {parts} messages.)"


def capped_parts(text: str, limit: int, max_parts: int) -> list[str]:
    """:func:`split_reply`, keeping at most ``max_parts`` parts; the last one kept says
    the answer was cut (a server gone wild must not post a thousand messages)."""
    chunks = split_reply(text, limit)
    if len(chunks) <= max_parts:
        return chunks
    note = CUT_PARTS_NOTE.format(parts=max_parts)
    last = chunks[max_parts - 1]
    if len(last) + len(note) > limit:
        last = split_reply(last, limit - len(note))[0]
    return [*chunks[: max_parts - 1], last + note]
