"""The tool loop against the scripted OpenAI-compatible server, over real HTTP.

Every test drives a real ``openai.AsyncOpenAI`` client, so error classes, retries,
``retry-after`` and timeouts are the client's own behaviour, not mocks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp import web
from sqlalchemy import func, select
from sqlalchemy.engine import URL

from bot.config import LlmSettings
from bot.conversation.tools.longterm import LONG_TERM_TOOL_NAMES
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.conversation.turn import TurnRequest, TurnRunner
from bot.db.engine import Database
from bot.db.models import LongTermMemory, ShortTermMemory
from bot.llm.tools.base import ToolOutcome
from bot.llm.tools.loop import (
    CONFIGURATION_MESSAGE,
    FALLBACK_REPLY,
    RATE_LIMIT_MESSAGE,
    TIMEOUT_MESSAGE,
    UNAVAILABLE_MESSAGE,
    LlmUnavailable,
    LoopResult,
    ToolSpec,
    run_tool_loop,
)
from bot.memory.turn.types import REASON_PROVIDER
from bot.vocabulary.providers import (
    GENERIC,
    MIN_STM_CONTEXT_TOKENS,
    PROVIDERS,
    ProviderCaps,
    capabilities,
)
from tests.helpers.builders import (
    ALICE,
    BOT,
    CHANNEL,
    GUILD,
    make_longterm,
    make_service,
    message,
)
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import ScriptedLLM, _Recorded, openai_client, refused_base_url

USER: list[dict[str, Any]] = [
    {"role": "system", "content": "You are Kioku."},
    {"role": "user", "content": "hi"},
]


def _settings(**overrides: Any) -> LlmSettings:
    values: dict[str, Any] = {
        "timeout_seconds": 5.0,
        "max_retries": 0,
        "max_tool_iterations": 6,
        "max_consecutive_tool_errors": 5,
        "temperature": 0.3,
        "max_reply_tokens": 256,
    }
    values.update(overrides)
    return LlmSettings(**values)


def _definition(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    }


class Recorder:
    """A tool that records the raw arguments it receives and answers a fixed outcome."""

    def __init__(self, name: str, content: str = "saved", ok: bool = True) -> None:
        self.name = name
        self.outcome = ToolOutcome(content, ok)
        self.received: list[str | None] = []

    async def run(self, arguments: str | None) -> ToolOutcome:
        self.received.append(arguments)
        return self.outcome

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(definition=_definition(self.name), run=self.run)


async def _loop(
    llm: ScriptedLLM,
    registry: dict[str, ToolSpec] | None = None,
    offered: Sequence[str] | None = None,
    *,
    client: openai.AsyncOpenAI | None = None,
    tool_calling: bool = True,
    **settings: Any,
) -> LoopResult:
    registry = registry or {}
    names = list(registry) if offered is None else list(offered)
    own = client or openai_client(llm)
    try:
        return await run_tool_loop(
            own,
            model="test-model",
            messages=list(USER),
            registry=registry,
            offered=lambda: names,
            settings=_settings(**settings),
            tool_calling=tool_calling,
        )
    finally:
        await own.close()


# --------------------------------------------------------------------------------------------
# Happy paths
# --------------------------------------------------------------------------------------------


async def test_text_reply(llm: ScriptedLLM) -> None:
    tool = Recorder("remember")
    llm.reply_text("Hello there!")
    result = await _loop(llm, {"remember": tool.spec})
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
    assert (await _loop(llm, {"remember": tool.spec}, offered=[])).text == "one"
    assert (await _loop(llm, {"remember": tool.spec}, tool_calling=False)).text == "two"
    assert "tools" not in llm.request(0)
    assert "tools" not in llm.request(1)


async def test_tool_call_result_sent_back_as_tool_message(llm: ScriptedLLM) -> None:
    tool = Recorder("remember", content="saved")
    llm.reply_tool_calls([("remember", {"x": "likes tea"})]).reply_text("Noted!")
    result = await _loop(llm, {"remember": tool.spec})

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
    result = await _loop(llm, {"a": first.spec, "b": second.spec})
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
    result = await _loop(llm, {"echo": ToolSpec(_definition("echo"), echo)})

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

    async def run_stm(arguments: str | None) -> ToolOutcome:
        offered.remove("stm")  # e.g. STM was updated: at most once per turn
        return ToolOutcome("saved", ok=True)

    registry = {
        "stm": ToolSpec(_definition("stm"), run_stm),
        "remember": Recorder("remember").spec,
    }
    llm.reply_tool_calls([("stm", {"x": "summary"})]).reply_text("Done.")
    async with openai_client(llm) as client:
        result = await run_tool_loop(
            client,
            model="test-model",
            messages=list(USER),
            registry=registry,
            offered=lambda: offered,
            settings=_settings(),
        )
    assert result.text == "Done."
    assert llm.tool_names(0) == ["stm", "remember"]
    assert llm.tool_names(1) == ["remember"]


async def test_call_to_tool_not_offered_is_routed_to_its_guard(llm: ScriptedLLM) -> None:
    guarded = Recorder("stm", content="rejected: already updated this turn", ok=False)
    llm.reply_tool_calls([("stm", {"x": "again"})]).reply_text("Fine.")
    result = await _loop(llm, {"stm": guarded.spec}, offered=[])
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
    result = await _loop(llm, {"remember": Recorder("remember").spec})
    assert result.text == "Tea it is!"


async def test_empty_reply_is_returned_as_empty_text(llm: ScriptedLLM) -> None:
    llm.reply_text("<think>hmm</think>   ")
    assert (await _loop(llm)).text == ""


# --------------------------------------------------------------------------------------------
# Tool errors
# --------------------------------------------------------------------------------------------


async def test_unknown_tool_gets_an_error_naming_available_tools(llm: ScriptedLLM) -> None:
    registry = {"remember": Recorder("remember").spec, "forget": Recorder("forget").spec}
    llm.reply_tool_calls([("nope", {"x": "1"})]).reply_text("Sorry.")
    result = await _loop(llm, registry)
    assert result.errors == 1
    (name, content), *_ = result.tool_calls
    assert name == "nope"
    assert 'unknown tool "nope"' in content
    assert '"remember"' in content and '"forget"' in content
    assert llm.messages(1)[-1]["content"] == content


async def test_malformed_arguments_reach_the_tool_raw(llm: ScriptedLLM) -> None:
    tool = Recorder("remember", content="rejected: arguments are truncated JSON", ok=False)
    llm.reply_tool_calls([("remember", '{"x": "likes te')]).reply_text("Oops.")
    result = await _loop(llm, {"remember": tool.spec})
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
        result = await _loop(llm, {"boom": ToolSpec(_definition("boom"), explode)})
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
    result = await _loop(llm, {"stm": tool.spec}, max_tool_iterations=10)
    assert result.stopped == "too_many_tool_errors"
    assert result.errors == 5
    assert result.text == "Sorry, I could not save that, but here is your answer."
    assert len(llm.requests) == 6
    assert llm.tool_names(4) == ["stm"]
    assert "tool_choice" not in llm.request(4)
    assert llm.request(-1)["tool_choice"] == "none"
    assert llm.messages(-1)[-1]["role"] == "tool"
    assert result.iterations == 6
    assert llm.unscripted == 0


async def test_a_success_resets_the_consecutive_error_count(llm: ScriptedLLM) -> None:
    bad = Recorder("bad", content="rejected", ok=False)
    good = Recorder("good", content="saved")
    llm.reply_tool_calls([("bad", {}), ("bad", {}), ("bad", {}), ("bad", {})])
    llm.reply_tool_calls([("good", {}), ("bad", {})]).reply_text("Done.")
    result = await _loop(llm, {"bad": bad.spec, "good": good.spec})
    assert result.stopped is None
    assert result.errors == 5
    assert result.text == "Done."


async def test_errors_within_one_batch_count_and_every_call_is_answered(
    llm: ScriptedLLM,
) -> None:
    bad = Recorder("bad", content="rejected", ok=False)
    llm.reply_tool_calls([("bad", {"x": str(i)}) for i in range(6)]).reply_text("Answer.")
    result = await _loop(llm, {"bad": bad.spec})
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
    result = await _loop(llm, {"remember": tool.spec}, max_tool_iterations=3)
    assert result.stopped == "max_iterations"
    assert result.text == "Final answer."
    assert result.iterations == 4
    assert len(tool.received) == 3
    assert [llm.tool_names(i) for i in range(4)] == [["remember"]] * 4
    assert [llm.request(i).get("tool_choice") for i in range(4)] == [None] * 3 + ["none"]
    assert llm.unscripted == 0


async def test_failed_final_call_returns_a_short_fallback(llm: ScriptedLLM) -> None:
    tool = Recorder("remember")
    llm.reply_tool_calls([("remember", {"x": "1"})]).reply_error(500)
    result = await _loop(llm, {"remember": tool.spec}, max_tool_iterations=1)
    assert result.stopped == "max_iterations"
    assert result.text == FALLBACK_REPLY
    assert result.iterations == 1


# --------------------------------------------------------------------------------------------
# Transport errors → LlmUnavailable
# --------------------------------------------------------------------------------------------


async def test_server_error_is_unavailable_without_the_body(llm: ScriptedLLM) -> None:
    llm.reply_error(500, "internal failure, key sk-live-123")
    with pytest.raises(LlmUnavailable) as info:
        await _loop(llm)
    assert info.value.kind == "unavailable"
    assert info.value.status == 500
    assert info.value.user_message == UNAVAILABLE_MESSAGE
    assert "sk-live" not in info.value.user_message and "sk-live" not in str(info.value)


async def test_rate_limit_with_retry_after_is_retried_by_the_client(llm: ScriptedLLM) -> None:
    llm.reply_error(429, headers={"retry-after": "0.05"}).reply_text("After the wait.")
    result = await _loop(llm, max_retries=1)
    assert result.text == "After the wait."
    assert len(llm.requests) == 2


async def test_persistent_rate_limit_is_unavailable_rate_limited(llm: ScriptedLLM) -> None:
    llm.reply_error(429, headers={"retry-after-ms": "20"})
    llm.reply_error(429, headers={"retry-after-ms": "20"})
    with pytest.raises(LlmUnavailable) as info:
        await _loop(llm, max_retries=1)
    assert len(llm.requests) == 2
    assert info.value.kind == "rate_limited"
    assert info.value.user_message == RATE_LIMIT_MESSAGE
    assert "rate limited" in info.value.user_message


async def test_timeout_is_unavailable_timeout(llm: ScriptedLLM) -> None:
    llm.reply_text("too late", delay=3.0)
    with pytest.raises(LlmUnavailable) as info:
        await _loop(llm, timeout_seconds=0.3)
    assert info.value.kind == "timeout"
    assert info.value.user_message == TIMEOUT_MESSAGE
    assert info.value.user_message.startswith("The model took too long to answer")


async def test_turn_timeout_cuts_the_retries_of_a_silent_endpoint(llm: ScriptedLLM) -> None:
    """With ``turn_timeout_seconds`` below one call's timeout, a silent endpoint ends the
    turn at the deadline as a timeout: the client's retries are never started."""
    for _ in range(3):
        llm.reply_text("far too late", delay=30.0)
    with pytest.raises(LlmUnavailable) as info:
        await _loop(llm, timeout_seconds=30.0, max_retries=2, turn_timeout_seconds=0.3)
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
        await _loop(
            llm,
            {"remember": ToolSpec(definition=_definition("remember"), run=slow_tool)},
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
    result = await _loop(
        llm, {"remember": tool.spec}, timeout_seconds=30.0, turn_timeout_seconds=2.0
    )
    assert result.text == "It is Tuesday."
    assert tool.received == ['{"x": "1"}']
    assert len(llm.requests) == 2


async def test_connection_refused_is_unavailable(llm: ScriptedLLM) -> None:
    client = openai.AsyncOpenAI(api_key="test", base_url=refused_base_url(), max_retries=0)
    with pytest.raises(LlmUnavailable) as info:
        await _loop(llm, client=client)
    assert info.value.kind == "unavailable"
    assert info.value.user_message == UNAVAILABLE_MESSAGE
    assert "127.0.0.1" not in info.value.user_message


async def test_dropped_connection_is_unavailable(llm: ScriptedLLM) -> None:
    llm.reply_disconnect()
    with pytest.raises(LlmUnavailable) as info:
        await _loop(llm)
    assert info.value.kind == "unavailable"


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_auth_and_config_errors_ask_for_the_operator(llm: ScriptedLLM, status: int) -> None:
    llm.reply_error(status, "Incorrect API key provided: sk-abc***xyz")
    with pytest.raises(LlmUnavailable) as info:
        await _loop(llm)
    assert info.value.kind == "configuration"
    assert info.value.status == status
    assert info.value.user_message == CONFIGURATION_MESSAGE
    assert "operator" in info.value.user_message
    assert "sk-" not in info.value.user_message


async def test_error_mid_turn_raises_unavailable(llm: ScriptedLLM) -> None:
    tool = Recorder("remember")
    llm.reply_tool_calls([("remember", {"x": "1"})]).reply_error(503)
    with pytest.raises(LlmUnavailable) as info:
        await _loop(llm, {"remember": tool.spec})
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
        result = await _loop(llm, {"stm": tool.spec})
    assert result.text == answer
    assert not result.gave_up and result.stopped is None
    assert tool.received == ['{"x": "Asked about France."}']
    assert "finishing with that answer" in caplog.text
    assert "France" not in caplog.text  # no memory text in the log


# Groq checks each generation's tool call against the schema and answers 400
# "tool_use_failed" when it does not match: one bad answer, not a model without tools.
GROQ_TOOL_USE_FAILED = (
    "tool call validation failed: parameters for tool stm did not match schema: "
    "errors: [at '/x': length must be <= 1500, but got 1873]"
)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        pytest.param(GROQ_TOOL_USE_FAILED, "tool_use_failed", id="groq-validation"),
        pytest.param(
            "Failed to call a function. Please adjust your prompt. See 'failed_generation' "
            "for more details.",
            "tool_use_failed",
            id="groq-failed-generation",
        ),
        pytest.param(GROQ_TOOL_USE_FAILED, None, id="wording-without-code"),
    ],
)
async def test_a_tool_call_the_server_refused_is_asked_again_not_a_refusal_of_tools(
    llm: ScriptedLLM, message: str, code: str | None
) -> None:
    tool = Recorder("stm")
    llm.reply_error(400, message, code=code)
    llm.reply_tool_calls([("stm", {"x": "short"})]).reply_text("Done.")
    result = await _loop(llm, {"stm": tool.spec})
    assert result.text == "Done."
    assert not result.tools_refused
    assert result.errors == 1  # a failed tool call of this turn
    assert tool.received == ['{"x": "short"}']
    assert [llm.tool_names(i) for i in range(2)] == [["stm"], ["stm"]]


