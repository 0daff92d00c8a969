"""The token alphabet, the ``[REDACTED:<kind>]`` marker, and cutting text between tokens."""

from __future__ import annotations

from typing import Final

import regex

MARKER_PREFIX: Final = "[REDACTED:"
MARKER: Final = regex.compile(r"\[REDACTED:[a-z_]+\]")

# Characters of token-like words.  A token pattern never starts right after one (so
# `task-management` yields no `sk-` key) and swallows those after the secret, so a match
# is always a whole word: redaction is then idempotent and never leaves half a token.
WORD_CHARS: Final = r"A-Za-z0-9_.\-"
WORD_START: Final = rf"(?<![{WORD_CHARS}])"
WORD_TAIL: Final = rf"[{WORD_CHARS}]*"
B64URL: Final = r"A-Za-z0-9_\-"
# The bearer-token alphabet, a superset of every token pattern's: text is only ever cut
# next to a character outside it, so no cut splits a token.
TOKEN_CHARS: Final = r"A-Za-z0-9._~+/=\-"
_TOKEN_CHAR: Final = regex.compile(rf"[{TOKEN_CHARS}]")
_LAST_NON_TOKEN_CHAR: Final = regex.compile(rf"(?r)[^{TOKEN_CHARS}]")


def marker(kind: str) -> str:
    """The marker that replaces a secret of ``kind``."""
    return f"{MARKER_PREFIX}{kind}]"


def cut_safely(text: str, bound: int) -> str:
    """Return a head of ``text`` of at most ``bound`` code points that splits no token."""
    # Half a token may no longer match its pattern (`sk-abc` is too short to be a key),
    # so the word straddling `bound` is dropped.  Secrets that span other characters are
    # safe: unclosed regions and quotes run to the end, and `cut=True` redacts a value or
    # URL userinfo that runs into the cut.
    if not _TOKEN_CHAR.match(text, bound - 1) or not _TOKEN_CHAR.match(text, bound):
        return text[:bound]
    boundary = _LAST_NON_TOKEN_CHAR.search(text, 0, bound)
    return text[: boundary.end()] if boundary else ""
