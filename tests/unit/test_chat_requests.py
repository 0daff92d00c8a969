"""``bot.llm.client``: a chat request is its body as given, posted through the client's own
lower-level call, which still brings the default query, timeouts, retries and error types;
and the tokens each kind of server reports, cached ones included.

Every request goes over HTTP to the scripted server through a real ``openai.AsyncOpenAI``."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from bot.config import load_settings
from bot.llm.client import LlmRequest, chat_completion, make_client, reported_tokens
from bot.llm.stream_assembly import StreamAssembly
from bot.llm.streaming import stream_chat_completion
from tests.helpers.fake_llm import ScriptedLLM, openai_client

TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "update_short_term_memory",
        "description": "Replace the channel's memory.",
        "parameters": {
            "type": "object",
            "properties": {"summary": {"type": "string"}},
            "required": ["summary"],
        },
    },
}
# A turn's body: a tool round in the history, text beyond ASCII, content parts.
BODY: dict[str, Any] = {
    "model": "test-model",
    "messages": [
        {"role": "system", "content": "You are Kioku."},
        {"role": "user", "content": "Ana: the café ☕ opens Friday"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "update_short_term_memory",
                        "arguments": '{"summary": "x"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "saved"},
        {"role": "user", "content": [{"type": "text", "text": "and the menu?"}]},
    ],
    "max_tokens": 64,
    "temperature": 0.3,
    "tool_choice": "auto",
    "tools": [TOOL],
}


async def nothing(assembly: StreamAssembly) -> None:
    """A stream's text goes nowhere."""


async def send(
    client: openai.AsyncOpenAI, request: dict[str, Any], *, streamed: bool, **options: Any
) -> str | None:
    """The answer's text, asked whole or streamed."""
    if streamed:
        message, _ = await stream_chat_completion(
            client, request, strict_roles=False, on_text=nothing, **options
        )
        return message.content
    completion = await chat_completion(client, request, strict_roles=False, **options)
    return completion.choices[0].message.content


async def test_a_whole_request_sends_exactly_the_body_given(llm: ScriptedLLM) -> None:
    llm.reply_text("Saturday too.")
    async with openai_client(llm, api_key="sk-test") as client:
        assert await send(client, {**BODY, "timeout": 5.0}, streamed=False) == "Saturday too."
    # The timeout is the client's: it is not sent.
    assert llm.request(0) == BODY
    assert list(llm.request(0)) == list(BODY)  # in the order given
    assert json.loads(llm.raw_request(0)) == BODY
    assert llm.headers[0]["authorization"] == "Bearer sk-test"
    assert llm.headers[0]["content-type"] == "application/json"


