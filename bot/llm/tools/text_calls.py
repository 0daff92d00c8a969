"""Tool calls that a model wrote into its reply text instead of the API's ``tool_calls``.

Small local models do this when the server's template does not parse their native form:
Hermes/Qwen ``<tool_call>{…}</tool_call>``, Llama ``<function=name>{…}</function>`` and
``<|python_tag|>{…}``, Mistral ``[TOOL_CALLS]…``, or a bare or fenced JSON object.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.llm.leaks import clean_tool_name
from bot.llm.tools.calls import ToolCall, history_arguments

log = logging.getLogger(__name__)

# A marker that says "this is a call": its payload is read even when it is broken.
_MARKED = re.compile(
    r"<tool_call>(?P<hermes>.*?)(?:</tool_call>|\Z)"
    r"|<function=(?P<fname>[^>\n]+)>(?P<fargs>.*?)(?:</function>|\Z)"
    r"|<\|python_tag\|>(?P<python>.*?)(?:<\|eom_id\|>|<\|eot_id\|>|\Z)"
    r"|\[TOOL_CALLS\]\s*(?:(?P<mname>[\w.\-]+)\s*(?:\[CALL_ID\]\s*\w+\s*)?\[ARGS\])?"
    r"(?P<mistral>.*?)(?=\[TOOL_CALLS\]|\Z)",
    re.IGNORECASE | re.DOTALL,
)
# Unmarked JSON counts only when it calls a known tool: a fenced block, or a line of its own.
_FENCE = re.compile(r"```[ \t]*(?:json|tool_call|tool_code)?[ \t]*\n?(.*?)```", re.DOTALL)
_decoder = json.JSONDecoder()

TOOLS_IN_PROMPT = (
    "(From Kioku, not from the user.) You can call tools. To call one, answer with only:\n"
    "<tool_call>\n"
    '{"name": "<tool name>", "arguments": {<its arguments>}}\n'
    "</tool_call>\n"
    "and wait for its result. Otherwise answer the user normally, without that syntax. "
    "The tools:"
)


def tool_prompt(definitions: Sequence[dict[str, Any]]) -> str:
    """The system note that offers ``definitions`` to a model whose server takes no tools."""
    listed = []
    for definition in definitions:
        function = definition.get("function", {})
        shown = {
            key: function[key] for key in ("name", "description", "parameters") if key in function
        }
        listed.append(json.dumps(shown, ensure_ascii=False))
    return "\n".join([TOOLS_IN_PROMPT, *listed])


@dataclass
class TextCalls:
    """The calls read from a reply's text, and how many marked payloads could not be read."""

    calls: list[ToolCall] = field(default_factory=list)
    unreadable: int = 0


def text_tool_calls(content: str, tool_names: Collection[str], iteration: int) -> TextCalls:
    """The tool calls written as text in ``content`` (unmarked JSON: to ``tool_names`` only)."""
    found = TextCalls()
    payloads: list[tuple[str | None, str]] = []
    for match in _MARKED.finditer(content):
        name = match.group("fname") or match.group("mname")
        body = next(
            (
                match.group(group)
                for group in ("hermes", "fargs", "python", "mistral")
                if match.group(group) is not None
            ),
            "",
        )
        body = body.strip()
        line_start = content.rfind("\n", 0, match.start()) + 1
        if content[line_start : match.start()].strip() and not body.startswith(("{", "[")):
            continue  # a marker named mid-sentence, with no payload: prose about it
        payloads.append((name, body))
    for name, body in payloads:
        decoded = _calls_in(body, name)
        if decoded is None:
            found.unreadable += 1
            continue
        found.calls.extend(_call(n, a, iteration, len(found.calls)) for n, a in decoded)
    if payloads:
        return found
    # Fenced calls first: a one-line call inside a fence is also a line of its own.
    for bodies in ([m.group(1) for m in _FENCE.finditer(content)], content.splitlines()):
        for body in bodies:
            decoded = _calls_in(body.strip(), None)
            if decoded and all(clean_tool_name(n) in tool_names for n, _ in decoded):
                found.calls.extend(_call(n, a, iteration, len(found.calls)) for n, a in decoded)
        if found.calls:
            break
    return found


def _calls_in(body: str, name: str | None) -> list[tuple[str, Any]] | None:
    """(name, arguments) of each call in ``body``; None when it holds no readable call."""
    if not body.startswith(("{", "[")):
        return None
    try:
        value, _ = _decoder.raw_decode(body)
    except ValueError:
        return None
    if name is not None and isinstance(value, dict) and not _is_call(value):
        return [(name.strip(), value)]  # <function=name>{arguments}
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(item, dict) and _is_call(item) for item in items):
        return None
    return [_name_and_arguments(item) for item in items]


def _is_call(value: dict[str, Any]) -> bool:
    inner = value.get("function")
    if isinstance(inner, dict):
        value = inner
    return isinstance(value.get("name"), str) and ("arguments" in value or "parameters" in value)


def _name_and_arguments(value: dict[str, Any]) -> tuple[str, Any]:
    inner = value.get("function")
    if isinstance(inner, dict):
        value = inner
    arguments = value.get("arguments", value.get("parameters"))
    return str(value["name"]), arguments


def _call(name: str, arguments: Any, iteration: int, index: int) -> ToolCall:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(
        id=f"text_{iteration}_{index}",
        name=name,
        routed_name=clean_tool_name(name),
        arguments=raw,
        history_arguments=history_arguments(raw),
    )
