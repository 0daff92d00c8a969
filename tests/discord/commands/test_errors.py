"""The commands' error handler on the real bot: answers in time, on an outage or a
stalled database, in a DM, and on an unexpected error."""

from __future__ import annotations

import logging
from typing import Any

import discord
import pytest

from bot.cogs.errors import GUILD_ONLY, SOMETHING_WENT_WRONG, UNAVAILABLE
from bot.cogs.stm import forms as stm_forms
from bot.db.storage import faults
from tests.helpers.bot import KiokuHarness
from tests.helpers.builders import settings_changed_elsewhere
from tests.helpers.stm_commands import break_database


@pytest.mark.parametrize(
    ("command", "reads"),
    [
        ("stm show", "guild_config"),
        ("stm settings", "guild_config"),
        ("stm history", "recent_events"),
        ("stm categories list", "guild_config"),
        ("stm categories clear", "guild_config"),
    ],
)
async def test_commands_that_read_the_database_acknowledge_before_reading(
    kioku: KiokuHarness,
    admin: discord.Member,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    reads: str,
) -> None:
    # Discord drops an interaction not answered within 3 s; a slow database must not.
    memory = kioku.bot.memory
    real = getattr(memory, reads)
    seen: list[bool] = []

    async def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(kioku.interactions.results[-1].deferred)
        return await real(*args, **kwargs)

    monkeypatch.setattr(memory, reads, watched)
    result = await kioku.interactions.slash(command, user=admin)
    assert seen and all(seen), f"{reads} ran before the acknowledgement: {seen}"
    assert result.deferred and result.ephemeral
    assert result.texts(), "the real answer follows the acknowledgement"


async def test_settings_with_the_database_down_answers_memory_unavailable(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    break_database(kioku)
    result = await kioku.interactions.slash("stm settings", {"cadence": 9}, user=admin)
    assert result.ephemeral
    assert result.content == UNAVAILABLE


async def test_admin_command_in_a_dm_is_guild_only(kioku: KiokuHarness) -> None:
    result = await kioku.interactions.slash("stm settings", dm=True)
    assert result.ephemeral and result.content == GUILD_ONLY


async def test_unexpected_error_is_logged_and_answered_generically(
    kioku: KiokuHarness, caplog: pytest.LogCaptureFixture
) -> None:
    settings_changed_elsewhere(kioku.bot.memory, kioku.env.guild.id)
    faults(kioku.bot.memory.sessions).fail("loading guild settings", error=RuntimeError("boom"))
    with caplog.at_level(logging.ERROR, logger="bot.cogs.errors"):
        result = await kioku.interactions.slash("stm show")
    assert result.ephemeral and result.content == SOMETHING_WENT_WRONG
    [record] = [r for r in caplog.records if r.name == "bot.cogs.errors"]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    assert "/stm show failed" in record.getMessage()


@pytest.mark.parametrize("command", ["stm edit", "stm categories set"])
async def test_a_modal_command_on_a_stalled_database_answers_in_time(
    kioku: KiokuHarness, admin: discord.Member, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    # A modal must be the first answer, so it cannot be preceded by "thinking…": the
    # reads before it get a short limit, and the user hears why instead of nothing.
    monkeypatch.setattr(stm_forms, "MODAL_READ_SECONDS", 0.05)
    settings_changed_elsewhere(kioku.bot.memory, kioku.env.guild.id)
    faults(kioku.bot.memory.sessions).hang("loading guild settings")  # never answers

    result = await kioku.interactions.slash(command, user=admin)

    assert result.modal is None
    assert result.ephemeral and result.content == UNAVAILABLE
