"""Shared output for benchmark scripts (a table for people, JSON for ``run_all.py``), and
the references their timing budgets are scaled by on the machine they run on."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

MARK = "KIOKU_FIGURES "

# The reference machine is the 2-core development machine of the 2026-12-06 figures in
# docs/scaling.md, where the budgets were set; "Budgets and the machine" there says how
# these were derived. The calibration loop there: its median chunk, its units' p99.
REFERENCE_CHUNK_MS = 7.5
REFERENCE_TAIL_US = {0.99: 120.0}
# Its database floor: one empty transaction's ms at these percentiles (one session), and
# empty transactions per second over 8 sessions (stm_core.py's writers).
REFERENCE_ROUND_TRIP_MS = {0.95: 0.35, 0.99: 0.60}
REFERENCE_ROUND_TRIPS_PER_S = 3400.0
UNITS_PER_CHUNK = 100
CHUNKS = 20


@dataclass
class Figure:
    name: str
    value: str
    budget: str = ""
    met: bool | None = None
    note: str = ""


def status(met: bool | None) -> str:
    return "" if met is None else ("met" if met else "NOT MET")


def table(figures: list[Figure]) -> str:
    rows = [("figure", "value", "budget", "status", "note")]
    rows += [(f.name, f.value, f.budget, status(f.met), f.note) for f in figures]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = []
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), row[1].rjust(widths[1])]
        cells += [row[i].ljust(widths[i]) for i in (2, 3)] + [row[4]]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def emit(figures: list[Figure], as_json: bool) -> None:
    if as_json:
        print(MARK + json.dumps([asdict(f) for f in figures]), flush=True)
    else:
        print(table(figures), flush=True)


def skipped(name: str, hint: str) -> Figure:
    """The figure of a benchmark that needs a model endpoint and has none (``hint``: the
    flag that runs it without one)."""
    return Figure(
        name, "skipped", note=f"no model endpoint (OPENAI_BASE_URL / OPENAI_API_KEY); try {hint}"
    )


# Budgets against the machine. A timing budget is a figure for the reference machine;
# here it is multiplied by a factor measured in the same run: this machine's time for a
# reference (a fixed loop, the operation's floor, a baseline checkout) over the reference
# machine's.


@dataclass(frozen=True)
class Scale:
    """A factor a reference budget is multiplied by here (divided by, for a rate)."""

    factor: float
    label: str


class _Item:
    __slots__ = ("count", "key")

    def __init__(self, key: str, count: int) -> None:
        self.key = key
        self.count = count


def _unit() -> int:
    """One fixed piece of pure-Python work like the bot's: dicts, strings, small objects."""
    counts: dict[str, int] = {}
    items = []
    for i in range(200):
        key = f"w{i % 13}"
        counts[key] = counts.get(key, 0) + i
        items.append(_Item(key, i))
    text = " ".join(item.key for item in items if item.count % 3)
    return len(text.split()) + sum(counts.values()) + len(sorted(counts, key=counts.__getitem__))


def percentile(samples: list[float], q: float) -> float:
    """The ``q`` quantile of ``samples`` (nearest rank, as the scripts take theirs)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Run:
    """One calibration run: each unit's µs and each chunk's ms."""

    units_us: list[float]
    chunks_ms: list[float]


@dataclass(frozen=True)
class Machine:
    """This machine against the reference, from a phase's calibration runs: the slowest."""

    runs: list[Run]

    @property
    def speed(self) -> Scale:
        """For medians, means and rates: a chunk spans scheduler slices, as they do."""
        factor = max(statistics.median(run.chunks_ms) for run in self.runs) / REFERENCE_CHUNK_MS
        return Scale(factor, "machine")

    def tail(self, q: float) -> Scale:
        """For a percentile of per-operation times: the same percentile of the units'."""
        factor = max(percentile(run.units_us, q) for run in self.runs) / REFERENCE_TAIL_US[q]
        return Scale(factor, f"machine p{q * 100:.0f}")


def calibrate(chunks: int = CHUNKS, per_chunk: int = UNITS_PER_CHUNK) -> Run:
    """Time ``chunks`` × ``per_chunk`` units, each on its own and each chunk whole."""
    for _ in range(per_chunk):
        _unit()  # warm-up: the first calls pay for allocation the rest reuse
    clock = time.perf_counter
    units: list[float] = []
    whole: list[float] = []
    for _ in range(chunks):
        chunk_started = clock()
        for _ in range(per_chunk):
            started = clock()
            _unit()
            units.append((clock() - started) * 1e6)
        whole.append((clock() - chunk_started) * 1e3)
    return Run(units, whole)