async def test_a_second_refused_tool_call_ends_the_loop_with_an_answer_without_tools(
    llm: ScriptedLLM,
) -> None:
    tool = Recorder("stm")
    llm.reply_error(400, GROQ_TOOL_USE_FAILED, code="tool_use_failed")
    llm.reply_error(400, GROQ_TOOL_USE_FAILED, code="tool_use_failed")
    llm.reply_text("Here is your answer.")
    result = await _loop(llm, {"stm": tool.spec})
    assert result.text == "Here is your answer."
    assert result.stopped == "too_many_tool_errors"
    assert result.errors == 2
    assert not result.tools_refused
    assert tool.received == []
    assert llm.tool_names(1) == ["stm"]
    assert "tools" not in llm.request(2)  # nothing was called: nothing to define
    assert llm.unscripted == 0


@pytest.mark.parametrize(
    "refusal",
    [
        "registry.ollama.ai/library/gemma3:4b does not support tools",
        "This model does not support function calling",
        "tools are not supported for this model",
        "Function calling is not supported by this endpoint",
        "tool_choice 'none' is not supported",
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    ],
)
async def test_a_server_that_cannot_take_tools_is_asked_again_without_them(
    llm: ScriptedLLM, refusal: str
) -> None:
    llm.reply_error(400, refusal).reply_text("Hello!")
    result = await _loop(llm, {"stm": Recorder("stm").spec})
    assert result.tools_refused
    assert result.text == "Hello!"
    assert "tools" in llm.request(0) and "tools" not in llm.request(1)


