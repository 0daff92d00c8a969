"""Secrets and ``<private>`` regions in text become ``[REDACTED:<kind>]`` markers."""

# token_rules and rule_data/provider_rules (provider tokens by shape; gitleaks' rules as
# data in rules/), context_rules and credential_forms (secrets by the words around them),
# split_tokens are the rules; keywords picks which run, normalize gives the view they
# match, engine runs them, replacements judge each match, leaves walks structured data.
# Imports nothing else of the bot.

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
