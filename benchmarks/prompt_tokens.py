"""Prompt tokens per turn, by part, beside an llmcord-shaped baseline; and the kept prefix.

The real bot (dpytest, the chat cog, the memory service, embedded PostgreSQL, the
``openai`` client over HTTP) answers a scripted chat (benchmarks/data/prompt_conversation.json)
through the scripted server, which writes the memory every ``--summary-every`` turns (an
``update_short_term_memory`` call in the answer) and stores one "remember that…" fact. The
request body the server received for each answer is split into parts (tools, persona,
memory, other channels, recall, raw window, notes; :func:`note_part`) and counted with
tiktoken's cl100k_base, at these points:

- the first turn; the turns at 25, 100 and 200 messages of one channel (a member's
  message and the bot's answer each turn);
- a turn after 200 messages nobody addressed to the bot;
- a turn 25 messages into a channel of a server whose 3 other channels have memories.

Beside each, an llmcord-shaped baseline on the same conversation: a one-sentence system
prompt with the date and time, and the channel's last 25 messages. Over the 100 turns of
the first channel, the share of each prompt (its tools then messages, as JSON) that is an
exact prefix of the previous turn's, with free and with strict roles. docs/scaling.md
explains the figures.

Usage: ``python benchmarks/prompt_tokens.py [--turns 100] [--summary-every 10] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import discord

import tests.helpers.messages as fake_messages
from benchmarks._figures import Figure, emit
from benchmarks._prompt_parts import (
    COUNTER,
    PARTS,
    content_text,
    kept_prefix,
    llmcord_tokens,
    prompt_parts,
    serialized,
)
from benchmarks.recall.posting import snowflake_at
from bot.app import KiokuBot, build_bot
from bot.config import Settings, load_settings
from bot.conversation.summarizer.facts import FACTS_SYSTEM
from bot.conversation.summarizer.prompt import SYSTEM_CATEGORIES, SYSTEM_SUMMARY
from bot.conversation.tools.longterm import REMEMBER_TOOL_NAME
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.engine import Database
from bot.db.migrate import upgrade
from bot.llm.tokens.encodings import load_encoding
from tests.helpers.builders import ManualClock
from tests.helpers.dpytest_env import DpytestEnv, attach_dpytest, detach
from tests.helpers.fake_llm import ScriptedLLM

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "data" / "prompt_conversation.json"
START = datetime(2025, 3, 7, 9, 0, tzinfo=UTC)
# Budgets (issue 34): at most the baseline everywhere, half of it after 200 messages.
HALF_AT = "200 messages"
KEPT_PREFIX_BUDGET = 0.90


# ------------------------------------------------------------------------ the script


@dataclass(frozen=True)
class Line:
    """One turn of the script: who says what to the bot, and what the model does."""

    author: str
    text: str
    reply: str
    gist: str = ""
    fact: str | None = None  # a "remember that…" turn: the fact the model stores


@dataclass
class Script:
    """The scripted chat, its lines repeating in order."""

    members: list[str]
    lines: list[Line]
    remember_turn: int
    remember: Line

    @classmethod
    def load(cls, path: Path = SCRIPT) -> Script:
        data = json.loads(path.read_text(encoding="utf-8"))
        members = data["members"]
        lines = [
            Line(
                turn.get("author", members[index % len(members)]),
                turn["text"],
                turn["reply"],
                turn["gist"],
            )
            for index, turn in enumerate(data["turns"])
        ]
        remember = data["remember"]
        line = Line(remember["author"], remember["text"], remember["reply"], "", remember["fact"])
        return cls(members, lines, int(remember["turn"]), line)

    def line(self, turn: int) -> Line:
        """Turn ``turn``'s line (1-based)."""
        if turn == self.remember_turn:
            return self.remember
        return self.lines[(turn - 1) % len(self.lines)]

    def summary(self, turn: int, label: str) -> str:
        """The memory the model writes at ``turn``: the gists so far, newest kept."""
        gists = list(dict.fromkeys(self.line(t).gist for t in range(1, turn + 1)))
        kept = [gist for gist in gists if gist][-14:]
        people = ", ".join(self.members)
        return f"Ongoing chat in {label} ({people}).\n" + "\n".join(f"- {g}" for g in kept)


# ------------------------------------------------------------------------- the world


@dataclass
class Channel:
    """A channel of the world and its conversation, as llmcord would read it."""

    channel: discord.TextChannel
    transcript: list[dict[str, str]] = field(default_factory=list)
    turns: int = 0
    last_answer: discord.Message | None = None