@pytest.mark.parametrize(
    "message",
    [
        "Invalid 'messages[3]': 'tool_call_id' of 'call_1' not found",
        "Invalid schema for function 'stm': 'maxLength' is not permitted",
        "This model's maximum context length is 8192 tokens (tools included)",
    ],
)
async def test_other_bad_requests_mentioning_tools_are_not_a_refusal(
    llm: ScriptedLLM, message: str
) -> None:
    llm.reply_error(400, message)
    with pytest.raises(LlmUnavailable) as info:
        await _loop(llm, {"stm": Recorder("stm").spec})
    assert info.value.user_message == UNAVAILABLE_MESSAGE
    assert len(llm.requests) == 1


async def test_a_follow_up_after_a_tool_call_still_defines_the_tools_called(
    llm: ScriptedLLM,
) -> None:
    # Bedrock (also behind LiteLLM) refuses a history of tool calls in a request that
    # defines no tools ("The toolConfig field must be defined ...").
    offered = ["stm", "remember"]

    async def run_stm(arguments: str | None) -> ToolOutcome:
        offered.clear()  # nothing is offered after the update
        return ToolOutcome("saved", ok=True)

    registry = {
        "stm": ToolSpec(_definition("stm"), run_stm),
        "remember": Recorder("remember").spec,
    }
    llm.reply_tool_calls([("stm", {"x": "summary"})]).reply_text("Done.")
    async with openai_client(llm) as client:
        result = await run_tool_loop(
            client,
            model="test-model",
            messages=list(USER),
            registry=registry,
            offered=lambda: offered,
            settings=_settings(),
        )
    assert result.text == "Done."
    assert "tool_choice" not in llm.request(0)
    assert any(m["role"] == "tool" for m in llm.messages(1))
    assert llm.tool_names(1) == ["stm"]  # the tool called, not every tool
    assert llm.request(1)["tool_choice"] == "none"