_calibrations: dict[str, list[Run]] = {}


def calibrate_phase(phase: str) -> None:
    """One calibration run for ``phase`` (a quarter of a second): call it just before the
    phase's timed part and just after."""
    # A shared host changes speed within a minute, so each phase is bracketed by its own
    # runs, and the slower side counts: the load may have come or gone in between.
    _calibrations.setdefault(phase, []).append(calibrate())


def machine(phase: str = "run") -> Machine:
    """``phase``'s calibration; a run is made now if the phase has none."""
    if phase not in _calibrations:
        calibrate_phase(phase)
    return Machine(_calibrations[phase])


@dataclass(frozen=True)
class Transactions:
    """One floor run: each empty transaction's ms, and how many ran per second."""

    ms: list[float]
    per_second: float


@dataclass(frozen=True)
class Floor:
    """A database figure's floor, empty transactions on its sessions: the slowest run."""

    runs: list[Transactions]

    def tail(self, q: float) -> Scale:
        """For a percentile of a query's time: the same percentile of the round trips'."""
        slowest = max(percentile(run.ms, q) for run in self.runs)
        return Scale(slowest / REFERENCE_ROUND_TRIP_MS[q], f"floor p{q * 100:.0f}")

    @property
    def rate(self) -> Scale:
        """For a rate of transactions: how many fewer empty ones this machine runs."""
        slowest = min(run.per_second for run in self.runs)
        return Scale(REFERENCE_ROUND_TRIPS_PER_S / slowest, "floor")


_floors: dict[str, list[Transactions]] = {}


def floor_of(phase: str) -> Floor:
    """The floor runs of ``phase`` (``round_trips`` before and after its timed part)."""
    return Floor(_floors[phase])


async def round_trips(
    phase: str, sessions: async_sessionmaker[AsyncSession], count: int, writers: int = 1
) -> None:
    """One floor run for ``phase``: ``count`` transactions of one ``SELECT 1`` over
    ``writers`` sessions. Call it just before the phase's timed part and just after."""
    # The database's part of a figure is two processes handing work back and forth: on a
    # busy machine each hand-off waits for a CPU, which a loop in one process never sees.
    from sqlalchemy import text

    ms: list[float] = []

    async def writer(share: int) -> None:
        for _ in range(share):
            started = time.perf_counter()
            async with sessions() as session, session.begin():
                await session.execute(text("SELECT 1"))
            ms.append((time.perf_counter() - started) * 1e3)

    for _ in range(writers):  # warm-up: every connection of the pool opened
        await writer(1)
    ms.clear()
    started = time.perf_counter()
    await asyncio.gather(*(writer(count // writers) for _ in range(writers)))
    _floors.setdefault(phase, []).append(
        Transactions(ms, len(ms) / (time.perf_counter() - started))
    )


def relative(measured: float, reference: float, label: str) -> Scale:
    """A figure measured here in the same run against the same figure on the reference."""
    return Scale(measured / reference, label)


def floor(measured: float, reference: float) -> Scale:
    """The operation's own floor (an empty variant), measured here against the reference's."""
    return relative(measured, reference, "floor")


def number(value: float) -> str:
    """A figure in three significant digits or so, thousands separated."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _with_unit(value: str, unit: str) -> str:
    return f"{value} {unit}" if unit else value


def at_most(value: float, limit: float, scale: Scale, unit: str = "") -> tuple[str, bool]:
    """The budget text and verdict for ``value`` ≤ ``limit`` (set on the reference) × scale."""
    allowed = limit * scale.factor
    text = (
        f"≤ {_with_unit(f'{limit:,g}', unit)} × {scale.factor:.2f} {scale.label} "
        f"= {_with_unit(number(allowed), unit)}"
    )
    return text, value <= allowed


def at_least(value: float, limit: float, scale: Scale, unit: str = "") -> tuple[str, bool]:
    """The budget text and verdict for a rate: ``value`` ≥ ``limit`` ÷ scale."""
    allowed = limit / scale.factor
    text = (
        f"≥ {_with_unit(f'{limit:,g}', unit)} ÷ {scale.factor:.2f} {scale.label} "
        f"= {_with_unit(number(allowed), unit)}"
    )
    return text, value >= allowed
