"""The members the slash-command tests act as, besides the harness's plain member."""

from __future__ import annotations

import discord
import pytest

from tests.helpers.bot import KiokuHarness


@pytest.fixture
async def moderator(kioku: KiokuHarness) -> discord.Member:
    return await kioku.env.create_member("mod", kind="moderator")


@pytest.fixture
async def admin(kioku: KiokuHarness) -> discord.Member:
    return await kioku.env.create_member("admin", kind="admin")
