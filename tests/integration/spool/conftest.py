"""The spool tests' fixtures: a durable spool in the test's folder, and a memory service
that spools to it, on the test's clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Settings
from bot.db.engine import Database
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, spool_path
from tests.helpers.builders import ManualClock, make_service


@pytest.fixture
def spool(tmp_path: Path) -> DurableSpool:
    return DurableSpool(spool_path(tmp_path))


@pytest.fixture
def service(
    db: Database, settings: Settings, clock: ManualClock, spool: DurableSpool
) -> MemoryService:
    return make_service(db.sessions, settings, clock, spool=spool)
