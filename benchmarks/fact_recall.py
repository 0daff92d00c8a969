"""Long-term recall latency with 10,000 and 1,000,000 stored facts (issue: "make bench
gains recall p95 at 10k / 1M facts"; target ≤ 20 ms at 1M, where mem0 reports 200 ms and
Zep 155 ms).

What is timed is the call a turn makes, ``LongTermService.recall(user, guild, message,
opted_in, channel_ids=(channel,), own=True)``: full-text search over the user's own facts
in the server and over the facts captured in the channel, ranked together, cut to the
recall budget, recall counts bumped; no embeddings endpoint (full-text recall only).

Each size gets a fresh ``long_term_memories`` on an embedded PostgreSQL in a temporary
folder, filled by server-side ``INSERT … SELECT … FROM generate_series``, then
``VACUUM ANALYZE``d (a live table is vacuumed; a fresh bulk load would leave the
full-text index's pending list and the visibility map as no running bot sees them) and
checkpointed (so no write-back of the load overlaps the timed recalls):

- 95% captured facts (scope ``channel``): 950 per channel, channels spread over up to
  100 guilds (1M facts: 1,000 channels), each about a member of the guild (its
  ``user_id``), from that member's and another's words, with a ``refers_to`` date,
  written over the last year;
- 5% facts users asked for (scope ``user``): 50 per user, four in five in the user's
  own guild, the rest in the next;
- the rows of every channel and user interleaved on disk (round robin), as facts
  written over time are: a channel's or a user's facts are on as many pages as facts;
- each fact 8 to 16 words of a 4,000-word vocabulary, common words far more often than
  rare ones (a word's rank is drawn as ``V·r²``): the commonest word is in a sixth of
  all facts, the rarest in one in 700.

Queries are turn messages of one to four vocabulary words (drawn as the facts' are)
among stop words, one in five of words found nowhere, from a random user of a random
channel's guild; after a warm-up, p50 and p95 in ms.

    .venv/bin/python benchmarks/fact_recall.py [--facts 10000 1000000] [--recalls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _figures import Figure, at_most, emit, floor_of, round_trips
from sqlalchemy import Text, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY

from bot.config import load_settings
from bot.db.engine import Database
from bot.db.migrate import upgrade
from bot.memory.longterm.facts import LongTermService
from bot.vocabulary import STOP_WORDS, SystemClock

BUDGET_MS = 20.0  # at the large size, on the reference machine (_figures.py)
VOCABULARY = 4_000
PER_CHANNEL = 950  # captured facts per channel
PER_USER = 50  # facts a user asked for
USER_SHARE = 0.05  # of all facts
MAX_GUILDS = 100
CHUNK = 100_000  # rows per INSERT (one progress line each)
WARMUP = 20
NO_MATCH_SHARE = 0.2

# Discord-like 18-digit snowflakes, one range per kind of id.
GUILD_BASE = 300_000_000_000_000_000
CHANNEL_BASE = 400_000_000_000_000_000
USER_BASE = 500_000_000_000_000_000

# One fact's words: 8 to 16 of the vocabulary, a word's rank drawn as V·r² (common words
# often, rare ones seldom). The generate_series bound reads the outer row, so the
# subquery is run per row, not once.
_CONTENT = (
    "(SELECT string_agg((:vocab)[1 + floor(:v * random() ^ 2)::int], ' ') "
    "FROM generate_series(1, 8 + (i % 9)))"
)

_CAPTURED = text(
    "INSERT INTO long_term_memories (scope, user_id, guild_id, channel_id, "
    "readable_by_everyone, content, refers_to, source_user_ids, origin, origin_detail, "
    "created_at, updated_at) "
    "SELECT 'channel', about, guild, channel, true, content, written::date, "
    "ARRAY[about, other], 'summarizer', 'benchmark', written, written "
    "FROM (SELECT :channel_base + i % :channels AS channel, "
    ":guild_base + (i % :channels) % :guilds AS guild, "
    # Members of the channel's guild (users u with u % guilds == the guild's number).
    ":user_base + (i % :channels) % :guilds "
    "+ :guilds * floor(random() * :members)::bigint AS about, "
    ":user_base + (i % :channels) % :guilds "
    "+ :guilds * floor(random() * :members)::bigint AS other, "
    f"{_CONTENT} AS content, "
    "now() - random() * interval '365 days' AS written "
    "FROM generate_series(CAST(:start AS bigint), CAST(:stop AS bigint) - 1) AS i) AS fact"
).bindparams(bindparam("vocab", type_=ARRAY(Text)))

_OWN = text(
    "INSERT INTO long_term_memories (scope, user_id, guild_id, channel_id, "
    "readable_by_everyone, content, origin, origin_detail, created_at, updated_at) "
    "SELECT 'user', :user_base + owner, :guild_base + place, :channel_base + place, true, "
    "content, 'model_tool', 'benchmark', written, written "
    # Four facts in five said in the user's own guild, the fifth in the next one.
    "FROM (SELECT i % :users AS owner, "
    "(i % :users + CASE WHEN (i / :users) % 5 = 4 THEN 1 ELSE 0 END) % :guilds AS place, "
    f"{_CONTENT} AS content, "
    "now() - random() * interval '365 days' AS written "
    "FROM generate_series(CAST(:start AS bigint), CAST(:stop AS bigint) - 1) AS i) AS fact"
).bindparams(bindparam("vocab", type_=ARRAY(Text)))


@dataclass(frozen=True)
class Layout:
    """How ``facts`` facts are spread: ``captured`` over ``channels``, ``own`` over ``users``."""

    facts: int
    users: int
    own: int
    captured: int
    channels: int
    guilds: int

    @classmethod
    def of(cls, facts: int) -> Layout:
        users = max(1, round(facts * USER_SHARE / PER_USER))
        own = min(facts, users * PER_USER)
        captured = facts - own
        channels = max(1, math.ceil(captured / PER_CHANNEL))
        return cls(facts, users, own, captured, channels, min(MAX_GUILDS, channels))

    @property
    def members(self) -> int:
        """Users per guild (at least one, for the captured facts' members)."""
        return max(1, self.users // self.guilds)

    def describe(self) -> str:
        return (
            f"{self.captured:,} captured over {self.channels:,} channels of {self.guilds:,} "
            f"guilds, {self.own:,} own of {self.users:,} users"
        )


def label(facts: int) -> str:
    """10,000 → "10k", 1,000,000 → "1M" (as the figures are named)."""
    for size, unit in ((1_000_000, "M"), (1_000, "k")):
        if facts >= size and facts % (size // 10) == 0:
            return f"{facts / size:g}{unit}"
    return f"{facts:,}"


def vocabulary(count: int, rng: random.Random) -> list[str]:
    """``count`` distinct made-up words of two to four syllables (no "q" in any)."""
    onsets = [*"bcdfghjklmnprstvwz", "br", "ch", "dr", "fl", "gr", "kr", "pl", "sh", "st", "tr"]
    vowels = [*"aeiou", "ai", "ea", "io", "ou"]
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < count:
        word = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.randint(2, 4)))
        if word not in seen and word not in STOP_WORDS:
            seen.add(word)
            words.append(word)
    return words


def skewed(words: list[str], rng: random.Random) -> str:
    """A word drawn as the facts' words are (rank ``V·r²``)."""
    return words[min(len(words) - 1, int(len(words) * rng.random() ** 2))]


def message(words: list[str], rng: random.Random) -> str:
    """A turn's message: one to four words among stop words, or words found nowhere."""
    count = rng.randint(1, 4)
    if rng.random() < NO_MATCH_SHARE:
        picked = ["q" + "".join(rng.choices("aeiouxyz", k=6)) for _ in range(count)]
    else:
        picked = [skewed(words, rng) for _ in range(count)]
    return f"hey, do you remember what we said about the {' and '.join(picked)}?"


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def fill(database: Database, layout: Layout, words: list[str]) -> float:
    """Empty the table, fill it as ``layout`` says, vacuum and analyze; seconds taken."""
    started = time.perf_counter()
    common = {
        "vocab": words,
        "v": len(words),
        "guilds": layout.guilds,
        "guild_base": GUILD_BASE,
        "channel_base": CHANNEL_BASE,
        "user_base": USER_BASE,
    }
    async with database.engine.begin() as connection:
        await connection.execute(text("TRUNCATE long_term_memories CASCADE"))
    done = 0
    for statement, total, extra in (
        (_OWN, layout.own, {"users": layout.users}),
        (_CAPTURED, layout.captured, {"channels": layout.channels, "members": layout.members}),
    ):
        for start in range(0, total, CHUNK):
            stop = min(total, start + CHUNK)
            async with database.engine.begin() as connection:
                await connection.execute(text("SELECT setseed(:seed)"), {"seed": start / total})
                await connection.execute(
                    statement, {**common, **extra, "start": start, "stop": stop}
                )
            done += stop - start
            log(
                f"  filled {done:,} / {layout.facts:,} facts "
                f"({time.perf_counter() - started:.0f} s)"
            )
    autocommit = await database.engine.connect()
    try:
        connection = await autocommit.execution_options(isolation_level="AUTOCOMMIT")
        await connection.execute(text("VACUUM ANALYZE long_term_memories"))
        # Written out now, not by a checkpoint (and the kernel's write-back) while the
        # recalls are timed, each of which waits for its commit's WAL flush.
        await connection.execute(text("CHECKPOINT"))
    finally:
        await autocommit.close()
    elapsed = time.perf_counter() - started
    log(f"  vacuumed, analyzed, checkpointed ({elapsed:.0f} s)")
    return elapsed


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Measured:
    layout: Layout
    fill_s: float
    p50_ms: float
    p95_ms: float
    matched: int  # recalls that brought back a captured fact (a full-text match)
    recalls: int


async def measure(
    service: LongTermService, layout: Layout, words: list[str], recalls: int, seed: int
) -> tuple[list[float], int]:
    """``recalls`` timed recalls (after a warm-up) in ms, and how many of them brought
    back a captured fact (those are full-text matches; the user's own facts come back
    matched or not)."""
    rng = random.Random(seed)
    timings: list[float] = []
    matched = 0
    for index in range(WARMUP + recalls):
        channel = rng.randrange(layout.channels)
        guild = channel % layout.guilds
        # A member of the channel's guild (users u with u % guilds == guild), if any.
        members = range(guild, layout.users, layout.guilds)
        user = rng.choice(members) if members else rng.randrange(layout.users)
        query = message(words, rng)
        started = time.perf_counter()
        result = await service.recall(
            USER_BASE + user,
            GUILD_BASE + guild,
            query,
            False,
            may_show=None,
            channel_ids=(CHANNEL_BASE + channel,),
            own=True,
        )
        elapsed = (time.perf_counter() - started) * 1e3
        if index >= WARMUP:
            timings.append(elapsed)
            matched += any(fact.scope == "channel" for fact in result.facts)
    return timings, matched


async def bench(sizes: list[int], recalls: int) -> list[Measured]:
    words = vocabulary(VOCABULARY, random.Random(7))
    results: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="kioku-bench-recall-") as folder:
        settings = load_settings(data_dir=Path(folder), database_url=None)
        database = Database(settings)
        await database.start()
        try:
            await upgrade(database.engine)
            service = LongTermService(database.sessions, settings, SystemClock())
            for number, facts in enumerate(sizes):
                layout = Layout.of(facts)
                log(f"{facts:,} facts: {layout.describe()}")
                fill_s = await fill(database, layout, words)
                # The budget's floor, on both sides of the timed recalls.
                await round_trips(f"recall {facts}", database.sessions, 1_000)
                timings, matched = await measure(service, layout, words, recalls, number)
                await round_trips(f"recall {facts}", database.sessions, 1_000)
                results.append(
                    Measured(
                        layout,
                        fill_s,
                        statistics.median(timings),
                        percentile(timings, 0.95),
                        matched,
                        recalls,
                    )
                )
                log(f"  recall p50 {results[-1].p50_ms:.2f} ms, p95 {results[-1].p95_ms:.2f} ms")
        finally:
            await database.close()
    return results


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def figures(results: list[Measured]) -> list[Figure]:
    out: list[Figure] = []
    large = results[-1]
    for result in results:
        name = label(result.layout.facts)
        where = (
            f"{result.recalls} recalls ({result.matched} with a captured match); "
            f"{plural(result.layout.channels, 'channel')}, {plural(result.layout.users, 'user')}"
        )
        out.append(Figure(f"recall p50 at {name} facts", f"{result.p50_ms:.2f} ms", note=where))
        if result is large:
            out.append(
                Figure(
                    f"recall p95 at {name} facts",
                    f"{result.p95_ms:.2f} ms",
                    *at_most(
                        result.p95_ms,
                        BUDGET_MS,
                        floor_of(f"recall {result.layout.facts}").tail(0.95),
                        "ms",
                    ),
                    f"{where}; mem0 reports 200 ms, Zep 155 ms",
                )
            )
        else:
            out.append(Figure(f"recall p95 at {name} facts", f"{result.p95_ms:.2f} ms", note=where))
    out.append(
        Figure(
            f"fact fill at {label(large.layout.facts)} facts",
            f"{large.fill_s:.1f} s",
            note="INSERT … SELECT generate_series, VACUUM ANALYZE, CHECKPOINT (setup)",
        )
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--facts",
        type=int,
        nargs=2,
        default=[10_000, 1_000_000],
        metavar=("SMALL", "LARGE"),
        help="the two sizes, in facts (default 10000 1000000; the budget is the larger's)",
    )
    parser.add_argument("--recalls", type=int, default=200, help="timed recalls per size")
    parser.add_argument("--json", action="store_true", help="one line for run_all.py")
    args = parser.parse_args(argv)
    if min(args.facts) < 1 or args.recalls < 1:
        parser.error("--facts and --recalls must be at least 1")
    if label(args.facts[0]) == label(args.facts[1]):
        parser.error("--facts: two different sizes")
    sizes = sorted(args.facts)
    results = asyncio.run(bench(sizes, args.recalls))
    if not args.json:
        print("long-term recall (LongTermService.recall), full-text only")
        for result in results:
            print(
                f"  {result.layout.facts:>9,} facts ({result.layout.describe()}): "
                f"fill {result.fill_s:.1f} s, p50 {result.p50_ms:.2f} ms, "
                f"p95 {result.p95_ms:.2f} ms"
            )
        print()
    emit(figures(results), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
