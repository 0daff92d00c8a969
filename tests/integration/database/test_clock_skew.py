"""The clock check: this machine's clock against PostgreSQL's (``kioku doctor``, ``run``).

Cross-machine /refresh and /forget-me compare times taken on different machines, so a
skewed clock must be seen before it costs a wiped memory coming back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.db.clock_skew import (
    MAX_CLOCK_SKEW_SECONDS,
    ClockSkew,
    measure_clock_skew,
    warn_of_clock_skew,
)
from bot.db.engine import Database


def shifted(seconds: float) -> Callable[[], datetime]:
    """A clock ``seconds`` ahead of the real one (behind when negative)."""
    return lambda: datetime.now(UTC) + timedelta(seconds=seconds)


async def test_a_clock_on_the_database_machine_is_in_step(migrated_database: Database) -> None:
    skew = await measure_clock_skew(migrated_database.engine, shifted(0))
    # Same machine, same clock: only the measurement's own error remains.
    assert abs(skew.offset) <= skew.uncertainty + 0.05, skew
    assert not skew.too_large


@pytest.mark.parametrize(("shift", "side"), [(-30.0, "behind"), (45.0, "ahead of")])
async def test_a_skewed_clock_is_measured_and_named(
    migrated_database: Database, shift: float, side: str
) -> None:
    skew = await measure_clock_skew(migrated_database.engine, shifted(shift))
    assert skew.offset == pytest.approx(-shift, abs=0.5)
    assert skew.too_large
    said = skew.describe()
    assert f"{side} the database's" in said
    assert "synchronise the clocks (NTP)" in said


async def test_a_skew_within_the_limit_passes(migrated_database: Database) -> None:
    skew = await measure_clock_skew(migrated_database.engine, shifted(-MAX_CLOCK_SKEW_SECONDS / 2))
    assert skew.offset > 0
    assert not skew.too_large
    assert "NTP" not in skew.describe()


def test_a_slow_round_trip_is_not_taken_for_a_skewed_clock() -> None:
    # 1.5 s off, but the answer took 2 s to come back: the clocks may well agree.
    assert not ClockSkew(offset=1.5, uncertainty=1.0).too_large
    assert ClockSkew(offset=1.5, uncertainty=0.1).too_large
    assert ClockSkew(offset=-1.5, uncertainty=0.1).too_large


async def test_run_warns_of_a_skewed_clock_once_and_not_of_one_in_step(
    migrated_database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="bot.db.clock_skew"):
        assert await warn_of_clock_skew(migrated_database.engine, shifted(0)) is not None
        assert not caplog.records
        skew = await warn_of_clock_skew(migrated_database.engine, shifted(-120))
    assert skew is not None and skew.too_large
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "behind the database's" in record.getMessage()


async def test_run_is_not_stopped_when_the_clock_cannot_be_compared(
    dead_engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="bot.db.clock_skew"):
        assert await warn_of_clock_skew(dead_engine, shifted(0)) is None
    [record] = caplog.records
    assert record.getMessage().startswith("could not compare the clock with the database's: ")
