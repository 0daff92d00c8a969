"""Tools that reach every server: ``tool_choice: "auto"``, and calls written as text.

Small self-hosted models behind llama-cpp-python or Ollama often write their tool call
into the reply text; where the provider row allows it the call is run, and it is never
shown to members.
"""

from __future__ import annotations

import json
import logging

import pytest
from sqlalchemy import select

from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.llm.tools.loop import TEXT_CALL_RESULTS, UNREADABLE_TEXT_CALL
from bot.llm.tools.text_calls import TOOLS_IN_PROMPT
from tests.helpers.bot import KiokuHarness
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.fake_llm import ScriptedLLM

MISO = "Ren's cat is called Miso; Ren flies to Osaka on March 14."


def written_call(summary: str) -> str:
    arguments = json.dumps({"summary": summary})
    return f'<tool_call>\n{{"name": "{STM_TOOL_NAME}", "arguments": {arguments}}}\n</tool_call>'


async def summaries(db: Database) -> list[str]:
    async with db.sessions() as session:
        return [row.summary for row in await session.scalars(select(ShortTermMemory))]


async def test_a_turn_offers_its_tools_with_tool_choice_auto(kioku: KiokuHarness) -> None:
    # llama-cpp-python's chatml-function-calling renders no tools without tool_choice.
    kioku.llm.reply_text("Hello!")
    await kioku.env.send("hi", mention_bot=True)
    assert kioku.llm.tool_names(0) == [STM_TOOL_NAME]
    assert kioku.llm.request(0)["tool_choice"] == "auto"


async def test_a_server_refusing_tool_choice_is_asked_again_with_the_tools_alone(
    kioku: KiokuHarness,
) -> None:
    kioku.llm.reply_error(400, "tool_choice is not supported by this server").reply_text("Hi!")
    await kioku.env.send("hi", mention_bot=True)
    assert kioku.env.last_sent().content == "Hi!"
    assert kioku.llm.request(0)["tool_choice"] == "auto"
    assert kioku.llm.tool_names(1) == [STM_TOOL_NAME]
    assert "tool_choice" not in kioku.llm.request(1)


async def test_a_server_that_cannot_stream_tools_is_asked_whole(kioku: KiokuHarness) -> None:
    # llama-cpp-python's chatml-function-calling raises "Automatic streaming tool choice
    # is not supported" once its 200 event stream has begun: it ends before any event.
    kioku.llm.reply_stream("Hi", drop_within="data")
    kioku.llm.reply_text("Hi!")
    await kioku.env.send("hi", mention_bot=True)
    assert kioku.env.last_sent().content == "Hi!"
    assert kioku.llm.request(0).get("stream") is True
    assert not kioku.llm.request(1).get("stream")
    assert kioku.llm.tool_names(1) == [STM_TOOL_NAME]


async def test_a_server_saying_it_cannot_stream_tools_is_asked_whole(kioku: KiokuHarness) -> None:
    kioku.llm.reply_error(500, "Automatic streaming tool choice is not supported")
    kioku.llm.reply_text("Hi!")
    await kioku.env.send("hi", mention_bot=True)
    assert kioku.env.last_sent().content == "Hi!"
    assert not kioku.llm.request(1).get("stream")


@pytest.mark.parametrize("provider", ["llamacpp", "ollama", "generic"])
async def test_a_memory_call_written_as_text_is_stored_and_never_shown(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter, provider: str
) -> None:
    async with kioku_with(settings={"provider": provider}) as kioku:
        llm.reply_text(f"Got it, I'll keep that in mind.\n{written_call(MISO)}")
        await kioku.env.send("my cat is Miso and I fly to Osaka on March 14", mention_bot=True)
        shown = kioku.env.last_sent().content
        assert "tool_call" not in shown and STM_TOOL_NAME not in shown and "{" not in shown
        # The text beside a successful memory write is the reply: the model is not asked
        # again.
        assert shown == "Got it, I'll keep that in mind."
        assert set(await summaries(db)) == {MISO}
        assert len(llm.requests) == 1 and llm.unscripted == 0


@pytest.mark.parametrize("provider", ["llamacpp", "ollama", "generic"])
async def test_the_result_of_a_call_written_as_text_goes_back_as_text(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter, provider: str
) -> None:
    async with kioku_with(settings={"provider": provider}) as kioku:
        # A call with no answer beside it: the model is asked again for one.
        llm.reply_text(written_call(MISO))
        llm.reply_text("Noted: Miso, and Osaka on March 14.")
        await kioku.env.send("my cat is Miso and I fly to Osaka on March 14", mention_bot=True)
        assert kioku.env.last_sent().content == "Noted: Miso, and Osaka on March 14."
        assert set(await summaries(db)) == {MISO}
        # The result goes back as text: a server that did not parse the call may drop
        # `tool` messages too.
        follow_up = llm.messages(1)
        assert follow_up[-1] == {
            "role": "user",
            "content": TEXT_CALL_RESULTS + f"{STM_TOOL_NAME}: saved",
        }
        assert not any(m.get("role") == "tool" for m in follow_up)


