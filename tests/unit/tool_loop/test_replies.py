"""The tool loop's answers: text, tool results sent back, and the final text the member
gets (interim text kept, repeats dropped, leaked syntax stripped).

Every test drives a real ``openai.AsyncOpenAI`` client against the scripted server."""

from __future__ import annotations

import pytest

from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.llm.tools.base import ToolOutcome
from bot.llm.tools.loop import LoopResult, ToolSpec
from tests.helpers.fake_llm import ScriptedLLM
from tests.helpers.loop_driver import (
    USER,
    Recorder,
    run_loop,
    run_loop_offering,
    tool_definition,
    withdrawing_tool,
)


async def test_text_reply(llm: ScriptedLLM) -> None:
    tool = Recorder("remember")
    llm.reply_text("Hello there!")
    result = await run_loop(llm, {"remember": tool.spec})
    assert result == LoopResult(text="Hello there!", iterations=1)
    request = llm.request(0)
    assert request["messages"] == USER
    assert llm.tool_names(0) == ["remember"]
    assert request["temperature"] == 0.3
    assert request["max_tokens"] == 256
    assert "stream" not in request or request["stream"] is False
    assert tool.received == []
    assert llm.unscripted == 0


async def test_tools_omitted_when_none_offered_or_no_tool_calling(llm: ScriptedLLM) -> None:
    tool = Recorder("remember")
    llm.reply_text("one").reply_text("two")
    assert (await run_loop(llm, {"remember": tool.spec}, offered=[])).text == "one"
    assert (await run_loop(llm, {"remember": tool.spec}, tool_calling=False)).text == "two"
    assert "tools" not in llm.request(0)
    assert "tools" not in llm.request(1)


async def test_tool_call_result_sent_back_as_tool_message(llm: ScriptedLLM) -> None:
    tool = Recorder("remember", content="saved")
    llm.reply_tool_calls([("remember", {"x": "likes tea"})]).reply_text("Noted!")
    result = await run_loop(llm, {"remember": tool.spec})

    assert result.text == "Noted!"
    assert result.iterations == 2
    assert result.tool_calls == [("remember", "saved")]
    assert result.errors == 0 and result.stopped is None
    assert tool.received == ['{"x": "likes tea"}']
    sent = llm.messages(1)
    assert sent[: len(USER)] == USER
    assistant, tool_message = sent[len(USER) :]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "remember", "arguments": '{"x": "likes tea"}'},
        }
    ]
    assert tool_message == {"role": "tool", "tool_call_id": "call_1", "content": "saved"}


async def test_parallel_calls_each_answered_in_order(llm: ScriptedLLM) -> None:
    first, second = Recorder("a", "A done"), Recorder("b", "B done")
    llm.reply_tool_calls([("a", {"x": "1"}), ("b", {"x": "2"})]).reply_text("Both.")
    result = await run_loop(llm, {"a": first.spec, "b": second.spec})
    assert result.tool_calls == [("a", "A done"), ("b", "B done")]
    tail = llm.messages(1)[-2:]
    assert tail == [
        {"role": "tool", "tool_call_id": "call_1", "content": "A done"},
        {"role": "tool", "tool_call_id": "call_2", "content": "B done"},
    ]


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        pytest.param(["call_1", "call_2"], ["call_1", "call_2"], id="unique-unchanged"),
        pytest.param(["call_0", "call_0"], ["call_0", "call_0_2"], id="pair"),
        pytest.param(["call_0"] * 3, ["call_0", "call_0_2", "call_0_3"], id="three"),
        pytest.param(
            ["call_0", "call_0_2", "call_0"],
            ["call_0", "call_0_2", "call_0_3"],
            id="suffix-already-taken",
        ),
        pytest.param(
            ["call_a", "call_b", "call_a", "call_b"],
            ["call_a", "call_b", "call_a_2", "call_b_2"],
            id="two-repeats",
        ),
    ],
)
async def test_repeated_tool_call_ids_are_made_unique(
    llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch, sent: list[str], expected: list[str]
) -> None:
    """Some servers repeat ids within one answer; every tool result must still answer
    exactly one call, with the same id in the assistant message and the result."""

    async def echo(arguments: str | None) -> ToolOutcome:
        return ToolOutcome(f"got {arguments}", ok=True)

    # The scripted server names its calls f"call_{next(_call_ids)}": feed it the suffixes.
    monkeypatch.setattr(llm, "_call_ids", iter(i.removeprefix("call_") for i in sent))
    llm.reply_tool_calls([("echo", {"x": str(n)}) for n in range(len(sent))])
    llm.reply_text("Done.")
    result = await run_loop(llm, {"echo": ToolSpec(tool_definition("echo"), echo)})

    assert result.text == "Done."
    assistant, *results = llm.messages(1)[len(USER) :]
    assert [call["id"] for call in assistant["tool_calls"]] == expected
    # Each result carries its own call's id, in order, and answers that call's arguments.
    assert results == [
        {"role": "tool", "tool_call_id": call["id"], "content": f"got {args}"}
        for call, args in zip(
            assistant["tool_calls"],
            [f'{{"x": "{n}"}}' for n in range(len(sent))],
            strict=True,
        )
    ]
    assert len({m["tool_call_id"] for m in results}) == len(sent)


