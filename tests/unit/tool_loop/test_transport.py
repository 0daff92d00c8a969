"""Transport errors of the model call become ``LlmUnavailable`` with a short message for
the member: server errors, rate limits, timeouts, refused and dropped connections.

Error classes, retries, ``retry-after`` and timeouts are the real client's own."""

from __future__ import annotations

import asyncio
import logging

import openai
import pytest

from bot.llm.tools.base import ToolOutcome
from bot.llm.tools.loop import (
    CONFIGURATION_MESSAGE,
    RATE_LIMIT_MESSAGE,
    TIMEOUT_MESSAGE,
    UNAVAILABLE_MESSAGE,
    LlmUnavailable,
    ToolSpec,
)
from tests.helpers.fake_llm import ScriptedLLM, refused_base_url
from tests.helpers.loop_driver import Recorder, run_loop, tool_definition


async def test_server_error_is_unavailable_without_the_body(llm: ScriptedLLM) -> None:
    llm.reply_error(500, "internal failure, key sk-live-123")
    with pytest.raises(LlmUnavailable) as info:
        await run_loop(llm)
    assert info.value.kind == "unavailable"
    assert info.value.status == 500
    assert info.value.user_message == UNAVAILABLE_MESSAGE
    assert "sk-live" not in info.value.user_message and "sk-live" not in str(info.value)


async def test_rate_limit_with_retry_after_is_retried_by_the_client(llm: ScriptedLLM) -> None:
    llm.reply_error(429, headers={"retry-after": "0.05"}).reply_text("After the wait.")
    result = await run_loop(llm, max_retries=1)
    assert result.text == "After the wait."
    assert len(llm.requests) == 2


async def test_persistent_rate_limit_is_unavailable_rate_limited(llm: ScriptedLLM) -> None:
    llm.reply_error(429, headers={"retry-after-ms": "20"})
    llm.reply_error(429, headers={"retry-after-ms": "20"})
    with pytest.raises(LlmUnavailable) as info:
        await run_loop(llm, max_retries=1)
    assert len(llm.requests) == 2
    assert info.value.kind == "rate_limited"
    assert info.value.user_message == RATE_LIMIT_MESSAGE
    assert "rate limited" in info.value.user_message


async def test_timeout_is_unavailable_timeout(llm: ScriptedLLM) -> None:
    llm.reply_text("too late", delay=3.0)
    with pytest.raises(LlmUnavailable) as info:
        await run_loop(llm, timeout_seconds=0.3)
    assert info.value.kind == "timeout"
    assert info.value.user_message == TIMEOUT_MESSAGE
    assert info.value.user_message.startswith("The model took too long to answer")


async def test_turn_timeout_cuts_the_retries_of_a_silent_endpoint(llm: ScriptedLLM) -> None:
    """With ``turn_timeout_seconds`` below one call's timeout, a silent endpoint ends the
    turn at the deadline as a timeout: the client's retries are never started."""
    for _ in range(3):
        llm.reply_text("far too late", delay=30.0)
    with pytest.raises(LlmUnavailable) as info:
        await run_loop(llm, timeout_seconds=30.0, max_retries=2, turn_timeout_seconds=0.3)
    assert info.value.kind == "timeout"
    assert info.value.user_message == TIMEOUT_MESSAGE
    assert len(llm.requests) == 1
    assert llm.pending == 2


