"""Queries, one module per table family; each function takes an AsyncSession."""

from bot.db.repositories.longterm import FactCursor
from bot.db.repositories.stm import EventRecord, UserRowsDeleted

__all__ = [
    "EventRecord",
    "FactCursor",
    "UserRowsDeleted",
]
