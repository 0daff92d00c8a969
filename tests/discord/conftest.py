"""Fixtures of the harness's own tests (a bare ``commands.Bot`` on dpytest, with
interactions), the real bot started with a test's own options, and the members the
real bot's tests act as besides the harness's plain member."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path

import discord
import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from tests.helpers.bot import KiokuHarness
from tests.helpers.chat_world import KiokuStarter, running_kioku
from tests.helpers.dpytest_env import DpytestEnv, attach_dpytest, detach, make_harness_bot
from tests.helpers.fake_llm import ScriptedLLM
from tests.helpers.interactions import InteractionHarness


@pytest.fixture
async def harness_env() -> AsyncIterator[DpytestEnv]:
    """A ``make_harness_bot`` bot attached with deterministic ids, detached afterwards."""
    bot = make_harness_bot()
    env = await attach_dpytest(bot)
    try:
        yield env
    finally:
        await detach(bot)


@pytest.fixture
async def interaction_harness(harness_env: DpytestEnv) -> AsyncIterator[InteractionHarness]:
    harness = InteractionHarness(harness_env.bot)
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture
def kioku_with(db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path) -> KiokuStarter:
    """The real bot with options of the test's own: ``async with kioku_with(settings=...)``."""
    return functools.partial(running_kioku, db, llm, pg_url, tmp_path)


@pytest.fixture
async def moderator(kioku: KiokuHarness) -> discord.Member:
    return await kioku.env.create_member("mod", kind="moderator")


@pytest.fixture
async def admin(kioku: KiokuHarness) -> discord.Member:
    return await kioku.env.create_member("admin", kind="admin")
