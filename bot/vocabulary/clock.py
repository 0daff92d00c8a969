"""Time, injectable: the cache's TTLs and the janitor's cut-off are tested by moving it."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall-clock time, timezone-aware UTC (stored in ``timestamptz`` columns)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (cache expiry)."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    # The builtin itself, not a wrapper: the cache reads it on every lookup.
    monotonic = staticmethod(time.monotonic)
