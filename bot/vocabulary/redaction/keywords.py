"""One keyword scan per text: which rules and passes can match it at all."""

# Every pass and rule names words each of its matches contains (looked up in the
# lower-cased text); one Aho-Corasick automaton finds them all in a single pass, so a text
# without a candidate costs one scan instead of a lookup per rule.

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import Final

import ahocorasick

from bot.vocabulary.redaction.context_rules import GATE_WORDS
from bot.vocabulary.redaction.credential_forms import CLI_GATE, KEY_SPACED_GATE, USER_PASS_GATE
from bot.vocabulary.redaction.provider_rules import RULES_BY_WORD
from bot.vocabulary.redaction.token_rules import TOKEN_KEYWORDS

# `str.lower()` folds letters as the engine's IGNORECASE does except for the long s and the
# dotted capital I (whose lower() is two code points): a text holding either runs every pass.
_FOLDED_ONLY_BY_REGEX: Final = "\u017f\u0130"


def _automaton(words: Iterable[str]) -> ahocorasick.Automaton:
    """An automaton whose hits are the words themselves."""
    automaton = ahocorasick.Automaton()
    for word in set(words):
        automaton.add_word(word, word)
    automaton.make_automaton()
    return automaton


ALL_WORDS: Final[frozenset[str]] = frozenset(
    [
        *RULES_BY_WORD,
        *GATE_WORDS,
        *CLI_GATE,
        *USER_PASS_GATE,
        *KEY_SPACED_GATE,
        *(w for words in TOKEN_KEYWORDS.values() for w in words),
    ]
)
_AUTOMATON: Final = _automaton(ALL_WORDS)


def scan(text: str) -> AbstractSet[str]:
    """The keywords that occur in ``text``, case-insensitively."""
    if not text.isascii() and any(char in text for char in _FOLDED_ONLY_BY_REGEX):
        return ALL_WORDS
    return {word for _, word in _AUTOMATON.iter(text.lower())}
