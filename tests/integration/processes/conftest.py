"""The multi-process tests' fixture: two processes, each with its own listener connection."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.engine import URL

from bot.config import Settings
from bot.db.engine import Database
from tests.helpers.listening import Process, start_process


@pytest.fixture
async def two(
    db: Database, settings: Settings, pg_url: URL
) -> AsyncIterator[tuple[Process, Process]]:
    a = await start_process(db, settings, pg_url)
    b = await start_process(db, settings, pg_url)
    yield a, b
    await a.listener.close()
    await b.listener.close()