async def test_after_tools_are_refused_mid_turn_no_request_carries_tools_or_tool_calls(
    llm: ScriptedLLM,
) -> None:
    # A server that refuses tools once the turn holds calls: the turn goes tool-less,
    # and its history loses the tool calls (what was written beside them stays).
    tool = Recorder("stm")
    llm.reply_tool_calls([("stm", {"x": "summary"})], content="Paris.")
    llm.reply_error(400, "this model does not support tools")
    llm.reply_text("Anything else?")
    result = await _loop(llm, {"stm": tool.spec}, offered=[])
    assert result.tools_refused
    assert result.text == "Paris.\n\nAnything else?"
    assert llm.request(1)["tool_choice"] == "none"
    assert "tools" not in llm.request(2) and "tool_choice" not in llm.request(2)
    history = llm.messages(2)
    assert all(m["role"] != "tool" and not m.get("tool_calls") for m in history)
    assert history[-1] == {"role": "assistant", "content": "Paris."}


async def test_a_provider_without_tool_calling_never_gets_tools_even_after_a_call(
    llm: ScriptedLLM,
) -> None:
    tool = Recorder("stm")
    for _ in range(2):
        llm.reply_tool_calls([("stm", {"x": "anyway"})])
    llm.reply_text("Hi.")
    result = await _loop(llm, {"stm": tool.spec}, tool_calling=False, max_tool_iterations=2)
    assert result.text == "Hi."
    for i in range(3):
        assert "tools" not in llm.request(i) and "tool_choice" not in llm.request(i)
        assert all(m["role"] != "tool" and not m.get("tool_calls") for m in llm.messages(i))


