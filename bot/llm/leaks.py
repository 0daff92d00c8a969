"""Remove tool calls and reasoning that some models write into their reply text.

A marker opens or closes a call or a reasoning block (``<tool_call>``, ``[TOOL_CALLS]``,
``<think>``…). Code is the model showing syntax on purpose, and a marker used as a word in a
sentence is prose about it: both stay.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import Any

__all__ = ["clean_tool_name", "strip_leaked_tool_syntax"]

# A reasoning block that opens the reply is removed before code is set aside: its free text
# may hold a stray backtick that would otherwise pair with one in the answer.
_LEADING_THINK = re.compile(r"\A\s*<(think|thinking)>.*?</\1>", re.IGNORECASE | re.DOTALL)
_THINK_BLOCK = re.compile(r"<(think|thinking)>.*?</\1>", re.IGNORECASE | re.DOTALL)
_THINK_CLOSE = re.compile(r"</(?:think|thinking)>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(?:think|thinking)>", re.IGNORECASE)

# Tool-call blocks with their closing marker: removed wherever they stand.
_CLOSED_CALLS = re.compile(
    "|".join(
        (
            # Hermes / Qwen: <tool_call>{...}</tool_call>
            r"<tool_calls>.*?</tool_calls>",
            r"<tool_call>.*?</tool_call>",
            # Kimi, then Phi / Granite style special tokens
            r"<\|tool_calls_section_begin\|>.*?<\|tool_calls_section_end\|>",
            r"<\|tool_calls_begin\|>.*?<\|tool_calls_end\|>",
            r"<\|tool_calls?(?:_begin)?\|>.*?(?:<\|/tool_calls?\|>|<\|tool_calls?_end\|>)",
            # DeepSeek's full-width special tokens
            r"<｜tool▁calls▁begin｜>.*?<｜tool▁calls▁end｜>",
            r"<｜tool▁call▁begin｜>.*?<｜tool▁call▁end｜>",
            # Llama 3.x: <function=name>{...}</function>
            r"<function=[^>\n]*>.*?</function>",
        )
    ),
    re.IGNORECASE | re.DOTALL,
)
# Markers that open a call or a reasoning block; without their closing marker a real leak
# runs to the end of the reply (see _starts_a_leak). The Mistral form takes its function
# name along so that the payload is what follows the match.
_OPENERS = re.compile(
    "|".join(
        (
            r"<(?:think|thinking)>",
            r"<tool_calls?>",
            r"<\|tool_calls?(?:_section)?(?:_begin)?\|>",
            r"<｜tool▁calls?▁begin｜>",
            r"<function=[^>\n]*>",
            r"<\|python_tag\|>",
            r"\[TOOL_CALLS\](?:\s*[\w.\-]+\s*(?:\[CALL_ID\]\s*\w+\s*)?\[ARGS\])?",
        )
    ),
    re.IGNORECASE,
)
_STRAY_TOOL_TOKENS = re.compile(
    r"<\|/?tool_calls?(?:_section)?(?:_begin|_end)?\|>|</tool_calls?>",
    re.IGNORECASE,
)

_MISTRAL_MARKER = "[TOOL_CALLS]"
_MISTRAL_NAMED = re.compile(r"\s*[\w.\-]+\s*(?:\[CALL_ID\]\s*\w+\s*)?\[ARGS\]\s*")

# Code the model shows on purpose: fenced blocks, then inline spans (one line).
_FENCE = re.compile(r"```[ \t]*[\w+\-]*[ \t]*\n?(.*?)```", re.DOTALL)
_INLINE_CODE = re.compile(r"``[^\n]+?``|`[^`\n]+`")
# Set-aside code is replaced by a private-use placeholder: nothing below matches it, and
# it is valid inside a JSON string (a tool call whose arguments quote code still parses).
_HELD = re.compile("\ue000(\\d+)\ue001")

_BLANK_RUNS = re.compile(r"\n[ \t]*(?:\n[ \t]*)+\n")

_CALL_KEYS = frozenset({"name", "arguments", "parameters", "type", "id", "call_id"})
_WRAPPER_KEYS = frozenset({"type", "id", "index", "function"})

_decoder = json.JSONDecoder()


def strip_leaked_tool_syntax(text: str, tool_names: Collection[str] | None = None) -> str:
    """``text`` without leaked calls and reasoning, trimmed; possibly ``""``.

    A fenced call to a name not in ``tool_names`` (None: any name) is an example, not a leak.
    """
    if not text:
        return ""
    text = _LEADING_THINK.sub("", text)
    text, held = _hold_code(text, tool_names)
    text = _strip_closed(_THINK_BLOCK, text)
    text = _strip_orphan_think_close(text)
    text = _strip_closed(_CLOSED_CALLS, text)
    text = _strip_mistral(text)
    text = _cut_unterminated(text)
    text = _strip_json_lines(text)
    text = _strip_closed(_STRAY_TOOL_TOKENS, text)
    text = _BLANK_RUNS.sub("\n\n", text)
    return _restore_code(text, held).strip()


def _hold_code(text: str, tool_names: Collection[str] | None) -> tuple[str, list[str]]:
    """Set code aside behind placeholders; a fence holding only a tool call is dropped instead."""
    held: list[str] = []

    def hold(span: str) -> str:
        held.append(span)
        return f"\ue000{len(held) - 1}\ue001"

    def fence(match: re.Match[str]) -> str:
        leaked = _is_tool_call_json(match.group(1), tool_names)
        return "" if leaked else hold(match.group(0))

    text = _FENCE.sub(fence, text)
    text = _INLINE_CODE.sub(lambda match: hold(match.group(0)), text)
    return text, held


def _restore_code(text: str, held: Sequence[str]) -> str:
    def restore(match: re.Match[str]) -> str:
        index = int(match.group(1))
        if index >= len(held):  # not one of ours
            return match.group(0)
        # An inline span may itself hold an earlier fence's placeholder.
        return _restore_code(held[index], held[:index])

    return _HELD.sub(restore, text)


def _starts_a_leak(text: str, start: int, end: int) -> bool:
    """Whether the unclosed opening marker at ``text[start:end]`` is a leak, not prose."""
    line_start = text.rfind("\n", 0, start) + 1
    if not text[line_start:start].strip():
        return True  # it begins the reply or a line
    glued = text[end : end + 1]
    if glued.isalnum() or glued in ("_", "{", "[", "<"):
        return True  # followed directly by a name, a payload or another token
    rest = text[end:].lstrip(" \t")
    return not rest or rest[0] in "\r\n{["


def _cut_unterminated(text: str) -> str:
    """Cut the reply at the first opening marker left (so unclosed) that is a leak."""
    for match in _OPENERS.finditer(text):
        if _starts_a_leak(text, match.start(), match.end()):
            return text[: match.start()]
    return text


# After a marker, what makes it a word in a sentence rather than the start of a payload.
_PROSE_AFTER = frozenset(" \t.,;:!?)'\"")


def _in_prose(text: str, start: int, end: int) -> bool:
    """Whether the marker at ``text[start:end]`` is a word in a sentence: mid-line, after
    a space, before a space or punctuation."""
    line_start = text.rfind("\n", 0, start) + 1
    after = text[end : end + 1]
    return (
        bool(text[line_start:start].strip())
        and text[start - 1 : start].isspace()
        and after != ""
        and after in _PROSE_AFTER
    )


# A block whose body is longer than this (in words), spans lines or holds a payload is a
# leak wherever it stands; "<think> and </think>" is a sentence naming the tags.
_PROSE_BODY_WORDS = 3


def _strip_closed(pattern: re.Pattern[str], text: str) -> str:
    """Remove ``pattern``'s closed blocks (or stray markers), except the few words of prose."""

    def drop(match: re.Match[str]) -> str:
        block = match.group(0)
        opener_end = block.find(">") + 1
        closer = block.rfind("<")
        body = block[opener_end:closer] if closer >= opener_end else ""
        if "\n" in body or "{" in body or len(body.split()) > _PROSE_BODY_WORDS:
            return ""
        return block if _in_prose(text, match.start(), match.start() + opener_end) else ""

    return pattern.sub(drop, text)