async def test_a_hosted_provider_does_not_run_calls_written_as_text(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    # OpenAI's models call tools through the API: text that looks like a call is an
    # example the model wrote, not a call. It is still not shown as syntax.
    async with kioku_with(settings={"provider": "openai"}) as kioku:
        llm.reply_text(f"Got it.\n{written_call(MISO)}")
        await kioku.env.send("my cat is Miso", mention_bot=True)
        assert kioku.env.last_sent().content == "Got it."
        assert await summaries(db) == []
        assert len(llm.requests) == 1


async def test_garbage_tool_text_gets_a_logged_refusal_and_stores_nothing(
    db: Database,
    llm: ScriptedLLM,
    kioku_with: KiokuStarter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with kioku_with(settings={"provider": "llamacpp"}) as kioku:
        llm.reply_text(
            f'<tool_call>{{"name": "{STM_TOOL_NAME}", "arguments": {{summary: x</tool_call>'
        )
        llm.reply_text("Sorry, here is your answer without a note.")
        with caplog.at_level(logging.WARNING, logger="bot.llm"):
            await kioku.env.send("my cat is Miso, by the way", mention_bot=True)
        assert kioku.env.last_sent().content == "Sorry, here is your answer without a note."
        assert await summaries(db) == []
        assert llm.messages(1)[-1] == {"role": "user", "content": UNREADABLE_TEXT_CALL}
        assert any("could not be read" in r.getMessage() for r in caplog.records)


def escaped(text: str) -> str:
    """``text`` as llama-cpp-python's autoescaping template makes the model write it."""
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&#34;")
        .replace("'", "&#39;")
    )


async def test_a_server_answering_tools_with_an_empty_message_gets_them_in_the_prompt(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    # llama-cpp-python's chatml-function-calling answers every message beside
    # tool_choice "auto" with an empty one, and escapes what the model reads.
    async with kioku_with(settings={"provider": "llamacpp"}) as kioku:
        llm.reply_text("").reply_text(escaped(written_call(MISO))).reply_text("Saved, Miso!")
        await kioku.env.send("my cat is Miso and I fly to Osaka on March 14", mention_bot=True)
        assert kioku.env.last_sent().content == "Saved, Miso!"
        assert set(await summaries(db)) == {MISO}
        assert "tools" in llm.request(0)
        assert "tools" not in llm.request(1) and "tool_choice" not in llm.request(1)
        assert TOOLS_IN_PROMPT in llm.messages(1)[0]["content"]
        assert STM_TOOL_NAME in llm.messages(1)[0]["content"]
        # The process has learnt it: the next turn describes the tools from the start.
        llm.reply_text("It&#39;s Miso, of course.")
        await kioku.env.send("what is my cat called?", mention_bot=True)
        assert "tools" not in llm.request(3)
        assert TOOLS_IN_PROMPT in llm.messages(3)[0]["content"]
        assert kioku.env.last_sent().content == "It's Miso, of course."


async def test_a_server_refusing_tools_gets_them_in_the_prompt_where_the_row_allows(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    # An Ollama model whose template has no tools: memory still works through the text.
    async with kioku_with(settings={"provider": "ollama"}) as kioku:
        llm.reply_error(400, "registry.ollama.ai/library/gemma3:4b does not support tools")
        llm.reply_text(written_call(MISO)).reply_text("Noted!")
        await kioku.env.send("my cat is Miso and I fly to Osaka on March 14", mention_bot=True)
        assert kioku.env.last_sent().content == "Noted!"
        assert set(await summaries(db)) == {MISO}
        assert "tools" not in llm.request(1)


@pytest.mark.parametrize(
    ("asked", "answer", "shown"),
    [
        # A tool tag named in a sentence is prose, not a broken call.
        (
            "how does qwen call tools?",
            "Qwen wraps its calls in <tool_call> tags, as you guessed.",
            "Qwen wraps its calls in <tool_call> tags, as you guessed.",
        ),
        # Entities the member wrote are kept; the ones the template escaped are undone.
        (
            "what is &amp; in HTML?",
            "In HTML, &amp; is an ampersand and &#39; an apostrophe.",
            "In HTML, &amp; is an ampersand and ' an apostrophe.",
        ),
    ],
)
async def test_a_plain_answer_is_shown_as_the_member_should_read_it(
    llm: ScriptedLLM, kioku_with: KiokuStarter, asked: str, answer: str, shown: str
) -> None:
    async with kioku_with(settings={"provider": "llamacpp"}) as kioku:
        llm.reply_text(answer)
        await kioku.env.send(asked, mention_bot=True)
        assert len(llm.requests) == 1
        assert kioku.env.last_sent().content == shown
