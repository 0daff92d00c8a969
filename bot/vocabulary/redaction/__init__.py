"""Secrets and ``<private>`` regions in text become ``[REDACTED:<kind>]`` markers."""

from bot.vocabulary.redaction.alphabet import TOKEN_CHARS, cut_safely
from bot.vocabulary.redaction.engine import redact_secrets, redaction_kinds
from bot.vocabulary.redaction.leaves import redact_leaves
from bot.vocabulary.redaction.normalize import fold

__all__ = [
    "TOKEN_CHARS",
    "cut_safely",
    "fold",
    "redact_leaves",
    "redact_secrets",
    "redaction_kinds",
]
