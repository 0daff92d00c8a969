"""What the long-term service answers: a fact stored, facts forgotten, a page of facts,
or why nothing was stored."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.db import FactCursor
from bot.vocabulary import Fact

__all__ = ["FactPage", "FactRefused", "ForgetResult", "RememberResult"]


class FactRefused(ValueError):
    """Nothing was stored; ``str()`` says why (safe to show the model or the user)."""


@dataclass(frozen=True, slots=True)
class RememberResult:
    """What :meth:`LongTermService.remember` stored, replaced and evicted."""

    id: int
    status: Literal["created", "updated"]
    evicted_ids: tuple[int, ...] = ()
    truncated: bool = False
    fact: Fact | None = None

    @property
    def created(self) -> bool:
        return self.status == "created"


@dataclass(frozen=True, slots=True)
class ForgetResult:
    """The facts :meth:`LongTermService.forget` deleted, or the candidates of an ambiguous query."""

    deleted: tuple[Fact, ...] = ()
    candidates: tuple[Fact, ...] = ()

    @property
    def ids(self) -> list[int]:
        return [fact.id for fact in self.deleted]


@dataclass(frozen=True, slots=True)
class FactPage:
    """One page of a user's facts, newest first; ``newer`` counts the facts before it."""

    facts: tuple[Fact, ...]
    page: int
    pages: int
    total: int
    page_size: int
    newer: int = 0

    @property
    def has_previous(self) -> bool:
        return self.newer > 0

    @property
    def has_next(self) -> bool:
        return self.newer + len(self.facts) < self.total

    @property
    def first(self) -> FactCursor | None:
        """Where the page starts (for the page before it), None when empty."""
        return (self.facts[0].updated_at, self.facts[0].id) if self.facts else None

    @property
    def last(self) -> FactCursor | None:
        """Where the page ends (for the page after it), None when empty."""
        return (self.facts[-1].updated_at, self.facts[-1].id) if self.facts else None
