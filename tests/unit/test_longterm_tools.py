"""The long-term tools as the model sees them: definitions, strict argument parsing with
errors the model can act on, and what each call asks the service to do."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from bot.config import LongTermSettings
from bot.llm.tools.base import ToolArgumentError
from bot.llm.tools.longterm import (
    FORGET_TOOL_NAME,
    LONG_TERM_TOOL_NAMES,
    MAX_REMEMBERS_PER_TURN,
    RECALL_TOOL_NAME,
    REMEMBER_TOOL_NAME,
    UNAVAILABLE,
    long_term_tools,
    parse_forget_arguments,
    parse_recall_arguments,
    parse_remember_arguments,
)
from bot.memory.longterm import (
    Fact,
    FactRefused,
    ForgetResult,
    LongTermService,
    RememberResult,
    is_near_duplicate,
)
from bot.memory.model import Provenance
from bot.memory.storage import MemoryUnavailable

USER = 333_333_333_333_333_001
GUILD = 111_111_111_111_111_111
MESSAGE = 444_444_444_444_444_444
WHEN = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def fact(fact_id: int = 12, content: str = "My cat is called Miso") -> Fact:
    return Fact(fact_id, USER, GUILD, content, "model_tool", "m", MESSAGE, 0, None, WHEN, WHEN)


@dataclass
class FakeService:
    """Records what the tools ask of the service; answers as scripted."""

    limits: LongTermSettings = field(default_factory=LongTermSettings)
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    fail: BaseException | None = None
    remember_result: RememberResult = field(
        default_factory=lambda: RememberResult(12, "created", fact=fact())
    )
    found: list[Fact] = field(default_factory=list)
    deleted: tuple[Fact, ...] = ()

    def _record(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))
        if self.fail is not None:
            raise self.fail

    async def remember(self, *args: Any, **kwargs: Any) -> RememberResult:
        self._record("remember", *args, **kwargs)
        return self.remember_result

    async def search(self, *args: Any, **kwargs: Any) -> list[Fact]:
        self._record("search", *args, **kwargs)
        return self.found

    async def forget(self, *args: Any, **kwargs: Any) -> ForgetResult:
        self._record("forget", *args, **kwargs)
        return ForgetResult(self.deleted)


def tools(service: FakeService, *, guild: int | None = GUILD, opted_in: bool = False) -> Any:
    return long_term_tools(
        cast(LongTermService, service),
        user_id=USER,
        guild_id=guild,
        source_message_id=MESSAGE,
        model="test-model",
        opted_in=opted_in,
    )


# ------------------------------------------------------------------ definitions


def test_the_three_tools_are_defined_strictly() -> None:
    specs = tools(FakeService())
    assert list(specs) == list(LONG_TERM_TOOL_NAMES) == ["remember", "recall", "forget_memory"]
    for name, spec in specs.items():
        function = spec.definition["function"]
        assert spec.definition["type"] == "function" and function["name"] == name
        assert function["parameters"]["additionalProperties"] is False
        assert function["description"]
    remember = specs[REMEMBER_TOOL_NAME].definition["function"]["parameters"]
    assert remember["required"] == ["fact"]
    assert remember["properties"]["fact"]["maxLength"] == 500
    forget = specs[FORGET_TOOL_NAME].definition["function"]["parameters"]
    assert set(forget["properties"]) == {"fact_id", "query"}
    assert forget["properties"]["fact_id"]["type"] == "integer"


# ------------------------------------------------------------------ parsing

COMMON_BAD_INPUT = [
    pytest.param(None, "no arguments", id="none"),
    pytest.param("   ", "no arguments", id="blank"),
    pytest.param("not json at all", "not valid JSON", id="not-json"),
    pytest.param('{"fact": "cut off', "truncated JSON", id="truncated"),
    pytest.param('["fact"]', "JSON object", id="array"),
    pytest.param("42", "JSON object", id="number"),
    pytest.param('{"fact": "a", "fact": "b"}', "more than once", id="duplicate-key"),
    pytest.param(json.dumps({"fact": "x" * 20_000}), "too large", id="huge"),
]


@pytest.mark.parametrize(("raw", "expected"), COMMON_BAD_INPUT)
def test_remember_refuses_malformed_json(raw: str | None, expected: str) -> None:
    with pytest.raises(ToolArgumentError, match=expected):
        parse_remember_arguments(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("{}", 'missing required field "fact"', id="missing"),
        pytest.param('{"fact": "x", "why": "y"}', '"why"', id="extra-field"),
        pytest.param('{"text": "x"}', 'unexpected field "text"', id="wrong-name"),
        pytest.param('{"fact": 42}', "must be a string, got number", id="number"),
        pytest.param('{"fact": null}', "must be a string, got null", id="null"),
        pytest.param('{"fact": ["a"]}', "must be a string, got array", id="array"),
        pytest.param('{"fact": "   "}', "is empty", id="empty"),
        pytest.param('{"fact": "nul \\u0000"}', "NUL", id="nul"),
        pytest.param('{"fact": "bad \\ud800"}', "surrogate", id="surrogate"),
    ],
)
def test_remember_refuses_bad_fields(raw: str, expected: str) -> None:
    with pytest.raises(ToolArgumentError, match=expected):
        parse_remember_arguments(raw)


def test_remember_returns_the_fact_as_given() -> None:
    assert parse_remember_arguments('{"fact": "  My cat is called Miso "}') == (
        "  My cat is called Miso "
    )
    # Long facts are not refused here: the service caps them (and the tool says so).
    assert len(parse_remember_arguments(json.dumps({"fact": "y" * 900}))) == 900


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("{}", 'missing required field "query"', id="missing"),
        pytest.param('{"query": ""}', "is empty", id="empty"),
        pytest.param('{"query": 7}', "must be a string", id="number"),
        pytest.param(json.dumps({"query": "q" * 501}), "too long", id="too-long"),
        pytest.param('{"query": "x", "limit": 3}', '"limit"', id="extra"),
    ],
)
def test_recall_refuses_bad_arguments(raw: str, expected: str) -> None:
    with pytest.raises(ToolArgumentError, match=expected):
        parse_recall_arguments(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("{}", "neither was given", id="neither"),
        pytest.param('{"fact_id": null, "query": null}', "neither was given", id="nulls"),
        pytest.param('{"fact_id": 3, "query": "cat"}', "both were given", id="both"),
        pytest.param('{"fact_id": "12"}', "must be an integer like 12, got string", id="str"),
        pytest.param('{"fact_id": true}', "must be an integer", id="bool"),
        pytest.param('{"fact_id": 1.5}', "must be an integer", id="fraction"),
        pytest.param('{"fact_id": 0}', "positive", id="zero"),
        pytest.param('{"fact_id": -4}', "positive", id="negative"),
        pytest.param('{"fact_id": 99999999999999999999999}', "positive", id="huge"),
        pytest.param('{"query": "  "}', "is empty", id="empty-query"),
        pytest.param('{"id": 3}', 'unexpected field "id"', id="wrong-name"),
        pytest.param("[3]", "JSON object", id="array"),
    ],
)
def test_forget_refuses_bad_arguments(raw: str, expected: str) -> None:
    with pytest.raises(ToolArgumentError, match=expected):
        parse_forget_arguments(raw)


def test_forget_takes_an_id_or_a_query() -> None:
    assert parse_forget_arguments('{"fact_id": 12}') == (12, None)
    assert parse_forget_arguments('{"fact_id": 12.0}') == (12, None)
    assert parse_forget_arguments('{"query": "cat name"}') == (None, "cat name")
    assert parse_forget_arguments('{"fact_id": null, "query": "cat"}') == (None, "cat")


# ------------------------------------------------------------------ running


@pytest.mark.parametrize("name", LONG_TERM_TOOL_NAMES)
async def test_a_malformed_call_is_an_error_and_touches_nothing(name: str) -> None:
    service = FakeService()
    outcome = await tools(service)[name].run('{"nope": 1}')
    assert not outcome.ok
    assert outcome.content.startswith("rejected: unexpected field")
    assert service.calls == []


async def test_remember_passes_the_turns_provenance() -> None:
    service = FakeService()
    outcome = await tools(service)[REMEMBER_TOOL_NAME].run('{"fact": "My cat is called Miso"}')
    assert outcome.ok and outcome.content == "saved as fact #12"
    [(name, args, _)] = service.calls
    assert name == "remember"
    assert args == (
        USER,
        GUILD,
        "My cat is called Miso",
        Provenance("model_tool", "test-model", USER, MESSAGE),
    )


async def test_remember_reports_updates_truncation_redaction_and_eviction() -> None:
    stored = fact(7, "my token is [REDACTED:discord_token]")
    service = FakeService(
        remember_result=RememberResult(7, "updated", (3,), truncated=True, fact=stored)
    )
    outcome = await tools(service)[REMEMBER_TOOL_NAME].run('{"fact": "my token is abc"}')
    assert outcome.ok
    assert outcome.content.startswith("updated fact #7 (it replaced a similar fact")
    assert "secrets in it were redacted" in outcome.content
    assert "shortened to 500 characters" in outcome.content
    assert "#3 was dropped" in outcome.content


async def test_remember_refusals_and_outages_are_errors() -> None:
    refused = FakeService(fail=FactRefused("the fact is empty after removing unsafe content"))
    outcome = await tools(refused)[REMEMBER_TOOL_NAME].run('{"fact": "x"}')
    assert not outcome.ok and outcome.content == (
        "rejected: the fact is empty after removing unsafe content"
    )
    down = FakeService(fail=MemoryUnavailable("down"))
    for name, raw in [
        (REMEMBER_TOOL_NAME, '{"fact": "x"}'),
        (RECALL_TOOL_NAME, '{"query": "x"}'),
        (FORGET_TOOL_NAME, '{"fact_id": 1}'),
    ]:
        outcome = await tools(down)[name].run(raw)
        assert not outcome.ok and outcome.content == UNAVAILABLE


async def test_remember_is_limited_per_turn() -> None:
    service = FakeService()
    remember = tools(service)[REMEMBER_TOOL_NAME]
    for _ in range(MAX_REMEMBERS_PER_TURN):
        assert (await remember.run('{"fact": "x"}')).ok
    outcome = await remember.run('{"fact": "one too many"}')
    assert not outcome.ok and "at most 5 facts" in outcome.content
    assert len(service.calls) == MAX_REMEMBERS_PER_TURN
    # A new turn starts afresh.
    assert (await tools(service)[REMEMBER_TOOL_NAME].run('{"fact": "x"}')).ok


async def test_recall_lists_the_matches_with_their_ids() -> None:
    service = FakeService(found=[fact(12), fact(13, "I live in Lisbon")])
    outcome = await tools(service, guild=None, opted_in=True)[RECALL_TOOL_NAME].run(
        '{"query": "cat"}'
    )
    assert outcome.ok
    assert outcome.content == (
        "#12 (saved 2026-11-01, in a server): My cat is called Miso\n"
        "#13 (saved 2026-11-01, in a server): I live in Lisbon"
    )
    [(_, args, kwargs)] = service.calls
    assert args == (USER, None, "cat") and kwargs == {"opted_in": True, "may_show": None}
    empty = await tools(FakeService())[RECALL_TOOL_NAME].run('{"query": "cat"}')
    assert empty.ok and empty.content == "no saved facts match that query"


async def test_forget_by_id_and_by_query() -> None:
    service = FakeService(deleted=(fact(12),))
    outcome = await tools(service)[FORGET_TOOL_NAME].run('{"fact_id": 12}')
    assert outcome.ok and outcome.content.startswith("deleted #12 ")
    [(_, args, kwargs)] = service.calls
    assert args == (USER,)
    assert kwargs["fact_id"] == 12 and kwargs["query"] is None
    assert kwargs["guild_id"] == GUILD and kwargs["source_message_id"] == MESSAGE

    none = FakeService()
    outcome = await tools(none)[FORGET_TOOL_NAME].run('{"fact_id": 99}')
    assert outcome.ok and outcome.content == "nothing deleted: this user has no fact #99"
    outcome = await tools(none)[FORGET_TOOL_NAME].run('{"query": "spaceships"}')
    assert outcome.content == "nothing deleted: no saved fact matches that query"
    assert none.calls[-1][2]["query"] == "spaceships"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            "My son Tom is allergic to peanuts and goes to Oak Street school",
            "My son Ben is allergic to peanuts and goes to Oak Street school",
        ),
        (
            "Meeting with Bob on Monday at 10am in room 4",
            "Meeting with Alice on Monday at 10am in room 4",
        ),
    ],
    ids=["two-children", "two-meetings"],
)
def test_facts_that_differ_in_a_name_or_number_are_not_merged(old: str, new: str) -> None:
    assert not is_near_duplicate(new, old)
