"""LoCoMo's answer scores: normalized, Porter-stemmed token F1, per question category.

As LoCoMo's own evaluation scores them: text is lowercased, punctuation dropped, the
words "a", "an", "the" and "and" dropped, each token Porter-stemmed (NLTK's stemmer, the
one LoCoMo uses), then precision and recall of the shared tokens give F1.

- category 1 (multi-hop): the gold answer split on commas; each part takes its best F1
  against the prediction's comma-separated parts; the mean of those.
- category 3 (open-domain): the gold answer up to its first ';' (the rest is rationale).
- categories 2 and 4: plain token F1.
- category 5 (adversarial): 1 when the prediction says the conversation does not hold
  the answer (:data:`NOT_MENTIONED`), else 0.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache

from nltk.stem import PorterStemmer

NOT_MENTIONED = ("not mentioned", "no information available", "not available")
"""What an answer to an adversarial question says when it is right (lowercase)."""

_STEMMER = PorterStemmer()
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_DROPPED_WORDS = re.compile(r"\b(a|an|the|and)\b")


def normalize(text: str) -> str:
    """Lowercase, no punctuation, no articles (nor "and"), single spaces."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_DROPPED_WORDS.sub(" ", text).split())


@lru_cache(maxsize=8192)
def _stem(word: str) -> str:
    return str(_STEMMER.stem(word))


def tokens(text: str) -> list[str]:
    return [_stem(word) for word in normalize(text).split()]


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the stemmed tokens the two share (0 when they share none)."""
    predicted, expected = tokens(prediction), tokens(gold)
    same = sum((Counter(predicted) & Counter(expected)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def multi_hop_f1(prediction: str, gold: str) -> float:
    """Each comma-separated part of ``gold`` matched by its best part of ``prediction``."""
    predictions = [part.strip() for part in prediction.split(",")]
    parts = [part.strip() for part in gold.split(",")]
    return sum(max(token_f1(p, part) for p in predictions) for part in parts) / len(parts)


def says_not_mentioned(prediction: str) -> bool:
    lowered = prediction.lower()
    return any(phrase in lowered for phrase in NOT_MENTIONED)


def score(category: int, prediction: str, gold: str) -> float:
    """The question's score in [0, 1], as LoCoMo computes it for ``category``."""
    if category == 5:
        return 1.0 if says_not_mentioned(prediction) else 0.0
    if category == 1:
        return multi_hop_f1(prediction, gold)
    if category == 3:
        gold = gold.split(";")[0].strip()
    return token_f1(prediction, gold)
