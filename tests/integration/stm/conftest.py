"""The STM tests' fixture: the memory service on the test database, on the test's clock."""

from __future__ import annotations

import pytest

from bot.config import Settings
from bot.db.engine import Database
from bot.memory.service import MemoryService
from tests.helpers.builders import ManualClock, make_service


@pytest.fixture
def service(db: Database, settings: Settings, clock: ManualClock) -> MemoryService:
    return make_service(db.sessions, settings, clock)
