"""Whether a fact the user asks to remember restates a stored one, which it then replaces."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from bot.vocabulary import STOP_WORDS

__all__ = ["is_near_duplicate", "normalized_tokens", "replacement"]

# Erring either way costs the user: a false match overwrites a fact they still want (so
# restating part of a fact must not overwrite the rest), a missed one keeps two versions.
JACCARD_THRESHOLD = 0.8
SUBJECT_MAX_VALUE_WORDS = 6

_TOKEN = re.compile(r"\w+", re.UNICODE)
# Spelling variants that should not make two statements of one fact look different.
_CANONICAL = {"named": "called", "favourite": "favorite", "colour": "color"}
_CONTRACTIONS = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"\bcan't\b", "can not"),
        (r"\bwon't\b", "will not"),
        (r"n't\b", " not"),
        (r"\bi'm\b", "i am"),
        (r"'re\b", " are"),
        (r"'ve\b", " have"),
        (r"'ll\b", " will"),
        (r"'d\b", " would"),
    )
)
# Words whose presence or absence alone does not make another fact ("The user's cat…"
# is "User's cat…"); anything else that differs does, pronouns and directions included
# ("she works at…" and "he works at…" are about two people).
_NOT_FILLER_TEXT = """
    i me my myself we our ours you your yours yourself he him his she her hers it its
    they them their theirs this that these those who whom
    before after on off over under in out up down
"""
_NOT_FILLER = frozenset(_NOT_FILLER_TEXT.split())
_FILLER = (STOP_WORDS | {"user", "users", "s", "also", "really", "still"}) - _NOT_FILLER
# Words that bind a subject to its value: "<subject> is/are/called <value>".
_BINDERS = frozenset({"is", "are", "am", "was", "were", "called"})
# Subjects that hold one name, number or date at a time: a new value replaces the old one.
# Not job or address: "my job is boring" / "my job is remote" are two facts.
_SINGLE_VALUED = frozenset(
    {
        "name",
        "names",
        "nickname",
        "username",
        "handle",
        "pronouns",
        "birthday",
        "birthdate",
        "age",
        "favorite",
        "timezone",
        "tz",
        "email",
        "phone",
    }
)
# Words that start another statement: an extension holding one is more than a longer
# value ("my name is Ann" / "my name is Ann and I like cats").
_CLAUSE_WORDS = _BINDERS | _NOT_FILLER | {"and", "but", "or", "because", "so", "with"}
# What separates two statements between two words ("my age is 34, vegan since 2019"). A dot
# or colon only before a space ("ann@x.com", "10:30"), a hyphen only between spaces
# ("Ann-Marie"); "UTC+2" and "she/her" are one value.
_STATEMENT_SEPARATOR = re.compile(r"[,;!?()\[\]{}|&\u2014\u2013\u2026\n]|[.:]\s|\s-\s")


def normalized_tokens(text: str) -> list[str]:
    """``text`` as case-folded words, contractions spelt out, a few spellings made canonical."""
    return _words(text)[0]


def _words(text: str) -> tuple[list[str], list[bool]]:
    """:func:`normalized_tokens`, and for each word whether a statement separator precedes it."""
    folded = text.casefold().replace("\u2019", "'")
    for pattern, replacement in _CONTRACTIONS:
        folded = pattern.sub(replacement, folded)
    words: list[str] = []
    separated: list[bool] = []
    end = 0
    for match in _TOKEN.finditer(folded):
        words.append(_CANONICAL.get(match.group(), match.group()))
        gap = folded[end : match.start()] if end else ""  # none before the first word
        separated.append(_STATEMENT_SEPARATOR.search(gap) is not None)
        end = match.end()
    return words, separated


def _jaccard(a: Sequence[str], b: Sequence[str]) -> float:
    left, right = set(a), set(b)
    return len(left & right) / len(left | right)


def _same_subject_new_value(
    a: Sequence[str], b: Sequence[str], separated_a: Sequence[bool], separated_b: Sequence[bool]
) -> bool:
    """Whether both say "<subject> is <value>" with the same subject and a short new value
    that replaces the old one: a name ("called …") or a single-valued subject's value."""
    prefix = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        prefix += 1
    rest_a, rest_b = a[prefix:], b[prefix:]
    if prefix < 2 or (not rest_a and not rest_b):
        return False
    if max(len(rest_a), len(rest_b)) > SUBJECT_MAX_VALUE_WORDS:
        return False
    shared = a[:prefix]
    binder = next((i for i, word in enumerate(shared) if i > 0 and word in _BINDERS), None)
    if binder is None:
        return False
    subject = shared[:binder]
    names_a_value = "called" in shared[binder:] or any(word in _SINGLE_VALUED for word in subject)
    if rest_a and rest_b:
        return names_a_value
    # One value extends the other ("UTC" / "UTC+2"): the same value restated, unless the
    # extra words start another statement ("…and I like cats", "34, vegan since 2019").
    extra = rest_a or rest_b
    separated = (separated_a if rest_a else separated_b)[prefix:]
    has_value = binder + 1 < prefix
    return (
        names_a_value
        and has_value
        and not any(word in _CLAUSE_WORDS for word in extra)
        and not any(separated)
    )


def is_near_duplicate(new: str, old: str) -> bool:
    """Whether remembering ``new`` should replace ``old`` rather than add a fact."""
    return replacement(new, old) is not None


def replacement(new: str, old: str) -> Literal["restates", "supersedes"] | None:
    """How ``new`` replaces ``old``: it says the same (``restates``), gives a subject a new
    value (``supersedes``: "my name is Ann" after "my name is Anna"), or not at all."""
    (a, separated_a), (b, separated_b) = _words(new), _words(old)
    if not a or not b:  # no words at all (emoji only): only the same text is a duplicate
        same = " ".join(new.casefold().split()) == " ".join(old.casefold().split())
        return "restates" if same else None
    # The same words, those that differ all filler: one differing word that carries meaning
    # (cat / dog, Tom / Ben, 2 / 3) makes two facts.
    if _jaccard(a, b) >= JACCARD_THRESHOLD and set(a) ^ set(b) <= _FILLER:
        return "restates"
    return "supersedes" if _same_subject_new_value(a, b, separated_a, separated_b) else None
