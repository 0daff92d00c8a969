"""The words every layer shares; imports nothing else of the bot.

model         keys, entries, raw messages, guild configuration, facts, provenance
clock         injectable time
providers     what each kind of provider can do (tools, context size, role order)
redaction/    secrets and private regions become [REDACTED:<kind>] markers
search_words  which words a long-term search looks for
errors        MemoryUnavailable, DatabaseUnavailable: failures safe to show
sanitize      the sanitizer every stored value goes through (SPEC §3)
"""

from bot.vocabulary.clock import Clock, SystemClock
from bot.vocabulary.errors import DatabaseUnavailable, MemoryUnavailable
from bot.vocabulary.model import (
    MAX_CATEGORIES,
    SUMMARY_SLUG,
    AuditEvent,
    Category,
    Fact,
    FactEvent,
    GuildAccess,
    GuildConfig,
    ImageRef,
    Marker,
    Place,
    Provenance,
    RawMessage,
    ScopeKey,
    ScoredFact,
    StmEntry,
    speaker_name,
)
from bot.vocabulary.providers import (
    CHARS_PER_TOKEN,
    ProviderCaps,
    capabilities,
    prompt_chars,
    provider_problem,
)
from bot.vocabulary.redaction import fold, redact_leaves, redact_secrets
from bot.vocabulary.sanitize import (
    MAX_VALUE_CHARS,
    PROMPT_PLACEHOLDERS,
    sanitize_value,
    strip_control_chars,
    truncate_graphemes,
)
from bot.vocabulary.search_words import STOP_WORDS, SearchWords, WordGroup

__all__ = [
    "CHARS_PER_TOKEN",
    "MAX_CATEGORIES",
    "MAX_VALUE_CHARS",
    "PROMPT_PLACEHOLDERS",
    "STOP_WORDS",
    "SUMMARY_SLUG",
    "AuditEvent",
    "Category",
    "Clock",
    "DatabaseUnavailable",
    "Fact",
    "FactEvent",
    "GuildAccess",
    "GuildConfig",
    "ImageRef",
    "Marker",
    "MemoryUnavailable",
    "Place",
    "Provenance",
    "ProviderCaps",
    "RawMessage",
    "ScopeKey",
    "ScoredFact",
    "SearchWords",
    "StmEntry",
    "SystemClock",
    "WordGroup",
    "capabilities",
    "fold",
    "prompt_chars",
    "provider_problem",
    "redact_leaves",
    "redact_secrets",
    "sanitize_value",
    "speaker_name",
    "strip_control_chars",
    "truncate_graphemes",
]
