"""Cross-process cache propagation (issue: scale).

Two memory services with their own caches share one embedded PostgreSQL (and, in this
one process, one engine); B hears A's notices through its own LISTEN connection. Process
A writes STM updates; the figure is the time from the start of A's write (its commit
included) to B having evicted its stale copy (the notice handled), median and p99 over
the writes - an upper bound on propagation.

Usage: ``python benchmarks/coherence.py [--writes 500]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from _figures import Figure, at_most, emit, floor_of, round_trips

from bot.config import load_settings
from bot.db.engine import Database
from bot.db.migrate import upgrade
from bot.db.notify import CacheListener, Notice
from bot.memory.service import MemoryService
from bot.memory.turn.types import TurnState
from bot.vocabulary.clock import SystemClock


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--json", action="store_true", help="one line for run_all.py")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kioku-bench-") as folder:
        settings = load_settings(database_url=None, data_dir=Path(folder))
        database = Database(settings)
        await database.start()
        await upgrade(database.engine)
        assert database.url is not None
        a = MemoryService(database.sessions, settings, clock=SystemClock())
        b = MemoryService(database.sessions, settings, clock=SystemClock())
        arrivals: dict[int, float] = {}
        waiting: dict[int, asyncio.Event] = {}

        def on_notice(notice: Notice) -> None:
            b.apply_notice(notice)  # the eviction happens here, before the time is taken
            for _kind, _guild, _user, channel, version in notice.get("k", ()):
                if _kind == "server":
                    arrivals[int(version) * 1_000_000 + int(channel)] = time.perf_counter()
                    event = waiting.get(int(channel))
                    if event is not None:
                        event.set()

        listener = CacheListener(database.url, on_notice=on_notice, on_reset=b.drop_all)
        await listener.start()
        await round_trips("propagation", database.sessions, 1_000)  # the budget's, either side
        latencies: list[float] = []
        for i in range(args.writes):
            channel = 1_000 + i % 20
            turn = TurnState(
                channel_id=channel,
                user_id=7,
                guild_id=1,
                config=a.defaults,
                epoch=a.channel_epoch(channel),
                started_at=a.clock.now(),  # as prepare_turn sets it (the database guard)
            )
            # B holds the current version, so the notice has something stale to evict.
            await b.entry(turn.channel_key)
            assert turn.channel_key in b.cache
            waiting[channel] = asyncio.Event()
            # Measured from the start of the write: the notice is delivered on commit,
            # often before the writer's own await returns, so this is an upper bound.
            started = time.perf_counter()
            result = await a.update_stm(turn, summary=f"update {i}")
            assert result.ok, str(result)
            version = (await a.entry(turn.channel_key)).version
            async with asyncio.timeout(10):
                await waiting[channel].wait()
            assert turn.channel_key not in b.cache, "B still holds the stale version"
            latencies.append((arrivals[version * 1_000_000 + channel] - started) * 1000)
        await round_trips("propagation", database.sessions, 1_000)
        await listener.close()
        await database.close()

    latencies.sort()
    median = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    emit(
        [
            Figure(
                "cross-process propagation median",
                f"{median:.2f} ms",
                note=f"{args.writes} writes; write start → other cache evicted (upper bound)",
            ),
            Figure(
                "cross-process propagation p99",
                f"{p99:.2f} ms",
                *at_most(p99, 100, floor_of("propagation").tail(0.99), "ms"),
            ),
        ],
        args.json,
    )


if __name__ == "__main__":
    asyncio.run(main())
