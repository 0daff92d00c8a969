"""Which words a long-term memory search looks for; the repository only turns them into SQL."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import regex

__all__ = [
    "MAX_QUERY_WORDS",
    "MAX_WORD_CHARS",
    "STOP_WORDS",
    "SearchWords",
    "WordGroup",
    "is_non_latin",
    "query_words",
    "search_terms",
    "word_groups",
]

MAX_QUERY_WORDS = 32
MAX_WORD_CHARS = 64

# Words too common to say anything about which fact is relevant (the index keeps them;
# only queries drop them).
_STOP_WORDS_TEXT = """
    a about after again all am an and any are as at be been before being but by can could
    did didn do does doesn doing don for from had has have having he her here hers him his
    how i if in into is isn it its just ll me more most my myself no not now of off on once
    only or other our ours out over own please re remember same she should so some such
    than that the their theirs them then there these they this those through to too under
    until up ve very was wasn we were what when where which while who whom why will with
    would you your yours yourself
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_WORD = re.compile(r"\w+", re.UNICODE)  # word characters only: nothing can act as query syntax
# Scripts written without spaces: PostgreSQL takes a whole run for one word ("猫" is no word
# of "私の猫の名前はミソです"), so one such character can be a word on its own.
_UNSPACED = regex.compile(
    r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}\p{Tibetan}]"
)
# A word holding a letter of another script than Latin is also matched as a substring.
_NON_LATIN = regex.compile(r"[^\p{Latin}\p{N}\p{M}_]")


def query_words(text: str) -> list[str]:
    """The last :data:`MAX_QUERY_WORDS` searchable words of ``text``, plus simple singulars."""
    keywords: list[str] = []
    # lower(), not casefold(): PostgreSQL's to_tsvector lowers "ß" and "ς" as they are,
    # where casefold() would make "ss" and "σ", and such words would never match.
    for raw in _WORD.findall(text.lower()):
        word = raw.strip("_")[:MAX_WORD_CHARS]
        if not word or word in STOP_WORDS or (len(word) < 2 and not _UNSPACED.match(word)):
            continue
        if word in keywords:
            keywords.remove(word)  # kept at its last place, so the end of the text wins
        keywords.append(word)
    words: list[str] = []
    # The last words: a long message usually ends with what it asks.
    for word in keywords[-MAX_QUERY_WORDS:]:
        forms = [word]
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            forms.append(word[:-1])
        words.extend(form for form in forms if form not in words)
    return words


def word_groups(words: Sequence[str]) -> list[list[str]]:
    """``words`` grouped per query word, with all its forms (``cats`` and ``cat`` are one)."""
    groups: list[list[str]] = []
    for word in words:
        forms = search_terms([word])
        same = next((group for group in groups if set(group) & set(forms)), None)
        if same is None:
            groups.append(forms)
        else:
            same.extend(form for form in forms if form not in same)
    return groups


def search_terms(words: Sequence[str]) -> list[str]:
    """``words`` with the other number of simple English nouns added (``city`` → ``cities``)."""
    # The "simple" text search configuration does not stem; an added form is the word's own
    # letters plus an ASCII suffix, still a plain word.
    terms: list[str] = []
    for word in words:
        forms = [word]
        if word.isascii() and word.isalpha():
            if len(word) > 4 and word.endswith("ies"):
                forms.append(word[:-3] + "y")
            elif len(word) > 4 and word.endswith(("sses", "xes", "zes", "ches", "shes", "oes")):
                forms.append(word[:-2])
            if word.endswith(("ss", "x", "z", "ch", "sh")):
                forms.append(word + "es")
            elif word.endswith("o"):  # "tomato" → "tomatoes", "photo" → "photos"
                forms.extend((word + "s", word + "es"))
            elif len(word) > 2 and word.endswith("y") and word[-2] not in "aeiou":
                forms.append(word[:-1] + "ies")
            elif not word.endswith("s"):  # a word ending in "s" is taken as a plural
                forms.append(word + "s")
        terms.extend(form for form in forms if form not in terms)
    return terms


def is_non_latin(word: str) -> bool:
    """Whether ``word`` holds a letter of a script other than Latin (CJK, Cyrillic, Greek…)."""
    return _NON_LATIN.search(word) is not None


@dataclass(frozen=True, slots=True)
class WordGroup:
    """One query word with every form it is searched in; a fact holding a form holds the word."""

    forms: tuple[str, ...]

    @property
    def substrings(self) -> tuple[str, ...]:
        """The forms in another script than Latin, also matched as substrings of a fact."""
        return tuple(form for form in self.forms if is_non_latin(form))

    @property
    def latin(self) -> tuple[str, ...]:
        """The other forms: matched as whole words only."""
        return tuple(form for form in self.forms if not is_non_latin(form))


@dataclass(frozen=True, slots=True)
class SearchWords:
    """What a search looks for in a query text: its words, their forms, and both grouped."""

    words: tuple[str, ...]
    terms: tuple[str, ...]
    groups: tuple[WordGroup, ...]

    @classmethod
    def of(cls, text: str) -> SearchWords:
        """What a search for ``text`` looks for."""
        words = query_words(text)
        return cls(
            tuple(words),
            tuple(search_terms(words)),
            tuple(WordGroup(tuple(group)) for group in word_groups(words)),
        )
