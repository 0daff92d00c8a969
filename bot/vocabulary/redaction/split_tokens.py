"""Tokens split across a line break or a space (`ghp_abc…` + newline + `…xyz`)."""

# Chat clients wrap long tokens and people paste them in two pieces.  Two cases:
# - the head alone is too short for its pattern: the head and the next word are joined and
#   checked as one word;
# - the head alone was already a token: a random-looking word right after its marker is
#   the rest of it.

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Final

import regex

from bot.vocabulary.redaction.provider_rules import RULES_BY_WORD
from bot.vocabulary.redaction.token_rules import TOKEN_KEYWORDS
from bot.vocabulary.redaction.value_shapes import looks_like_token

# Token prefixes distinctive enough to try a join: 3+ characters, one of them not a letter
# (`ghp_`, `sk-`, `xoxb`), so ordinary words never start one.
PREFIXES: Final[frozenset[str]] = frozenset(
    word
    for word in [*RULES_BY_WORD, *(w for words in TOKEN_KEYWORDS.values() for w in words)]
    if len(word) >= 3 and not word.isalpha() and "/" not in word
)
_BREAK: Final = r"(?:[ \t]*\n[ \t]*|[ \t])"
_PIECE: Final = r"[A-Za-z0-9_\-]"
_PREFIX: Final = "|".join(map(regex.escape, sorted(PREFIXES, key=len, reverse=True)))
_HEAD: Final = regex.compile(
    rf"(?<![A-Za-z0-9_\-.])(?i:{_PREFIX})"
    rf"{_PIECE}*+(?P<break>{_BREAK})(?P<tail>{_PIECE}{{4,}}+)"
)
_AFTER_MARKER: Final = regex.compile(
    rf"(?P<marker>\[REDACTED:[a-z_]+\])(?P<break>{_BREAK})(?P<tail>[A-Za-z0-9_\-+/=]{{8,}}+)"
    r"(?![^\s.,;:)\]}])"
)
_MIN_REST_CHARS: Final = 8
_NOT_TOKEN_KINDS: Final = frozenset({"private", "private_key", "credential", "url_credentials"})


def may_be_split(words: AbstractSet[str]) -> bool:
    """Whether a text holding ``words`` (its keyword scan) may hold a split token."""
    return not words.isdisjoint(PREFIXES)


def join_split_tokens(
    text: str, redact_word: Callable[[str], tuple[str, list[str]]], kinds: list[str]
) -> str:
    """``text`` with tokens split by a break redacted whole (their kinds added to ``kinds``).

    ``redact_word`` returns a word redacted and the kinds of its redactions.
    """

    def join(match: regex.Match[str]) -> str:
        head = match.group()[: match.start("break") - match.start()]
        joined = head + match.group("tail")
        redacted, found = redact_word(joined)
        # Only when the joined token's marker swallows part of the tail.
        if redacted.startswith("[REDACTED:"):
            rest = redacted[redacted.index("]") + 1 :]
            if len(rest) < len(match.group("tail")) and joined.endswith(rest):
                kinds.extend(found)
                return redacted
        return match.group()

    text = _HEAD.sub(join, text)

    def swallow(match: regex.Match[str]) -> str:
        kind = match.group("marker")[len("[REDACTED:") : -1]
        tail = match.group("tail")
        if kind in _NOT_TOKEN_KINDS or len(tail) < _MIN_REST_CHARS or not looks_like_token(tail):
            return match.group()
        return match.group("marker")

    if "[REDACTED:" in text:
        text = _AFTER_MARKER.sub(swallow, text)
    return text
