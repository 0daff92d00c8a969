"""Database deadlines (:func:`bot.db.database_deadline`): time the event loop spent stalled by
its own work does not count against the database, while a database that does not answer
still times out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy.engine import URL

from bot.db import database_deadline

# The loop is kept busy this long (a burst of turns' CPU work) while a query is on its way.
STALL_SECONDS = 1.5
DEADLINE_SECONDS = 1.0


@pytest.fixture
async def connection(pg_url: URL) -> AsyncIterator[asyncpg.Connection]:
    dsn = pg_url.set(drivername="postgresql").render_as_string(hide_password=False)
    connection = await asyncpg.connect(dsn)
    yield connection
    connection.terminate()  # a query cancelled by a timeout leaves it unusable


def stall_the_loop_soon() -> None:
    """The loop runs a callback that holds it (no other task runs meanwhile)."""
    asyncio.get_running_loop().call_later(0.05, time.sleep, STALL_SECONDS)


async def test_a_loop_stall_does_not_count_against_the_database(
    connection: asyncpg.Connection,
) -> None:
    stall_the_loop_soon()
    began = time.monotonic()
    async with database_deadline(DEADLINE_SECONDS):
        assert await connection.fetchval("SELECT 1 FROM pg_sleep(0.1)") == 1
    assert time.monotonic() - began > DEADLINE_SECONDS  # it did outlast the plain deadline


async def test_a_plain_timeout_takes_the_same_stall_for_the_database(
    connection: asyncpg.Connection,
) -> None:
    stall_the_loop_soon()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(DEADLINE_SECONDS):
            await connection.fetchval("SELECT 1 FROM pg_sleep(0.1)")


async def test_a_database_that_does_not_answer_still_times_out(
    connection: asyncpg.Connection,
) -> None:
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        async with database_deadline(0.3):
            await connection.fetchval("SELECT pg_sleep(30)")
    assert time.monotonic() - began < 5
