"""Memory upkeep: the nudge as a call of its own after the reply, never part of the reply."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from sqlalchemy import select

from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.conversation.upkeep import IGNORED_LIMIT
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from tests.helpers.bot import KiokuHarness
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.fake_llm import ScriptedLLM

NOTES = "Sure, here are the updated notes for Kioku: Alice asked about France."
FORCED = {"type": "function", "function": {"name": STM_TOOL_NAME}}


def texts(llm: ScriptedLLM, i: int) -> str:
    return "\n".join(str(m.get("content") or "") for m in llm.messages(i))


async def stored(db: Database) -> list[ShortTermMemory]:
    async with db.sessions() as session:
        return list(await session.scalars(select(ShortTermMemory)))


@contextlib.asynccontextmanager
async def due_every_turn(
    llm: ScriptedLLM, kioku_with: KiokuStarter, provider: str = "openai"
) -> AsyncIterator[KiokuHarness]:
    settings = {"provider": provider, "stm": {"refresh_cadence": 1}}
    async with kioku_with(settings=settings) as kioku:
        llm.reply_text("Hi!")
        await kioku.env.send("hello", mention_bot=True)  # from the next turn on, memory is due
        yield kioku


async def test_a_nudge_answered_in_prose_never_reaches_the_reply(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with due_every_turn(llm, kioku_with) as kioku:
        llm.reply_text("Paris.").reply_text(NOTES)  # the answer, then the upkeep in prose
        await kioku.env.send("what's the capital of France?", mention_bot=True)
        assert [m.content for m in kioku.env.sent] == ["Hi!", "Paris."]
        assert "Memory upkeep" not in texts(llm, 1)
        upkeep = llm.request(2)
        assert "Memory upkeep" in llm.messages(2)[-1]["content"]
        assert llm.messages(2)[-2] == {"role": "assistant", "content": "Paris."}
        assert upkeep["tool_choice"] == FORCED
        assert await stored(db) == []
        # The notes are not in the conversation the next turn reads either.
        llm.reply_text("Anything else?")
        await kioku.env.send("thanks", mention_bot=True)
        assert "updated notes" not in texts(llm, 3)


async def test_an_upkeep_call_writes_the_memory_before_the_next_turn(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with due_every_turn(llm, kioku_with) as kioku:
        llm.reply_text("Paris.")
        llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "Alice asked about France."})])
        await kioku.env.send("what's the capital of France?", mention_bot=True)
        # No answer is asked for after the forced call: it is not shown to anyone.
        assert len(llm.requests) == 3 and llm.pending == 0
        assert {row.summary for row in await stored(db)} == {"Alice asked about France."}
        llm.reply_text("You asked about France.")
        await kioku.env.send("what did I ask?", mention_bot=True)
        assert "Alice asked about France." in texts(llm, 3)
        assert len(llm.requests) == 4  # written this cadence: no upkeep after this turn


async def test_a_model_ignoring_upkeep_leaves_the_channel_to_the_summarizer(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with due_every_turn(llm, kioku_with) as kioku:
        for n in range(IGNORED_LIMIT):
            llm.reply_text(f"answer {n}").reply_text("I'd rather chat.")
            await kioku.env.send(f"tea talk {n}", mention_bot=True)
        assert len(llm.requests) == 1 + 2 * IGNORED_LIMIT
        assert await stored(db) == []
        # No more upkeep here: the summarizer folds the messages in instead.
        llm.reply_text("last answer").reply_text("Alice talked about tea with the bot.")
        await kioku.env.send("more tea talk", mention_bot=True)
        await kioku.bot.turns.drain()
        assert "Memory upkeep" not in texts(llm, -1)
        [row, *_] = await stored(db)
        assert row.summary == "Alice talked about tea with the bot."
        assert (row.origin, row.origin_detail) == ("summarizer", "test-model, upkeep ignored")


async def test_upkeep_on_a_server_without_api_tools_reads_the_call_from_the_text(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    llm.reply_error(400, "registry.ollama.ai/library/gemma3:4b does not support tools")
    async with due_every_turn(llm, kioku_with, provider="ollama") as kioku:
        call = (
            '<tool_call>{"name": "%s", "arguments": {"summary": "Alice said hello."}}</tool_call>'
        )
        llm.reply_text("Paris.").reply_text(call % STM_TOOL_NAME)
        await kioku.env.send("what's the capital of France?", mention_bot=True)
        assert kioku.env.last_sent().content == "Paris."
        assert "tools" not in llm.request(3) and "tool_choice" not in llm.request(3)
        assert {row.summary for row in await stored(db)} == {"Alice said hello."}
