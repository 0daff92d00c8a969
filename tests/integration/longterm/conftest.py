"""The long-term tests' fixture: the long-term service on the test database, on the test's clock."""

from __future__ import annotations

import pytest

from bot.config import Settings
from bot.db.engine import Database
from bot.memory.longterm.facts import LongTermService
from tests.helpers.builders import ManualClock


@pytest.fixture
def service(db: Database, settings: Settings, clock: ManualClock) -> LongTermService:
    return LongTermService(db.sessions, settings, clock)
