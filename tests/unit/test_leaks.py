"""Leaked tool-call syntax (bot/llm/leaks.py): removed from a reply; code, examples and
prose about the syntax kept."""

from __future__ import annotations

import pytest

from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.llm.leaks import strip_leaked_tool_syntax

CALL = '{"name": "update_short_term_memory", "arguments": {"summary": "likes tea"}}'

LEAKS = [
    pytest.param(f"Sure!\n<tool_call>\n{CALL}\n</tool_call>", "Sure!", id="hermes"),
    pytest.param(f"Sure! <tool_call>{CALL}", "Sure!", id="hermes-unterminated"),
    pytest.param(f"Sure!<|tool_call|>[{CALL}]", "Sure!", id="pipe-token"),
    pytest.param(f"Sure!<|tool_call|>{CALL}<|/tool_call|> Bye.", "Sure! Bye.", id="pipe-closed"),
    pytest.param(f"Sure![TOOL_CALLS][{CALL}]", "Sure!", id="mistral-list"),
    pytest.param(
        'Sure![TOOL_CALLS]update_short_term_memory[ARGS]{"summary": "tea"} Bye.',
        "Sure! Bye.",
        id="mistral-args",
    ),
    pytest.param('Sure![TOOL_CALLS]{"name": "x", "argu', "Sure!", id="mistral-truncated"),
    pytest.param(
        'Sure!\n<function=update_short_term_memory>{"summary": "tea"}</function>',
        "Sure!",
        id="llama-function-tag",
    ),
    pytest.param('Sure!<|python_tag|>{"name": "x", "parameters": {}}', "Sure!", id="python-tag"),
    pytest.param(f"Sure!\n{CALL}", "Sure!", id="bare-json"),
    pytest.param(f"{CALL}", "", id="bare-json-alone"),
    pytest.param(f"  {CALL}  \nSure!", "Sure!", id="bare-json-first-line"),
    pytest.param(
        'Sure!\n{"type": "function", "function": {"name": "x", "arguments": "{}"}}',
        "Sure!",
        id="bare-json-wrapped",
    ),
    pytest.param(f"Sure!\n[{CALL}, {CALL}]", "Sure!", id="bare-json-list"),
    pytest.param(f"Sure!\n```json\n{CALL}\n```", "Sure!", id="fenced-json"),
    pytest.param(f"Sure! ```json {CALL}```", "Sure!", id="fenced-json-inline"),
    pytest.param(f"Sure!\n```\n{CALL}\n```\nBye.", "Sure!\n\nBye.", id="fenced-no-lang"),
    pytest.param(
        "Sure!<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>x\n"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "Sure!",
        id="deepseek-tokens",
    ),
    pytest.param(
        "Sure!<|tool_calls_section_begin|><|tool_call_begin|>functions.x:0"
        '<|tool_call_argument_begin|>{"a": 1}<|tool_call_end|><|tool_calls_section_end|> Bye.',
        "Sure! Bye.",
        id="kimi-tokens",
    ),
    pytest.param(
        f"Sure!<tool_calls><tool_call>{CALL}</tool_call><tool_call>{CALL}</tool_call></tool_calls>",
        "Sure!",
        id="nested-tool-calls",
    ),
    pytest.param("<think>\nplan the answer\n</think>\n\nHello!", "Hello!", id="think"),
    pytest.param("<THINK>a</THINK>Hi <think>b</think>there", "Hi there", id="think-twice"),
    pytest.param("plan silently...</think>Hello!", "Hello!", id="think-open-in-prompt"),
    pytest.param("Hello!<think>and then I will", "Hello!", id="think-unclosed"),
    pytest.param("<thinking>x</thinking>Hello!", "Hello!", id="thinking"),
    pytest.param("A\n\n\n\nB", "A\n\nB", id="blank-runs-collapsed"),
]

KEPT = [
    pytest.param('```json\n{"name": "Kioku", "age": 2}\n```', id="json-with-name-only"),
    pytest.param('```json\n{"a": 1, "b": [1, 2]}\n```', id="ordinary-json-fence"),
    pytest.param('{"a": 1}', id="ordinary-bare-json"),
    pytest.param('{"name": "f", "arguments": {}, "description": "a schema"}', id="extra-keys-stay"),
    pytest.param('Use {"name": "x", "arguments": {}} inline like this.', id="inline-in-prose"),
    pytest.param("```python\nprint({'name': 1})\n```", id="python-fence"),
    pytest.param("I [love] {braces} and <b>tags</b>.", id="brackets"),
    pytest.param("[1, 2, 3]", id="json-list"),
    pytest.param("Plain answer.", id="plain"),
]