class World:
    """The bot on dpytest with the scripted server, and a clock moved a minute a message."""

    def __init__(self, bot: KiokuBot, env: DpytestEnv, llm: ScriptedLLM, clock: ManualClock):
        self.bot, self.env, self.llm, self.clock = bot, env, llm, clock
        self.script = Script.load()
        self._members: dict[tuple[int, str], discord.Member] = {}

    async def channel(self, guild: discord.Guild, name: str) -> Channel:
        return Channel(await self.env.create_text_channel(name, guild=guild))

    async def _member(self, guild: discord.Guild, name: str) -> discord.Member:
        key = (guild.id, name)
        if key not in self._members:
            self._members[key] = await self.env.create_member(name, guild=guild)
        return self._members[key]

    async def chatter(self, place: Channel, author: str, text: str) -> None:
        """A message nobody addressed to the bot."""
        self.clock.advance(minutes=1)
        member = await self._member(place.channel.guild, author)
        await self.env.send(text, channel=place.channel, author=member)
        place.transcript.append({"role": "user", "content": f"{author}: {text}"})

    async def turn(
        self, place: Channel, *, summary_every: int, reply_turn: int = 0
    ) -> dict[str, Any]:
        """The channel's next scripted turn; the body of the request that answered it."""
        await self.bot.tasks.wait()  # no summary of earlier messages running beside the turn
        place.turns += 1
        number = place.turns
        line = self.script.line(number)
        llm = self.llm
        llm.reset()
        if line.fact is not None:
            llm.reply_tool_calls([(REMEMBER_TOOL_NAME, {"fact": line.fact})])
        elif summary_every and number % summary_every == 0:
            label = f"#{place.channel.name}"
            llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": self.script.summary(number, label)})])
        llm.reply_text(line.reply)
        self.clock.advance(minutes=1)
        member = await self._member(place.channel.guild, line.author)
        reply_to = place.last_answer if number == reply_turn else None
        sent = len(self.env.sent)
        await self.env.send(
            line.text, channel=place.channel, author=member, mention_bot=True, reply_to=reply_to
        )
        await self.bot.tasks.wait()  # what the turn started (a summary, a capture)
        await self.bot.memory.writes_settled()
        body = next((r for r in llm.requests if _answers(r, line.text)), None)
        if body is None or len(self.env.sent) == sent:
            raise RuntimeError(f"turn {number} in #{place.channel.name} was not answered")
        answer = self.env.last_sent().message
        place.last_answer = answer
        place.transcript.append({"role": "user", "content": f"{line.author}: {line.text}"})
        place.transcript.append({"role": "assistant", "content": answer.content})
        return body


# The summarizer's requests (a capture of unaddressed messages) quote the chat too.
_BACKGROUND = tuple(prompt[:60] for prompt in (SYSTEM_SUMMARY, SYSTEM_CATEGORIES, FACTS_SYSTEM))


def _answers(body: Mapping[str, Any], text: str) -> bool:
    """Whether ``body`` is the request answering the member's ``text``."""
    messages = body.get("messages") or []
    if not messages or content_text(messages[0].get("content")).startswith(_BACKGROUND):
        return False
    return any(text in content_text(m.get("content")) for m in messages if m.get("role") == "user")


@contextlib.contextmanager
def clock_snowflakes(clock: ManualClock) -> Iterator[None]:
    """Message ids (and so times) from the harness clock while inside: the fake Discord
    stamps messages with the wall clock, which a clock moved by hand runs ahead of."""
    last = 0

    def snowflake() -> int:
        nonlocal last
        last = max(snowflake_at(clock.now()), last + 1)
        return last

    wall = fake_messages.snowflake
    fake_messages.snowflake = snowflake
    try:
        yield
    finally:
        fake_messages.snowflake = wall


# -------------------------------------------------------------------------- the runs


@dataclass(frozen=True)
class Options:
    """What to run: the first channel's turns, the points measured, the other scenarios."""

    turns: int = 100
    summary_every: int = 10
    points: tuple[tuple[str, int], ...] = (
        ("first turn", 1),
        ("25 messages", 13),
        ("100 messages", 50),
        ("200 messages", 100),
    )
    unaddressed: int = 200
    others: int = 3
    other_turns: int = 10
    beside_turns: int = 13  # the channel beside the others: measured at its 25th message
    reply_turn: int = 9  # a member answers the bot's last answer: the reply-chain note
    strict_pass: bool = True  # the first channel again with strict roles, for its prefix


@dataclass
class Point:
    """One measured turn: Kioku's prompt by part, and the baseline's on the same chat."""

    name: str
    parts: dict[str, int]
    llmcord: int
    messages: int  # in the channel, the one answered included

    @property
    def total(self) -> int:
        return sum(self.parts.values())


