"""Fixtures of the harness's own tests: a bare ``commands.Bot`` on dpytest, with interactions."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.helpers.dpytest_env import DpytestEnv, attach_dpytest, detach, make_harness_bot
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
