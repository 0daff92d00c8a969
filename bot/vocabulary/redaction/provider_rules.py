"""The data-driven provider token pass: one keyword scan picks the rules worth running."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Set as AbstractSet
from typing import Final

import regex

from bot.vocabulary.redaction.alphabet import marker
from bot.vocabulary.redaction.rule_data import TokenRule, load_rules

RULES: Final[tuple[TokenRule, ...]] = tuple(load_rules())


# Rules by keyword; a rule runs when one of its keywords occurs in the lower-cased text.


def _rules_by_word(rules: tuple[TokenRule, ...]) -> dict[str, tuple[int, ...]]:
    """Each keyword and the numbers of the rules it selects."""
    by_word: dict[str, tuple[int, ...]] = {}
    for number, rule in enumerate(rules):
        for word in rule.keywords:
            by_word[word] = (*by_word.get(word, ()), number)
    return by_word


RULES_BY_WORD: Final = _rules_by_word(RULES)
# Rules without keywords run on every text (none ship today; a local rule may add one).
_ALWAYS: Final[tuple[int, ...]] = tuple(n for n, rule in enumerate(RULES) if not rule.keywords)
# A secret is a whole token-like word: not glued to a letter or digit before it, and the
# characters glued after it go with it (so redaction is idempotent, never half a token).
_GLUED_BEFORE: Final = regex.compile(r"[A-Za-z0-9]")
_WORD_TAIL: Final = regex.compile(r"[A-Za-z0-9_\-]*")


def rules_for(words: AbstractSet[str]) -> list[int]:
    """The numbers of the rules with a keyword among ``words`` (found in the text)."""
    hits: set[int] = set(_ALWAYS)
    for word in words:
        rules = RULES_BY_WORD.get(word)
        if rules is not None:
            hits.update(rules)
    return sorted(hits)


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text``, as gitleaks computes a rule's ``entropy``."""
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in Counter(text).values()) if size else 0.0


def redact_provider_tokens(
    text: str, words: AbstractSet[str], kinds: list[str], found: dict[str, str]
) -> str:
    """``text`` with every provider token a shipped rule finds replaced by its marker.

    ``words``: the keywords `bot.vocabulary.redaction.keywords` found in ``text``.
    """
    numbers = rules_for(words)
    if not numbers:
        return text
    for number in numbers:
        rule = RULES[number]
        spans: list[tuple[int, int]] = []
        for match in rule.pattern.finditer(text):
            span = _secret_span(match, rule)
            if span is not None and (not spans or span[0] >= spans[-1][1]):
                spans.append(span)
        if not spans:
            continue
        pieces: list[str] = []
        pos = 0
        for start, end in spans:
            pieces += [text[pos:start], marker(rule.kind)]
            kinds.append(rule.kind)
            found[text[start:end]] = rule.kind
            pos = end
        pieces.append(text[pos:])
        text = "".join(pieces)
    return text


def _secret_span(match: regex.Match[str], rule: TokenRule) -> tuple[int, int] | None:
    """Where the secret of a rule's match is (its first group that took part), or None."""
    start, end = match.span()
    for group in range(1, (match.re.groups or 0) + 1):
        if match.start(group) != -1 and match.end(group) > match.start(group):
            start, end = match.span(group)
            break
    text = match.string
    if text.startswith("[REDACTED:", start) or (
        start > 0 and _GLUED_BEFORE.match(text, start - 1) is not None
    ):
        return None
    tail = _WORD_TAIL.match(text, end)
    end = tail.end() if tail is not None else end
    if rule.entropy and shannon_entropy(text[start:end]) < rule.entropy:
        return None
    return start, end
