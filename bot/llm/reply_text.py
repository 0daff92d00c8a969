"""The reply's text: the final answer after what the model wrote beside its tool calls."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from bot.llm.leaks import strip_leaked_tool_syntax

# How much of an interim text the final must be to be dropped as its repeat.
_REPEAT_SHARE = 0.8
# Where a restated answer may start and end in the final: its start or end, a line's, or
# a sentence's (an ending comma too: "Paris, yes.").
_SENTENCE_START = r"(?:^|(?<=[.!?:;\n])|(?<=[.!?:;] ))"
_SENTENCE_END = r"(?=$|[.!?,;:\n])"


def content_text(content: object) -> str:
    """Message content as text; some servers send a list of ``{"type": "text"}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
            for part in content
        ]
        return "".join(part for part in parts if isinstance(part, str))
    return ""


def reply_text(content: str, interim: Sequence[str], tool_names: Collection[str]) -> str:
    """The cleaned final answer after the ``interim`` texts, none said twice."""
    # Some models answer beside their tool calls (as the nudge asks: answer, then update
    # the memory) and close the turn with a line or nothing.  An interim text the final
    # restates (as whole sentences) is dropped; the final is dropped when one interim text
    # covers it.  Never an answer for being short: "Monday." after "Let me check my notes
    # on Friday vs Monday." stays, and so does "No." before "I have no other notes."
    text = strip_leaked_tool_syntax(content, tool_names)
    if not text:
        return "\n\n".join(interim)
    kept = [said for said in interim if not _restates(text, said)]
    if any(_covers(said, text) for said in kept):
        # What was dropped above is inside the final, so inside the text covering it.
        return "\n\n".join(kept)
    return "\n\n".join([*kept, text])


def plain(text: str) -> str:
    """``text`` for comparing answers: case, spacing and closing punctuation aside."""
    return " ".join(text.casefold().split()).rstrip(".!?")


def _covers(said: str, final: str) -> bool:
    """Whether ``final`` is found in ``said`` at word boundaries and is most of it."""
    outer, inner = plain(said), plain(final)
    if not inner or len(inner) < _REPEAT_SHARE * len(outer):
        return False
    return re.search(rf"(?<!\w){re.escape(inner)}(?!\w)", outer) is not None


def _restates(final: str, said: str) -> bool:
    """Whether ``final`` holds all of ``said`` as whole sentences."""
    # "The capital of France is Paris. Anything else?" restates "The capital of France
    # is Paris."; "I have no other notes." does not restate "No.", nor "Paris it is." "Paris."
    inner = _squash(said).rstrip(".!? ")
    if not inner:
        return False
    pattern = rf"{_SENTENCE_START}{re.escape(inner)}{_SENTENCE_END}"
    return re.search(pattern, _squash(final)) is not None


def _squash(text: str) -> str:
    """``text`` casefolded, each run of whitespace one space or, with a line break, one."""
    text = re.sub(r"\s*\n\s*", "\n", text.casefold().strip())
    return re.sub(r"[^\S\n]+", " ", text)
