"""The OpenAI-compatible client, and the one place chat requests are sent, timed and counted."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import openai
from openai.types.chat import ChatCompletion

from bot.config import Settings
from bot.llm.roles import alternate_roles

# How a request ended, as a metric label: "refused" is a 4xx other than 429, "bad_answer" a
# 200 whose body was no Chat Completions answer.
LlmOutcome = Literal[
    "ok", "timeout", "rate_limited", "refused", "server_error", "unreachable", "bad_answer"
]


@dataclass(frozen=True)
class LlmRequest:
    """One Chat Completions request: its outcome, seconds (retries included) and tokens."""

    outcome: LlmOutcome
    seconds: float
    prompt_tokens: int = 0
    completion_tokens: int = 0


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


async def chat_completion(
    api: openai.AsyncOpenAI,
    request: dict[str, Any],
    *,
    strict_roles: bool,
    observe: RequestObserver | None = None,
) -> ChatCompletion:
    """Send one request (``chat.completions.create``'s arguments), reported to ``observe``."""
    if strict_roles:
        request = {**request, "messages": alternate_roles(request["messages"])}
    began = time.perf_counter()
    try:
        completion: ChatCompletion = await api.chat.completions.create(**request)
    except Exception as exc:  # not a cancellation: that is the caller's doing, not the server's
        if observe is not None:
            observe(LlmRequest(request_outcome(exc), time.perf_counter() - began))
        raise
    if observe is not None:
        usage = getattr(completion, "usage", None)
        observe(
            LlmRequest(
                "ok",
                time.perf_counter() - began,
                _tokens(usage, "prompt_tokens"),
                _tokens(usage, "completion_tokens"),
            )
        )
    return completion


def _tokens(usage: object, field: str) -> int:
    """A token count of the answer's ``usage`` (servers omit it, or send nulls)."""
    value = getattr(usage, field, None)
    return value if isinstance(value, int) and value > 0 else 0