@dataclass
class Results:
    points: list[Point]
    bodies: dict[str, list[dict[str, Any]]]  # the first channel's requests, by roles
    seconds: float = 0.0

    def kept(self, roles: str) -> list[float]:
        """Each turn's kept prefix of the previous turn's prompt (from the second turn)."""
        shown = [serialized(body) for body in self.bodies.get(roles, [])]
        return [kept_prefix(a, b) for a, b in itertools.pairwise(shown)]


def _settings(folder: Path, llm: ScriptedLLM, options: Options, *, strict: bool) -> Settings:
    return load_settings(
        database_url=None,
        data_dir=folder,
        openai_base_url=llm.base_url,
        openai_api_key="bench",
        model="gpt-4",  # cl100k_base, so a counter by model agrees with the figures
        provider="openai",
        # One member may answer many turns a minute; the scripted model writes the memory
        # every summary_every turns, so the cadence falls on those turns.
        llm={
            "max_retries": 0,
            "turns_per_user_per_minute": 0,
            "strict_roles": "on" if strict else "off",
        },
        stm={"refresh_cadence": max(1, options.summary_every)},
    )


def _point(name: str, place: Channel, body: Mapping[str, Any], at: datetime) -> Point:
    asked = place.transcript[:-1]  # the llmcord-shaped prompt ends with the message answered
    return Point(name, prompt_parts(body), llmcord_tokens(asked, at), len(asked))


async def _first_channel(
    world: World, guild: discord.Guild, options: Options
) -> tuple[list[Point], list[dict[str, Any]]]:
    """The long conversation: a point at each of ``options.points``, every turn's body."""
    place = await world.channel(guild, "general")
    wanted = {turn: name for name, turn in options.points}
    points, bodies = [], []
    for turn in range(1, options.turns + 1):
        at = world.clock.now()
        body = await world.turn(
            place, summary_every=options.summary_every, reply_turn=options.reply_turn
        )
        bodies.append(body)
        if turn in wanted:
            points.append(_point(wanted[turn], place, body, at))
    return points, bodies


async def _unaddressed(world: World, guild: discord.Guild, options: Options) -> Point:
    """A turn after ``options.unaddressed`` messages nobody addressed to the bot."""
    place = await world.channel(guild, "general")
    members = world.script.members
    for index in range(options.unaddressed):
        # The script's lines in turn, but for the "remember that…" one: said to nobody.
        line = world.script.line(index + 1 + (index >= world.script.remember_turn - 1))
        await world.chatter(place, members[index % len(members)], line.text)
    at = world.clock.now()
    body = await world.turn(place, summary_every=0)
    return _point(f"{options.unaddressed} unaddressed", place, body, at)


async def _beside_others(world: World, guild: discord.Guild, options: Options) -> Point:
    """A turn in a channel whose server's ``options.others`` other channels have memories."""
    for name in ("raids", "food", "tech", "art", "music")[: options.others]:
        other = await world.channel(guild, name)
        for _ in range(options.other_turns):
            await world.turn(other, summary_every=options.other_turns)
    place = await world.channel(guild, "general")
    for _ in range(options.beside_turns - 1):
        await world.turn(place, summary_every=options.summary_every)
    at = world.clock.now()
    body = await world.turn(place, summary_every=options.summary_every)
    return _point(f"{options.others} other channels with memory", place, body, at)


async def _pass(
    database: Database, llm: ScriptedLLM, settings: Settings, options: Options, *, full: bool
) -> tuple[list[Point], list[dict[str, Any]]]:
    """One bot's run on a world of its own: the first channel and, when ``full``, the rest."""
    clock = ManualClock(START)
    bot = build_bot(settings, database=database, clock=clock, janitor=False, serve_metrics=False)
    with clock_snowflakes(clock):
        env = await attach_dpytest(
            bot,
            guilds=["chat", "quiet", "busy"] if full else ["strict chat"],
            text_channels=[],
            members=[],
            run_setup_hook=True,
            # Each world's own ids: the second bot must not find the first one's memories.
            base_id=None,
        )
        world = World(bot, env, llm, clock)
        try:
            points, bodies = await _first_channel(world, env.guilds[0], options)
            if full:
                points.append(await _unaddressed(world, env.guilds[1], options))
                points.append(await _beside_others(world, env.guilds[2], options))
        finally:
            await detach(bot)
    return points, bodies


