"""The fault seam of ``bot.db.storage``: a plan per database makes a named step fail,
hang or lose its connection, and nothing else."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.db.engine import Database
from bot.db.models import GuildSettings
from bot.db.storage import (
    database_down,
    faults,
    is_outage,
    memory_session,
    open_session,
    outage_number,
)
from bot.vocabulary.errors import MemoryUnavailable
from tests.helpers.faults import back, outage, own_sessions

GUILD = 111_111_111_111_111_111


async def answers(sessions: async_sessionmaker[AsyncSession], what: str = "reading") -> bool:
    """Whether a query of the step ``what`` goes through."""
    try:
        async with memory_session(sessions, what) as session:
            return (await session.execute(text("SELECT 1"))).scalar() == 1
    except MemoryUnavailable:
        return False


async def stored_guilds(db: Database) -> int:
    async with db.sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(GuildSettings)) or 0)


async def test_a_failing_step_is_refused_and_marks_the_database_down(db: Database) -> None:
    sessions = own_sessions(db)
    plan = faults(sessions)
    plan.fail("hydrating")

    with pytest.raises(MemoryUnavailable) as refused:
        async with memory_session(sessions, "hydrating an STM entry"):
            pytest.fail("the session opened")
    assert isinstance(refused.value.__cause__, ConnectionRefusedError)
    assert outage_number(sessions) is not None
    # A step is matched by a part of its name: others go through (and end the outage).
    assert await answers(sessions, "loading guild settings")
    assert outage_number(sessions) is None
    assert plan.met == ["hydrating an STM entry"]


async def test_a_step_fails_with_the_error_given_times_times(db: Database) -> None:
    sessions = own_sessions(db)
    fault = faults(sessions).fail(error=RuntimeError("unexpected"), times=2)

    for _ in range(2):
        with pytest.raises(RuntimeError, match="unexpected"):  # not an outage: as it is
            async with open_session(sessions, "reading"):
                pass
    assert await answers(sessions)
    assert fault.met == 2


async def test_a_step_fails_after_letting_some_uses_through(db: Database) -> None:
    sessions = own_sessions(db)
    faults(sessions).fail("reading", after=2)
    assert [await answers(sessions) for _ in range(4)] == [True, True, False, False]


async def test_the_latest_fault_planned_strikes_and_clear_ends_them_all(db: Database) -> None:
    sessions = own_sessions(db)
    plan = faults(sessions)
    plan.fail()
    plan.hang("reading", timeout=0.01)
    with pytest.raises(MemoryUnavailable) as timed_out:
        async with memory_session(sessions, "reading"):
            pass
    assert isinstance(timed_out.value.__cause__, TimeoutError)
    assert not await answers(sessions, "writing")  # refused
    plan.clear()
    assert plan.met == []
    assert await answers(sessions, "reading") and await answers(sessions, "writing")


async def test_a_hung_step_waits_until_released_then_goes_on(db: Database) -> None:
    sessions = own_sessions(db)
    plan = faults(sessions)
    hung = plan.hang("reading", times=1)

    reading = asyncio.create_task(answers(sessions))
    await hung.reached()
    assert not reading.done() and plan.met == ["reading"]
    assert await answers(sessions)  # times=1: the next one is not held
    hung.release()
    assert await reading


async def test_a_hung_step_ends_with_its_callers_timeout(db: Database) -> None:
    sessions = own_sessions(db)
    hung = faults(sessions).hang()

    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05), memory_session(sessions, "reading"):
            pytest.fail("the session opened")
    assert loop.time() - began >= 0.05
    assert hung.met == 1
    # Or its own timeout, made short: a TimeoutError, as the database did not answer.
    faults(sessions).hang(timeout=0.05)
    began = loop.time()
    assert not await answers(sessions)
    assert loop.time() - began >= 0.05
    assert outage_number(sessions) is not None


async def test_a_step_hung_at_its_end_has_run_its_statements(db: Database) -> None:
    sessions = own_sessions(db)
    late = faults(sessions).hang("saving", at="end")

    async def save() -> None:
        async with memory_session(sessions, "saving guild settings") as session, session.begin():
            session.add(GuildSettings(guild_id=GUILD))

    saving = asyncio.create_task(save())
    await late.reached()
    assert await stored_guilds(db) == 1  # committed; the answer is late
    assert not saving.done()
    faults(sessions).clear()
    await saving


async def test_a_dropped_connection_fails_the_first_statement_as_a_lost_connection(
    db: Database,
) -> None:
    sessions = own_sessions(db)
    dropped = faults(sessions).drop("reading", times=1)

    with pytest.raises(DBAPIError) as lost:
        async with open_session(sessions, "reading") as session:
            await session.execute(text("SELECT 1"))
    assert lost.value.connection_invalidated and is_outage(lost.value)
    assert dropped.met == 1
    assert await answers(sessions)  # the pool holds no dead connection


async def test_a_connection_dropped_at_commit_rolls_its_statements_back(db: Database) -> None:
    sessions = own_sessions(db)
    faults(sessions).drop("saving", at="end")

    with pytest.raises(MemoryUnavailable):
        async with memory_session(sessions, "saving guild settings") as session, session.begin():
            session.add(GuildSettings(guild_id=GUILD))
            await session.flush()  # the row is written, then the commit fails
    assert await stored_guilds(db) == 0
    # A read has no commit: it is spared.
    assert await answers(sessions, "saving nothing, reading")


async def test_a_plan_on_one_database_leaves_another_alone(db: Database) -> None:
    a, b = own_sessions(db), own_sessions(db)  # two processes on one server
    async with outage(a):
        assert not await answers(a)
        assert await answers(b)
        assert outage_number(a) is not None and outage_number(b) is None
    assert await answers(a) and outage_number(a) is None


async def test_the_breakers_probe_meets_the_plan_too(db: Database) -> None:
    sessions = own_sessions(db)
    plan = faults(sessions)
    plan.fail()
    assert not await answers(sessions)

    async def probed() -> None:
        assert database_down(sessions)
        (probe,) = [t for t in asyncio.all_tasks() if t.get_name() == "database-probe"]
        await probe

    await probed()
    assert plan.met[-1] == "probing the database"
    assert outage_number(sessions) is not None, "a refused probe finds it still down"
    await back(sessions)
    assert outage_number(sessions) is None
