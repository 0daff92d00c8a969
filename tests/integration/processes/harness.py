"""What the multi-process tests share: the test channel's key, a write (or a category write) in a
process, its next notice of a kind, their clocks, every listener connection ended."""

from __future__ import annotations

from sqlalchemy import select, text

from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.db.notify import Notice
from bot.vocabulary.model import ScopeKey
from tests.helpers.builders import ALICE, CHANNEL, GUILD, ManualClock, prepare
from tests.helpers.listening import Process

KEY = ScopeKey.server(GUILD, CHANNEL)


async def write(process: Process, summary: str, user: int = ALICE) -> str:
    prepared = await prepare(process.memory, user)
    return str(await process.memory.update_stm(prepared.turn, summary=summary))


async def terminate_listeners(db: Database) -> None:
    async with db.engine.connect() as connection:
        await connection.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'kioku-listener'"
            )
        )
        await connection.commit()


# ------------------------------------------- rows deleted without naming their keys


def clock_of(process: Process) -> ManualClock:
    clock = process.memory.clock
    assert isinstance(clock, ManualClock)
    return clock


def advance_both(two: tuple[Process, Process], **delta: float) -> None:
    for process in two:
        clock_of(process).advance(**delta)


async def next_of(process: Process, kind: str) -> Notice:
    while (notice := await process.next_notice()).get("t") != kind:
        pass
    return notice


async def category_write(process: Process, values: dict[str, str], user: int = ALICE) -> bool:
    turn = (await prepare(process.memory, user)).turn
    return (await process.memory.update_stm(turn, categories=values)).ok


async def server_rows(db: Database) -> list[tuple[str, list[int]]]:
    async with db.sessions() as session:
        rows = await session.scalars(select(ShortTermMemory))
        return [(r.summary, list(r.contributor_ids)) for r in rows]