def _strip_orphan_think_close(text: str) -> str:
    """Drop everything up to the last ``</think>`` without an opener, unless it is prose.

    Such a reply started inside a reasoning block whose opening tag was in the prompt."""
    for match in reversed(list(_THINK_CLOSE.finditer(text))):
        start = match.start()
        if _THINK_OPEN.search(text, 0, start) is not None:
            continue  # the closer of a block kept as prose, not an orphan
        if not _in_prose(text, start, match.end()):
            return text[match.end() :]
    return text


def _strip_mistral(text: str) -> str:
    """``[TOOL_CALLS][{...}]`` or ``[TOOL_CALLS]name[ARGS]{...}``: drop the marker and the
    JSON after it. A marker without readable JSON is left to :func:`_cut_unterminated`."""
    pos = 0
    while True:
        start = text.find(_MISTRAL_MARKER, pos)
        if start < 0:
            return text
        payload = start + len(_MISTRAL_MARKER)
        named = _MISTRAL_NAMED.match(text, payload)
        if named is not None:
            payload = named.end()
        while payload < len(text) and text[payload].isspace():
            payload += 1
        try:
            if text[payload : payload + 1] not in ("{", "["):
                raise ValueError("no JSON payload")
            _, end = _decoder.raw_decode(text, payload)
        except ValueError:
            pos = start + len(_MISTRAL_MARKER)
            continue
        text = text[:start] + text[end:]
        pos = start


