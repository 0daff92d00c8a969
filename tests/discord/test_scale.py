"""Many channels through the bot: a warm turn sends no statement at all (access lists, guild
settings, memory, other channels, long-term recall, turn counts), and many cold channels
starting at once on a pool of two connections all load their memories, in a few batched
queries, without the database ever being taken for unavailable."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from bot.vocabulary.model import ScopeKey
from tests.helpers.builders import BOB, make_service, prepare
from tests.helpers.chat_world import KiokuStarter, running_kioku, stm_call
from tests.helpers.database import count_statements, make_test_settings
from tests.helpers.fake_llm import ScriptedLLM


async def test_a_warm_turn_through_the_bot_sends_no_statement(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(channels=4) as kioku:
        env = kioku.env
        # Two channels get a memory; then every member talks in every channel once (the
        # cold loads: memories and members' copies, wipe times, facts, other channels).
        for channel in env.channels[:2]:
            llm.reply_tool_calls([stm_call(f"what #{channel.name} settled")])
            await env.send("we settled it", channel=channel, mention_bot=True)
        for member in env.members:
            for channel in env.channels:
                await env.send("hello", channel=channel, author=member, mention_bot=True)
        await kioku.bot.memory.writes_settled()
        sent_before, asked_before = len(env.sent), len(llm.requests)

        with count_statements(kioku.database.engine) as counter:
            for member in env.members:
                for channel in env.channels:
                    await env.send("and now?", channel=channel, author=member, mention_bot=True)

        assert counter.statements == []
        assert len(env.sent) - sent_before == len(env.members) * len(env.channels)  # answered
        # The warm turns did show the memories (of their own and of other channels).
        assert all("what #" in str(llm.messages(i)) for i in range(asked_before, len(llm.requests)))


CHANNELS = 60


@pytest.fixture
async def small_pool(db: Database, pg_url: URL, tmp_path: Path) -> AsyncIterator[Database]:
    """The test database behind a pool of two connections and no overflow."""
    small = Database(
        make_test_settings(pg_url, tmp_path, database={"pool_size": 2, "max_overflow": 0})
    )
    await small.start()
    yield small
    await small.close()


async def test_many_cold_channels_at_once_on_a_small_pool_load_every_memory_in_a_few_queries(
    small_pool: Database,
    llm: ScriptedLLM,
    pg_url: URL,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="bot.db.storage")
    async with running_kioku(
        small_pool,
        llm,
        pg_url,
        tmp_path,
        channels=CHANNELS,
        settings={"database": {"pool_size": 2, "max_overflow": 0}},
    ) as kioku:
        env, bot = kioku.env, kioku.bot
        # Every channel's memory is stored (by another process, or before a restart):
        # nothing of it is cached here.
        elsewhere = make_service(small_pool.sessions, bot.settings, kioku.clock)
        for channel in env.channels:
            turn = (await prepare(elsewhere, BOB, channel=channel.id, guild=env.guild.id)).turn
            assert (await elsewhere.update_stm(turn, summary=f"memory of #{channel.name}")).ok

        with count_statements(small_pool.engine) as counter:
            await asyncio.gather(
                *(
                    env.send("what did we say?", channel=channel, author=member, mention_bot=True)
                    for channel, member in zip(env.channels, env.members * CHANNELS, strict=False)
                )
            )

        unavailable = [r for r in caplog.records if "database unavailable" in r.getMessage()]
        assert unavailable == []
        for channel in env.channels:
            entry = bot.memory.cached_entry(ScopeKey.server(env.guild.id, channel.id))
            assert entry is not None and entry.summary == f"memory of #{channel.name}"
        assert len(llm.requests) == CHANNELS
        prompts = "\n".join(str(llm.messages(i)) for i in range(CHANNELS))
        assert all(f"memory of #{channel.name}" in prompts for channel in env.channels)
        # 120 keys (each channel's memory and its member's copy), 60 back-fills' wipe
        # times, 60 members' and channels' facts: a few batches each, not one query each.
        loads = [s for s in counter.statements if "JOIN unnest" in s]
        wipe_reads = [s for s in counter.statements if "FROM stm_clears" in s]
        fact_checks = [s for s in counter.statements if "AS scope" in s]
        assert 1 <= len(loads) <= 10, len(loads)
        assert 1 <= len(wipe_reads) <= 10, len(wipe_reads)
        assert 1 <= len(fact_checks) <= 10, len(fact_checks)