async def test_a_server_refusing_tool_choice_none_is_asked_again_without_it(
    llm: ScriptedLLM,
) -> None:
    # It takes tools, only not tool_choice "none": the turn keeps its tools (never
    # tool-less for that), the follow-up goes again with the definitions alone.
    tool = Recorder("stm")
    llm.reply_tool_calls([("stm", {"x": "summary"})], content="Paris.")
    llm.reply_error(400, "tool_choice 'none' is not supported")
    llm.reply_text("Paris it is.")
    result = await _loop(llm, {"stm": tool.spec}, offered=[])
    assert not result.tools_refused
    assert result.text == "Paris.\n\nParis it is."
    assert llm.request(1)["tool_choice"] == "none"
    assert llm.tool_names(2) == ["stm"] and "tool_choice" not in llm.request(2)
    assert any(m["role"] == "tool" for m in llm.messages(2))


OPENROUTER_TOOL_CHOICE_404 = (
    "No endpoints found that support the provided 'tool_choice' value. To learn more "
    "about provider routing, visit: https://openrouter.ai/docs/provider-routing"
)


class OpenRouterLike(ScriptedLLM):
    """Answers 404 to any request carrying ``tool_choice`` (no provider OpenRouter routes
    to takes it), the script otherwise."""

    async def _handle_chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if isinstance(body, dict) and "tool_choice" in body:
            self._recorded.append(_Recorded(body=body, headers={}))
            return self._error_response(404, OPENROUTER_TOOL_CHOICE_404, "api_error")
        return await super()._handle_chat(request)


