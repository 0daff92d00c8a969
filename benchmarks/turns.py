"""End-to-end turns/s (issue: the bot).

Each turn goes through discord.py's real state (dpytest), the chat cog, the memory
service, the real ``openai`` client over HTTP to a zero-latency scripted server, and
PostgreSQL (embedded, in a temporary folder). Turns run concurrently over 100 channels;
one turn in five also makes the model call ``update_short_term_memory`` (a database
write). Prints turns/s and the share of turn time spent in the memory layer
(``prepare_turn``, prompt assembly, the STM write path, cadence bookkeeping).

Streamed and whole answers are measured in fresh processes, alternating (``--repeats``
of each, medians quoted): a process slows as it ages (its heap and its database grow),
which in one process favours whichever variant runs first. The server answers at once,
so every streamed answer is a fast one (sent once, no edit): the figure is the cost of
reading the event stream.

Usage: ``python benchmarks/turns.py [--channels 100] [--rounds 5] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _figures import MARK, Figure, emit

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
    figures = alternate(args) if args.stream == "both" else await measure(args)
    emit(figures, args.json)


def alternate(args: argparse.Namespace) -> list[Figure]:
    """Whole and streamed answers, each run in a fresh process, A B B A…"""
    runs: dict[bool, list[dict[str, Figure]]] = {False: [], True: []}
    for repeat in range(args.repeats):
        for streaming in (False, True) if repeat % 2 == 0 else (True, False):
            command = [sys.executable, __file__, "--stream", "on" if streaming else "off"]
            command += ["--repeats", "1", "--channels", str(args.channels)]
            command += ["--rounds", str(args.rounds), "--json"]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            line = next(line for line in out.splitlines() if line.startswith(MARK))
            found = [Figure(**f) for f in json.loads(line[len(MARK) :])]
            runs[streaming].append({f.name: f for f in found})

    def values(streaming: bool, name: str) -> list[float]:
        return [float(run[name].value.rstrip("%").replace(",", "")) for run in runs[streaming]]

    whole = values(False, "end-to-end turns/s")
    streamed = values(True, "end-to-end turns/s (streamed)")
    cpu = {s: statistics.median(values(s, "process CPU per turn")) for s in (False, True)}
    ratio = statistics.median(streamed) / statistics.median(whole)
    share = statistics.median(values(False, "memory layer share of turn time"))
    warm = max(values(False, "database queries per warm turn"))
    runs_note = (
        f"median of {args.repeats} runs of {args.rounds * args.channels} turns, "
        f"{args.channels} channels, each run a fresh process"
    )
    return [
        Figure("end-to-end turns/s", f"{statistics.median(whole):,.0f}", note=runs_note),
        Figure(
            "end-to-end turns/s (streamed)",
            f"{statistics.median(streamed):,.0f}",
            note=f"{runs_note}, answers streamed (alternating with whole answers)",
        ),
        Figure(
            "streamed / whole turns/s",
            f"{ratio:.2f}",
            "≥ 0.90",
            ratio >= 0.90,
            f"turns/s {_runs(streamed)} vs {_runs(whole)}; "
            f"CPU ms/turn {cpu[True]:.1f} vs {cpu[False]:.1f}",
        ),
        Figure("memory layer share of turn time", f"{share:.1f}%"),
        Figure(
            "database queries per warm turn",
            f"{warm:g}",
            "0",
            warm == 0,
            "turns without a memory update, cache warm",
        ),
    ]


async def measure(args: argparse.Namespace) -> list[Figure]:
    """One variant (``--stream on`` or ``off``) in this process, ``--repeats`` runs."""
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
        # A hang guard, not a measure: on a slow machine 100 concurrent first turns (hydration,
        # back-fill) outlast the tests' 10 s per message.
        env = await attach_dpytest(
            bot, text_channels=args.channels, members=3, run_setup_hook=True, event_timeout=300
        )
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

        streaming = args.stream == "on"
        bot.turns.caps = dataclasses.replace(bot.turns.caps, streaming=streaming)
        # Warm-up: hydration, back-fill, connection pool, encoded answers.
        await one_round(-1)
        memory_time.seconds = turn_time.seconds = 0.0
        llm.reset()
        rates: list[float] = []
        # CPU time of the process (bot, server, database client) per turn: steadier than
        # turns/s on a machine shared with other work.
        cpu_ms: list[float] = []
        requests = 0
        for _ in range(args.repeats):
            started, cpu = time.perf_counter(), time.process_time()
            for n in range(args.rounds):
                await one_round(n)
            turns = args.rounds * len(env.channels)
            cpu_ms.append((time.process_time() - cpu) * 1000 / turns)
            rates.append(turns / (time.perf_counter() - started))
            requests += len(llm.requests)
            llm.reset()  # recordings would grow the heap the collector walks
        turns = args.rounds * len(env.channels) * args.repeats
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
    name = "end-to-end turns/s (streamed)" if streaming else "end-to-end turns/s"
    return [
        Figure(
            name,
            f"{statistics.median(rates):,.0f}",
            note=f"median of {args.repeats} runs of {args.rounds * args.channels} turns, "
            f"{args.channels} channels; mean turn {turn_time.seconds / turns * 1000:.0f} ms "
            f"under load, {requests} LLM calls",
        ),
        Figure("process CPU per turn", f"{statistics.median(cpu_ms):.1f}", note="ms"),
        Figure("memory layer share of turn time", f"{share:.1%}"),
        Figure(
            "database queries per warm turn",
            f"{warm_queries:g}",
            "0",
            warm_queries == 0,
            "turns without a memory update, cache warm",
        ),
    ]


def _runs(rates: list[float]) -> str:
    return "/".join(f"{rate:.0f}" for rate in rates)


if __name__ == "__main__":
    asyncio.run(main())
