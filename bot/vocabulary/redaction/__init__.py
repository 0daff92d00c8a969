"""Secrets and ``<private>`` regions in text become ``[REDACTED:<kind>]`` markers."""

# token_rules (provider tokens by shape) and context_rules (secrets by the words around
# them) are the rules; engine runs them, replacements judge each match, leaves walks
# structured data.  Imports nothing else of the bot.

from bot.vocabulary.redaction.alphabet import TOKEN_CHARS, cut_safely
from bot.vocabulary.redaction.engine import redact_secrets, redaction_kinds
from bot.vocabulary.redaction.leaves import redact_leaves

__all__ = [
    "TOKEN_CHARS",
    "cut_safely",
    "redact_leaves",
    "redact_secrets",
    "redaction_kinds",
]
