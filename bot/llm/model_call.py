"""One Chat Completions request of a turn, within the turn's deadline."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

import openai
from openai.types.chat import ChatCompletionMessage

from bot.config import LlmSettings
from bot.llm.client import LlmRequest, RequestObserver, chat_completion
from bot.llm.failures import (
    CUT_MESSAGE,
    TIMEOUT_MESSAGE,
    UNAVAILABLE_MESSAGE,
    HistoryToolsRefused,
    LlmUnavailable,
    refusal,
    unavailable,
)
from bot.llm.streaming import StreamCut, TextSink, stream_chat_completion

log = logging.getLogger(__name__)

# "auto", "none", or {"type": "function", "function": {"name": …}}: a call to that tool.
ToolChoice = str | dict[str, Any]


@dataclass
class HistoryTools:
    """Which requests with tools (only for the history's calls, or streamed) this turn's
    server refused."""

    # 1: it refused `tool_choice`; 2: the definitions too.  A fallback needed once is
    # used from the start next time.
    refused: int = 0
    # It refused `tool_choice: "auto"` beside offered tools: they go without it.
    auto_refused: bool = False
    # It failed a streamed request with tools: requests with tools are asked whole.
    no_streamed_tools: bool = False


class Ask(Protocol):
    """:class:`Asker`, or anything that asks the model as it does."""

    def __call__(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        tool_choice: ToolChoice | None = None,
    ) -> Awaitable[tuple[ChatCompletionMessage, bool]]: ...


@dataclass
class Asker:
    """The turn's requests: its client, model, settings, deadline and fallbacks, bound."""

    api: openai.AsyncOpenAI
    model: str
    settings: LlmSettings
    history: HistoryTools
    strict_roles: bool
    observe: RequestObserver | None
    deadline: float  # event-loop time: bounds the client's retries and their waits too
    on_text: TextSink | None = None

    async def __call__(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        tool_choice: ToolChoice | None = None,
    ) -> tuple[ChatCompletionMessage, bool]:
        """The model's message and whether it was cut at ``max_tokens``, with fallbacks."""
        # A request with `tool_choice` (tools defined only for the history's calls) the
        # server refuses is asked again without it, then without tools nor tool calls in
        # the history: OpenRouter answers 404 when no provider it routes to takes the value.
        history = self.history
        complete = functools.partial(self._complete, messages)
        if tool_choice is None:
            return await complete(tools)
        if tool_choice != "none":  # "auto", or one function the call must be to
            if not history.auto_refused:
                try:
                    return await complete(tools, tool_choice)
                except HistoryToolsRefused:
                    history.auto_refused = True
                    log.warning("LLM refused tool_choice %r: asking again without it", tool_choice)
            return await complete(tools)
        for keep_choice in (True, False)[history.refused :]:
            try:
                return await complete(
                    tools, tool_choice if keep_choice else None, history_only=True
                )
            except HistoryToolsRefused:
                history.refused += 1
                if keep_choice:
                    log.warning("LLM refused tool_choice %r: asking again without it", tool_choice)
                else:
                    log.warning(
                        "LLM refused the tool definitions of a follow-up: asking again with "
                        "the tool calls taken out of the history"
                    )
        return await complete([])

    def _request(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        tool_choice: ToolChoice | None,
        remaining: float,
    ) -> dict[str, Any]:
        # Without tools the request carries no tool calls or results either (servers
        # refuse them without definitions). The body goes out as built, its fields in the
        # order `chat.completions.create` sent them: the same bytes as before.
        settings = self.settings
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages if tools else _without_tool_calls(messages),
        }
        # Only send what is set: some servers reject explicit nulls.
        if settings.max_reply_tokens:
            request["max_tokens"] = settings.max_reply_tokens
        if settings.temperature is not None:
            request["temperature"] = settings.temperature
        if tools:
            if tool_choice is not None:
                request["tool_choice"] = tool_choice
            request["tools"] = tools
        request["timeout"] = min(settings.timeout_seconds, remaining)  # the client's, not sent
        return request

    async def _complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        tool_choice: ToolChoice | None = None,
        *,
        history_only: bool = False,
    ) -> tuple[ChatCompletionMessage, bool]:
        """One request: the first choice's message and whether it was cut at ``max_tokens``."""
        # Only model calls are cut at the deadline, never a tool's run.
        settings, observe = self.settings, self.observe
        remaining = self.deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise _past_deadline(settings, observe, 0.0)
        request = self._request(messages, tools, tool_choice, remaining)
        began = time.perf_counter()
        try:
            async with asyncio.timeout_at(self.deadline):
                if self.on_text is not None and not (tools and self.history.no_streamed_tools):
                    streamed, finish = await stream_chat_completion(
                        self.api,
                        request,
                        strict_roles=self.strict_roles,
                        on_text=self.on_text,
                        observe=observe,
                    )
                    return streamed, finish == "length"
                completion = await chat_completion(
                    self.api, request, strict_roles=self.strict_roles, observe=observe
                )
        except StreamCut as exc:
            if not exc.started and self._ask_whole(tools, "a stream that ended before it began"):
                return await self._complete(messages, tools, tool_choice, history_only=history_only)
            log.warning("LLM stream broke off before the answer ended (%s)", exc)
            # Nothing of the answer arrived (a body that was no event stream): unavailable.
            notice = CUT_MESSAGE if exc.started else UNAVAILABLE_MESSAGE
            raise LlmUnavailable("unavailable", notice) from exc
        except TimeoutError as exc:
            raise _past_deadline(settings, observe, time.perf_counter() - began) from exc
        except openai.APIStatusError as exc:
            if "stream" in str(exc.message).lower() and self._ask_whole(tools, exc.status_code):
                return await self._complete(messages, tools, tool_choice, history_only=history_only)
            raise refusal(
                exc, tools=bool(tools), tool_choice=tool_choice, history_only=history_only
            ) from exc
        except openai.OpenAIError as exc:
            raise unavailable(exc) from exc
        except ValueError as exc:  # a 200 whose JSON body does not parse (a proxy's fault)
            log.warning("LLM answer was not valid JSON (%s)", type(exc).__name__)
            raise LlmUnavailable("unavailable", UNAVAILABLE_MESSAGE) from exc
        choices = getattr(completion, "choices", None)
        if not choices or getattr(choices[0], "message", None) is None:
            log.warning("LLM answer had no choices (%s)", type(completion).__name__)
            raise LlmUnavailable("unavailable", UNAVAILABLE_MESSAGE)
        message: ChatCompletionMessage = choices[0].message
        return message, getattr(choices[0], "finish_reason", None) == "length"

    def _ask_whole(self, tools: list[dict[str, Any]], failure: object) -> bool:
        """Whether a streamed request with tools that failed so is asked again whole: once
        a turn, as a server that cannot stream tools fails (llama-cpp-python's
        chatml-function-calling ends the event stream before its first event, "Automatic
        streaming tool choice is not supported"); the turn then asks whole."""
        if self.on_text is None or not tools or self.history.no_streamed_tools:
            return False
        self.history.no_streamed_tools = True
        log.warning("LLM failed a streamed request with tools (%s): asking whole", failure)
        return True


def _without_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` without tool results, and assistant tool calls reduced to their text."""
    kept: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "tool":
            continue
        if message.get("role") == "assistant" and message.get("tool_calls"):
            if message.get("content"):
                kept.append({"role": "assistant", "content": message["content"]})
            continue
        kept.append(message)
    return kept


def _past_deadline(
    settings: LlmSettings, observe: RequestObserver | None, seconds: float
) -> LlmUnavailable:
    """The turn's time for model calls ran out: a timeout, counted as one."""
    # A call cut here never reached the client's own accounting.
    log.warning(
        "LLM gave no answer within the turn's %g s (KIOKU_LLM__TURN_TIMEOUT_SECONDS)",
        settings.turn_timeout_seconds,
    )
    if observe is not None:
        observe(LlmRequest("timeout", seconds))
    return LlmUnavailable("timeout", TIMEOUT_MESSAGE)
