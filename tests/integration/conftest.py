"""The integration tests' shared fixture: a clock the test moves by hand."""

from __future__ import annotations

import pytest

from tests.helpers.builders import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
