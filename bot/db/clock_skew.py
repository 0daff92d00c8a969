"""How far this machine's clock is from the database's.

Wipe times (``stm_clears``, ``stm_forgets``) are compared with turn starts across
processes, which holds only while their clocks agree: doctor shows the offset, and
``kioku run`` warns when it is too large.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config import one_line_error
from bot.vocabulary import SystemClock

log = logging.getLogger(__name__)

# Past this, a /refresh made on another machine may not stop a turn that started just
# before it here: turns take seconds, so a second of skew already matters. NTP keeps
# machines within milliseconds.
MAX_CLOCK_SKEW_SECONDS = 1.0
SAMPLES = 3


@dataclass(frozen=True, slots=True)
class ClockSkew:
    """The database's clock minus this one (seconds; positive: this clock is behind),
    give or take ``uncertainty`` (half the round trip of the best sample)."""

    offset: float
    uncertainty: float

    @property
    def too_large(self) -> bool:
        # Only what the measurement proves: a slow round trip is not a skewed clock.
        return abs(self.offset) - self.uncertainty > MAX_CLOCK_SKEW_SECONDS

    def describe(self) -> str:
        size = f"{abs(self.offset) * 1000:.0f} ms ± {self.uncertainty * 1000:.0f} ms"
        if abs(self.offset) < 0.0005:
            return f"in step with the database's ({size})"
        side = "behind" if self.offset > 0 else "ahead of"
        said = f"{size} {side} the database's"
        if self.too_large:
            said += (
                f": over {MAX_CLOCK_SKEW_SECONDS:g} s, /refresh and /forget-me made on another"
                " machine may not stop a turn in flight here; synchronise the clocks (NTP)"
            )
        return said


async def measure_clock_skew(engine: AsyncEngine, now: Callable[[], datetime]) -> ClockSkew:
    """The skew between ``now`` (timezone-aware) and PostgreSQL's ``clock_timestamp()``,
    from the sample with the shortest round trip (the least queueing in it)."""
    best: ClockSkew | None = None
    async with engine.connect() as connection:
        for _ in range(SAMPLES):
            sent, local = time.perf_counter(), now()
            remote = (await connection.execute(text("SELECT clock_timestamp()"))).scalar_one()
            half_trip = (time.perf_counter() - sent) / 2
            # The server read its clock about halfway through the round trip.
            offset = (remote - local).total_seconds() - half_trip
            if best is None or half_trip < best.uncertainty:
                best = ClockSkew(offset, half_trip)
    assert best is not None
    return best


async def warn_of_clock_skew(
    engine: AsyncEngine, now: Callable[[], datetime] | None = None
) -> ClockSkew | None:
    """Log a warning when this machine's clock is too far off the database's. Never
    stops a start: a skew that cannot be measured is only logged too."""
    try:
        skew = await measure_clock_skew(engine, now or SystemClock().now)
    except Exception as exc:
        log.warning("could not compare the clock with the database's: %s", one_line_error(exc))
        return None
    if skew.too_large:
        log.warning("this machine's clock is %s", skew.describe())
    return skew
