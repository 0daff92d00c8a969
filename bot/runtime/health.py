"""What ``/healthz`` answers: whether this process is connected to Discord and its
database answers, with the reason when not."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.db import DB_TIMEOUT_SECONDS, memory_session
from bot.vocabulary import MemoryUnavailable

# The step's name in the storage seam (its log lines, and tests' fault plans).
HEALTH_STEP = "health check"
NOT_CONNECTED_YET = "discord: not connected yet"


class Health:
    """The checks behind ``/healthz``; the bot tells it how to judge its Discord link."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions
        # Until the bot is built and watching, nothing is connected.
        self._discord: Callable[[], str | None] = lambda: NOT_CONNECTED_YET

    def watch_discord(self, problem: Callable[[], str | None]) -> None:
        """Judge the Discord link with ``problem`` (``None``: connected, else why not)."""
        self._discord = problem

    async def problems(self) -> list[str]:
        """Why this process is not healthy, one line per reason; empty when it is."""
        found: list[str] = []
        discord_problem = self._discord()
        if discord_problem is not None:
            found.append(discord_problem)
        database_problem = await self._database_problem()
        if database_problem is not None:
            found.append(database_problem)
        return found

    async def _database_problem(self) -> str | None:
        # Through the storage seam: its timeout, and an outage it finds is the breaker's too.
        try:
            async with memory_session(self._sessions, HEALTH_STEP) as session:
                await session.execute(text("SELECT 1"))
        except MemoryUnavailable as exc:
            # The class of the cause only: the endpoint may be reachable from outside, and
            # a driver's text can name hosts and users.
            cause = exc.__cause__
            if isinstance(cause, TimeoutError):
                return f"database: no answer within {DB_TIMEOUT_SECONDS:g} s"
            named = f" ({cause.__class__.__name__})" if cause is not None else ""
            return f"database: does not answer{named}"
        return None