def _strip_json_lines(text: str) -> str:
    """Drop tool-call JSON values that start a line and end one (nothing else around)."""
    out: list[str] = []
    pos = 0
    length = len(text)
    while pos < length:
        line_end = text.find("\n", pos)
        line_end = length if line_end < 0 else line_end
        first = pos
        while first < line_end and text[first] in " \t":
            first += 1
        if first < line_end and text[first] in "{[":
            try:
                value, end = _decoder.raw_decode(text, first)
            except ValueError:
                value, end = None, -1
            if end > 0:
                after = text.find("\n", end)
                after = length if after < 0 else after
                if not text[end:after].strip() and _looks_like_tool_call(value):
                    pos = after + 1
                    continue
        out.append(text[pos : line_end + 1])
        pos = line_end + 1
    return "".join(out)


def _is_tool_call_json(body: str, tool_names: Collection[str] | None = None) -> bool:
    try:
        value = json.loads(body)
    except ValueError:
        return False
    if not _looks_like_tool_call(value):
        return False
    return tool_names is None or all(
        _call_name(call) in tool_names for call in (value if isinstance(value, list) else [value])
    )


def clean_tool_name(name: str) -> str:
    """The name of the tool a call means: ``functions.name`` means ``name``."""
    cleaned = name.strip()
    return cleaned.removeprefix("functions.")


def _call_name(call: dict[str, Any]) -> object:
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else call.get("name")
    return clean_tool_name(name) if isinstance(name, str) else name


def _looks_like_tool_call(value: object) -> bool:
    if isinstance(value, list):
        return bool(value) and all(_looks_like_tool_call(item) for item in value)
    if not isinstance(value, dict):
        return False
    function = value.get("function")
    if isinstance(function, dict) and set(value) <= _WRAPPER_KEYS:
        value = function
    keys = set(value)
    return (
        isinstance(value.get("name"), str)
        and ("arguments" in keys or "parameters" in keys)
        and keys <= _CALL_KEYS
    )
