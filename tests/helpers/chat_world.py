"""What the chat tests on the real bot read and script: STM tool calls, the stored
rows, the prompt the model was sent, the tool results it got back, and a bot started
with settings of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import discord
from discord.ext import commands
from sqlalchemy import select
from sqlalchemy.engine import URL

from bot.app import KiokuBot
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from tests.helpers.bot import KiokuHarness, start_kioku, stop_kioku
from tests.helpers.fake_llm import ScriptedLLM

# ``kioku_with(settings=...)``: the ``kioku_with`` fixture, :func:`running_kioku` on the
# test's database, model and folder.
KiokuStarter = Callable[..., AbstractAsyncContextManager[KiokuHarness]]


def stm_call(summary: str) -> tuple[str, dict[str, Any]]:
    return (STM_TOOL_NAME, {"summary": summary})


async def rows(db: Database) -> list[ShortTermMemory]:
    async with db.sessions() as session:
        return list(
            await session.scalars(select(ShortTermMemory).order_by(ShortTermMemory.scope_kind))
        )


def prompt_text(llm: ScriptedLLM, i: int = -1) -> str:
    return "\n".join(str(m.get("content") or "") for m in llm.messages(i))


def tool_results(llm: ScriptedLLM, i: int = -1) -> list[str]:
    return [str(m["content"]) for m in llm.messages(i) if m.get("role") == "tool"]


@asynccontextmanager
async def running_kioku(
    db: Database, llm: ScriptedLLM, pg_url: URL, data_dir: Path, **options: Any
) -> AsyncIterator[KiokuHarness]:
    """:func:`start_kioku` with ``options``, stopped on the way out."""
    kioku = await start_kioku(db, llm, pg_url, data_dir, **options)
    try:
        yield kioku
    finally:
        await stop_kioku(kioku)


@asynccontextmanager
async def chat_cog_away(bot: KiokuBot) -> AsyncIterator[None]:
    """The chat cog unloaded for the block: what is sent meanwhile the bot never saw live
    (as while it was offline), so only a back-fill finds it."""
    chat = bot.get_cog("Chat")
    assert isinstance(chat, commands.Cog)
    await bot.remove_cog(chat.qualified_name)
    try:
        yield
    finally:
        await bot.add_cog(chat)


async def refresh_succeeds(kioku: KiokuHarness, moderator: discord.Member) -> None:
    """``moderator`` runs /refresh in the harness's channel, and it does not fail."""
    refreshed = await kioku.interactions.slash("refresh", user=moderator)
    assert not refreshed.command_failed
