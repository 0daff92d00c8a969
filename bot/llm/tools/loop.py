"""The tool loop: ask the model, run the tools it calls, repeat until it answers in text."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from bot.config import LlmSettings
from bot.llm.client import RequestObserver
from bot.llm.failures import (
    CONFIGURATION_MESSAGE,
    FALLBACK_REPLY,
    FRIENDLY_ERRORS,
    RATE_LIMIT_MESSAGE,
    TIMEOUT_MESSAGE,
    UNAVAILABLE_MESSAGE,
    LlmUnavailable,
    ToolCallFailed,
    ToolsRefused,
)
from bot.llm.leaks import strip_leaked_tool_syntax
from bot.llm.model_call import Ask, HistoryTools, ask
from bot.llm.reply_text import content_text, plain, reply_text
from bot.llm.stream_assembly import StreamAssembly
from bot.llm.tools.calls import ToolSpec, assistant_message, run_tool_call, tool_calls_in

# Told, while an answer streams in, how to read the reply so far (read only when shown).
ReplyPreview = Callable[[Callable[[], str]], Awaitable[None]]

__all__ = [
    "CONFIGURATION_MESSAGE",
    "FALLBACK_REPLY",
    "FRIENDLY_ERRORS",
    "RATE_LIMIT_MESSAGE",
    "TIMEOUT_MESSAGE",
    "UNAVAILABLE_MESSAGE",
    "LlmUnavailable",
    "LoopResult",
    "ReplyPreview",
    "ToolSpec",
    "run_tool_loop",
]

log = logging.getLogger(__name__)

STOPPED_MAX_ITERATIONS = "max_iterations"
STOPPED_TOOL_ERRORS = "too_many_tool_errors"
# Answers the server refused as bad tool calls (ToolCallFailed) before the turn stops
# offering tools: the first is asked again, the second ends the loop.
MAX_FAILED_GENERATIONS = 2


@dataclass
class LoopResult:
    """What one turn produced."""

    # The cleaned reply; "" when the model said nothing usable (the caller decides).
    text: str
    # Model answers received, the final no-tools call included.
    iterations: int
    # (tool name, result content), in call order.
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    errors: int = 0  # failed tool calls
    # Why the loop ended early ("max_iterations", "too_many_tool_errors"), or None.
    stopped: str | None = None
    # The last answer hit `max_tokens`: fine to show in chat, not to store as a memory.
    truncated: bool = False
    # The loop stopped early and the final call failed too: `text` is the fallback
    # notice, not an answer (it is not part of the conversation).
    gave_up: bool = False
    # The server refused tools (the model cannot call them); the turn went on without.
    tools_refused: bool = False


async def run_tool_loop(
    client: openai.AsyncOpenAI,
    *,
    model: str,
    messages: list[dict[str, Any]],
    registry: Mapping[str, ToolSpec],
    offered: Callable[[], Sequence[str]],
    settings: LlmSettings,
    tool_calling: bool = True,
    without_tools_notes: Sequence[str] = (),
    strict_roles: bool = False,
    observe: RequestObserver | None = None,
    preview: ReplyPreview | None = None,
) -> LoopResult:
    """Run one turn of the bot's reply (SPEC §3) on a copy of ``messages``."""
    # Raises LlmUnavailable when a model call fails, unless the model already answered
    # beside a tool call (that answer is the reply) or it is the final call after an
    # early stop (FALLBACK_REPLY).  The client retries 429/5xx/timeouts itself
    # (`settings.max_retries`); nothing here retries again.  `without_tools_notes` tell
    # the model what it can no longer do when the server refuses tools; `strict_roles`
    # sends every request in the role order strict chat templates accept.  With a
    # `preview` the answers are streamed, and it hears of the reply as it grows.
    api = client.with_options(max_retries=settings.max_retries)
    # All the model calls of a turn share `turn_timeout_seconds`, retries included.
    deadline = asyncio.get_running_loop().time() + settings.turn_timeout_seconds
    conversation: list[dict[str, Any]] = list(messages)
    result = LoopResult(text="", iterations=0)
    interim: list[str] = []  # text the model wrote alongside its tool calls
    consecutive_errors = 0
    failed_generations = 0
    called: list[str] = []  # registry tools the conversation holds calls to
    history = HistoryTools()

    async def streamed(assembly: StreamAssembly) -> None:
        assert preview is not None
        await preview(lambda: reply_text(assembly.text(), interim, registry.keys()))

    bound_ask = functools.partial(
        ask,
        api,
        model=model,
        settings=settings,
        history=history,
        strict_roles=strict_roles,
        observe=observe,
        deadline=deadline,
        on_text=streamed if preview is not None else None,
    )

    while result.iterations < settings.max_tool_iterations:
        # Re-read every time: a tool can stop being offered mid-turn (the STM tool after
        # a successful update).
        names = _offered_names(offered, registry) if tool_calling else []
        tools, tool_choice = _request_tools(registry, names, called, tool_calling=tool_calling)
        try:
            message, result.truncated = await bound_ask(
                messages=conversation, tools=tools, tool_choice=tool_choice
            )
        except ToolsRefused:
            _go_tool_less(result, conversation, without_tools_notes)
            tool_calling = False
            continue
        except ToolCallFailed:
            # One bad generation (arguments the server's schema check refused): a failed
            # tool call of this turn, not a sign that the model cannot take tools.
            failed_generations += 1
            consecutive_errors += 1
            result.errors += 1
            if (
                failed_generations >= MAX_FAILED_GENERATIONS
                or consecutive_errors >= settings.max_consecutive_tool_errors
            ):
                result.stopped = STOPPED_TOOL_ERRORS
                break
            log.warning("the server refused the model's tool call (tool_use_failed): asking again")
            continue
        except LlmUnavailable as exc:
            if not interim:
                raise
            # The model already answered beside its tool call: the member gets that
            # answer rather than the outage notice.
            log.warning(
                "model call failed after an answer written beside a tool call (%s); "
                "finishing with that answer",
                exc,
            )
            result.text = "\n\n".join(interim)
            return result
        result.iterations += 1
        calls = tool_calls_in(message, result.iterations)
        content = content_text(getattr(message, "content", None))
        if not calls:
            result.text = reply_text(content, interim, registry.keys())
            return result

        cleaned = strip_leaked_tool_syntax(content, registry.keys())
        if cleaned and plain(cleaned) not in {plain(said) for said in interim}:
            interim.append(cleaned)  # a model repeating its answer beside a retried call
        conversation.append(assistant_message(content, calls))
        # Every call is answered with a `tool` message, so each result answers one call.
        for call in calls:
            if call.routed_name not in called:
                called.append(call.routed_name)
            outcome = await run_tool_call(registry, call, names)
            conversation.append(
                {"role": "tool", "tool_call_id": call.id, "content": outcome.content}
            )
            result.tool_calls.append((call.routed_name, outcome.content))
            if outcome.ok:
                consecutive_errors = 0
            else:
                consecutive_errors += 1
                result.errors += 1
        if consecutive_errors >= settings.max_consecutive_tool_errors:
            result.stopped = STOPPED_TOOL_ERRORS
            break
    else:
        result.stopped = STOPPED_MAX_ITERATIONS
    return await _final_answer(
        bound_ask,
        result,
        conversation,
        registry=registry,
        called=called,
        interim=interim,
        tool_calling=tool_calling,
        without_tools_notes=without_tools_notes,
    )