@pytest.mark.parametrize(("raw", "expected"), LEAKS)
def test_strip_leaked_tool_syntax(raw: str, expected: str) -> None:
    assert strip_leaked_tool_syntax(raw) == expected


@pytest.mark.parametrize("raw", KEPT)
def test_strip_leaves_ordinary_content(raw: str) -> None:
    assert strip_leaked_tool_syntax(raw) == raw


# Code the model shows on purpose, and prose that mentions the syntax mid-line (the marker
# followed by a space or punctuation), is an answer, not a leak: it comes back unchanged.
EXAMPLE_BLOCK = f"<tool_call>\n{CALL}\n</tool_call>"
ABOUT_SYNTAX = [
    pytest.param("Qwen wraps calls in `<tool_call>` tags. The rest…", id="inline-tool-call"),
    pytest.param("Reasoning goes in `<think>` blocks. Then the answer.", id="inline-think"),
    pytest.param("Use `</think>` to close it. Then answer.", id="inline-think-close"),
    pytest.param("Llama writes `<function=foo>` first. Then JSON.", id="inline-function"),
    pytest.param("Mistral starts with `[TOOL_CALLS]` and a list.", id="inline-mistral"),
    pytest.param("Llama 3.1 emits `<|python_tag|>` here. More.", id="inline-python-tag"),
    pytest.param("Use ``<tool_call>`` (double backticks). More.", id="inline-double-backticks"),
    pytest.param('Qwen writes `<tool_call>{"name": "f"}` then stops.', id="inline-glued-payload"),
    pytest.param("Write `<think>plan` first, then answer.", id="inline-glued-text"),
    pytest.param(f"Like this:\n```xml\n{EXAMPLE_BLOCK}\n```\nThat's it.", id="fenced-example"),
    pytest.param("```\n<think>\nplan\n</think>\nanswer\n```", id="fenced-think"),
    pytest.param("```\n[TOOL_CALLS]\n<|python_tag|>\n<function=f>\n```", id="fenced-openers"),
    pytest.param("```\na\n\n\n\nb\n```", id="fenced-blank-lines-kept"),
    pytest.param("Qwen wraps calls in <tool_call> tags. The rest.", id="prose-tool-call"),
    pytest.param("I reason inside <think> tags first.", id="prose-think"),
    pytest.param("Tags like <think>, <tool_call>. Fine.", id="prose-punctuation"),
    pytest.param("Close reasoning with </think> and answer.", id="prose-think-close"),
    pytest.param("Llama writes <function=foo> and then JSON.", id="prose-function"),
    pytest.param("Mistral emits [TOOL_CALLS] before calls.", id="prose-mistral"),
    pytest.param("Llama emits <|python_tag|> before calls.", id="prose-python-tag"),
]

# Real leaks next to code or prose: the leak goes, the rest stays.
LEAKS_BESIDE_CODE = [
    pytest.param(
        f"Use `<tool_call>` tags.\n<tool_call>{CALL}",
        "Use `<tool_call>` tags.",
        id="code-then-leak",
    ),
    pytest.param(
        f"```py\nprint(1)\n```\n{EXAMPLE_BLOCK}", "```py\nprint(1)\n```", id="fence-then-call"
    ),
    pytest.param("See `<think>`.<think>and then I will", "See `<think>`.", id="code-then-think"),
    pytest.param(
        "<think>a stray ` backtick</think>Answer with `code`.",
        "Answer with `code`.",
        id="leading-think-with-backtick",
    ),
    pytest.param(
        'Sure!\n{"name": "remember", "arguments": {"fact": "uses `vim`"}}',
        "Sure!",
        id="bare-json-quoting-code",
    ),
    # An unterminated marker at the start of a line is a leak, even when what follows
    # reads like prose: real leaks start there, and prose rarely does.
    pytest.param("Intro.\n<think> tags hold reasoning.", "Intro.", id="line-start-is-a-leak"),
    pytest.param("Hello! <think>\nreasoning", "Hello!", id="think-then-newline"),
    pytest.param("Hello! <think>", "Hello!", id="think-at-the-end"),
    pytest.param("Hello! <tool_call> \n{", "Hello!", id="tool-call-spaces-then-newline"),
    pytest.param('Sure! [TOOL_CALLS] {"name": "x", "argu', "Sure!", id="mistral-spaced-truncated"),
    pytest.param('Sure! <function=f> {"a": 1', "Sure!", id="function-spaced-truncated"),
    pytest.param("planning.</think> Hello!", "Hello!", id="think-close-glued"),
    pytest.param("planning\n</think> Hello!", "Hello!", id="think-close-line-start"),
]


