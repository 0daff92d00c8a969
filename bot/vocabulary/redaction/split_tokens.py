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

from bot.vocabulary.redaction.provider_rules import RULES, RULES_BY_WORD
from bot.vocabulary.redaction.token_rules import (
    TOKEN_KEYWORDS,
    TOKEN_PATTERNS,
    may_hold_discord_token,
)
from bot.vocabulary.redaction.value_shapes import looks_like_token

# Keywords of token prefixes (3+ characters: `ghp_`, `sk-`, `xoxb`, `akia`): a text holding
# one may hold a split token.  Twilio's `SK` and Discord's dotted tokens are checked apart.
PREFIXES: Final[frozenset[str]] = frozenset(
    word
    for word in [*RULES_BY_WORD, *(w for words in TOKEN_KEYWORDS.values() for w in words)]
    if len(word) >= 3
)
_BREAK: Final = r"(?:[ \t]*\n[ \t]*|[ \t])"
_PIECE: Final = r"[A-Za-z0-9_\-.:/]"
# A head is a token-like word of 8+ characters with a digit, `_` or `-` in its first 80, or a
# short lower-case prefix and a separator (`dp.pt.`, `hvs.`); the tail is the next word.
_HEAD: Final = regex.compile(
    rf"(?<!{_PIECE})(?=[A-Za-z.:/]{{0,80}}[0-9_\-]|[a-z]{{1,12}}[._\-:])(?={_PIECE}{{8}}){_PIECE}++"
    rf"(?P<break>{_BREAK})(?P<tail>[A-Za-z0-9_\-.:/=+]{{4,}}+)"
)
_AFTER_MARKER: Final = regex.compile(
    rf"(?P<marker>\[REDACTED:[a-z_]+\])(?P<break>{_BREAK})(?P<tail>[A-Za-z0-9_\-+/=]{{8,}}+)"
    r"(?![^\s.,;:)\]}])"
)
_MIN_REST_CHARS: Final = 8
# The kinds of provider tokens (a credential's value is no split token).
TOKEN_KINDS: Final = frozenset(
    [*(kind for kind, _ in TOKEN_PATTERNS), *(rule.kind for rule in RULES), "aws_secret_key"]
)


def may_be_split(text: str, words: AbstractSet[str]) -> bool:
    """Whether ``text`` may still hold a split token; ``words`` is the scan of its original.

    Checked after the token passes: a prefix whose token was found is gone with it.
    """
    prefixes = PREFIXES.intersection(words)
    if prefixes:
        lowered = text.lower()
        if any(prefix in lowered for prefix in prefixes):
            return True
    return "SK" in text or may_hold_discord_token(text)


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
        # Only when a token's marker swallows part of the tail, the text before it unchanged.
        at = redacted.find("[REDACTED:")
        if at != -1 and joined.startswith(redacted[:at]) and TOKEN_KINDS.issuperset(found):
            rest = redacted[redacted.index("]", at) + 1 :]
            if len(rest) < len(match.group("tail")) and joined.endswith(rest):
                kinds.extend(found)
                return redacted
        return match.group()

    return _HEAD.sub(join, text)


def swallow_token_tails(text: str) -> str:
    """``text`` where a random-looking word right after a token's marker is hidden with it."""

    def swallow(match: regex.Match[str]) -> str:
        kind = match.group("marker")[len("[REDACTED:") : -1]
        tail = match.group("tail")
        if kind not in TOKEN_KINDS or len(tail) < _MIN_REST_CHARS or not looks_like_token(tail):
            return match.group()
        return match.group("marker")

    return _AFTER_MARKER.sub(swallow, text)
