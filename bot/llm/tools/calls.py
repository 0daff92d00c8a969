"""The tool calls in a model's answer: read from the response, echoed in the history, run."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openai.types.chat import ChatCompletionMessage

from bot.llm.leaks import clean_tool_name
from bot.llm.tools.base import ToolOutcome

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolSpec:
    """A tool the loop can run: its Chat Completions definition and its executor."""

    definition: dict[str, Any]
    # Receives the model's raw argument string, possibly malformed, possibly None.
    run: Callable[[str | None], Awaitable[ToolOutcome]]
    # False: a successful call tells the model nothing it needs to answer (a memory note),
    # so an answer written beside it is the reply and the model is not asked again.
    answer_needs_result: bool = True


@dataclass(frozen=True)
class ToolCall:
    """One tool call of the model's answer."""

    id: str
    name: str  # as the model wrote it (echoed back in the history)
    routed_name: str  # the registry key it is routed to (or the cleaned name if unknown)
    arguments: str | None  # raw, exactly as received (what the tool parses)
    history_arguments: str  # always valid JSON: some servers re-parse the history


def tool_calls_in(message: ChatCompletionMessage, iteration: int) -> list[ToolCall]:
    """The tool calls of ``message``, each with an id unique within it."""
    raw_calls = getattr(message, "tool_calls", None) or []
    calls: list[ToolCall] = []
    used: set[str] = set()
    for index, raw in enumerate(raw_calls):
        function = getattr(raw, "function", None)
        if function is None:  # e.g. a "custom" tool call: route by its name, no arguments
            function = getattr(raw, "custom", None)
        name = getattr(function, "name", None)
        name = name if isinstance(name, str) else ""
        arguments = getattr(function, "arguments", None)
        if arguments is not None and not isinstance(arguments, str):
            # Non-conforming servers sometimes send the arguments as an object.
            try:
                arguments = json.dumps(arguments, ensure_ascii=False)
            except (TypeError, ValueError):
                arguments = str(arguments)
        call_id = getattr(raw, "id", None)
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{iteration}_{index}"
        call_id = _unique_id(call_id, used)
        used.add(call_id)
        calls.append(
            ToolCall(
                id=call_id,
                name=name,
                routed_name=clean_tool_name(name),
                arguments=arguments,
                history_arguments=history_arguments(arguments),
            )
        )
    return calls


def assistant_message(content: str, calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The assistant message that carries ``calls`` in the conversation's history."""
    return {
        "role": "assistant",
        # A string even when empty: llama-cpp-python's server refuses (500) an assistant
        # message whose content is null; OpenAI, vLLM, Ollama and llama.cpp take "".
        "content": content,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.history_arguments},
            }
            for call in calls
        ],
    }


async def run_tool_call(
    registry: Mapping[str, ToolSpec], call: ToolCall, available: Sequence[str]
) -> ToolOutcome:
    """The outcome of ``call``; an unknown tool or one that raises is an error result."""
    # Routed by name even when the tool is not offered right now: its own guards refuse
    # it with a message the model can read.
    spec = registry.get(call.routed_name)
    if spec is None:
        shown = json.dumps(call.routed_name[:64], ensure_ascii=True)
        if available:
            listed = ", ".join(json.dumps(name, ensure_ascii=True) for name in available)
            return ToolOutcome.error(f"error: unknown tool {shown}; available tools: {listed}")
        return ToolOutcome.error(
            f"error: unknown tool {shown}; no tools are available now, answer the user directly"
        )
    try:
        return await spec.run(call.arguments)
    except Exception as exc:
        log.warning(
            "tool %s raised %s; answered as a tool error",
            call.routed_name,
            type(exc).__name__,
            exc_info=True,
        )
        return ToolOutcome.error(
            f"error: the tool {call.routed_name} failed unexpectedly ({type(exc).__name__}); "
            "do not retry it this turn, answer the user"
        )


def _unique_id(call_id: str, used: set[str]) -> str:
    """``call_id``, or ``call_id_2``, ``call_id_3``... when it is already taken."""
    # Every `tool` result must answer exactly one call: servers reject or mis-associate
    # repeated ids.
    if call_id not in used:
        return call_id
    suffix = 2
    while f"{call_id}_{suffix}" in used:
        suffix += 1
    return f"{call_id}_{suffix}"


def history_arguments(arguments: str | None) -> str:
    """``arguments`` when they are JSON, else ``{}``: some servers re-parse the history."""
    if arguments is None or not arguments.strip():
        return "{}"
    try:
        json.loads(arguments)
    except ValueError:
        return "{}"
    return arguments
