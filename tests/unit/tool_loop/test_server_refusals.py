"""Servers that refuse tools, ``tool_choice`` or a generated tool call: asked again
without what they refused, and what they refused is told from other bad requests."""

from __future__ import annotations

import pytest
from aiohttp import web

from bot.llm.tools.loop import UNAVAILABLE_MESSAGE, LlmUnavailable
from tests.helpers.fake_llm import ScriptedLLM, _Recorded
from tests.helpers.loop_driver import Recorder, run_loop, run_loop_offering, withdrawing_tool

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
    result = await run_loop(llm, {"stm": tool.spec})
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
    result = await run_loop(llm, {"stm": tool.spec})
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
    llm.reply_error(400, refusal)
    asks = 1
    if "tool choice" in refusal.replace("_", " "):
        # A refusal naming tool_choice is first asked again without it ("auto" is only
        # said outright), and refused the same way.
        llm.reply_error(400, refusal)
        asks = 2
    llm.reply_text("Hello!")
    result = await run_loop(llm, {"stm": Recorder("stm").spec})
    assert result.tools_refused
    assert result.text == "Hello!"
    assert all("tools" in llm.request(i) for i in range(asks))
    assert "tools" not in llm.request(asks)


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
        await run_loop(llm, {"stm": Recorder("stm").spec})
    assert info.value.user_message == UNAVAILABLE_MESSAGE
    assert len(llm.requests) == 1


async def test_a_follow_up_after_a_tool_call_still_defines_the_tools_called(
    llm: ScriptedLLM,
) -> None:
    # Bedrock (also behind LiteLLM) refuses a history of tool calls in a request that
    # defines no tools ("The toolConfig field must be defined ...").
    offered = ["stm", "remember"]
    # Nothing is offered after the update.
    registry = {"stm": withdrawing_tool("stm", offered), "remember": Recorder("remember").spec}
    llm.reply_tool_calls([("stm", {"x": "summary"})]).reply_text("Done.")
    result = await run_loop_offering(llm, registry, offered)
    assert result.text == "Done."
    assert llm.request(0)["tool_choice"] == "auto"
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
    result = await run_loop(llm, {"stm": tool.spec}, offered=[])
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
    result = await run_loop(llm, {"stm": tool.spec}, tool_calling=False, max_tool_iterations=2)
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
    result = await run_loop(llm, {"stm": tool.spec}, offered=[])
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


async def test_a_follow_up_refused_for_tool_choice_with_a_404_is_asked_again_without_it() -> None:
    offered = ["stm"]
    async with OpenRouterLike() as llm:
        llm.reply_tool_calls([("stm", {"x": "summary"})]).reply_text("Done.")
        result = await run_loop_offering(llm, {"stm": withdrawing_tool("stm", offered)}, offered)
        assert result.text == "Done."
        assert not result.tools_refused
        # The first request's "auto" is refused too, and asked again without it.
        assert llm.request(0)["tool_choice"] == "auto"
        assert llm.tool_names(1) == ["stm"] and "tool_choice" not in llm.request(1)
        assert llm.request(2)["tool_choice"] == "none"
        assert llm.tool_names(3) == ["stm"] and "tool_choice" not in llm.request(3)
        assert any(m["role"] == "tool" for m in llm.messages(3))
        assert len(llm.requests) == 4


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
    result = await run_loop_offering(llm, {"stm": withdrawing_tool("stm", offered)}, offered)
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
        result = await run_loop(llm, {"stm": tool.spec}, offered=[])
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
    result = await run_loop(llm, {"stm": tool.spec}, offered=[])
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
        await run_loop(llm, {"stm": Recorder("stm").spec})
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
    result = await run_loop(llm, {"stm": Recorder("stm").spec})
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
    result = await run_loop(llm, {"stm": tool.spec}, max_tool_iterations=1)
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
    result = await run_loop_offering(llm, {"stm": withdrawing_tool("stm", offered)}, offered)
    assert result.text == "Done."
    assert result.errors == 1
    assert llm.request(1)["tool_choice"] == "none"
    assert llm.request(2)["tool_choice"] == "none"
