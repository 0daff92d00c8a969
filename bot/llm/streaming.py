"""One streamed Chat Completions request: raw event lines over the client's HTTP, assembled."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessage

from bot.llm.client import LlmRequest, RequestObserver, answered, post_chat, request_outcome
from bot.llm.stream_assembly import StreamAssembly, StreamBroken

__all__ = ["StreamCut", "TextSink", "stream_chat_completion"]

log = logging.getLogger(__name__)

# Told each time the answer's text grows, with the text of this answer so far.
TextSink = Callable[[StreamAssembly], Awaitable[None]]


class StreamCut(Exception):
    """The stream broke off (an error event, a dropped connection) before the answer ended."""

    def __init__(self, reason: str, *, started: bool) -> None:
        super().__init__(reason)
        self.started = started  # some of the answer had arrived: it was cut, not refused


async def stream_chat_completion(
    api: openai.AsyncOpenAI,
    request: dict[str, Any],
    *,
    strict_roles: bool,
    on_text: TextSink,
    observe: RequestObserver | None = None,
) -> tuple[ChatCompletionMessage, str | None]:
    """Send ``request`` streamed; the whole message and its finish reason."""
    # The client sends the request, retries and raises for a refused status; its stream's
    # HTTP response is read here line by line, no object built per chunk. An error once
    # the answer started is StreamCut, never retried (text was shown).
    began = time.perf_counter()
    assembly = StreamAssembly()
    try:
        stream = await post_chat(api, request, strict_roles=strict_roles, stream=True)
        try:
            response = stream.response
            if "json" in response.headers.get("content-type", ""):
                # A server that ignores `stream` answers whole, as a plain completion.
                await response.aread()
                whole = ChatCompletion.model_validate(response.json())
                if observe is not None:
                    observe(answered(time.perf_counter() - began, whole))
                return _first_choice(whole)
            try:
                async for line in response.aiter_lines():
                    if assembly.feed(line):
                        await on_text(assembly)
            except StreamBroken as exc:
                raise StreamCut(str(exc), started=assembly.started) from exc
            except (openai.OpenAIError, OSError, ValueError) as exc:
                raise StreamCut(type(exc).__name__, started=assembly.started) from exc
            except Exception as exc:
                # The client's HTTP library (httpx or httpx2, by openai version) raises
                # its own transport errors for a connection dropped mid-body.
                if not _transport_error(exc):
                    raise
                raise StreamCut(type(exc).__name__, started=assembly.started) from exc
        finally:
            await stream.close()
    except StreamCut:
        _observe(observe, "unreachable", began)
        raise
    except Exception as exc:  # not a cancellation: that is the caller's doing
        _observe(observe, request_outcome(exc), began)
        raise
    if not assembly.finished:
        # The body ended cleanly but without a finish reason or [DONE]: a proxy cut it.
        _observe(observe, "unreachable", began)
        raise StreamCut("the stream ended before the answer did", started=assembly.started)
    if observe is not None:
        observe(answered(time.perf_counter() - began, assembly.reported()))
    return assembly.message(), assembly.finish_reason


def _first_choice(completion: ChatCompletion) -> tuple[ChatCompletionMessage, str | None]:
    if not completion.choices:
        raise StreamCut("the answer had no choices", started=False)
    choice = completion.choices[0]
    return choice.message, choice.finish_reason


def _transport_error(exc: Exception) -> bool:
    """Whether ``exc`` comes from the HTTP library: a connection that failed mid-body."""
    return type(exc).__module__.split(".")[0] in {"httpx", "httpx2", "httpcore", "h11"}


def _observe(observe: RequestObserver | None, outcome: Any, began: float) -> None:
    if observe is not None:
        observe(LlmRequest(outcome, time.perf_counter() - began))