async def _final_answer(
    ask: Ask,
    result: LoopResult,
    conversation: list[dict[str, Any]],
    *,
    registry: Mapping[str, ToolSpec],
    called: Sequence[str],
    interim: Sequence[str],
    tool_calling: bool,
    without_tools_notes: Sequence[str],
) -> LoopResult:
    """After an early stop, one last call in which no tool may be called."""
    # Its failure gives the text written beside the tool calls, or FALLBACK_REPLY
    # (`result.gave_up`).
    log.info(
        "tool loop stopped early (%s) after %d model call(s); asking for a final answer "
        "without tools",
        result.stopped,
        result.iterations,
    )
    # The history may hold tool calls: their definitions go along, with tool_choice
    # "none" (any call that still comes is ignored below).
    tools, tool_choice = _request_tools(registry, [], called, tool_calling=tool_calling)
    try:
        try:
            message, result.truncated = await ask(
                messages=conversation, tools=tools, tool_choice=tool_choice
            )
        except ToolsRefused:
            _go_tool_less(result, conversation, without_tools_notes)
            message, result.truncated = await ask(messages=conversation, tools=[])
        except ToolCallFailed:
            # The server refused a tool call in the call that must allow none (Groq:
            # "Tool choice is none, but model called a tool"): once more, with no tools
            # at all, so no call can come.
            log.warning("the model called a tool in the final call: asking again without tools")
            message, result.truncated = await ask(messages=conversation, tools=[])
    except LlmUnavailable as exc:
        log.warning("final no-tools call failed (%s); using the fallback reply", exc)
        result.text = "\n\n".join(interim) or FALLBACK_REPLY
        result.gave_up = not interim
        return result
    result.iterations += 1
    # Any tool calls in this answer are ignored: none may be made.
    final = content_text(getattr(message, "content", None))
    result.text = reply_text(final, interim, registry.keys())
    return result


def _request_tools(
    registry: Mapping[str, ToolSpec],
    offered: Sequence[str],
    called: Sequence[str],
    *,
    tool_calling: bool,
) -> tuple[list[dict[str, Any]], str | None]:
    """The ``tools`` and ``tool_choice`` of the next request."""
    # The offered tools, if any.  Otherwise, once the conversation holds tool calls, the
    # definitions of the tools called with tool_choice "none": Bedrock (and servers in
    # front of it) refuse a history of tool calls in a request that defines no tools.
    # So a turn's first request never carries tool_choice: a wrong model name or URL
    # stays a configuration problem.
    if not tool_calling:
        return [], None
    if offered:
        return [registry[name].definition for name in offered], None
    if not called:
        return [], None
    names = [name for name in called if name in registry] or list(registry)
    definitions = [registry[name].definition for name in names]
    return definitions, ("none" if definitions else None)


def _go_tool_less(
    result: LoopResult, conversation: list[dict[str, Any]], notes: Sequence[str]
) -> None:
    """Go on without tools, the ``notes`` placed after the leading system messages."""
    log.warning(
        "the model refused a request with tools (it cannot call them): asking "
        "without tools; set provider to one without tool calling to stop offering them"
    )
    result.tools_refused = True
    leading = next(
        (i for i, m in enumerate(conversation) if m.get("role") != "system"),
        len(conversation),
    )
    conversation[leading:leading] = [{"role": "system", "content": note} for note in notes]


def _offered_names(
    offered: Callable[[], Sequence[str]], registry: Mapping[str, ToolSpec]
) -> list[str]:
    names: list[str] = []
    for name in offered():
        if name in registry and name not in names:
            names.append(name)
        elif name not in registry:
            log.debug("offered tool %r is not in the registry; not offered", name)
    return names