def _stm_updated_once(offered: list[str]) -> ToolSpec:
    """The STM tool: no longer offered once it succeeded, as in a real turn."""

    async def run(arguments: str | None) -> ToolOutcome:
        offered.clear()
        return ToolOutcome("saved", ok=True)

    return ToolSpec(_definition("stm"), run)


async def test_a_follow_up_refused_for_tool_choice_with_a_404_is_asked_again_without_it() -> None:
    offered = ["stm"]
    async with OpenRouterLike() as llm:
        llm.reply_tool_calls([("stm", {"x": "summary"})]).reply_text("Done.")
        async with openai_client(llm) as client:
            result = await run_tool_loop(
                client,
                model="test-model",
                messages=list(USER),
                registry={"stm": _stm_updated_once(offered)},
                offered=lambda: offered,
                settings=_settings(),
            )
        assert result.text == "Done."
        assert not result.tools_refused
        assert llm.request(1)["tool_choice"] == "none"
        assert llm.tool_names(2) == ["stm"] and "tool_choice" not in llm.request(2)
        assert any(m["role"] == "tool" for m in llm.messages(2))
        assert len(llm.requests) == 3


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (404, OPENROUTER_TOOL_CHOICE_404),
        (422, "Unprocessable request"),
        (400, "Invalid request"),
    ],
)
async def test_a_follow_up_refused_with_and_without_tool_choice_goes_without_tool_calls(
    llm: ScriptedLLM, status: int, message: str
) -> None:
    # The tools of a follow-up after the STM update are only there for the history: if
    # the server refuses them, with tool_choice and without, the history loses its tool
    # calls (what was written beside them stays) rather than the turn failing.
    offered = ["stm"]
    llm.reply_tool_calls([("stm", {"x": "summary"})], content="Paris.")
    llm.reply_error(status, message).reply_error(status, message)
    llm.reply_text("Anything else?")
    async with openai_client(llm) as client:
        result = await run_tool_loop(
            client,
            model="test-model",
            messages=list(USER),
            registry={"stm": _stm_updated_once(offered)},
            offered=lambda: offered,
            settings=_settings(),
        )
    assert result.text == "Paris.\n\nAnything else?"
    assert not result.tools_refused  # the process keeps offering tools
    assert llm.request(1)["tool_choice"] == "none"
    assert llm.tool_names(2) == ["stm"] and "tool_choice" not in llm.request(2)
    assert "tools" not in llm.request(3) and "tool_choice" not in llm.request(3)
    history = llm.messages(3)
    assert all(m["role"] != "tool" and not m.get("tool_calls") for m in history)
    assert history[-1] == {"role": "assistant", "content": "Paris."}


async def test_a_turn_remembers_that_its_follow_ups_cannot_carry_tool_choice() -> None:
    # Nothing offered: every request after the first defines the tools called. Once the
    # server refused tool_choice, the turn's later follow-ups go without it at once.
    tool = Recorder("stm")
    async with OpenRouterLike() as llm:
        llm.reply_tool_calls([("stm", {"x": "1"})])  # a call the model makes anyway
        llm.reply_tool_calls([("stm", {"x": "2"})])  # the follow-up without tool_choice
        llm.reply_text("Done.")
        result = await _loop(llm, {"stm": tool.spec}, offered=[])
        assert result.text == "Done."
        assert ["tool_choice" in body for body in llm.requests] == [False, True, False, False]
        assert llm.tool_names(3) == ["stm"]


async def test_a_turn_remembers_that_its_follow_ups_cannot_carry_tool_definitions(
    llm: ScriptedLLM,
) -> None:
    # Nothing offered: once the server refused a follow-up with tool_choice and with the
    # definitions alone, the turn's later follow-ups go without tools at once.
    tool = Recorder("stm")
    llm.reply_tool_calls([("stm", {"x": "1"})])  # a call the model makes anyway
    llm.reply_error(400, "Invalid request").reply_error(400, "Invalid request")
    llm.reply_tool_calls([("stm", {"x": "2"})])  # asked without tools, it calls again
    llm.reply_text("Done.")
    result = await _loop(llm, {"stm": tool.spec}, offered=[])
    assert result.text == "Done."
    assert tool.received == ['{"x": "1"}', '{"x": "2"}']
    assert ["tools" in body for body in llm.requests] == [False, True, True, False, False]
    assert ["tool_choice" in body for body in llm.requests] == [False, True, False, False, False]


