"""Database outages for tests, through the fault seam of ``bot.db.storage``: a plan per
session factory says which steps fail, hang or lose their connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.db.engine import Database
from bot.db.storage import FaultPlan, faults, memory_session


def own_sessions(database: Database) -> async_sessionmaker[AsyncSession]:
    """A session factory of its own on ``database``, as another process has: its faults
    and its breaker touch no other service."""
    return async_sessionmaker(database.engine, expire_on_commit=False)


@contextlib.asynccontextmanager
async def outage(
    sessions: async_sessionmaker[AsyncSession], step: str | None = None
) -> AsyncIterator[FaultPlan]:
    """Every session of ``sessions`` (or of ``step``) is refused meanwhile; then the
    database is back (see :func:`back`)."""
    plan = faults(sessions)
    plan.fail(step)
    try:
        yield plan
    finally:
        await back(sessions)


async def back(sessions: async_sessionmaker[AsyncSession]) -> None:
    """The planned faults end and the database answers a query (which ends the outage for
    its breaker, as its probe would)."""
    faults(sessions).clear()
    async with memory_session(sessions, "a test's query") as session:
        await session.execute(text("SELECT 1"))


async def probes_done() -> None:
    """Wait for the breakers' probes under way (they meet the faults planned now)."""
    probes = [task for task in asyncio.all_tasks() if task.get_name() == "database-probe"]
    await asyncio.gather(*probes, return_exceptions=True)


async def callbacks_already_scheduled() -> None:
    """Return once the callbacks scheduled before this call have run: a task woken by a
    release (or a ``cancel()``) has then run on to its next wait."""
    loop = asyncio.get_running_loop()
    ran = loop.create_future()
    loop.call_soon(ran.set_result, None)
    await ran