async def test_a_streamed_request_sends_the_body_given_asking_for_events_and_usage(
    llm: ScriptedLLM,
) -> None:
    llm.reply_text("Saturday too.")
    async with openai_client(llm, api_key="sk-test") as client:
        assert await send(client, {**BODY, "timeout": 5.0}, streamed=True) == "Saturday too."
    assert llm.request(0) == {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    assert llm.headers[0]["authorization"] == "Bearer sk-test"


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_the_base_urls_query_goes_with_every_request(
    llm: ScriptedLLM, streamed: bool
) -> None:
    # Azure's api-version: the client's default query.
    settings = load_settings(
        openai_base_url=f"{llm.base_url}?api-version=2024-10-21",
        openai_api_key="test",
        model="test-model",
    )
    llm.reply_text("ok")
    client = make_client(settings, max_retries=0)
    try:
        assert await send(client, dict(BODY), streamed=streamed) == "ok"
    finally:
        await client.close()
    assert llm.request_queries == [{"api-version": "2024-10-21"}]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_requests_own_timeout_cuts_it(llm: ScriptedLLM, streamed: bool) -> None:
    # The client's own timeout is 30 s: only the request's 0.2 s can end it this soon.
    seen: list[LlmRequest] = []
    llm.reply_text("far too late", delay=30.0)
    async with openai_client(llm, timeout=30.0) as client:
        with pytest.raises(openai.APITimeoutError):
            await send(client, {**BODY, "timeout": 0.2}, streamed=streamed, observe=seen.append)
    assert [r.outcome for r in seen] == ["timeout"]
    assert seen[0].seconds < 10


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_the_clients_retries_and_their_setting_apply(
    llm: ScriptedLLM, streamed: bool
) -> None:
    for _ in range(2):
        llm.reply_error(503, headers={"retry-after-ms": "1"})
    llm.reply_text("after two retries")
    async with openai_client(llm, max_retries=2) as client:
        assert await send(client, dict(BODY), streamed=streamed) == "after two retries"
        assert len(llm.requests) == 3
        # The same request each time, retried by the client itself.
        assert len({json.dumps(body) for body in llm.requests}) == 1
        assert [h["x-stainless-retry-count"] for h in llm.headers] == ["0", "1", "2"]
        llm.reply_error(503, headers={"retry-after-ms": "1"})
        with pytest.raises(openai.InternalServerError):
            await send(client.with_options(max_retries=0), dict(BODY), streamed=streamed)
    assert len(llm.requests) == 4


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
    ],
)
async def test_a_refusal_raises_the_clients_error_type(
    llm: ScriptedLLM, streamed: bool, status: int, error: type[openai.APIStatusError]
) -> None:
    seen: list[LlmRequest] = []
    llm.reply_error(status, "refused")
    async with openai_client(llm) as client:
        with pytest.raises(error) as info:
            await send(client, dict(BODY), streamed=streamed, observe=seen.append)
    assert info.value.status_code == status
    assert [r.outcome for r in seen] == ["rate_limited" if status == 429 else "refused"]


@pytest.mark.parametrize(
    ("answer", "tokens"),
    [
        # OpenAI, vLLM, recent llama-server: the cached part of the prompt in its details.
        (
            {
                "usage": {
                    "prompt_tokens": 1200,
                    "completion_tokens": 30,
                    "prompt_tokens_details": {"cached_tokens": 1024},
                }
            },
            (1200, 30, 1024),
        ),
        # llama.cpp's llama-server: `timings`, beside usage or (a stream) without it.
        (
            {
                "usage": {"prompt_tokens": 900, "completion_tokens": 12},
                "timings": {"cache_n": 850, "prompt_n": 50, "predicted_n": 12},
            },
            (900, 12, 850),
        ),
        (
            {"usage": None, "timings": {"cache_n": 850, "prompt_n": 50, "predicted_n": 12}},
            (900, 12, 850),
        ),
        # DeepSeek.
        (
            {"usage": {"prompt_tokens": 500, "prompt_cache_hit_tokens": 448}},
            (500, 0, 448),
        ),
        # A whole-context count: never more than the prompt.
        ({"usage": {"prompt_tokens": 6, "completion_tokens": 20}, "tokens_cached": 25}, (6, 20, 6)),
        ({"usage": {"prompt_tokens": 60}, "tokens_cached": 40}, (60, 0, 40)),
        # Nothing reported, or nulls.
        ({}, (0, 0, 0)),
        (
            {
                "usage": {
                    "prompt_tokens": None,
                    "completion_tokens": None,
                    "prompt_tokens_details": None,
                },
                "timings": None,
            },
            (0, 0, 0),
        ),
    ],
)
def test_the_tokens_each_kind_of_server_reports_are_read(
    answer: dict[str, Any], tokens: tuple[int, int, int]
) -> None:
    assert reported_tokens(answer) == tokens


async def test_tokens_are_read_from_the_clients_answer_object(llm: ScriptedLLM) -> None:
    # A whole answer is the client's ChatCompletion: usage typed, llama.cpp's timings kept.
    llm.cached, llm.cache_report = (lambda prompt: prompt - 1), "llama.cpp"
    seen: list[LlmRequest] = []
    llm.reply_text("Hello there!")
    async with openai_client(llm) as client:
        await chat_completion(client, dict(BODY), strict_roles=False, observe=seen.append)
    [request] = seen
    assert request.outcome == "ok"
    assert request.prompt_tokens > 1 and request.completion_tokens == 3
    assert request.cached_tokens == request.prompt_tokens - 1
