"""1,000 channels starting at once (issue 34): no "database unavailable", no query on a
warm turn, and how fast and how big.

One guild of ``--channels`` text channels on dpytest, three members, the chat cog, the
memory service, the real ``openai`` client over HTTP to a zero-latency scripted server,
and PostgreSQL (embedded, in a temporary folder) behind a pool of ``--pool`` connections
and no overflow. The database already holds every channel's memory and its members'
copies, as after a restart: nothing is cached.

cold  a message in every channel at once. Every channel's memory and its member's copy,
      the guild's settings and its other channels, each back-fill's wipe times and whether
      anyone has long-term facts load while the turns run; one turn in five also makes the
      model update its memory (a write through to the database).
warm  the same again, every channel at once, no memory update. The statements sent
      meanwhile (SQLAlchemy's ``before_cursor_execute`` on the engine, and asyncpg's query
      logger for the write path's own statements: ``bot.db.driver.statements_sent``) are
      counted per turn.

Also printed: turns/s of each round, the process's resident memory after them (the bot,
the scripted server and the harness; PostgreSQL is a process of its own), and the
"database unavailable" warnings ``bot.db.storage`` logged over both rounds.

Usage: ``python benchmarks/channels.py [--channels 1000] [--pool 10]``
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _figures import Figure, emit
from sqlalchemy import BigInteger, Text, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY

from bot.app import build_bot
from bot.config import load_settings
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.driver import statements_sent
from bot.db.engine import Database
from bot.db.migrate import upgrade
from tests.helpers.dpytest_env import DpytestEnv, attach_dpytest, detach
from tests.helpers.fake_llm import ScriptedLLM

MEMBERS = 3
# A round of a thousand turns takes tens of seconds on two cores: the harness's wait for
# one message's handlers must outlast it (it guards against a hang, it measures nothing).
EVENT_TIMEOUT_SECONDS = 600.0

_SEED = text(
    "INSERT INTO short_term_memories (scope_kind, guild_id, user_id, channel_id, summary, "
    "origin, version, updated_at) "
    "SELECT kind, :guild, member, channel, 'What #' || channel || ' settled: the launch "
    "moves to Friday, Dana owns the checklist, the demo needs a new build.', "
    "'model_tool', 1, now() "
    "FROM unnest(:kinds, :members, :channels) AS seeded(kind, member, channel)"
).bindparams(
    bindparam("kinds", type_=ARRAY(Text)),
    bindparam("members", type_=ARRAY(BigInteger)),
    bindparam("channels", type_=ARRAY(BigInteger)),
)


# The memories the cold round's turns updated (each update writes two rows).
_UPDATED = text("SELECT count(*) FROM short_term_memories WHERE summary = :words")


class Unavailable(logging.Handler):
    """Counts the "database unavailable" warnings (one per outage the breaker saw)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("database unavailable"):
            self.lines += 1


async def seed(database: Database, env: DpytestEnv) -> None:
    """Every channel's memory and the copy of the member who talks there, stored."""
    kinds: list[str] = []
    members: list[int | None] = []
    channels: list[int] = []
    for i, channel in enumerate(env.channels):
        for kind, member in (("server", None), ("user", env.members[i % MEMBERS].id)):
            kinds.append(kind)
            members.append(member)
            channels.append(channel.id)
    async with database.engine.begin() as connection:
        await connection.execute(
            _SEED,
            {"guild": env.guild.id, "kinds": kinds, "members": members, "channels": channels},
        )


async def one_round(env: DpytestEnv, llm: ScriptedLLM, words: str, *, writes: bool) -> float:
    """A message in every channel at once; the round's turns/s."""
    if writes:
        for _ in range(0, len(env.channels), 5):
            llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": f"{words}: noted"})])
    started = time.perf_counter()
    await asyncio.gather(
        *(
            env.send(words, channel=channel, author=env.members[i % MEMBERS], mention_bot=True)
            for i, channel in enumerate(env.channels)
        )
    )
    return len(env.channels) / (time.perf_counter() - started)


async def measure(channels: int, pool: int) -> list[Figure]:
    unavailable = Unavailable()
    logging.getLogger("bot.db.storage").addHandler(unavailable)
    with tempfile.TemporaryDirectory(prefix="kioku-bench-") as folder:
        llm = await ScriptedLLM(fallback_text="Sure — noted.", backlog=max(128, channels)).start()
        settings = load_settings(
            database_url=None,
            data_dir=Path(folder),
            openai_base_url=llm.base_url,
            openai_api_key="bench",
            model="bench-model",
            # Three members answer every channel as fast as they can: no per-member limit.
            llm={"max_retries": 0, "turns_per_user_per_minute": 0},
            database={"pool_size": pool, "max_overflow": 0},
        )
        database = Database(settings)
        await database.start()
        await upgrade(database.engine)
        bot = build_bot(settings, database=database, janitor=False)
        env = await attach_dpytest(
            bot,
            text_channels=channels,
            members=MEMBERS,
            run_setup_hook=True,
            event_timeout=EVENT_TIMEOUT_SECONDS,
        )
        await seed(database, env)
        cold_statements: list[str] = []
        with statements_sent(database.engine, cold_statements.append):
            cold = await one_round(env, llm, "what did we settle?", writes=True)
        await bot.memory.writes_settled()
        async with database.engine.connect() as connection:
            saved = await connection.scalar(_UPDATED, {"words": "what did we settle?: noted"})
        spooled = bot.memory.pending_sync
        llm.reset()
        warm_statements: list[str] = []
        with statements_sent(database.engine, warm_statements.append):
            warm = await one_round(env, llm, "and who owns the checklist?", writes=False)
        resident_mb = psutil.Process().memory_info().rss / 2**20
        answered = len(llm.requests)
        await detach(bot)
        await database.close()
        await llm.stop()
    logging.getLogger("bot.db.storage").removeHandler(unavailable)
    warm_queries = len(warm_statements) / channels
    setup = f"{channels:,} channels, {MEMBERS} members, a pool of {pool}, memories stored"
    label = f"{channels:,} channels at once"
    return [
        Figure(
            f"{label}: turns/s, cold",
            f"{cold:,.0f}",
            note=f"{setup}; every memory loads; {len(cold_statements) / channels:.2f} "
            f"statements per turn; {saved // 2} memory updates saved, {spooled} spooled",
        ),
        Figure(
            f"{label}: turns/s, warm",
            f"{warm:,.0f}",
            note=f"the same again, cached; {answered} model calls",
        ),
        Figure(f"{label}: resident memory", f"{resident_mb:,.0f} MB", note="bot process"),
        Figure(
            f"{label}: queries per warm turn",
            f"{warm_queries:g}",
            "0",
            warm_queries == 0,
            "every statement sent during the warm round, per turn",
        ),
        Figure(
            f'{label}: "database unavailable" lines',
            f"{unavailable.lines}",
            "0",
            unavailable.lines == 0,
            "logged over both rounds",
        ),
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--channels", type=int, default=1000)
    parser.add_argument("--pool", type=int, default=10, help="pool_size (no overflow)")
    parser.add_argument("--json", action="store_true", help="one line for run_all.py")
    args = parser.parse_args()
    emit(await measure(args.channels, args.pool), args.json)


if __name__ == "__main__":
    asyncio.run(main())
