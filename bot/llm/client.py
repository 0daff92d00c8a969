"""The OpenAI-compatible client, and the one place chat requests are sent, timed and counted."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, overload
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from bot.config import Settings
from bot.llm.roles import alternate_roles

# How a request ended, as a metric label: "refused" is a 4xx other than 429, "bad_answer" a
# 200 whose body was no Chat Completions answer.
LlmOutcome = Literal[
    "ok", "timeout", "rate_limited", "refused", "server_error", "unreachable", "bad_answer"
]

CHAT_PATH = "/chat/completions"


@dataclass(frozen=True)
class LlmRequest:
    """One Chat Completions request: its outcome, seconds (retries included) and tokens."""

    outcome: LlmOutcome
    seconds: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # The part of prompt_tokens the server read from its prompt cache.
    cached_tokens: int = 0


RequestObserver = Callable[[LlmRequest], None]


def request_outcome(exc: BaseException) -> LlmOutcome:
    """The outcome label of a request that raised ``exc``."""
    if isinstance(exc, openai.APITimeoutError):  # a kind of APIConnectionError
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "unreachable"
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code == 429:
            return "rate_limited"
        return "server_error" if exc.status_code >= 500 else "refused"
    return "bad_answer"


def make_client(settings: Settings, *, max_retries: int | None = None) -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` client for the configured endpoint."""
    # Local servers need no key, but the openai client insists on one.
    api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "unset"
    # A query in the base URL (Azure's ?api-version=…) goes with every request: left in the
    # URL, the client would append /chat/completions after it.
    base_url, query = _split_query(settings.llm_base_url)
    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        default_query=query or None,
        timeout=settings.llm.timeout_seconds,
        max_retries=settings.llm.max_retries if max_retries is None else max_retries,
    )


def _split_query(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without its query, and the query's parameters (settings refuse repeated names)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit(parts._replace(query="")), query


@overload
async def post_chat(
    api: openai.AsyncOpenAI,
    request: Mapping[str, Any],
    *,
    strict_roles: bool,
    stream: Literal[False] = False,
) -> ChatCompletion: ...


@overload
async def post_chat(
    api: openai.AsyncOpenAI,
    request: Mapping[str, Any],
    *,
    strict_roles: bool,
    stream: Literal[True],
) -> openai.AsyncStream[ChatCompletionChunk]: ...


async def post_chat(
    api: openai.AsyncOpenAI,
    request: Mapping[str, Any],
    *,
    strict_roles: bool,
    stream: bool = False,
) -> ChatCompletion | openai.AsyncStream[ChatCompletionChunk]:
    """Send ``request`` (the JSON body, and ``timeout`` for this request) as it is."""
    # Not through `chat.completions.create`: its transformation of the arguments walks
    # every message (1-25 ms a request, a third of a turn's time), and the body is plain
    # JSON already. `post` is the client's own: base URL, key, default query (Azure's
    # api-version), timeouts, retries and error types stay its own.
    body = dict(request)
    options: openai.RequestOptions = {
        # What `create` asks for: the API key, never an admin key the environment holds.
        "security": {"bearer_auth": True},
    }
    if "timeout" in body:
        options["timeout"] = body.pop("timeout")
    if strict_roles:
        body["messages"] = alternate_roles(body["messages"])
    if not stream:
        return await api.post(CHAT_PATH, body=body, cast_to=ChatCompletion, options=options)
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    # The stream is read as raw lines (stream_assembly): its chunks are never built.
    return await api.post(
        CHAT_PATH,
        body=body,
        cast_to=ChatCompletion,
        options=options,
        stream=True,
        stream_cls=openai.AsyncStream[ChatCompletionChunk],
    )


async def chat_completion(
    api: openai.AsyncOpenAI,
    request: dict[str, Any],
    *,
    strict_roles: bool,
    observe: RequestObserver | None = None,
) -> ChatCompletion:
    """Send one whole request (its body, and ``timeout``), reported to ``observe``."""
    began = time.perf_counter()
    try:
        completion = await post_chat(api, request, strict_roles=strict_roles)
    except Exception as exc:  # not a cancellation: that is the caller's doing, not the server's
        if observe is not None:
            observe(LlmRequest(request_outcome(exc), time.perf_counter() - began))
        raise
    if observe is not None:
        observe(answered(time.perf_counter() - began, completion))
    return completion


def answered(seconds: float, answer: object) -> LlmRequest:
    """A request that answered ``answer`` (a ChatCompletion, or the JSON of one) in ``seconds``."""
    return LlmRequest("ok", seconds, *reported_tokens(answer))


def reported_tokens(answer: object) -> tuple[int, int, int]:
    """The prompt, completion and cached prompt tokens ``answer`` reports (0: not reported)."""
    # Servers omit usage, or send nulls. llama.cpp's llama-server reports its prompt cache
    # in `timings`: cache_n tokens reused, prompt_n read anew, predicted_n generated.
    usage, timings = _part(answer, "usage"), _part(answer, "timings")
    reused = _count(_part(timings, "cache_n"))
    prompt = _count(_part(usage, "prompt_tokens")) or _count(_part(timings, "prompt_n")) + reused
    completion = _count(_part(usage, "completion_tokens")) or _count(_part(timings, "predicted_n"))
    cached = max(
        _count(_part(_part(usage, "prompt_tokens_details"), "cached_tokens")),  # OpenAI, vLLM
        _count(_part(usage, "prompt_cache_hit_tokens")),  # DeepSeek
        reused,
    )
    if not cached:
        # Some servers count the whole cached context here, the answer too: at most the prompt.
        cached = min(_count(_part(answer, "tokens_cached")), prompt)
    return prompt, completion, cached


def _part(value: object, name: str) -> object:
    """``value``'s field ``name``: a key of JSON, or an attribute of the client's objects."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _count(value: object) -> int:
    """A token count as reported: a positive int, else 0."""
    return value if isinstance(value, int) and value > 0 else 0
