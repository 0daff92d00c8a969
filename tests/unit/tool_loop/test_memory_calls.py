"""A memory write beside the answer: the text written beside a lone, successful call to a
tool whose result the model need not see is the reply, in one request; the model is
asked again whenever it must read a result (a failed call, another tool, no text).

Every test drives a real ``openai.AsyncOpenAI`` client against the scripted server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.conversation.unsaved import tracked
from bot.llm.tools.base import ToolOutcome
from bot.llm.tools.loop import LoopResult, ToolSpec, run_tool_loop
from tests.helpers.fake_llm import ScriptedLLM, ToolDelta, openai_client
from tests.helpers.loop_driver import USER, Recorder, loop_settings, run_loop, tool_definition

ANSWER = "The capital of France is Paris."


def note_tool(ok: bool = True) -> Recorder:
    """A memory tool: its result ("saved") is nothing the model needs to answer."""
    return Recorder("note", content="saved" if ok else "error: the summary is empty", ok=ok)


def memory_spec(tool: Recorder) -> ToolSpec:
    return ToolSpec(tool_definition(tool.name), tool.run, answer_needs_result=False)


async def run_note_loop(llm: ScriptedLLM, tool: Recorder, **options: Any) -> LoopResult:
    """One loop over :data:`USER` offering the memory tool ``tool``, with ``options``."""
    async with openai_client(llm) as client:
        return await run_tool_loop(
            client,
            model="test-model",
            messages=list(USER),
            registry={"note": memory_spec(tool)},
            offered=lambda: ["note"],
            settings=loop_settings(),
            **options,
        )


async def ignore(reply: Callable[[], str]) -> None:
    """A preview that shows nothing: the answers are streamed."""


async def test_a_lone_successful_memory_write_beside_the_answer_takes_one_request(
    llm: ScriptedLLM,
) -> None:
    tool = note_tool()
    llm.reply_tool_calls([("note", {"x": "asked about France"})], content=ANSWER)
    result = await run_loop(llm, {"note": memory_spec(tool)})
    assert result.text == ANSWER
    assert result.iterations == 1
    assert result.tool_calls == [("note", "saved")]
    assert tool.received == ['{"x": "asked about France"}']
    assert len(llm.requests) == 1 and llm.unscripted == 0


async def test_a_failed_memory_write_is_read_by_the_model_in_a_second_request(
    llm: ScriptedLLM,
) -> None:
    llm.reply_tool_calls([("note", {"x": ""})], content=ANSWER).reply_text("Noted.")
    result = await run_loop(llm, {"note": memory_spec(note_tool(ok=False))})
    assert len(llm.requests) == 2
    assert llm.messages(1)[-1]["content"] == "error: the summary is empty"
    assert result.text == f"{ANSWER}\n\nNoted."


async def test_a_memory_write_without_text_beside_it_asks_for_the_answer(
    llm: ScriptedLLM,
) -> None:
    llm.reply_tool_calls([("note", {"x": "asked about France"})]).reply_text(ANSWER)
    result = await run_loop(llm, {"note": memory_spec(note_tool())})
    assert len(llm.requests) == 2
    assert result.text == ANSWER


async def test_text_that_is_only_leaked_syntax_is_no_answer(llm: ScriptedLLM) -> None:
    llm.reply_tool_calls([("note", {"x": "y"})], content="<think>I should save this.</think>")
    llm.reply_text(ANSWER)
    result = await run_loop(llm, {"note": memory_spec(note_tool())})
    assert len(llm.requests) == 2
    assert result.text == ANSWER


async def test_a_tool_whose_result_the_model_needs_is_always_answered_again(
    llm: ScriptedLLM,
) -> None:
    # The default, and the long-term `remember`: the model must see whether it was stored.
    remember = Recorder("remember", content="saved as fact #1")
    llm.reply_tool_calls([("remember", {"x": "likes tea"})], content="I'll remember that.")
    llm.reply_text("Saved.")
    result = await run_loop(llm, {"remember": remember.spec})
    assert len(llm.requests) == 2
    assert result.text == "I'll remember that.\n\nSaved."


async def test_a_memory_write_beside_another_tool_call_is_answered_again(
    llm: ScriptedLLM,
) -> None:
    lookup = Recorder("lookup", content="Paris")
    llm.reply_tool_calls([("note", {"x": "1"}), ("lookup", {"x": "France"})], content="Checking.")
    llm.reply_text(ANSWER)
    result = await run_loop(llm, {"note": memory_spec(note_tool()), "lookup": lookup.spec})
    assert len(llm.requests) == 2
    assert result.text == f"Checking.\n\n{ANSWER}"


async def test_a_memory_write_beside_an_answer_cut_at_max_tokens_is_answered_again(
    llm: ScriptedLLM,
) -> None:
    llm.reply_stream(
        "The capital of",
        ToolDelta(0, '{"x": "France"}', id="call_a", name="note"),
        finish_reason="length",
    )
    llm.reply_text(ANSWER)
    result = await run_note_loop(llm, note_tool(), preview=ignore)
    assert len(llm.requests) == 2
    assert result.text == f"The capital of\n\n{ANSWER}"


async def test_a_memory_call_written_as_text_beside_the_answer_takes_one_request(
    llm: ScriptedLLM,
) -> None:
    tool = note_tool()
    llm.reply_text(
        f'{ANSWER}\n<tool_call>{{"name": "note", "arguments": {{"x": "y"}}}}</tool_call>'
    )
    result = await run_note_loop(llm, tool, text_tool_calls=True)
    assert result.text == ANSWER
    assert tool.received == ['{"x": "y"}']
    assert len(llm.requests) == 1


async def test_a_streamed_memory_write_shows_its_answer_in_the_preview(
    llm: ScriptedLLM,
) -> None:
    tool = note_tool()
    shown: list[str] = []

    async def preview(reply: Callable[[], str]) -> None:
        shown.append(reply())

    llm.reply_stream(
        "The capital of ",
        "France is Paris.",
        ToolDelta(0, '{"x": "asked about France"}', id="call_a", name="note"),
    )
    result = await run_note_loop(llm, tool, preview=preview)
    assert llm.request(0).get("stream") is True
    assert shown[-1] == ANSWER == result.text
    assert tool.received == ['{"x": "asked about France"}']
    assert len(llm.requests) == 1


async def test_a_wrapped_memory_tool_keeps_its_flag() -> None:
    # Wrappers (the turn's tracking of long-term writes) replace the run, not the flag.
    async def run(raw: str | None) -> ToolOutcome:
        return ToolOutcome("saved", True)

    registry = {"note": ToolSpec(tool_definition("note"), run, answer_needs_result=False)}
    done: list[str] = []
    tracked(registry, ("note",), done)
    assert registry["note"].answer_needs_result is False
    assert (await registry["note"].run("{}")).ok and done == ["note"]
