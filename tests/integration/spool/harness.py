"""What the spool tests share: the test's keys, a database-down switch, what the tables hold, two
processes on one database."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.db.repositories import stm as stm_repo
from bot.db.storage import FaultPlan, faults
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.vocabulary.model import ScopeKey
from tests.helpers.builders import CHANNEL, GUILD, ManualClock, make_service
from tests.helpers.faults import own_sessions

SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)
OTHER = CHANNEL + 1


async def summaries(db: Database) -> list[tuple[str, str, int]]:
    async with db.sessions() as session:
        rows = await session.scalars(select(ShortTermMemory).order_by(ShortTermMemory.scope_kind))
        return [(r.scope_kind, r.summary, r.version) for r in rows]


def down(service: MemoryService) -> FaultPlan:
    """The service's database refuses every connection until ``back``."""
    plan = faults(service.sessions)
    plan.fail()
    return plan


async def rows_derived_from(db: Database, user_id: int) -> list[str]:
    async with db.sessions() as session:
        rows = await session.scalars(select(ShortTermMemory))
        return [r.summary for r in rows if user_id in r.contributor_ids or r.user_id == user_id]


async def stored_server_summary(db: Database) -> str | None:
    async with db.sessions() as session:
        row = await stm_repo.load_entry(session, ScopeKey.server(GUILD, CHANNEL))
    return row.summary if row is not None else None


def spooling_and_direct(
    db: Database, settings: Settings, spool: DurableSpool
) -> tuple[ManualClock, MemoryService, MemoryService]:
    """Processes A (with ``spool``) and B (without) on one database and one clock (each
    with its own session factory: A's outages leave B alone)."""
    clock = ManualClock()
    return (
        clock,
        make_service(own_sessions(db), settings, clock, spool=spool),
        make_service(db.sessions, settings, clock),
    )


def spooling_pair(
    db: Database, settings: Settings, tmp_path: Path
) -> tuple[ManualClock, DurableSpool, MemoryService, MemoryService]:
    """As :func:`spooling_and_direct`, A's spool in ``tmp_path``."""
    clock = ManualClock()
    spool = DurableSpool(spool_path(tmp_path / "a"))
    a = make_service(own_sessions(db), settings, clock, spool=spool)
    return clock, spool, a, make_service(db.sessions, settings, clock)
