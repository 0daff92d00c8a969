"""Database access for the memory services: one way to open a session whose failures
surface as :class:`MemoryUnavailable` (a message safe to show a user), with a timeout."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

log = logging.getLogger(__name__)

DB_TIMEOUT_SECONDS = 5.0


class MemoryUnavailable(RuntimeError):
    """The database refused or timed out; the message is safe to show a user."""


@contextlib.asynccontextmanager
async def storage(
    sessions: async_sessionmaker[AsyncSession], what: str
) -> AsyncIterator[AsyncSession]:
    """A session for ``what`` (named in the warning logged if the database fails)."""
    try:
        async with asyncio.timeout(DB_TIMEOUT_SECONDS), sessions() as session:
            yield session
    except (SQLAlchemyError, OSError, TimeoutError) as exc:
        log.warning("%s failed: %s", what, exc.__class__.__name__)
        raise MemoryUnavailable("memory storage is unavailable right now") from exc
