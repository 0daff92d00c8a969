"""Strict role order (bot/llm/roles.py): requests that strict chat templates accept.

Table-driven over the pure function; then the provider table, the operator's setting,
and that requests are sent from one place only (where the function is applied).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from bot.config import LlmSettings, SettingsError, load_settings
from bot.llm.roles import LATE_NOTE_LINE, OPENING_USER_LINE, alternate_roles
from bot.llm.tools.base import ToolOutcome
from bot.llm.tools.loop import LlmUnavailable, ToolSpec, run_tool_loop
from bot.vocabulary.providers import PROVIDERS, capabilities
from tests.helpers.fake_llm import ScriptedLLM, openai_client, role_order_problem

ROOT = Path(__file__).resolve().parents[2]

PERSONA = {"role": "system", "content": "You are Kioku."}
MEMORY = {
    "role": "system",
    "content": 'Your short-term memory:\n<memory source="this channel">\nLaunch Friday.\n</memory>',
}
FACTS = {
    "role": "system",
    "content": (
        "Facts the user asked you to remember:\n"
        '<memory source="long-term memory">\n- The cat is Miso.\n</memory>'
    ),
}
NUDGE = {"role": "system", "content": "Memory upkeep: 3 new messages."}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str | None) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def calls(*ids: str, content: str | None = None) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "remember", "arguments": "{}"}}
            for i in ids
        ],
    }


def result(call_id: str, text: str = "saved") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def system(*notes: dict[str, Any]) -> dict[str, Any]:
    return {"role": "system", "content": "\n\n".join(note["content"] for note in notes)}


CASES: list[Any] = [
    pytest.param([], [], id="empty"),
    pytest.param(
        [PERSONA, user("Ann: hi"), bot("Hello!"), user("Ann: thanks")],
        [PERSONA, user("Ann: hi"), bot("Hello!"), user("Ann: thanks")],
        id="already-alternating",
    ),
    pytest.param(
        [PERSONA, MEMORY, FACTS, NUDGE, user("Ann: hi")],
        [system(PERSONA, MEMORY, FACTS, NUDGE), user("Ann: hi")],
        id="system-notes-fold-into-one-in-order",
    ),
    pytest.param(
        [PERSONA, user("Ann: hi"), NUDGE, bot("Hello!"), user("Ann: and?")],
        [
            PERSONA,
            user(f"Ann: hi\n\n{LATE_NOTE_LINE}\n\n{NUDGE['content']}"),
            bot("Hello!"),
            user("Ann: and?"),
        ],
        id="a-note-within-the-conversation-joins-the-user-message-beside-it",
    ),
    pytest.param(
        [user("Ann: hi"), MEMORY, user("Bob: yo")],
        [user(f"Ann: hi\n\n{LATE_NOTE_LINE}\n\n{MEMORY['content']}\n\nBob: yo")],
        id="a-note-after-the-conversation-starts-never-leads",
    ),
    pytest.param(
        [PERSONA, user("Ann: hi"), bot("Hello!"), FACTS, user("Ann: my cat?")],
        [
            PERSONA,
            user("Ann: hi"),
            bot("Hello!"),
            user(f"{LATE_NOTE_LINE}\n\n{FACTS['content']}\n\nAnn: my cat?"),
        ],
        id="a-turns-note-opens-the-message-answered",
    ),
    pytest.param(
        [PERSONA, user("Ann: the launch is friday"), user("Bob: I write docs"), user("Ann: ok?")],
        [PERSONA, user("Ann: the launch is friday\n\nBob: I write docs\n\nAnn: ok?")],
        id="consecutive-users-merge-keeping-speakers",
    ),
    pytest.param(
        [PERSONA, user("Ann: hi"), bot("One."), bot("Two."), user("Ann: ok")],
        [PERSONA, user("Ann: hi"), bot("One.\n\nTwo."), user("Ann: ok")],
        id="consecutive-assistants-merge",
    ),
    pytest.param(
        [PERSONA, MEMORY, bot("Earlier answer."), user("Ann: hi")],
        [system(PERSONA, MEMORY), user(OPENING_USER_LINE), bot("Earlier answer."), user("Ann: hi")],
        id="assistant-first-gets-a-neutral-user-line",
    ),
    pytest.param(
        [bot("Earlier answer."), bot("And more."), user("Ann: hi")],
        [user(OPENING_USER_LINE), bot("Earlier answer.\n\nAnd more."), user("Ann: hi")],
        id="assistant-first-without-system",
    ),
    pytest.param(
        [PERSONA, user("Ann: hi"), calls("c1", "c2"), result("c1"), result("c2", "done")],
        [PERSONA, user("Ann: hi"), calls("c1", "c2"), result("c1"), result("c2", "done")],
        id="tool-calls-and-results-stay",
    ),
    pytest.param(
        [PERSONA, user("Ann: hi"), calls("c1"), result("c1"), calls("c2"), result("c2")],
        [PERSONA, user("Ann: hi"), calls("c1"), result("c1"), calls("c2"), result("c2")],
        id="rounds-of-tool-calls-stay",
    ),
    pytest.param(
        [PERSONA, user("Ann: hi"), user("Bob: yo"), calls("c1", content="Sure."), result("c1")],
        [PERSONA, user("Ann: hi\n\nBob: yo"), calls("c1", content="Sure."), result("c1")],
        id="users-before-a-tool-call-merge",
    ),
    pytest.param(
        [PERSONA, user("Ann: hi"), bot("Let me note that."), calls("c1"), result("c1")],
        [PERSONA, user("Ann: hi"), calls("c1", content="Let me note that."), result("c1")],
        id="assistant-text-before-a-tool-call-joins-it",
    ),
    pytest.param(
        [PERSONA, user("Ann: hi"), bot("A."), calls("c1", content="B."), result("c1")],
        [PERSONA, user("Ann: hi"), calls("c1", content="A.\n\nB."), result("c1")],
        id="assistant-text-and-a-tool-call-with-text-join",
    ),
    pytest.param(
        [PERSONA, user("Ann: hi"), bot(None), bot("Answer.")],
        [PERSONA, user("Ann: hi"), bot("Answer.")],
        id="an-empty-assistant-adds-no-blank-lines",
    ),
    pytest.param(
        [PERSONA, MEMORY],
        [system(PERSONA, MEMORY)],
        id="only-system-notes",
    ),
]


@pytest.mark.parametrize(("messages", "expected"), CASES)
def test_alternate_roles(messages: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    before = copy.deepcopy(messages)
    assert alternate_roles(messages) == expected
    assert messages == before, "the caller's messages are not modified"


@pytest.mark.parametrize(("messages", "expected"), CASES)
def test_alternate_roles_satisfies_a_strict_template(
    messages: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> None:
    # A system message only first; user and assistant alternating from a user message.
    assert role_order_problem(alternate_roles(messages)) is None


def test_every_text_survives_in_order() -> None:
    messages = [
        PERSONA,
        bot("Earlier answer."),
        user("Ann: the launch is friday"),
        MEMORY,
        user("Bob: I write docs"),
        bot("Noted."),
        bot("Anything else?"),
        FACTS,
        user("Ann: <@1> what is my cat called?"),
    ]
    conformed = alternate_roles(messages)
    joined = "\n\n".join(str(m["content"]) for m in conformed)
    for message in messages:
        assert message["content"] in joined
    # The leading note is the system message; the others keep their place in the chat.
    assert conformed[0]["content"] == PERSONA["content"]
    positions = [joined.index(str(m["content"])) for m in messages]
    assert positions == sorted(positions)


def test_user_messages_with_image_parts_merge_into_one_message_of_parts() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://cdn.example/cat.png"}}
    parts = {"role": "user", "content": [{"type": "text", "text": "Bob: look"}, image]}
    messages = [PERSONA, user("Ann: hi"), parts, user("Cy: nice")]
    conformed = alternate_roles(messages)
    assert conformed == [
        PERSONA,
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Ann: hi\n\nBob: look"},
                image,
                {"type": "text", "text": "Cy: nice"},
            ],
        },
    ]
    assert messages[2]["content"][0] == {"type": "text", "text": "Bob: look"}  # unmodified


def test_assistant_content_that_is_not_text_is_never_merged() -> None:
    odd = {"role": "assistant", "content": [{"type": "text", "text": "look"}]}
    hello = {"role": "assistant", "content": "Hello."}
    messages = [PERSONA, user("Ann: hi"), hello, odd]
    assert alternate_roles(messages)[2:] == [hello, odd]


# ------------------------------------------------------------------ the provider table


STRICT = {"perplexity", "deepseek", "mistral", "vllm", "llamacpp", "lmstudio", "localai"}


def test_the_table_marks_the_providers_known_to_need_strict_roles() -> None:
    assert {name for name, caps in PROVIDERS.items() if caps.strict_roles} == STRICT
    assert capabilities("llama.cpp").strict_roles
    assert not capabilities("my-gateway").strict_roles, "unknown names: the generic entry"


# ------------------------------------------------------------------ the operator's setting


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("KIOKU_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("KIOKU_ENV_FILE", str(tmp_path / "absent.env"))


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("provider", "setting", "strict"),
    [
        ("openai", "auto", False),
        ("vllm", "auto", True),
        ("perplexity", "auto", True),
        ("openai", "on", True),
        ("vllm", "off", False),
        ("generic", "on", True),
    ],
)
def test_the_setting_overrides_the_table(
    monkeypatch: pytest.MonkeyPatch, provider: str, setting: str, strict: bool
) -> None:
    monkeypatch.setenv("KIOKU_PROVIDER", provider)
    monkeypatch.setenv("KIOKU_LLM__STRICT_ROLES", setting)
    settings = load_settings()
    assert settings.llm.strict_roles == setting
    assert settings.strict_roles is strict


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(("provider", "strict"), [("mistral", True), ("openai", False)])
def test_the_default_follows_the_table(
    monkeypatch: pytest.MonkeyPatch, provider: str, strict: bool
) -> None:
    assert capabilities(provider).strict_roles is strict  # the table, as this case reads it
    monkeypatch.setenv("KIOKU_PROVIDER", provider)  # no llm.strict_roles given
    settings = load_settings()
    assert settings.llm.strict_roles == "auto"
    assert settings.strict_roles is strict


@pytest.mark.usefixtures("clean_env")
def test_a_bad_value_gives_one_line_with_the_allowed_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KIOKU_LLM__STRICT_ROLES", "yes")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        "invalid setting llm.strict_roles (KIOKU_LLM__STRICT_ROLES) = 'yes': "
        "Input should be 'auto', 'on' or 'off' (allowed: 'auto' | 'on' | 'off')"
    )


# ------------------------------------------------------------------ requests sent

# What a turn sends at worst: notes as several system messages, the bot's own message
# first, members' messages in a row.
CONVERSATION = [
    PERSONA,
    MEMORY,
    FACTS,
    NUDGE,
    bot("Earlier answer."),
    user("Ann: the launch is friday"),
    user("Bob: I write the docs"),
    user("Ann: <@1> what did we decide?"),
]
TOOL = {
    "type": "function",
    "function": {
        "name": "note",
        "description": "Take a note.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    },
}
LLM = LlmSettings(timeout_seconds=5, max_retries=0, temperature=0.3, max_reply_tokens=256)


async def _saved(arguments: str | None) -> ToolOutcome:
    return ToolOutcome("saved", True)


async def _turn(llm: ScriptedLLM, *, strict_roles: bool, **loop: Any) -> str:
    async with openai_client(llm) as client:
        result = await run_tool_loop(
            client,
            model="test-model",
            messages=list(CONVERSATION),
            registry={"note": ToolSpec(TOOL, _saved)},
            offered=lambda: ["note"],
            strict_roles=strict_roles,
            **{"settings": LLM, **loop},
        )
    return result.text


async def test_a_request_that_need_not_be_strict_is_sent_byte_for_byte_as_given(
    llm: ScriptedLLM,
) -> None:
    llm.reply_text("one").reply_text("two")
    assert await _turn(llm, strict_roles=False) == "one"
    # The same request made straight through the openai client.
    async with openai_client(llm) as client:
        await client.chat.completions.create(
            model="test-model",
            messages=CONVERSATION,  # type: ignore[arg-type]
            tools=[TOOL],  # type: ignore[list-item]
            tool_choice="auto",
            temperature=0.3,
            max_tokens=256,
        )
    assert llm.raw_request(0) == llm.raw_request(1)
    assert llm.messages(0) == CONVERSATION


async def test_a_strict_server_takes_every_round_of_a_turn(llm: ScriptedLLM) -> None:
    llm.strict_roles = True
    llm.reply_tool_calls([("note", {"text": "launch friday"})]).reply_text("Friday.")
    assert await _turn(llm, strict_roles=True) == "Friday."
    assert llm.refused_roles == []
    first, second = llm.messages(0), llm.messages(1)
    assert first == [
        system(PERSONA, MEMORY, FACTS, NUDGE),
        user(OPENING_USER_LINE),
        bot("Earlier answer."),
        user("Ann: the launch is friday\n\nBob: I write the docs\n\nAnn: <@1> what did we decide?"),
    ]
    assert second[: len(first)] == first
    assert [m["role"] for m in second[len(first) :]] == ["assistant", "tool"]


async def test_without_strict_roles_a_strict_server_refuses_the_turn(llm: ScriptedLLM) -> None:
    # What the setting is for: the same turn, as sent before it existed.
    llm.strict_roles = True
    llm.reply_text("never sent")
    with pytest.raises(LlmUnavailable):
        await _turn(llm, strict_roles=False)
    assert llm.refused_roles == ["message 1 is 'system' after the first message"]


async def test_the_note_of_a_turn_gone_tool_less_joins_the_one_system_message(
    llm: ScriptedLLM,
) -> None:
    llm.strict_roles = True
    llm.reply_error(400, "this model does not support tools").reply_text("Friday.")
    text = await _turn(llm, strict_roles=True, without_tools_notes=["You cannot take notes."])
    assert text == "Friday."
    (leading,) = [m for m in llm.messages(1) if m["role"] == "system"]
    assert leading["content"].endswith("\n\nYou cannot take notes.")
    assert llm.refused_roles == []


async def test_answers_beside_stripped_tool_calls_merge_into_one(llm: ScriptedLLM) -> None:
    # Two rounds of calls with text beside them; the last call refuses tools, so the
    # history loses its tool calls and keeps two assistant texts in a row.
    llm.strict_roles = True
    llm.reply_tool_calls([("note", {"text": "a"})], content="Checking.")
    llm.reply_tool_calls([("note", {"text": "b"})], content="Still checking.")
    llm.reply_error(400, "this model does not support tools")
    llm.reply_text("Friday.")
    settings = LLM.model_copy(update={"max_tool_iterations": 2})
    assert "Friday." in await _turn(llm, strict_roles=True, settings=settings)
    assert llm.messages(3)[-1] == bot("Checking.\n\nStill checking.")
    assert llm.refused_roles == []


# ------------------------------------------------------------------ one place sends requests


def test_chat_requests_are_sent_from_one_place_only() -> None:
    # The strict role order is applied there: the tool loop (turns, the summarizer) and
    # doctor's probe all go through it. A sender calls the SDK's chat route or posts to
    # its path itself.
    sends = re.compile(
        r"\.chat\.completions\.(?:with_\w+\.)?create\("
        r"|\.post\(\s*(?:CHAT_PATH|[\"']/chat/completions)"
    )
    senders = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "bot").rglob("*.py")
        if sends.search(path.read_text(encoding="utf-8"))
    )
    assert senders == ["bot/llm/client.py"]
