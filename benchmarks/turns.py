"""End-to-end turns/s (issue: the bot).

Each turn goes through discord.py's real state (dpytest), the chat cog, the memory
service, the real ``openai`` client over HTTP to a zero-latency scripted server, and
PostgreSQL (embedded, in a temporary folder). Turns run concurrently over 100 channels;
one turn in five also makes the model call ``update_short_term_memory`` (a database
write). Prints turns/s and the share of turn time spent in the memory layer
(``prepare_turn``, prompt assembly, the STM write path, cadence bookkeeping).

Streamed and whole answers are measured in one process, runs alternating (``--repeats``
of each, medians quoted) so a machine shared with other work treats both alike. The
server answers at once, so every streamed answer is a fast one (sent once, no edit):
the figure is the cost of reading the event stream.

Usage: ``python benchmarks/turns.py [--channels 100] [--rounds 5] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _figures import Figure, emit

from bot.app import build_bot
from bot.config import load_settings
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.driver import statements_sent
from bot.db.engine import Database
from bot.db.migrate import upgrade
from tests.helpers.dpytest_env import attach_dpytest, detach
from tests.helpers.fake_llm import ScriptedLLM


class Stopwatch:
    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap_async(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return timed

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return timed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--channels", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant")
    parser.add_argument(
        "--stream",
        choices=("both", "on", "off"),
        default="both",
        help="measure streamed answers, whole ones, or both alternating",
    )
    parser.add_argument("--json", action="store_true", help="one line for run_all.py")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kioku-bench-") as folder:
        llm = await ScriptedLLM(fallback_text="Sure — noted.").start()
        settings = load_settings(
            database_url=None,
            data_dir=Path(folder),
            openai_base_url=llm.base_url,
            openai_api_key="bench",
            model="bench-model",
            # Three members answer 100 channels as fast as they can: no per-member limit.
            llm={"max_retries": 0, "turns_per_user_per_minute": 0},
            database={"pool_size": 10, "max_overflow": 0},
        )
        database = Database(settings)
        await database.start()
        await upgrade(database.engine)
        bot = build_bot(settings, database=database, janitor=False)
        env = await attach_dpytest(bot, text_channels=args.channels, members=3, run_setup_hook=True)
        memory_time, turn_time = Stopwatch(), Stopwatch()
        memory = bot.memory
        memory.prepare_turn = memory_time.wrap_async(memory.prepare_turn)  # type: ignore[method-assign]
        memory.update_stm = memory_time.wrap_async(memory.update_stm)  # type: ignore[method-assign]
        memory.finish_turn = memory_time.wrap(memory.finish_turn)  # type: ignore[method-assign]
        import bot.conversation.turn as turn_module

        turn_module.assemble = memory_time.wrap(turn_module.assemble)  # type: ignore[assignment]
        bot.turns.run = turn_time.wrap_async(bot.turns.run)  # type: ignore[method-assign]

        async def one_round(n: int) -> None:
            for i, _ in enumerate(env.channels):
                if (i + n) % 5 == 0:
                    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": f"round {n} notes"})])
            await asyncio.gather(
                *(
                    env.send(
                        f"message {n}", channel=channel, author=env.members[i % 3], mention_bot=True
                    )
                    for i, channel in enumerate(env.channels)
                )
            )

        async def run(streaming: bool) -> float:
            """Turns/s over ``args.rounds`` rounds with streaming on or off."""
            bot.turns.caps = dataclasses.replace(bot.turns.caps, streaming=streaming)
            started, cpu = time.perf_counter(), time.process_time()
            for n in range(args.rounds):
                await one_round(n)
            turns = args.rounds * len(env.channels)
            cpu_ms[streaming].append((time.process_time() - cpu) * 1000 / turns)
            return turns / (time.perf_counter() - started)

        # Warm-up, both ways: hydration, back-fill, connection pool, encoded answers.
        for warm, streaming in ((-1, False), (-2, True)):
            bot.turns.caps = dataclasses.replace(bot.turns.caps, streaming=streaming)
            await one_round(warm)
        memory_time.seconds = turn_time.seconds = 0.0
        llm.reset()
        variants = {"both": (False, True), "on": (True,), "off": (False,)}[args.stream]
        rates: dict[bool, list[float]] = {variant: [] for variant in variants}
        # CPU time of the process (bot, server, database client) per turn: steadier than
        # turns/s on a machine shared with other work.
        cpu_ms: dict[bool, list[float]] = {variant: [] for variant in variants}
        requests = 0
        for repeat in range(args.repeats):
            # A, B, B, A…: neither variant always runs later (the process warms and ages).
            for variant in variants if repeat % 2 == 0 else variants[::-1]:
                rates[variant].append(await run(variant))
                requests += len(llm.requests)
                llm.reset()  # recordings would grow the heap the collector walks
        turns = args.rounds * len(env.channels) * args.repeats * len(variants)
        # A warm turn: every channel already hydrated, no memory update this turn.
        statements: list[str] = []
        with statements_sent(database.engine, statements.append):
            for i, channel in enumerate(env.channels):
                await env.send(
                    "a quiet turn", channel=channel, author=env.members[i % 3], mention_bot=True
                )
        warm_queries = len(statements) / len(env.channels)
        await detach(bot)
        await database.close()
        await llm.stop()

    share = memory_time.seconds / turn_time.seconds if turn_time.seconds else 0.0
    runs = f"median of {args.repeats} runs of {args.rounds * args.channels} turns"
    figures: list[Figure] = []
    if False in rates:
        figures.append(
            Figure(
                "end-to-end turns/s",
                f"{statistics.median(rates[False]):,.0f}",
                note=f"{runs}, {args.channels} channels; mean turn "
                f"{turn_time.seconds / turns * 1000:.0f} ms under load, {requests} LLM calls",
            )
        )
    if True in rates:
        figures.append(
            Figure(
                "end-to-end turns/s (streamed)",
                f"{statistics.median(rates[True]):,.0f}",
                note=f"{runs}, answers streamed (runs alternate with whole answers)",
            )
        )
    if False in rates and True in rates:
        ratio = statistics.median(rates[True]) / statistics.median(rates[False])
        figures.append(
            Figure(
                "streamed / whole turns/s",
                f"{ratio:.2f}",
                "≥ 0.90",
                ratio >= 0.90,
                "turns/s "
                + _runs(rates[True])
                + " vs "
                + _runs(rates[False])
                + f"; CPU ms/turn {statistics.median(cpu_ms[True]):.1f}"
                + f" vs {statistics.median(cpu_ms[False]):.1f}",
            )
        )
    figures += [
        Figure("memory layer share of turn time", f"{share:.1%}"),
        Figure(
            "database queries per warm turn",
            f"{warm_queries:g}",
            "0",
            warm_queries == 0,
            "turns without a memory update, cache warm",
        ),
    ]
    emit(figures, args.json)


def _runs(rates: list[float]) -> str:
    return "/".join(f"{rate:.0f}" for rate in rates)


if __name__ == "__main__":
    asyncio.run(main())