async def test_turn_timeout_never_cuts_a_tool_run(llm: ScriptedLLM) -> None:
    """A tool still running at the deadline finishes (a write is never abandoned
    half-way); the model call after it is the one that times out, without a request."""
    finished: list[bool] = []
    # Room for the first model call on a loaded machine (at 0.2 s it sometimes used the
    # whole deadline under xdist, and the tool never ran).
    turn_timeout = 2.0

    async def slow_tool(arguments: str | None) -> ToolOutcome:
        # Outlive the turn's deadline, on the loop's own clock: the deadline was set
        # before this tool started, so a full turn_timeout from now is past it.
        past_deadline = asyncio.Event()
        asyncio.get_running_loop().call_later(turn_timeout + 0.05, past_deadline.set)
        await past_deadline.wait()
        finished.append(True)
        return ToolOutcome("saved", True)

    llm.reply_tool_calls([("remember", '{"x": "1"}')]).reply_text("never asked for")
    with pytest.raises(LlmUnavailable) as info:
        await run_loop(
            llm,
            {"remember": ToolSpec(definition=tool_definition("remember"), run=slow_tool)},
            turn_timeout_seconds=turn_timeout,
        )
    assert finished == [True]
    assert info.value.kind == "timeout"
    assert len(llm.requests) == 1
    assert llm.pending == 1


async def test_turn_timeout_past_an_answer_beside_a_tool_call_keeps_that_answer(
    llm: ScriptedLLM,
) -> None:
    """The model answered beside its tool call, then the next call outlived the
    deadline: the member gets that answer, not the timeout notice."""
    tool = Recorder("remember")
    llm.reply_tool_calls([("remember", '{"x": "1"}')], content="It is Tuesday.")
    llm.reply_text("too late", delay=30.0)
    # 2 s: the first call must answer inside the deadline even on a loaded machine.
    result = await run_loop(
        llm, {"remember": tool.spec}, timeout_seconds=30.0, turn_timeout_seconds=2.0
    )
    assert result.text == "It is Tuesday."
    assert tool.received == ['{"x": "1"}']
    assert len(llm.requests) == 2


async def test_connection_refused_is_unavailable(llm: ScriptedLLM) -> None:
    client = openai.AsyncOpenAI(api_key="test", base_url=refused_base_url(), max_retries=0)
    with pytest.raises(LlmUnavailable) as info:
        await run_loop(llm, client=client)
    assert info.value.kind == "unavailable"
    assert info.value.user_message == UNAVAILABLE_MESSAGE
    assert "127.0.0.1" not in info.value.user_message


async def test_dropped_connection_is_unavailable(llm: ScriptedLLM) -> None:
    llm.reply_disconnect()
    with pytest.raises(LlmUnavailable) as info:
        await run_loop(llm)
    assert info.value.kind == "unavailable"


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_auth_and_config_errors_ask_for_the_operator(llm: ScriptedLLM, status: int) -> None:
    llm.reply_error(status, "Incorrect API key provided: sk-abc***xyz")
    with pytest.raises(LlmUnavailable) as info:
        await run_loop(llm)
    assert info.value.kind == "configuration"
    assert info.value.status == status
    assert info.value.user_message == CONFIGURATION_MESSAGE
    assert "operator" in info.value.user_message
    assert "sk-" not in info.value.user_message


async def test_error_mid_turn_raises_unavailable(llm: ScriptedLLM) -> None:
    tool = Recorder("remember")
    llm.reply_tool_calls([("remember", {"x": "1"})]).reply_error(503)
    with pytest.raises(LlmUnavailable) as info:
        await run_loop(llm, {"remember": tool.spec})
    assert info.value.kind == "unavailable"
    assert tool.received == ['{"x": "1"}']


async def test_an_answer_written_beside_a_tool_call_survives_a_failed_follow_up(
    llm: ScriptedLLM, caplog: pytest.LogCaptureFixture
) -> None:
    tool = Recorder("stm")
    answer = "The capital of France is Paris."
    llm.reply_tool_calls([("stm", {"x": "Asked about France."})], content=answer)
    llm.reply_error(503)
    with caplog.at_level(logging.WARNING, logger="bot.llm.tools.loop"):
        result = await run_loop(llm, {"stm": tool.spec})
    assert result.text == answer
    assert not result.gave_up and result.stopped is None
    assert tool.received == ['{"x": "Asked about France."}']
    assert "finishing with that answer" in caplog.text
    assert "France" not in caplog.text  # no memory text in the log