@pytest.mark.parametrize("raw", ABOUT_SYNTAX)
def test_strip_keeps_code_and_prose_about_tool_syntax(raw: str) -> None:
    assert strip_leaked_tool_syntax(raw) == raw


@pytest.mark.parametrize(("raw", "expected"), LEAKS_BESIDE_CODE)
def test_strip_removes_leaks_beside_code_and_prose(raw: str, expected: str) -> None:
    assert strip_leaked_tool_syntax(raw) == expected


def test_strip_trims_and_handles_empty() -> None:
    assert strip_leaked_tool_syntax("") == ""
    assert strip_leaked_tool_syntax("  hi \n") == "hi"


@pytest.mark.parametrize(
    "answer",
    [
        "DeepSeek-R1 wraps its reasoning in <think> and </think> tags.",
        "Qwen wraps each call in <tool_call> and </tool_call> tags, then continues.",
        "The reasoning block ends with </think>.",
        "An OpenAI tool call looks like this:\n```json\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\nThat is all.',
    ],
)
def test_prose_and_examples_about_the_syntax_are_an_answer_not_a_leak(answer: str) -> None:
    assert strip_leaked_tool_syntax(answer, {"update_short_term_memory"}) == answer


@pytest.mark.parametrize(
    ("leaked", "answer"),
    [
        ("Sure.<think>I should check the memory first.</think> Here it is.", "Sure. Here it is."),
        ('Noted <tool_call>{"name": "x"}</tool_call>', "Noted"),
        ("I thought about it.</think>The answer is 4.", "The answer is 4."),
        (
            'Saved.\n```json\n{"name": "update_short_term_memory", "arguments": {}}\n```',
            "Saved.",
        ),
    ],
)
def test_leaks_glued_to_their_payload_or_naming_a_tool_of_the_turn_are_removed(
    leaked: str, answer: str
) -> None:
    assert strip_leaked_tool_syntax(leaked, {"update_short_term_memory"}) == answer


TURN_TOOLS = {STM_TOOL_NAME, "remember", "recall", "forget_memory"}


@pytest.mark.parametrize(
    ("leaked", "answer"),
    [
        # A reasoning block opened mid-line: the answer before it is dropped.
        (
            "Sure thing. <think> The user wants the capital.\nKeep it short.\n</think>\n"
            "Paris is the capital.",
            "Sure thing. \nParis is the capital.",
        ),
        # A closed tool call mid-line after a space: the answer after it is dropped.
        (
            'Done. <tool_call> {"name": "update_short_term_memory", "arguments": '
            '{"summary": "x"}} </tool_call> Anything else?',
            "Done.  Anything else?",
        ),
        (
            'Saved. <function=update_short_term_memory> {"summary": "x"} </function> Bye!',
            "Saved.  Bye!",
        ),
        # Reasoning mid-line between spaces is shown to the member.
        (
            "Okay. <think> the user is testing me, keep it short </think> It is 4.",
            "Okay.  It is 4.",
        ),
    ],
)
def test_leaked_blocks_mid_line_are_removed_and_the_answer_around_them_kept(
    leaked: str, answer: str
) -> None:
    # What the cleaner returned before 387fba3 for each of these.
    assert strip_leaked_tool_syntax(leaked, TURN_TOOLS) == answer


def test_a_fenced_call_to_a_turn_tool_with_the_functions_prefix_is_a_leak() -> None:
    # The loop routes "functions.update_short_term_memory" to the STM tool (clean_tool_name);
    # the same call leaked in a fence is shown in chat, memory text and all.
    leaked = (
        "Noted.\n```json\n"
        '{"name": "functions.update_short_term_memory", '
        '"arguments": {"summary": "Alice is moving to Berlin in May."}}\n```'
    )
    assert strip_leaked_tool_syntax(leaked, TURN_TOOLS) == "Noted."
