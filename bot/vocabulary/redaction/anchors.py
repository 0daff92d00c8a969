"""Running a pattern only where its key word is, found by a fast literal scan."""

# The regex engine scans for a literal prefix at memchr speed but tries a pattern that
# starts with a look-behind or a character class at every position (~10 ns a character).
# A finder is a literal-first pattern over the lower-cased text; the real pattern is then
# only tried next to what it finds.

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import regex

# What may stand between a key word and where a pattern's match starts (`"password"`,
# `**Token**`): see context_rules' `_KEY_END`.
_KEY_END_CHARS: Final = "\"'*_`"
_MAX_KEY_END: Final = 3


def finders(words: dict[str, str], follow: str = "") -> dict[str, regex.Pattern[str]]:
    """A literal-first finder per keyword: ``words`` maps each to the word pattern it stands
    for (``"pass"`` -> ``pass(?:word|wd)?``), matched when ``follow`` comes next.

    ``follow`` (a pattern over lower-cased text) is checked by the engine, so a word the
    pattern cannot start next to costs no Python call.
    """
    return {word: regex.compile(rf"{pattern}(?={follow})") for word, pattern in words.items()}


def anchored_matches(
    pattern: regex.Pattern[str],
    text: str,
    lowered: str,
    word_finders: Iterable[regex.Pattern[str]],
    *,
    at_word_start: bool = False,
) -> list[regex.Match[str]]:
    """``pattern``'s matches in ``text`` that start at a found word or just after it.

    ``lowered`` is ``text.lower()``; ``at_word_start``: the match starts at the word itself
    (else after it and up to three quote or emphasis characters).  In text order, not
    overlapping.
    """
    if len(lowered) != len(text) or "\u017f" in lowered:
        # Positions differ (`İ` lowers to two code points), or the engine reads a long s as
        # `s` where lower() does not: scan the slow way.
        return list(pattern.finditer(text))
    found: dict[int, regex.Match[str]] = {}
    for finder in word_finders:
        for word in finder.finditer(lowered):
            if at_word_start:
                match = pattern.match(text, word.start())
            else:
                match = _match_after(pattern, text, word.end())
            if match is not None:
                found.setdefault(match.start(), match)
    matches: list[regex.Match[str]] = []
    for start in sorted(found):
        if not matches or start >= matches[-1].end():
            matches.append(found[start])
    return matches


def _match_after(pattern: regex.Pattern[str], text: str, pos: int) -> regex.Match[str] | None:
    """``pattern`` matched at ``pos`` or after up to three key-end characters there."""
    for offset in range(_MAX_KEY_END + 1):
        match = pattern.match(text, pos + offset)
        if match is not None:
            return match
        if pos + offset >= len(text) or text[pos + offset] not in _KEY_END_CHARS:
            return None
    return None
