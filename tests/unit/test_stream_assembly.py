"""A streamed answer put back together from its event lines (bot/llm/stream_assembly.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.llm.stream_assembly import StreamAssembly, StreamBroken


def line(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return "data: " + json.dumps({"choices": choices, **extra})


def call(index: int | None, arguments: str = "", **fields: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"function": {"arguments": arguments}}
    if index is not None:
        raw["index"] = index
    if "name" in fields:
        raw["function"]["name"] = fields.pop("name")
    return {"tool_calls": [{**raw, **fields}]}


def feed(*lines: str) -> StreamAssembly:
    assembly = StreamAssembly()
    for text in lines:
        assembly.feed(text)
    return assembly


def test_text_pieces_join_and_each_feed_returns_what_it_added() -> None:
    assembly = StreamAssembly()
    added = [
        assembly.feed(text)
        for text in (
            line({"role": "assistant", "content": ""}),
            line({"content": "Hel"}),
            "",
            ": keep-alive",
            line({"content": "lo wör"}),
            line({"content": "ld"}),
            line({}, "stop"),
            "data: [DONE]",
        )
    ]
    assert added == ["", "Hel", "", "", "lo wör", "ld", "", ""]
    message = assembly.message()
    assert message.content == "Hello wörld" and message.tool_calls is None
    assert assembly.finish_reason == "stop" and assembly.done and assembly.finished


def test_tool_calls_interleaved_with_text_are_assembled_by_index() -> None:
    assembly = feed(
        line({"content": "Noting "}),
        line(call(0, '{"summ', id="call_a", type="function", name="update_short_term_memory")),
        line({"content": "that."}),
        line(call(1, '{"fact": ', id="call_b", type="function", name="remember")),
        line(call(0, 'ary": "tea ☕"}')),
        line(call(1, '"x"}')),
        line({}, "tool_calls"),
    )
    message = assembly.message()
    assert message.content == "Noting that."
    calls = message.tool_calls or []
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [  # type: ignore[union-attr]
        ("call_a", "update_short_term_memory", '{"summary": "tea ☕"}'),
        ("call_b", "remember", '{"fact": "x"}'),
    ]


def test_calls_without_an_index_are_told_apart_by_their_ids() -> None:
    # Gemini's compatibility endpoint leaves the index out.
    assembly = feed(
        line(call(None, '{"a": ', id="one", name="first")),
        line(call(None, "1}")),
        line(call(None, "{}", id="two", name="second")),
        line({}, "stop"),
    )
    calls = assembly.message().tool_calls or []
    assert [(c.id, c.function.arguments) for c in calls] == [("one", '{"a": 1}'), ("two", "{}")]  # type: ignore[union-attr]


def test_two_calls_sharing_an_index_with_different_ids_stay_two_calls() -> None:
    assembly = feed(
        line(call(0, '{"summary": ', id="one", name="update_short_term_memory")),
        line(call(0, '"Ren likes tea"}')),
        line(call(0, '{"fact": ', id="two", name="remember")),
        line(call(0, '"Aki has a cat"}')),
        line(call(1, "{}", id="three", name="recall")),
        line({}, "tool_calls"),
    )
    calls = assembly.message().tool_calls or []
    assert [(c.id, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("one", {"summary": "Ren likes tea"}),
        ("two", {"fact": "Aki has a cat"}),
        ("three", {}),
    ]


def test_usage_is_read_from_the_last_event() -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    assembly = feed(line({"content": "hi"}, usage=None), line({}, "stop"), line(usage=usage))
    assert assembly.usage == usage


@pytest.mark.parametrize(
    "bad",
    [
        'data: {"error": {"message": "overloaded", "type": "server_error"}}',
        "data: {not json",
        "data: [1, 2]",
    ],
)
def test_an_error_event_or_a_broken_event_breaks_the_stream(bad: str) -> None:
    assembly = feed(line({"content": "so far"}))
    with pytest.raises(StreamBroken):
        assembly.feed(bad)
    assert assembly.text() == "so far" and not assembly.finished


def test_a_stream_without_finish_reason_or_done_is_not_finished() -> None:
    assert not feed(line({"content": "half"})).finished
    assert feed(line({"content": "whole"}), "data: [DONE]").finished
