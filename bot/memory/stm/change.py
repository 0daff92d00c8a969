"""One STM write, apart from where it is stored: what it may hold and what it does to an entry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from bot.vocabulary import GuildConfig, Marker, Provenance, StmEntry, sanitize_value


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What the tool tells the model: ``saved``, ``saved, pending sync`` or a rejection."""

    status: Literal["saved", "saved, pending sync", "rejected"]
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != "rejected"

    def __str__(self) -> str:
        return f"rejected: {self.reason}" if self.status == "rejected" else self.status


def rejected(reason: str) -> WriteResult:
    return WriteResult("rejected", reason)


REASON_ALL_EMPTY = (
    "every category would be empty; give at least one non-empty category value "
    '("" clears only the categories you list; a moderator wipes the memory with /refresh)'
)


REASON_CATEGORIES_CHANGED = (
    "the server's memory categories changed since this turn began; nothing was saved"
)


def write_shape(config: GuildConfig) -> tuple[bool, frozenset[str]]:
    """What a write's shape depends on: category mode, and which categories."""
    # Not labels, descriptions or order: those may change under a turn, its values still fit.
    if not config.category_mode:
        return False, frozenset()
    return True, frozenset(c.slug for c in config.categories)


def keeps_a_value(entry: StmEntry, change: Mapping[str, str], config: GuildConfig) -> bool:
    """Whether the memory still holds a category value after ``change`` ("" clears one)."""
    if any(change.values()):
        return True
    defined = {c.slug for c in config.categories}
    return any(
        value.strip() and slug in defined and slug not in change
        for slug, value in entry.categories.items()
    )


def apply_change(
    entry: StmEntry,
    *,
    summary: str | None,
    categories: Mapping[str, str] | None,
    config: GuildConfig,
    marker: Marker | None,
    contributors: set[int],
    provenance: Provenance,
    now: datetime,
) -> None:
    """Apply one sanitized write to ``entry`` in place, bookkeeping included (version, cadence…)."""
    if summary is not None:
        # Categories left from before the guild went back to summary mode were shown to the
        # writer, so the summary folds them in.
        entry.summary = summary
        entry.categories = {}
    if categories is not None:
        # A summary from before the guild chose categories is no longer shown, and must not
        # keep the 24 h TTL alive.
        entry.summary = ""
        for slug, value in categories.items():
            if value:
                entry.categories[slug] = value
            else:
                entry.categories.pop(slug, None)
        # Drop values of categories an admin removed or renamed: the model can no longer see them.
        defined = {c.slug for c in config.categories}
        for slug in [s for s in entry.categories if s not in defined]:
            del entry.categories[slug]
    entry.marker = marker or entry.marker
    entry.contributor_ids = sorted(set(entry.contributor_ids) | contributors)
    entry.provenance = provenance
    entry.version += 1
    entry.updated_at = now
    if entry.created_at is None:  # its row is created by this write
        entry.created_at = now
    entry.turns_since_refresh = 0
    entry.last_refreshed_turn += 1


def sanitized_change(
    config: GuildConfig,
    summary: str | None,
    categories: Mapping[str, str] | None,
) -> tuple[str | None, dict[str, str] | None] | WriteResult:
    """The sanitized summary or category values (``""`` clears one), or why the write is refused."""
    if (summary is None) == (categories is None):
        return rejected("give either a summary or categories")
    if summary is not None:
        if config.category_mode:
            return rejected("this server uses categories; give category values instead")
        clean = sanitize_value(summary)
        if not clean:
            return rejected("the summary is empty after removing unsafe content")
        return clean, None
    assert categories is not None
    known = {c.slug for c in config.categories}
    if not config.category_mode:
        return rejected("this server uses a single summary; give `summary` instead")
    unknown = sorted(set(categories) - known)
    if unknown:
        return rejected(f"unknown categories {unknown}; valid: {sorted(known)}")
    cleaned = {slug: sanitize_value(value) if value else "" for slug, value in categories.items()}
    if not cleaned:
        return rejected("give at least one category value")
    emptied = sorted(slug for slug, value in categories.items() if value and not cleaned[slug])
    if emptied:
        # The model asked to set these, not to clear them: refuse rather than erase.
        return rejected(f"categories {emptied} are empty after removing unsafe content")
    return None, cleaned