async def measure(options: Options, *, database: Database | None = None) -> Results:
    """Run the scenarios against the scripted server, on ``database`` (else an embedded
    PostgreSQL of its own, in a temporary folder)."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kioku-prompt-tokens-") as folder:
        async with ScriptedLLM(fallback_text="Sure.") as llm:
            free = _settings(Path(folder), llm, options, strict=False)
            own = database is None
            if database is None:
                database = Database(free)
                await database.start()
            try:
                if own:
                    await upgrade(database.engine)
                points, bodies = await _pass(database, llm, free, options, full=True)
                results = Results(points, {"free roles": bodies})
                if options.strict_pass:
                    strict = _settings(Path(folder), llm, options, strict=True)
                    _, strict_bodies = await _pass(database, llm, strict, options, full=False)
                    results.bodies["strict roles"] = strict_bodies
            finally:
                if own:
                    await database.close()
    results.seconds = time.perf_counter() - started
    return results


# ------------------------------------------------------------------------ the report


def counting_speed(body: Mapping[str, Any]) -> tuple[float, float, int]:
    """Milliseconds to count ``body`` with cl100k_base uncached and with the per-text
    cache (best of 5), and its tokens."""
    encoding = load_encoding("cl100k_base")
    texts = [content_text(m.get("content")) for m in body["messages"]]
    texts.append(json.dumps(body.get("tools") or [], ensure_ascii=False))
    tools = body.get("tools") or None

    def best(count: Any) -> float:
        runs = []
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(20):
                count()
            runs.append((time.perf_counter() - started) / 20)
        return min(runs) * 1000

    cold = best(lambda: [encoding.encode_ordinary(text) for text in texts])
    warm = best(lambda: COUNTER.count_messages(body["messages"], tools))
    return cold, warm, COUNTER.count_messages(body["messages"], tools)


def _parts_note(point: Point) -> str:
    shown = [f"{part} {point.parts[part]:,}" for part in PARTS if point.parts[part]]
    noun = "message" if point.messages == 1 else "messages"
    return " · ".join(shown) + f"; {point.messages} {noun} in the channel"


def figures(results: Results, options: Options) -> list[Figure]:
    """The run's figures for ``run_all.py``: tokens per point against the baseline, the
    kept prefix, how fast a prompt is counted."""
    found = []
    for point in results.points:
        budget = f"≤ llmcord-shaped {point.llmcord:,}"
        met = point.total <= point.llmcord
        if point.name == HALF_AT:
            budget = f"≤ 50 % of llmcord-shaped {point.llmcord:,}"
            met = point.total <= point.llmcord / 2
        share = point.total / point.llmcord if point.llmcord else 0.0
        found.append(
            Figure(
                f"prompt tokens, {point.name}",
                f"{point.total:,} ({share:.0%})",
                budget,
                met,
                _parts_note(point),
            )
        )
    for roles in results.bodies:
        kept = results.kept(roles)
        if not kept:
            continue
        median = statistics.median(kept)
        found.append(
            Figure(
                f"kept prompt prefix, {roles}",
                f"{median:.0%}",
                f"≥ {KEPT_PREFIX_BUDGET:.0%} (median)",
                median >= KEPT_PREFIX_BUDGET,
                f"min {min(kept):.0%} over {len(kept)} turns; memory written every "
                f"{options.summary_every} turns",
            )
        )
    last = results.bodies["free roles"][-1]
    cold, warm, tokens = counting_speed(last)
    found.append(
        Figure(
            "cl100k count of a turn's prompt",
            f"{cold:.2f} ms",
            note=f"{tokens:,} tokens uncached; {warm * 1000:.0f} µs with the per-text cache",
        )
    )
    return found


def parts_table(results: Results) -> str:
    """Tokens per part at each point, beside the baseline."""
    header = ["point", *PARTS, "total", "llmcord", "share"]
    rows = [
        [
            point.name,
            *(f"{point.parts[part]:,}" for part in PARTS),
            f"{point.total:,}",
            f"{point.llmcord:,}",
            f"{point.total / point.llmcord:.0%}" if point.llmcord else "-",
        ]
        for point in results.points
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.rjust(w) if i else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100, help="turns of the first channel")
    parser.add_argument("--summary-every", type=int, default=10, help="turns between memory writes")
    parser.add_argument("--no-strict", action="store_true", help="skip the strict-roles pass")
    parser.add_argument("--json", action="store_true", help="one line for run_all.py")
    args = parser.parse_args(argv)
    # The scripted server answers the summarizer's capture calls with a bare "Sure.",
    # which it refuses and logs: expected here, and not what is measured.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    defaults = Options()
    points = tuple((name, turn) for name, turn in defaults.points if turn <= args.turns)
    options = Options(
        turns=args.turns,
        summary_every=args.summary_every,
        points=points,
        strict_pass=not args.no_strict,
    )
    results = asyncio.run(measure(options))
    found = figures(results, options)
    if not args.json:
        print(f"prompt tokens by part (cl100k_base), {results.seconds:.0f} s\n")
        print(parts_table(results) + "\n")
    emit(found, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
