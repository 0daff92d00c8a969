"""Timing budgets in ``make bench`` scale with a reference measured in the same run."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any

import pytest

from benchmarks import _figures as figures
from benchmarks._figures import Floor, Machine, Run, Scale, Transactions, at_least, at_most


def test_a_ceiling_is_the_reference_budget_times_the_factor() -> None:
    text, met = at_most(230, 200, Scale(1.18, "machine"), "µs")
    assert text == "≤ 200 µs × 1.18 machine = 236 µs"
    assert met
    assert at_most(237, 200, Scale(1.18, "machine"), "µs")[1] is False


def test_a_ceiling_tightens_on_a_faster_machine() -> None:
    text, met = at_most(95, 100, Scale(0.9, "06de254"))
    assert text == "≤ 100 × 0.90 06de254 = 90.0"
    assert not met


def test_a_rate_floor_is_the_reference_budget_divided_by_the_factor() -> None:
    text, met = at_least(500, 1000, Scale(2.0, "floor"))
    assert text == "≥ 1,000 ÷ 2.00 floor = 500"
    assert met
    assert at_least(499, 1000, Scale(2.0, "floor"))[1] is False


def test_the_budget_is_printed_in_three_figures_or_so() -> None:
    assert at_most(1, 5, Scale(34.26, "floor p99"), "ms")[0] == "≤ 5 ms × 34.26 floor p99 = 171 ms"
    assert at_most(1, 20, Scale(1.53, "floor p95"), "ms")[0] == "≤ 20 ms × 1.53 floor p95 = 30.6 ms"
    assert at_most(1, 3, Scale(1.08, "floor"), "s")[0] == "≤ 3 s × 1.08 floor = 3.24 s"
    assert at_most(1, 200, Scale(10.8, "machine"), "µs")[0].endswith("= 2,160 µs")


def test_the_machine_speed_is_its_median_chunk_over_the_references(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(figures, "REFERENCE_CHUNK_MS", 5.0)
    machine = Machine([Run(units_us=[1.0], chunks_ms=[9.0, 10.0, 100.0])])
    assert machine.speed == Scale(2.0, "machine")


def test_the_machine_tail_is_the_same_percentile_of_the_units(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(figures, "REFERENCE_TAIL_US", {0.99: 50.0, 0.95: 40.0})
    units = [float(i) for i in range(1, 101)]  # nearest rank: p99 is 100, p95 is 96
    machine = Machine([Run(units_us=units, chunks_ms=[1.0])])
    assert machine.tail(0.99) == Scale(2.0, "machine p99")
    assert machine.tail(0.95) == Scale(96 / 40, "machine p95")


def test_the_slower_side_of_a_phase_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figures, "REFERENCE_CHUNK_MS", 5.0)
    monkeypatch.setattr(figures, "REFERENCE_TAIL_US", {0.99: 50.0})
    before = Run(units_us=[50.0] * 100, chunks_ms=[5.0])  # the reference itself
    after = Run(units_us=[100.0] * 100, chunks_ms=[15.0])  # load came during the phase
    machine = Machine([before, after])
    assert machine.speed.factor == 3.0
    assert machine.tail(0.99).factor == 2.0


def test_a_floor_scales_by_its_percentile_or_its_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figures, "REFERENCE_ROUND_TRIP_MS", {0.99: 2.0, 0.95: 1.0})
    monkeypatch.setattr(figures, "REFERENCE_ROUND_TRIPS_PER_S", 3000.0)
    quick = Transactions(ms=[1.0] * 100, per_second=6000.0)
    slow = Transactions(ms=[float(i) for i in range(1, 101)], per_second=1500.0)
    floor = Floor([quick, slow])
    assert floor.tail(0.99) == Scale(50.0, "floor p99")
    assert floor.rate == Scale(2.0, "floor")  # half the empty transactions: half the budget
    assert Floor([quick]).rate == Scale(0.5, "floor")  # a faster machine: a higher bar
    assert figures.floor(0.3, 0.2) == Scale(pytest.approx(1.5), "floor")
    assert figures.relative(150.0, 100.0, "06de254") == Scale(1.5, "06de254")


def test_a_calibration_times_every_unit_and_every_chunk() -> None:
    run = figures.calibrate(chunks=3, per_chunk=4)
    assert len(run.units_us) == 12
    assert len(run.chunks_ms) == 3
    # A chunk's time holds its units' times.
    assert sum(run.chunks_ms) * 1e3 >= sum(run.units_us)


def test_a_phase_keeps_its_own_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Run] = []

    def calibrate() -> Run:
        made.append(Run(units_us=[1.0], chunks_ms=[float(len(made) + 1)]))
        return made[-1]

    monkeypatch.setattr(figures, "calibrate", calibrate)
    monkeypatch.setattr(figures, "_calibrations", {})
    figures.calibrate_phase("assembly")
    figures.calibrate_phase("assembly")
    assert figures.machine("assembly").runs == made  # before and after the timed loop
    assert figures.machine("redaction").runs == [made[2]]  # none yet: one made on use
    assert figures.machine("redaction").runs == [made[2]]
    assert len(made) == 3


def test_round_trips_time_empty_transactions_per_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[str] = []

    class Session:
        async def execute(self, statement: Any) -> None:
            sent.append(str(statement))

        @asynccontextmanager
        async def begin(self) -> Any:
            yield self

    @asynccontextmanager
    async def sessions() -> Any:
        yield Session()

    monkeypatch.setattr(figures, "_floors", {})
    asyncio.run(figures.round_trips("hydrate", sessions, 10, writers=2))  # type: ignore[arg-type]
    assert sent == ["SELECT 1"] * 12  # one warm-up per session, then the timed ten
    asyncio.run(figures.round_trips("hydrate", sessions, 10))  # type: ignore[arg-type]
    runs = figures.floor_of("hydrate").runs
    assert [len(run.ms) for run in runs] == [10, 10]
    assert all(run.per_second > 0 for run in runs)