async def test_tool_not_offered_after_offered_changes(llm: ScriptedLLM) -> None:
    offered = ["stm", "remember"]
    registry = {
        # e.g. STM was updated: at most once per turn
        "stm": withdrawing_tool("stm", offered, "stm"),
        "remember": Recorder("remember").spec,
    }
    llm.reply_tool_calls([("stm", {"x": "summary"})]).reply_text("Done.")
    result = await run_loop_offering(llm, registry, offered)
    assert result.text == "Done."
    assert llm.tool_names(0) == ["stm", "remember"]
    assert llm.tool_names(1) == ["remember"]


async def test_call_to_tool_not_offered_is_routed_to_its_guard(llm: ScriptedLLM) -> None:
    guarded = Recorder("stm", content="rejected: already updated this turn", ok=False)
    llm.reply_tool_calls([("stm", {"x": "again"})]).reply_text("Fine.")
    result = await run_loop(llm, {"stm": guarded.spec}, offered=[])
    assert guarded.received == ['{"x": "again"}']
    assert result.tool_calls == [("stm", "rejected: already updated this turn")]
    assert result.errors == 1
    # The history holds a call: the tool is defined, but no call may be made.
    assert llm.tool_names(1) == ["stm"]
    assert llm.request(1)["tool_choice"] == "none"


async def test_text_written_beside_tool_calls_is_kept_if_final_is_empty(
    llm: ScriptedLLM,
) -> None:
    llm.reply_tool_calls([("remember", {"x": "y"})], content="Tea it is!").reply_text("")
    result = await run_loop(llm, {"remember": Recorder("remember").spec})
    assert result.text == "Tea it is!"


async def test_empty_reply_is_returned_as_empty_text(llm: ScriptedLLM) -> None:
    llm.reply_text("<think>hmm</think>   ")
    assert (await run_loop(llm)).text == ""


@pytest.mark.parametrize(
    ("interim", "final", "expected"),
    [
        # A short answer inside a longer lead-in is an answer, not a repeat.
        (
            "Let me check my notes on Friday vs Monday.",
            "Monday.",
            "Let me check my notes on Friday vs Monday.\n\nMonday.",
        ),
        ("I'll look at my notes.", "No.", "I'll look at my notes.\n\nNo."),
        ("The answer is 42, I think", "42", "The answer is 42, I think\n\n42"),
        # Repeats: equal but for case, spacing and closing punctuation, or nearly all of it.
        ("The capital of France is Paris.", "the capital of  France is Paris!", None),
        ("The capital of France is Paris.", "The capital of France is Paris, yes.", None),
        ("The capital of France is Paris, yes.", "The capital of France is Paris.", None),
        # A final that restates the interim answer and goes on: the answer once.
        (
            "The capital of France is Paris.",
            "The capital of France is Paris. Is there anything else you'd like to know?",
            None,
        ),
        ("The capital of France is Paris.", "Sure!\n\nThe capital of France is Paris.", None),
        # Found in the final only as a word of another sentence: not restated.
        ("No.", "I have no other notes.", "No.\n\nI have no other notes."),
        ("Paris.", "Paris it is.", "Paris.\n\nParis it is."),
    ],
)
async def test_a_final_answer_is_dropped_only_when_it_repeats_the_interim_text(
    llm: ScriptedLLM, interim: str, final: str, expected: str | None
) -> None:
    llm.reply_tool_calls([("stm", {"x": "memory"})], content=interim).reply_text(final)
    result = await run_loop(llm, {"stm": Recorder("stm").spec})
    longer = max(interim, final, key=len)
    assert result.text == (expected if expected is not None else longer)


async def test_a_final_answer_repeating_one_of_two_interim_texts_is_not_doubled(
    llm: ScriptedLLM,
) -> None:
    # Compared with each interim text on its own: the final is "Let me save that." and
    # the answer, which it restates; only the answer's repeat goes.
    tool = Recorder("stm")
    llm.reply_tool_calls([("stm", {"x": "1"})], content="Let me save that.")
    llm.reply_tool_calls([("stm", {"x": "2"})], content="The capital of France is Paris.")
    llm.reply_text("The capital of France is Paris.")
    result = await run_loop(llm, {"stm": tool.spec})
    assert result.text == "Let me save that.\n\nThe capital of France is Paris."


async def test_an_answer_repeated_beside_each_tool_call_is_not_doubled(llm: ScriptedLLM) -> None:
    """The nudge asks to answer, then update the memory. A model whose first update is
    refused (malformed arguments) sends the same answer again beside its corrected call,
    then closes the turn repeating it once more: the member gets it once, not twice."""
    answer = "The capital of France is Paris."
    answers = iter([ToolOutcome("rejected: arguments are not valid JSON", False)])

    async def stm(raw: str | None) -> ToolOutcome:
        return next(answers, ToolOutcome("saved", True))

    tool = Recorder(STM_TOOL_NAME)
    tool.run = stm  # type: ignore[method-assign]
    llm.reply_tool_calls([(STM_TOOL_NAME, '{"summary": "Alice asked')], content=answer)
    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "Alice asked."})], content=answer)
    llm.reply_text(answer)

    result = await run_loop(llm, {STM_TOOL_NAME: tool.spec})

    assert result.text == answer


async def test_leaked_syntax_in_a_real_reply_is_stripped(llm: ScriptedLLM) -> None:
    llm.reply_text(
        "<think>The user greets me.</think>Hi there!\n"
        '<tool_call>{"name": "update_short_term_memory", "arguments": {"summary": "hi"}}'
        "</tool_call>"
    )
    assert (await run_loop(llm)).text == "Hi there!"
