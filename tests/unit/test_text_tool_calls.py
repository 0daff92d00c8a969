"""Tool calls written as reply text, in the forms small models use, read as calls."""

from __future__ import annotations

import json

import pytest

from bot.llm.tools.text_calls import text_tool_calls

NAMES = ("update_short_term_memory", "remember")
ARGS = {"summary": "Miso is the cat."}
CALL = json.dumps({"name": "update_short_term_memory", "arguments": ARGS})


@pytest.mark.parametrize(
    "content",
    [
        f"<tool_call>\n{CALL}\n</tool_call>",
        f"Sure!\n<tool_call>{CALL}</tool_call>",
        f"<tool_call>\n{CALL}",  # cut off before its closing tag
        f"<function=update_short_term_memory>{json.dumps(ARGS)}</function>",
        f"<|python_tag|>{CALL}<|eom_id|>",
        f"[TOOL_CALLS][{CALL}]",
        f"[TOOL_CALLS]update_short_term_memory[ARGS]{json.dumps(ARGS)}",
        f"```json\n{CALL}\n```",
        f"Noting that.\n{CALL}",
        json.dumps({"name": "functions.update_short_term_memory", "parameters": ARGS}),
        json.dumps(
            {
                "type": "function",
                "function": {"name": "update_short_term_memory", "arguments": json.dumps(ARGS)},
            }
        ),
    ],
)
def test_each_written_form_is_one_call_with_its_arguments(content: str) -> None:
    found = text_tool_calls(content, NAMES, 1)
    assert found.unreadable == 0
    [call] = found.calls
    assert call.routed_name == "update_short_term_memory"
    assert json.loads(call.arguments or "") == ARGS
    assert json.loads(call.history_arguments) == ARGS
    assert call.id == "text_1_0"


def test_several_calls_in_one_reply_each_get_their_own_id() -> None:
    other = json.dumps({"name": "remember", "arguments": {"fact": "likes tea"}})
    found = text_tool_calls(
        f"<tool_call>{CALL}</tool_call>\n<tool_call>{other}</tool_call>", NAMES, 2
    )
    assert [(c.routed_name, c.id) for c in found.calls] == [
        ("update_short_term_memory", "text_2_0"),
        ("remember", "text_2_1"),
    ]


@pytest.mark.parametrize(
    "content",
    [
        "I remember: your cat is Miso.",
        # JSON that calls no known tool is an example, not a call.
        json.dumps({"name": "get_weather", "arguments": {"city": "Osaka"}}),
        '```json\n{"name": "Miso", "species": "cat"}\n```',
        "Qwen writes <tool_call> tags around its calls.",
    ],
)
def test_prose_and_other_json_are_not_calls(content: str) -> None:
    found = text_tool_calls(content, NAMES, 1)
    assert (found.calls, found.unreadable) == ([], 0)


@pytest.mark.parametrize(
    "content",
    [
        '<tool_call>{"name": "update_short_term_memory", "arguments": {summary: x}</tool_call>',
        "<tool_call>\nupdate_short_term_memory(summary='x')\n</tool_call>",
        "[TOOL_CALLS] not json at all",
    ],
)
def test_a_marked_call_that_cannot_be_read_is_counted_not_run(content: str) -> None:
    found = text_tool_calls(content, NAMES, 1)
    assert (found.calls, found.unreadable) == ([], 1)


def test_arguments_given_as_a_string_are_passed_as_written() -> None:
    # The tool's own parser refuses them with an error the model can read.
    content = '<tool_call>{"name": "remember", "arguments": "{not json"}</tool_call>'
    [call] = text_tool_calls(content, NAMES, 1).calls
    assert call.arguments == "{not json"
    assert call.history_arguments == "{}"
