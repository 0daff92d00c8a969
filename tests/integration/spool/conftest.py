"""The spool tests' fixture: a durable spool in the test's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.memory.spool.durable import DurableSpool, spool_path


@pytest.fixture
def spool(tmp_path: Path) -> DurableSpool:
    return DurableSpool(spool_path(tmp_path))