@pytest.mark.parametrize(
    "message",
    [
        "The model `gpt-5-typo` does not exist or you do not have access to it.",
        "No endpoints found for vendor/model-typo.",
    ],
)
async def test_a_404_on_the_first_request_is_still_a_configuration_problem(
    llm: ScriptedLLM, message: str
) -> None:
    llm.reply_error(404, message)
    with pytest.raises(LlmUnavailable) as info:
        await _loop(llm, {"stm": Recorder("stm").spec})
    assert info.value.kind == "configuration" and info.value.status == 404
    assert len(llm.requests) == 1 and "tools" in llm.request(0)


async def test_openrouters_404_for_a_model_without_tools_is_a_refusal_of_tools(
    llm: ScriptedLLM,
) -> None:
    llm.reply_error(
        404,
        "No endpoints found that support tool use. To learn more about provider routing, "
        "visit: https://openrouter.ai/docs/provider-routing",
    )
    llm.reply_text("Hello!")
    result = await _loop(llm, {"stm": Recorder("stm").spec})
    assert result.tools_refused
    assert result.text == "Hello!"
    assert "tools" in llm.request(0) and "tools" not in llm.request(1)


GROQ_CALLED_UNDER_NONE = "Tool choice is none, but model called a tool"


async def test_a_tool_called_in_the_final_call_is_asked_again_without_tools(
    llm: ScriptedLLM,
) -> None:
    # Groq's 400 tool_use_failed names tool choice: it is the model's failed generation,
    # not a refusal of tool_choice; asked again allowing tools, the model calls again.
    tool = Recorder("stm")
    llm.reply_tool_calls([("stm", {"x": "summary"})])  # iteration 1 = max: loop stops
    llm.reply_error(400, GROQ_CALLED_UNDER_NONE, code="tool_use_failed")
    llm.reply_text("Done.")
    result = await _loop(llm, {"stm": tool.spec}, max_tool_iterations=1)
    assert result.text == "Done." and not result.gave_up
    assert llm.request(1)["tool_choice"] == "none"
    assert "tools" not in llm.request(2) and "tool_choice" not in llm.request(2)
    assert all(m["role"] != "tool" and not m.get("tool_calls") for m in llm.messages(2))
    assert tool.received == ['{"x": "summary"}']


async def test_a_tool_called_under_tool_choice_none_mid_turn_is_a_failed_generation(
    llm: ScriptedLLM,
) -> None:
    # Not read as "tool_choice refused": the follow-up is asked again as it was.
    offered = ["stm"]
    llm.reply_tool_calls([("stm", {"x": "summary"})])
    llm.reply_error(400, GROQ_CALLED_UNDER_NONE, code="tool_use_failed")
    llm.reply_text("Done.")
    async with openai_client(llm) as client:
        result = await run_tool_loop(
            client,
            model="test-model",
            messages=list(USER),
            registry={"stm": _stm_updated_once(offered)},
            offered=lambda: offered,
            settings=_settings(),
        )
    assert result.text == "Done."
    assert result.errors == 1
    assert llm.request(1)["tool_choice"] == "none"
    assert llm.request(2)["tool_choice"] == "none"


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
    result = await _loop(llm, {"stm": Recorder("stm").spec})
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
    result = await _loop(llm, {"stm": tool.spec})
    assert result.text == "Let me save that.\n\nThe capital of France is Paris."


async def test_leaked_syntax_in_a_real_reply_is_stripped(llm: ScriptedLLM) -> None:
    llm.reply_text(
        "<think>The user greets me.</think>Hi there!\n"
        '<tool_call>{"name": "update_short_term_memory", "arguments": {"summary": "hi"}}'
        "</tool_call>"
    )
    assert (await _loop(llm)).text == "Hi there!"


