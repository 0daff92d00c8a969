"""The real Kioku bot on dpytest, the test database and the scripted LLM.

``kioku`` gives a :class:`KiokuHarness`: the bot built by ``build_bot`` (its real
``setup_hook``: memory service, turn runner, cogs, error handler), attached to dpytest
with deterministic ids, talking to the ``llm`` fixture's server, plus an
:class:`InteractionHarness` for slash commands. Tables are emptied before each test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

from bot.app import KiokuBot, build_bot
from bot.db.engine import Database
from tests.helpers.builders import ManualClock
from tests.helpers.database import make_test_settings
from tests.helpers.dpytest_env import DEFAULT_BASE_ID, DpytestEnv, attach_dpytest, detach
from tests.helpers.fake_cdn import FakeCdn
from tests.helpers.fake_llm import ScriptedLLM
from tests.helpers.interactions import InteractionHarness


@dataclass
class KiokuHarness:
    bot: KiokuBot
    env: DpytestEnv
    interactions: InteractionHarness
    llm: ScriptedLLM
    clock: ManualClock
    database: Database


async def start_kioku(
    database: Database,
    llm: ScriptedLLM,
    pg_url: URL,
    data_dir: Path,
    *,
    base_id: int | None = DEFAULT_BASE_ID,
    clock: ManualClock | None = None,
    members: int = 3,
    channels: int = 1,
    guilds: int = 1,
    settings: dict[str, Any] | None = None,
) -> KiokuHarness:
    """Start the bot; ``settings`` overrides the test defaults (nested sections merge)."""
    overrides: dict[str, Any] = {
        "openai_base_url": llm.base_url,
        "openai_api_key": "test-key",
        "model": "test-model",
        # A few members make all of a test's turns, on a clock that stands still: no
        # per-member limit unless a test sets one.
        "llm": {"max_retries": 0, "timeout_seconds": 5, "turns_per_user_per_minute": 0},
        # Background capture makes model calls a test did not script: off unless a test
        # turns it on (tests/discord/test_capture.py).
        "stm": {"capture_after_messages": 0},
        # So does the facts call after each summary: off unless a test turns it on.
        "longterm": {"capture_facts": False},
    }
    for name, value in (settings or {}).items():
        if isinstance(value, dict) and isinstance(overrides.get(name), dict):
            overrides[name] = {**overrides[name], **value}
        else:
            overrides[name] = value
    # dpytest's message times are real (time-based snowflakes): the bot's clock starts
    # at the real time too, so "sent before the /refresh" compares like with like.
    clock = clock or ManualClock(datetime.now(UTC))
    cdn = FakeCdn()
    bot = build_bot(
        make_test_settings(pg_url, data_dir, **overrides),
        database=database,
        clock=clock,
        janitor=False,
        image_fetcher=cdn,
    )
    env = await attach_dpytest(
        bot,
        base_id=base_id,
        members=members,
        text_channels=channels,
        guilds=guilds,
        run_setup_hook=True,
    )
    cdn.world = env
    return KiokuHarness(bot, env, InteractionHarness(bot), llm, clock, database)


async def stop_kioku(harness: KiokuHarness) -> None:
    harness.interactions.close()
    await detach(harness.bot)


@pytest.fixture
async def kioku(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> AsyncIterator[KiokuHarness]:
    harness = await start_kioku(db, llm, pg_url, tmp_path)
    try:
        yield harness
    finally:
        await stop_kioku(harness)
