"""The chaos tests' fixture: one listener for every scenario's notices."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.engine import URL

from tests.integration.chaos.notices import Notices


@pytest.fixture
async def notices(pg_url: URL) -> Any:
    listener = Notices(pg_url)
    await listener.start()
    yield listener
    await listener.close()