# --------------------------------------------------------------------------------------------
# Provider capabilities
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "openai",
        "azure",
        "ollama",
        "vllm",
        "lmstudio",
        "openrouter",
        "groq",
        "together",
        "mistral",
        "deepseek",
        "anthropic",
    ],
)
def test_known_tool_calling_providers_allow_stm(name: str) -> None:
    caps = capabilities(name)
    assert caps.name == name
    assert caps.tool_calling and caps.stm_allowed
    assert caps.context_tokens >= MIN_STM_CONTEXT_TOKENS
    assert caps.notes


def test_novelai_is_excluded_from_stm() -> None:
    caps = capabilities("NovelAI")
    assert caps.name == "novelai"
    assert not caps.tool_calling
    assert caps.context_tokens < MIN_STM_CONTEXT_TOKENS
    assert not caps.stm_allowed


def test_lookup_is_case_insensitive_and_knows_aliases() -> None:
    assert capabilities("  OpenAI ") is PROVIDERS["openai"]
    assert capabilities("LM_Studio").name == "lmstudio"
    assert capabilities("Azure-OpenAI").name == "azure"
    assert capabilities("llama.cpp").name == "llamacpp"


def test_unknown_provider_gets_the_generic_entry() -> None:
    caps = capabilities("My-Gateway")
    assert caps.name == "my-gateway"
    assert caps.tool_calling and caps.stm_allowed
    assert caps.context_tokens == GENERIC.context_tokens
    assert "unknown provider" in caps.notes.lower()


def test_stm_allowed_is_derived_for_every_entry() -> None:
    for caps in PROVIDERS.values():
        expected = caps.tool_calling and caps.context_tokens >= MIN_STM_CONTEXT_TOKENS
        assert caps.stm_allowed == expected, caps.name


async def test_a_tool_calling_provider_excluded_from_stm_hides_only_the_stm_tool(
    llm: ScriptedLLM,
    db: Database,
    pg_url: URL,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A provider that calls tools but whose table entry disallows STM (here: too little
    context) still gets the long-term tools on a "remember that…" turn; only the STM tool
    is hidden, and a forced STM call is refused with the provider reason."""
    small = ProviderCaps(
        name="small-context",
        tool_calling=True,
        context_tokens=MIN_STM_CONTEXT_TOKENS // 2,
        stm_allowed=False,
        notes="Tool calling, but too little context for STM.",
    )
    # The shipped table has no such entry (every tool-calling provider there allows STM).
    assert not any(c.tool_calling and not c.stm_allowed for c in PROVIDERS.values())
    monkeypatch.setattr("bot.conversation.turn.capabilities", lambda name: small)
    settings = make_test_settings(
        pg_url, tmp_path, model="test-model", llm={"max_retries": 0, "timeout_seconds": 5}
    )
    service = make_service(db.sessions, settings)

    def request(text: str) -> TurnRequest:
        said = message(ALICE, text)
        service.observe_message(CHANNEL, said)
        return TurnRequest(
            channel_id=CHANNEL,
            user_id=ALICE,
            source_message_id=said.message_id,
            content=text,
            bot_user_id=BOT,
            guild_id=GUILD,
        )

    async with openai_client(llm) as client:
        runner = TurnRunner(
            service, client, settings, longterm=make_longterm(service), persona="You are Kioku."
        )
        assert runner.caps is small

        llm.reply_tool_calls([("remember", {"fact": "Alice's cat is called Miso"})])
        llm.reply_text("I'll remember Miso.")
        remembered = await runner.run(request("remember that my cat is called Miso"))

        llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "forced by the model"})])
        llm.reply_text("Nothing much.")
        plain = await runner.run(request("what's new today?"))

    assert remembered.text == "I'll remember Miso."
    assert llm.tool_names(0) == list(LONG_TERM_TOOL_NAMES)
    assert STM_TOOL_NAME not in llm.tool_names(1)
    assert "tools" not in llm.request(2)  # an ordinary turn offers nothing
    assert plain.text == "Nothing much."
    assert plain.stm_results == (f"rejected: {REASON_PROVIDER}",)
    async with db.sessions() as session:
        facts = list(await session.scalars(select(LongTermMemory.content)))
        stm_rows = await session.scalar(select(func.count()).select_from(ShortTermMemory))
    assert facts == ["Alice's cat is called Miso"]
    assert stm_rows == 0
    assert llm.unscripted == 0


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

    result = await _loop(llm, {STM_TOOL_NAME: tool.spec})

    assert result.text == answer
