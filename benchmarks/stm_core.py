"""STM core figures (issue: short-term memory core).

Prints, in one run, on an embedded PostgreSQL in a temporary folder:
- prompt assembly (``prepare_turn`` + ``assemble``) median and p99 in µs, with 100,000
  entries in the cache;
- hydrate-on-miss p99 in ms with 1,000,000 rows in ``short_term_memories``;
- sustained STM updates/s (each writes the server and the user row and two audit events,
  after the same /refresh and /forget-me checks as a turn's write; concurrent updates
  share a transaction, as in production's group commit) and their p99 latency in ms.

Usage: ``python benchmarks/stm_core.py [--entries 100000] [--rows 1000000]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import random
import resource
import statistics
import tempfile
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path

from _figures import (
    Figure,
    at_least,
    at_most,
    calibrate_phase,
    emit,
    floor_of,
    machine,
    round_trips,
)
from sqlalchemy import text

from bot.config import load_settings
from bot.db.engine import Database
from bot.db.migrate import upgrade
from bot.memory.service import MemoryService
from bot.memory.stm.cache import StmCache
from bot.memory.turn.prompt import assemble
from bot.memory.turn.types import TurnStart, TurnState
from bot.vocabulary.clock import SystemClock
from bot.vocabulary.model import Marker, Provenance, RawMessage, ScopeKey, StmEntry

BOT_ID = 1
SUMMARY = ("The team agreed to ship on Friday; Alice owns the docs, Bob the release. " * 20)[:1500]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fill_cache(service: MemoryService, entries: int, guilds: int) -> list[tuple[int, int]]:
    """``entries`` server entries spread over ``guilds`` guilds, windows on a few."""
    now = service.clock.now()
    channels: list[tuple[int, int]] = []
    per_guild = entries // guilds
    for g in range(guilds):
        guild_id = 10_000 + g
        for c in range(per_guild):
            channel_id = guild_id * 1_000 + c
            service.cache.put(
                StmEntry(
                    key=ScopeKey.server(guild_id, channel_id),
                    updated_at=now - timedelta(minutes=c),
                    summary=SUMMARY,
                    version=1,
                )
            )
            channels.append((guild_id, channel_id))
    return channels


def add_window(service: MemoryService, channel_id: int, count: int = 50) -> None:
    now = service.clock.now()
    for i in range(count):
        service.observe_message(
            channel_id,
            RawMessage(
                message_id=channel_id * 100 + i,
                author_id=BOT_ID if i % 2 else 2 + i % 5,
                author_name="Kioku" if i % 2 else f"user{i % 5}",
                content=f"message number {i} about the launch plan and who does what",
                created_at=now,
                is_bot=bool(i % 2),
            ),
        )


async def bench_assembly(service: MemoryService, entries: int) -> tuple[float, float]:
    # 1,000 guilds (fewer for a small run, so each has a channel to sample).
    channels = fill_cache(service, entries, guilds=max(1, min(1_000, entries)))
    sample = random.Random(1).sample(channels, min(200, len(channels)))
    for _, channel_id in sample:
        add_window(service, channel_id)
    for guild_id, _ in sample:
        service._state.guilds_hydrated[guild_id] = True  # measured warm: no database on this path
        await service.guild_config(guild_id)  # one read each, then cached

    def label(entry: StmEntry) -> str:
        return f"#c{entry.key.channel_id % 1000}"

    # The budget's calibration, on both sides of the timed loop and on the heap it runs on.
    calibrate_phase("assembly")
    timings: list[float] = []
    for round_ in range(60):
        for guild_id, channel_id in sample:
            started = time.perf_counter()
            prepared = await service.prepare_turn(
                TurnStart(
                    channel_id=channel_id,
                    user_id=7,
                    guild_id=guild_id,
                    bot_user_id=BOT_ID,
                    label_for=label,
                )
            )
            assemble(prepared.prompt)
            if round_ >= 10:
                timings.append((time.perf_counter() - started) * 1e6)
    calibrate_phase("assembly")
    return statistics.median(timings), percentile(timings, 0.99)


async def bench_hydrate(database: Database, service: MemoryService, rows: int) -> float:
    async with database.engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO short_term_memories (scope_kind, guild_id, channel_id, summary, "
                "origin, version, updated_at) "
                "SELECT 'server', 1 + n / 100, 5000000 + n, :summary, 'model_tool', 1, now() "
                "FROM generate_series(1, :rows) AS n"
            ),
            {"summary": SUMMARY[:600], "rows": rows},
        )
        await connection.execute(text("ANALYZE short_term_memories"))
    rng = random.Random(2)
    await round_trips("hydrate", service.sessions, 1_000)  # the budget's floor, either side
    timings: list[float] = []
    for i in range(1_200):
        n = rng.randint(1, rows)
        key = ScopeKey.server(1 + n // 100, 5_000_000 + n)
        service.cache.pop(key)
        started = time.perf_counter()
        entry = await service.entry(key)
        elapsed = (time.perf_counter() - started) * 1e3
        assert entry.has_summary, "hydration found nothing"
        if i >= 200:
            timings.append(elapsed)
    await round_trips("hydrate", service.sessions, 1_000)
    return percentile(timings, 0.99)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def bench_upserts(
    service: MemoryService, updates: int, workers: int
) -> tuple[float, float, float]:
    """STM updates/s, their p99 (ms), and the bot process's CPU per update (ms)."""
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(updates):
        queue.put_nowait(i)

    async def worker(w: int) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            channel_id = 9_000_000 + (i % 100)
            turn = TurnState(
                channel_id=channel_id,
                user_id=100 + w,
                guild_id=77,
                config=service.defaults,
                epoch=service.channel_epoch(channel_id),
                # As prepare_turn sets it: the write also checks /refresh and /forget-me
                # times in the database (the cross-process guard), as in production.
                started_at=service.clock.now(),
            )
            started = time.perf_counter()
            result = await service.update_stm(turn, summary=f"{SUMMARY[:800]} #{i}")
            latencies.append((time.perf_counter() - started) * 1e3)
            assert result.ok, str(result)

    await round_trips("upserts", service.sessions, 1_000, writers=workers)  # either side
    started, cpu = time.perf_counter(), _cpu_seconds()
    await asyncio.gather(*(worker(w) for w in range(workers)))
    elapsed = time.perf_counter() - started
    cpu_ms = (_cpu_seconds() - cpu) * 1e3 / updates
    await round_trips("upserts", service.sessions, 1_000, writers=workers)
    return updates / elapsed, percentile(latencies, 0.99), cpu_ms


