"""Tool errors in the loop: unknown tools, malformed arguments, raising tools, the
consecutive-error and iteration limits, and the final call without tools."""

from __future__ import annotations

import logging

import pytest

from bot.llm.tools.base import ToolOutcome
from bot.llm.tools.loop import FALLBACK_REPLY, ToolSpec
from tests.helpers.fake_llm import ScriptedLLM
from tests.helpers.loop_driver import Recorder, run_loop, tool_definition


async def test_unknown_tool_gets_an_error_naming_available_tools(llm: ScriptedLLM) -> None:
    registry = {"remember": Recorder("remember").spec, "forget": Recorder("forget").spec}
    llm.reply_tool_calls([("nope", {"x": "1"})]).reply_text("Sorry.")
    result = await run_loop(llm, registry)
    assert result.errors == 1
    (name, content), *_ = result.tool_calls
    assert name == "nope"
    assert 'unknown tool "nope"' in content
    assert '"remember"' in content and '"forget"' in content
    assert llm.messages(1)[-1]["content"] == content


async def test_malformed_arguments_reach_the_tool_raw(llm: ScriptedLLM) -> None:
    tool = Recorder("remember", content="rejected: arguments are truncated JSON", ok=False)
    llm.reply_tool_calls([("remember", '{"x": "likes te')]).reply_text("Oops.")
    result = await run_loop(llm, {"remember": tool.spec})
    assert tool.received == ['{"x": "likes te']
    assert result.tool_calls == [("remember", "rejected: arguments are truncated JSON")]
    # The history echoes valid JSON so strict servers accept the next request.
    assistant = llm.messages(1)[-2]
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"


async def test_raising_tool_is_answered_as_error_and_logged_without_arguments(
    llm: ScriptedLLM, caplog: pytest.LogCaptureFixture
) -> None:
    async def explode(arguments: str | None) -> ToolOutcome:
        raise RuntimeError("database went away")

    llm.reply_tool_calls([("boom", {"x": "SECRET-ARGUMENT"})]).reply_text("Hmm.")
    with caplog.at_level(logging.WARNING, logger="bot.llm.tools.calls"):
        result = await run_loop(llm, {"boom": ToolSpec(tool_definition("boom"), explode)})
    assert result.text == "Hmm."
    assert result.errors == 1
    content = result.tool_calls[0][1]
    assert content.startswith("error:") and "failed unexpectedly" in content
    assert "database went away" not in content
    records = [r for r in caplog.records if r.levelno == logging.WARNING and "boom" in r.message]
    assert records and records[0].exc_info is not None
    assert "SECRET-ARGUMENT" not in caplog.text


async def test_five_consecutive_tool_errors_end_the_loop_with_a_final_no_tools_call(
    llm: ScriptedLLM,
) -> None:
    tool = Recorder("stm", content="rejected: bad", ok=False)
    for _ in range(5):
        llm.reply_tool_calls([("stm", "{oops")])
    llm.reply_text("Sorry, I could not save that, but here is your answer.")
    result = await run_loop(llm, {"stm": tool.spec}, max_tool_iterations=10)
    assert result.stopped == "too_many_tool_errors"
    assert result.errors == 5
    assert result.text == "Sorry, I could not save that, but here is your answer."
    assert len(llm.requests) == 6
    assert llm.tool_names(4) == ["stm"]
    assert llm.request(4)["tool_choice"] == "auto"
    assert llm.request(-1)["tool_choice"] == "none"
    assert llm.messages(-1)[-1]["role"] == "tool"
    assert result.iterations == 6
    assert llm.unscripted == 0


async def test_a_success_resets_the_consecutive_error_count(llm: ScriptedLLM) -> None:
    bad = Recorder("bad", content="rejected", ok=False)
    good = Recorder("good", content="saved")
    llm.reply_tool_calls([("bad", {}), ("bad", {}), ("bad", {}), ("bad", {})])
    llm.reply_tool_calls([("good", {}), ("bad", {})]).reply_text("Done.")
    result = await run_loop(llm, {"bad": bad.spec, "good": good.spec})
    assert result.stopped is None
    assert result.errors == 5
    assert result.text == "Done."


async def test_errors_within_one_batch_count_and_every_call_is_answered(
    llm: ScriptedLLM,
) -> None:
    bad = Recorder("bad", content="rejected", ok=False)
    llm.reply_tool_calls([("bad", {"x": str(i)}) for i in range(6)]).reply_text("Answer.")
    result = await run_loop(llm, {"bad": bad.spec})
    assert result.stopped == "too_many_tool_errors"
    assert len(bad.received) == 6  # the API needs a tool message for every call
    tool_messages = [m for m in llm.messages(-1) if m["role"] == "tool"]
    assert len(tool_messages) == 6
    assert llm.request(-1)["tool_choice"] == "none"


async def test_max_iterations_then_one_call_without_tools(llm: ScriptedLLM) -> None:
    tool = Recorder("remember")
    for i in range(3):
        llm.reply_tool_calls([("remember", {"x": str(i)})])
    llm.reply_text("Final answer.")
    result = await run_loop(llm, {"remember": tool.spec}, max_tool_iterations=3)
    assert result.stopped == "max_iterations"
    assert result.text == "Final answer."
    assert result.iterations == 4
    assert len(tool.received) == 3
    assert [llm.tool_names(i) for i in range(4)] == [["remember"]] * 4
    assert [llm.request(i).get("tool_choice") for i in range(4)] == ["auto"] * 3 + ["none"]
    assert llm.unscripted == 0


async def test_failed_final_call_returns_a_short_fallback(llm: ScriptedLLM) -> None:
    tool = Recorder("remember")
    llm.reply_tool_calls([("remember", {"x": "1"})]).reply_error(500)
    result = await run_loop(llm, {"remember": tool.spec}, max_tool_iterations=1)
    assert result.stopped == "max_iterations"
    assert result.text == FALLBACK_REPLY
    assert result.iterations == 1
