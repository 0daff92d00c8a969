"""The integration tests' shared fixtures: a clock the test moves by hand, and a memory
service on the test database and that clock (a folder's own conftest may give another)."""

from __future__ import annotations

import pytest

from bot.config import Settings
from bot.db.engine import Database
from bot.memory.service import MemoryService
from tests.helpers.builders import ManualClock, make_service


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def service(db: Database, settings: Settings, clock: ManualClock) -> MemoryService:
    return make_service(db.sessions, settings, clock)