def bench_cache_bytes(entries: int) -> float:
    """Bytes the cache adds per entry, beyond the memory text itself: the entry object,
    its key, counters, marker, contributor list, the TLRU bookkeeping and the indexes."""
    clock = SystemClock()
    cache = StmCache(maxsize=entries + 1, ttl_summary_s=86_400, ttl_empty_s=43_200, clock=clock)
    now = clock.now()
    texts = [f"{SUMMARY[:600]} #{i}" for i in range(entries)]  # allocated before measuring
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    snowflake = 1_234_567_890_123_456_789  # 19 digits, like Discord ids
    for i, summary in enumerate(texts):
        key = ScopeKey.server(snowflake + i // 100, snowflake + i)
        # Each entry with its own marker hash, timestamp and ids, as real ones have.
        cache.put(
            StmEntry(
                key=key,
                updated_at=now - timedelta(microseconds=i),
                summary=summary,
                marker=Marker(snowflake + i, hashlib.sha256(str(i).encode()).hexdigest()),
                contributor_ids=[snowflake + 7 + i, snowflake + 8 + i],
                provenance=Provenance("model_tool", "model", snowflake + 7 + i, snowflake + i),
                version=1,
            )
        )
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / entries


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--updates", type=int, default=3_000)
    parser.add_argument("--writers", type=int, default=8, help="concurrent STM writers")
    parser.add_argument("--json", action="store_true", help="one line for run_all.py")
    args = parser.parse_args()
    overhead = bench_cache_bytes(args.entries)

    with tempfile.TemporaryDirectory(prefix="kioku-bench-") as folder:
        settings = load_settings(
            database_url=None,
            data_dir=Path(folder),
            stm={"cache_max_entries": args.entries + 10_000},
            database={"pool_size": 10, "max_overflow": 0},
        )
        database = Database(settings)
        await database.start()
        try:
            await upgrade(database.engine)
            service = MemoryService(database.sessions, settings, clock=SystemClock())
            asm_median, asm_p99 = await bench_assembly(service, args.entries)
            hydrate_p99 = await bench_hydrate(database, service, args.rows)
            rate, upsert_p99, cpu_ms = await bench_upserts(
                service, args.updates, workers=args.writers
            )
        finally:
            await database.close()

    emit(
        [
            Figure(
                "prompt assembly median",
                f"{asm_median:.0f} µs",
                note=f"{args.entries:,} entries cached",
            ),
            Figure(
                "prompt assembly p99",
                f"{asm_p99:.0f} µs",
                *at_most(asm_p99, 200, machine("assembly").tail(0.99), "µs"),
            ),
            Figure(
                "hydrate-on-miss p99",
                f"{hydrate_p99:.2f} ms",
                *at_most(hydrate_p99, 5, floor_of("hydrate").tail(0.99), "ms"),
                f"{args.rows:,} rows",
            ),
            Figure(
                "row upserts/s",
                f"{2 * rate:,.0f}",
                *at_least(2 * rate, 1000, floor_of("upserts").rate),
                f"{rate:,.0f} STM updates/s (server + user row, 2 events each), "
                f"{args.writers} writers",
            ),
            Figure(
                "STM update p99", f"{upsert_p99:.1f} ms", note=f"{args.writers} concurrent writers"
            ),
            Figure(
                "bot CPU per STM update",
                f"{cpu_ms:.2f} ms",
                note="the bot's process (PostgreSQL not counted): the upsert rate's limit",
            ),
            Figure(
                "cache bytes per entry beyond the text",
                f"{overhead:,.0f} B",
                "≤ 2 KB",
                overhead <= 2048,
                f"tracemalloc, {args.entries:,} entries",
            ),
        ],
        args.json,
    )


if __name__ == "__main__":
    asyncio.run(main())
