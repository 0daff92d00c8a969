"""Prove the scripted LLM server through the real ``openai.AsyncOpenAI`` client over HTTP.

Other tests trust this fake to behave like an OpenAI-compatible endpoint, so each feature is
checked end to end with the same client the bot uses (no mocks anywhere).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

from tests.helpers.fake_llm import ScriptedLLM, openai_client, refused_base_url

USER_HI: list[Any] = [{"role": "user", "content": "hi"}]

REMEMBER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "remember",
        "description": "Store a fact.",
        "parameters": {
            "type": "object",
            "properties": {"fact": {"type": "string"}},
            "required": ["fact"],
        },
    },
}
FORGET_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "forget",
        "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
    },
}


async def test_text_reply_reaches_client(llm: ScriptedLLM) -> None:
    llm.reply_text("Hello there, friend.")
    async with openai_client(llm) as client:
        resp = await client.chat.completions.create(model="test-model", messages=USER_HI)
    assert resp.choices[0].message.content == "Hello there, friend."
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and resp.usage.completion_tokens > 0
    assert llm.unscripted == 0


async def test_tool_call_reply_parsed_by_client(llm: ScriptedLLM) -> None:
    llm.reply_tool_calls([("remember", {"fact": "likes tea"}), ("forget", {"id": 3})])
    async with openai_client(llm) as client:
        resp = await client.chat.completions.create(model="test-model", messages=USER_HI)
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 2
    assert calls[0].type == "function"
    assert calls[0].id == "call_1"
    assert calls[0].function.name == "remember"
    assert json.loads(calls[0].function.arguments) == {"fact": "likes tea"}
    assert calls[1].id == "call_2"
    assert calls[1].function.name == "forget"
    assert json.loads(calls[1].function.arguments) == {"id": 3}


async def test_malformed_tool_arguments_arrive_verbatim(llm: ScriptedLLM) -> None:
    broken = '{"fact": "likes te'
    llm.reply_tool_calls([("remember", broken)])
    async with openai_client(llm) as client:
        resp = await client.chat.completions.create(model="test-model", messages=USER_HI)
    calls = resp.choices[0].message.tool_calls
    assert calls is not None
    assert calls[0].function.arguments == broken


async def test_streaming_text_reassembles_across_several_chunks(llm: ScriptedLLM) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    llm.reply_text(text)
    pieces: list[str] = []
    finish: list[str] = []
    async with openai_client(llm) as client:
        stream = await client.chat.completions.create(
            model="test-model", messages=USER_HI, stream=True
        )
        async for chunk in stream:
            assert chunk.object == "chat.completion.chunk"
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                if choice.finish_reason:
                    finish.append(choice.finish_reason)
    assert len(pieces) > 1
    assert "".join(pieces) == text
    assert finish == ["stop"]


async def test_streaming_single_word_still_splits(llm: ScriptedLLM) -> None:
    llm.reply_text("Supercalifragilistic")
    pieces: list[str] = []
    async with openai_client(llm) as client:
        stream = await client.chat.completions.create(
            model="test-model", messages=USER_HI, stream=True
        )
        async for chunk in stream:
            pieces += [c.delta.content for c in chunk.choices if c.delta.content]
    assert len(pieces) > 1
    assert "".join(pieces) == "Supercalifragilistic"


async def test_streaming_tool_call_reassembles_name_and_arguments(llm: ScriptedLLM) -> None:
    args = {"fact": "the user's cat is called Miso", "importance": 3}
    llm.reply_tool_calls([("remember", args), ("forget", '{"id": 1')], content="Sure.")
    ids: dict[int, str] = {}
    names: dict[int, str] = {}
    arg_parts: dict[int, list[str]] = {}
    content: list[str] = []
    finish: list[str] = []
    async with openai_client(llm) as client:
        stream = await client.chat.completions.create(
            model="test-model", messages=USER_HI, tools=[REMEMBER_TOOL], stream=True
        )
        async for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    content.append(choice.delta.content)
                for tc in choice.delta.tool_calls or []:
                    if tc.id:
                        ids[tc.index] = tc.id
                    if tc.function and tc.function.name:
                        names[tc.index] = tc.function.name
                    if tc.function and tc.function.arguments:
                        arg_parts.setdefault(tc.index, []).append(tc.function.arguments)
                if choice.finish_reason:
                    finish.append(choice.finish_reason)
    assert "".join(content) == "Sure."
    assert ids == {0: "call_1", 1: "call_2"}
    assert names == {0: "remember", 1: "forget"}
    assert len(arg_parts[0]) > 1, "arguments should be split across several deltas"
    assert json.loads("".join(arg_parts[0])) == args
    assert "".join(arg_parts[1]) == '{"id": 1'
    assert finish == ["tool_calls"]


async def test_streaming_usage_chunk_when_requested(llm: ScriptedLLM) -> None:
    llm.reply_text("counting tokens here")
    usages: list[int] = []
    async with openai_client(llm) as client:
        stream = await client.chat.completions.create(
            model="test-model",
            messages=USER_HI,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            if chunk.usage is not None:
                usages.append(chunk.usage.total_tokens)
    assert len(usages) == 1 and usages[0] > 0


async def test_500_raises_internal_server_error(llm: ScriptedLLM) -> None:
    llm.reply_error(500, "the model fell over")
    async with openai_client(llm) as client:
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(model="test-model", messages=USER_HI)
    assert info.value.status_code == 500
    assert "the model fell over" in info.value.message


async def test_429_raises_rate_limit_error_with_retry_after(llm: ScriptedLLM) -> None:
    llm.reply_error(429, "slow down", headers={"retry-after": "7"})
    async with openai_client(llm) as client:
        with pytest.raises(openai.RateLimitError) as info:
            await client.chat.completions.create(model="test-model", messages=USER_HI)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "7"
    assert isinstance(info.value.body, dict)
    assert info.value.body["message"] == "slow down"


async def test_error_on_streaming_request_raises_before_stream(llm: ScriptedLLM) -> None:
    llm.reply_error(503)
    async with openai_client(llm) as client:
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="test-model", messages=USER_HI, stream=True)


async def test_delay_beyond_client_timeout_raises_api_timeout(llm: ScriptedLLM) -> None:
    llm.reply_text("too late", delay=5.0)
    async with openai_client(llm, timeout=0.2) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(model="test-model", messages=USER_HI)


async def test_reply_delay_within_timeout_still_answers(llm: ScriptedLLM) -> None:
    llm.reply_delay(0.05, "worth the wait")
    async with openai_client(llm, timeout=5.0) as client:
        resp = await client.chat.completions.create(model="test-model", messages=USER_HI)
    assert resp.choices[0].message.content == "worth the wait"


async def test_disconnect_raises_api_connection_error(llm: ScriptedLLM) -> None:
    llm.reply_disconnect()
    async with openai_client(llm) as client:
        with pytest.raises(openai.APIConnectionError):
            await client.chat.completions.create(model="test-model", messages=USER_HI)
    assert llm.pending == 0


async def test_refused_base_url_raises_api_connection_error() -> None:
    async with openai.AsyncOpenAI(
        api_key="test", base_url=refused_base_url(), max_retries=0, timeout=2.0
    ) as client:
        with pytest.raises(openai.APIConnectionError) as info:
            await client.chat.completions.create(model="test-model", messages=USER_HI)
    assert not isinstance(info.value, openai.APITimeoutError)


async def test_requests_are_recorded(llm: ScriptedLLM) -> None:
    llm.reply_text("first").reply_text("second")
    async with openai_client(llm, default_headers={"X-Trace": "abc"}) as client:
        await client.chat.completions.create(
            model="test-model",
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "remember tea"},
            ],
            tools=[REMEMBER_TOOL, FORGET_TOOL],
        )
        await client.chat.completions.create(model="other-model", messages=USER_HI)

    assert len(llm.requests) == 2
    assert llm.messages(0) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "remember tea"},
    ]
    assert llm.tool_names(0) == ["remember", "forget"]
    assert llm.tool_schema("remember", 0) == REMEMBER_TOOL["function"]["parameters"]
    with pytest.raises(KeyError):
        llm.tool_schema("nonexistent", 0)
    # Defaults look at the latest request, which offered no tools.
    assert llm.last_request["model"] == "other-model"
    assert llm.messages() == USER_HI
    assert llm.tool_names() == []
    assert llm.headers[0]["x-trace"] == "abc"
    assert llm.headers[0]["authorization"] == "Bearer test"


async def test_last_request_without_requests_raises(llm: ScriptedLLM) -> None:
    with pytest.raises(LookupError):
        _ = llm.last_request


async def test_fallback_counts_unscripted(llm: ScriptedLLM) -> None:
    llm.fallback_text = "nothing scripted"
    llm.reply_text("scripted")
    async with openai_client(llm) as client:
        first = await client.chat.completions.create(model="test-model", messages=USER_HI)
        second = await client.chat.completions.create(model="test-model", messages=USER_HI)
        third = await client.chat.completions.create(model="test-model", messages=USER_HI)
    assert first.choices[0].message.content == "scripted"
    assert second.choices[0].message.content == "nothing scripted"
    assert third.choices[0].message.content == "nothing scripted"
    assert llm.unscripted == 2


async def test_replies_consumed_in_order(llm: ScriptedLLM) -> None:
    llm.reply_text("one").reply_tool_calls([("remember", {"fact": "x"})]).reply_error(500)
    llm.reply_text("four")
    assert llm.pending == 4
    async with openai_client(llm) as client:
        r1 = await client.chat.completions.create(model="test-model", messages=USER_HI)
        r2 = await client.chat.completions.create(model="test-model", messages=USER_HI)
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="test-model", messages=USER_HI)
        assert llm.pending == 1
        r4 = await client.chat.completions.create(model="test-model", messages=USER_HI)
    assert r1.choices[0].message.content == "one"
    assert r2.choices[0].message.tool_calls is not None
    assert r2.choices[0].message.tool_calls[0].function.name == "remember"
    assert r4.choices[0].message.content == "four"
    assert llm.pending == 0
    assert llm.unscripted == 0


async def test_reset_clears_script_and_recordings(llm: ScriptedLLM) -> None:
    llm.reply_text("consumed").reply_text("left over")
    async with openai_client(llm) as client:
        await client.chat.completions.create(model="test-model", messages=USER_HI)
        llm.reset()
        assert llm.pending == 0 and llm.requests == [] and llm.unscripted == 0
        resp = await client.chat.completions.create(model="test-model", messages=USER_HI)
    assert resp.choices[0].message.content == "ok"
    assert llm.unscripted == 1
    assert len(llm.requests) == 1


async def test_models_endpoint_lists_configured_model() -> None:
    async with ScriptedLLM(model_id="kioku-small") as server, openai_client(server) as client:
        page = await client.models.list()
    assert [m.id for m in page.data] == ["kioku-small"]


async def test_models_endpoint_can_be_absent_like_on_some_gateways() -> None:
    async with ScriptedLLM() as server, openai_client(server) as client:
        server.lists_models = False
        with pytest.raises(openai.NotFoundError):
            await client.models.list()


async def test_a_wrong_api_key_is_refused_with_401_quoting_it(llm: ScriptedLLM) -> None:
    llm.api_key = "right-key"
    llm.reply_text("never sent")
    async with openai_client(llm, api_key="wrong-key") as client:
        with pytest.raises(openai.AuthenticationError) as refused:
            await client.models.list()
        assert refused.value.message == "Error code: 401 - Incorrect API key provided: wrong-key"
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(model="test-model", messages=USER_HI)
    async with openai_client(llm, api_key="right-key") as client:
        resp = await client.chat.completions.create(model="test-model", messages=USER_HI)
    assert resp.choices[0].message.content == "never sent"
    assert len(llm.requests) == 1, "a refused request is not recorded"


async def test_stop_is_prompt_while_a_reply_is_delayed() -> None:
    """stop() must not wait out a long scripted delay (the handler is woken and dropped)."""
    server = ScriptedLLM()
    handle = server._handle_chat
    ended: list[str] = []

    async def watched(request: Any) -> Any:
        try:
            response = await handle(request)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        ended.append("returned")
        return response

    server._handle_chat = watched  # type: ignore[method-assign]  # routed at start()
    await server.start()
    server.reply_text("never", delay=30.0)
    async with openai_client(server, timeout=60.0) as client:
        request = asyncio.create_task(
            client.chat.completions.create(model="test-model", messages=USER_HI)
        )
        await server.wait_for_requests(1)  # its handler now sleeps in the delay
        assert ended == []
        async with asyncio.timeout(10):  # a hang guard: the delay is 30 s
            await server.stop()
        # Woken by stop(), not cancelled by the shutdown: no handler outlives the server.
        assert ended == ["returned"]
        with pytest.raises(openai.APIConnectionError):
            await request
    await server.stop()  # idempotent


async def test_a_strict_server_refuses_roles_a_strict_template_refuses(llm: ScriptedLLM) -> None:
    llm.strict_roles = True
    llm.reply_text("answered")
    two_users = [{"role": "user", "content": "Ann: hi"}, {"role": "user", "content": "Bob: yo"}]
    async with openai_client(llm) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="test-model", messages=two_users)
        assert "roles must alternate" in caught.value.message
        assert llm.refused_roles == ["message 1 is 'user' where 'assistant' belongs"]
        assert llm.pending == 1  # the refusal used no scripted reply
        alternating = [
            {"role": "system", "content": "persona"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [_call("call_1")]},
            {"role": "tool", "tool_call_id": "call_1", "content": "saved"},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "thanks"},
        ]
        answer = await client.chat.completions.create(model="test-model", messages=alternating)
    assert answer.choices[0].message.content == "answered"
    assert len(llm.requests) == 2


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "remember", "arguments": "{}"}}


async def test_the_raw_body_is_recorded_as_it_arrived(llm: ScriptedLLM) -> None:
    async with openai_client(llm) as client:
        await client.chat.completions.create(model="test-model", messages=USER_HI)
    assert json.loads(llm.raw_request(0)) == llm.request(0)
