"""A streamed answer put back together from its server-sent event lines (pure, no I/O).

Each ``data:`` line is read with :func:`json.loads` into plain dicts, not the client's
pydantic chunk objects: a reply streams in hundreds of chunks, and building an object for
each cost more than the whole non-streamed request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from openai.types.chat import ChatCompletionMessage

__all__ = ["StreamAssembly", "StreamBroken"]

_DATA = "data:"
_DONE = "[DONE]"


class StreamBroken(Exception):
    """The stream reported an error, or ended before the answer did."""


@dataclass
class _ToolCallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAssembly:
    """The answer so far: its text, its tool calls by index, how it finished, its usage."""

    content: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    # llama.cpp's llama-server sends its prompt cache's use in the last event's `timings`.
    timings: dict[str, Any] | None = None
    tokens_cached: int | None = None
    done: bool = False  # `data: [DONE]` arrived
    _calls: dict[int, _ToolCallParts] = field(default_factory=dict)
    _last_index: int = -1
    # A server's index -> where its latest call went (a second call sent under an index
    # already taken by another id gets a slot of its own).
    _moved: dict[int, int] = field(default_factory=dict)

    def feed(self, line: str) -> str:
        """Take one line of the event stream; returns the text it adds to the answer."""
        # Blank lines end events; ":" lines are comments (keep-alives); "event:" and "id:"
        # lines carry nothing used here (an error event's data line says it is one).
        if not line.startswith(_DATA):
            return ""
        data = line[len(_DATA) :].strip()
        if data == _DONE:
            self.done = True
            return ""
        if not data:
            return ""
        try:
            event = json.loads(data)
        except ValueError as exc:
            raise StreamBroken("a streamed event was not valid JSON") from exc
        if not isinstance(event, dict):
            raise StreamBroken("a streamed event was not a JSON object")
        if event.get("error") is not None:
            raise StreamBroken("the server reported an error mid-stream")
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        timings = event.get("timings")
        if isinstance(timings, dict):
            self.timings = timings
        cached = event.get("tokens_cached")
        if isinstance(cached, int):
            self.tokens_cached = cached
        choices = event.get("choices")
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            return ""
        choice = choices[0]
        finish = choice.get("finish_reason")
        if isinstance(finish, str):
            self.finish_reason = finish
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return ""
        calls = delta.get("tool_calls")
        if calls:
            self._take_calls(calls)
        text = delta.get("content")
        if isinstance(text, str) and text:
            self.content.append(text)
            return text
        return ""

    def _take_calls(self, calls: object) -> None:
        """Add tool-call deltas, each to the call its index names."""
        if not isinstance(calls, list):
            return
        for position, raw in enumerate(calls):
            if not isinstance(raw, dict):
                continue
            index = raw.get("index")
            call_id = raw.get("id")
            if isinstance(index, int):
                index = self._slot(index, call_id)
            else:
                # Some servers (Gemini's compatibility endpoint) leave the index out: a new
                # id starts a new call, anything else continues the last one.
                known = any(c.id == call_id for c in self._calls.values())
                if isinstance(call_id, str) and call_id and not known:
                    index = max(self._calls, default=-1) + 1
                else:
                    index = self._last_index if self._last_index >= 0 else position
            parts = self._calls.setdefault(index, _ToolCallParts())
            self._last_index = index
            if isinstance(call_id, str) and call_id:
                parts.id = call_id
            function = raw.get("function")
            if not isinstance(function, dict):
                continue
            name = function.get("name")
            if isinstance(name, str) and name:
                # Most servers send the name once; some repeat it whole in every delta.
                parts.name = name if name.startswith(parts.name) else parts.name + name
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                parts.arguments.append(arguments)
            elif arguments is not None:
                # Non-conforming servers sometimes send the arguments as an object.
                parts.arguments.append(json.dumps(arguments, ensure_ascii=False))

    def _slot(self, index: int, call_id: object) -> int:
        """Where a delta the server sent under ``index`` goes: two calls with different
        ids under one index stay two calls, their arguments never joined."""
        taken = self._calls.get(self._moved.get(index, index))
        new_id = isinstance(call_id, str) and bool(call_id)
        if taken is not None and new_id and taken.id and taken.id != call_id:
            known = next((i for i, c in self._calls.items() if c.id == call_id), None)
            self._moved[index] = known if known is not None else max(self._calls) + 1
        return self._moved.get(index, index)

    def reported(self) -> dict[str, Any]:
        """What the stream reported of its tokens, as the JSON of a whole answer has it."""
        return {"usage": self.usage, "timings": self.timings, "tokens_cached": self.tokens_cached}

    def text(self) -> str:
        """The answer's text so far."""
        return "".join(self.content)

    @property
    def started(self) -> bool:
        """Whether any of the answer (text or a tool call) arrived."""
        return bool(self.content or self._calls)

    @property
    def finished(self) -> bool:
        """Whether the stream said the answer is complete (a finish reason or ``[DONE]``)."""
        return self.done or self.finish_reason is not None

    def message(self) -> ChatCompletionMessage:
        """The whole answer as the message a non-streamed request would have returned."""
        tool_calls = [
            {
                "id": parts.id,
                "type": "function",
                "function": {"name": parts.name, "arguments": "".join(parts.arguments)},
            }
            for _, parts in sorted(self._calls.items())
        ]
        return ChatCompletionMessage.model_validate(
            {
                "role": "assistant",
                "content": self.text() if self.content else None,
                "tool_calls": tool_calls or None,
            }
        )
