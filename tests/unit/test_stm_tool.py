"""The STM tool: per-guild schema and strict, model-readable argument parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.conversation.tools import stm
from bot.conversation.tools.stm import (
    DEFAULT_TOOL_DESCRIPTION,
    STM_TOOL_NAME,
    StmUpdate,
    ToolArgumentError,
    parse_stm_arguments,
    stm_tool_definition,
)
from bot.vocabulary.model import Category, GuildConfig

SUMMARY = GuildConfig(guild_id=1)
SINGLE_SUMMARY_CATEGORY = GuildConfig(
    guild_id=1,
    categories=(Category(0, "summary", "Summary", "What matters in this channel"),),
)
CATEGORIES = GuildConfig(
    guild_id=1,
    categories=(
        Category(1, "open_threads", "Open threads", "Questions still pending"),
        Category(0, "facts", "Facts", "Durable facts about members"),
    ),
)
KIB_64 = 64 * 1024


def _parameters(config: GuildConfig) -> dict[str, Any]:
    definition = stm_tool_definition(config)
    assert definition["type"] == "function"
    assert definition["function"]["name"] == STM_TOOL_NAME == "update_short_term_memory"
    parameters: dict[str, Any] = definition["function"]["parameters"]
    return parameters


# --- schema -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config", [SUMMARY, SINGLE_SUMMARY_CATEGORY], ids=["no-categories", "single-summary"]
)
def test_summary_mode_schema(config: GuildConfig) -> None:
    parameters = _parameters(config)
    assert parameters["type"] == "object"
    assert list(parameters["properties"]) == ["summary"]
    assert parameters["properties"]["summary"]["type"] == "string"
    # No maxLength: longer text is cut when stored, and servers that check arguments
    # against the schema (Groq) would refuse the whole call instead.
    assert "maxLength" not in parameters["properties"]["summary"]
    assert "At most 1500 characters" in parameters["properties"]["summary"]["description"]
    assert parameters["required"] == ["summary"]
    assert parameters["additionalProperties"] is False
    assert "minProperties" not in parameters


def test_single_summary_category_describes_the_summary() -> None:
    properties = _parameters(SINGLE_SUMMARY_CATEGORY)["properties"]
    assert "What matters in this channel" in properties["summary"]["description"]


def test_category_mode_schema() -> None:
    parameters = _parameters(CATEGORIES)
    properties = parameters["properties"]
    assert list(properties) == ["facts", "open_threads"]  # by position
    for category in CATEGORIES.categories:
        prop = properties[category.slug]
        assert prop["type"] == "string"
        assert "maxLength" not in prop
        assert "At most 1500 characters" in prop["description"]
        assert category.description in prop["description"]
        assert category.label in prop["description"]
        assert "empty string clears" in prop["description"]
    assert parameters.get("required", []) == []
    assert parameters["minProperties"] == 1
    assert parameters["additionalProperties"] is False


def test_schema_is_json_serializable() -> None:
    for config in (SUMMARY, CATEGORIES):
        json.dumps(stm_tool_definition(config))


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        pytest.param(None, DEFAULT_TOOL_DESCRIPTION, id="default"),
        pytest.param("", DEFAULT_TOOL_DESCRIPTION, id="empty-override-ignored"),
        pytest.param("   ", DEFAULT_TOOL_DESCRIPTION, id="blank-override-ignored"),
        pytest.param("Keep notes tidy.", "Keep notes tidy.", id="override"),
    ],
)
@pytest.mark.parametrize("base", [SUMMARY, CATEGORIES], ids=["summary", "categories"])
def test_description_override(base: GuildConfig, override: str | None, expected: str) -> None:
    config = GuildConfig(guild_id=1, tool_description_override=override, categories=base.categories)
    assert stm_tool_definition(config)["function"]["description"] == expected


def test_default_description_covers_the_contract() -> None:
    text = DEFAULT_TOOL_DESCRIPTION.lower()
    for fragment in ("silently", "replaces", "facts", "decisions", "open threads", "1500"):
        assert fragment in text
    assert "once per turn" in text


# --- parsing: accepted --------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "config", "expected"),
    [
        pytest.param(
            '{"summary": "Ana is vegan."}',
            SUMMARY,
            StmUpdate(summary="Ana is vegan."),
            id="summary",
        ),
        pytest.param(
            '  {"summary": " x "}\n', SUMMARY, StmUpdate(summary=" x "), id="summary-kept-as-given"
        ),
        pytest.param(
            '{"summary": "\\ud83d\\ude00 ok"}',
            SUMMARY,
            StmUpdate(summary="\U0001f600 ok"),
            id="surrogate-pair",
        ),
        pytest.param(
            '{"summary": "' + "x" * 5000 + '"}',
            SUMMARY,
            StmUpdate(summary="x" * 5000),
            id="not-truncated",
        ),
        pytest.param(
            '{"summary": "ok"}',
            SINGLE_SUMMARY_CATEGORY,
            StmUpdate(summary="ok"),
            id="single-summary-category",
        ),
        pytest.param(
            '{"facts": "Ana is vegan"}',
            CATEGORIES,
            StmUpdate(categories={"facts": "Ana is vegan"}),
            id="one-category",
        ),
        pytest.param(
            '{"facts": "a", "open_threads": ""}',
            CATEGORIES,
            StmUpdate(categories={"facts": "a", "open_threads": ""}),
            id="clear-one",
        ),
        # Clearing only: whether the memory would be left empty is the service's call.
        pytest.param(
            '{"open_threads": ""}',
            CATEGORIES,
            StmUpdate(categories={"open_threads": ""}),
            id="clear-only",
        ),
        # SPEC §3: NUL and other control characters are stripped by the sanitizer before
        # storing, not a reason to refuse the update.
        pytest.param(
            '{"summary": "a\\u0000b"}', SUMMARY, StmUpdate(summary="a\x00b"), id="summary-nul"
        ),
        pytest.param(
            '{"facts": "ok", "open_threads": "\\u0000"}',
            CATEGORIES,
            StmUpdate(categories={"facts": "ok", "open_threads": "\x00"}),
            id="category-nul",
        ),
    ],
)
def test_parse_accepts(raw: str, config: GuildConfig, expected: StmUpdate) -> None:
    assert parse_stm_arguments(raw, config) == expected


# --- parsing: refused with a specific message ---------------------------------------


@pytest.mark.parametrize(
    ("raw", "config", "fragments"),
    [
        pytest.param(None, SUMMARY, ["no arguments were given", '{"summary": "..."}'], id="none"),
        pytest.param("  ", SUMMARY, ["no arguments were given"], id="blank"),
        pytest.param("summary: hi", SUMMARY, ["not valid JSON", "line 1 column 1"], id="not-json"),
        pytest.param('{"summary": "Ana is veg', SUMMARY, ["truncated JSON"], id="truncated-string"),
        pytest.param('{"summary": "Ana"', SUMMARY, ["truncated JSON"], id="truncated-object"),
        pytest.param('{"summary": ', SUMMARY, ["truncated JSON"], id="truncated-after-colon"),
        pytest.param(
            '{"summary" "x"}',
            SUMMARY,
            ["not valid JSON", "Expecting ':' delimiter"],
            id="bad-syntax",
        ),
        pytest.param('["x"]', SUMMARY, ["must be a JSON object", "got a JSON array"], id="array"),
        pytest.param(
            '"just text"', SUMMARY, ["must be a JSON object", "got a JSON string"], id="string"
        ),
        pytest.param("null", SUMMARY, ["got a JSON null"], id="null"),
        pytest.param("42", SUMMARY, ["got a JSON number"], id="number"),
        pytest.param("[" * 5000, SUMMARY, ["nested too deeply"], id="deep-nesting"),
        pytest.param("1" * 5000, SUMMARY, ["not usable JSON"], id="huge-integer"),
        pytest.param(
            '{"summary": "a", "summary": "b"}',
            SUMMARY,
            ['"summary" appears more than once'],
            id="duplicate-key",
        ),
        pytest.param(
            '{"summary": "' + "x" * KIB_64 + '"}',
            SUMMARY,
            ["too large", "65536"],
            id="raw-too-large",
        ),
        pytest.param(
            '{"summary": "' + "é" * (KIB_64 // 2) + '"}',
            SUMMARY,
            ["too large"],
            id="raw-too-large-utf8",
        ),
        # summary mode
        pytest.param("{}", SUMMARY, ['missing required field "summary"'], id="missing-summary"),
        pytest.param(
            '{"notes": "x"}',
            SUMMARY,
            ['missing required field "summary"', 'unexpected field "notes"'],
            id="wrong-name",
        ),
        pytest.param(
            '{"summary": "x", "facts": "y", "mood": "z"}',
            SUMMARY,
            ['unexpected fields "facts", "mood"', 'takes only "summary"'],
            id="extra-fields",
        ),
        pytest.param(
            '{"summary": 5}',
            SUMMARY,
            ['"summary" must be a string, got number'],
            id="summary-number",
        ),
        pytest.param(
            '{"summary": null}',
            SUMMARY,
            ['"summary" must be a string, got null'],
            id="summary-null",
        ),
        pytest.param('{"summary": ["a"]}', SUMMARY, ["got array"], id="summary-array"),
        pytest.param('{"summary": {"a": "b"}}', SUMMARY, ["got object"], id="summary-object"),
        pytest.param('{"summary": true}', SUMMARY, ["got boolean"], id="summary-bool"),
        pytest.param(
            '{"summary": ""}',
            SUMMARY,
            ['"summary" is empty', "give the new summary text"],
            id="summary-empty",
        ),
        pytest.param(
            '{"summary": " \\n\\t "}',
            SUMMARY,
            ['"summary" is empty', "give the new summary text"],
            id="summary-whitespace",
        ),
        pytest.param(
            '{"summary": "a\\ud800b"}',
            SUMMARY,
            ['"summary" contains a lone surrogate'],
            id="summary-lone-high",
        ),
        pytest.param('{"summary": "\\udfff"}', SUMMARY, ["lone surrogate"], id="summary-lone-low"),
        pytest.param(
            '{"summary": "a\ud800"}', SUMMARY, ["lone surrogate"], id="summary-raw-surrogate"
        ),
        # category mode
        pytest.param(
            "{}", CATEGORIES, ["no categories given", '"facts", "open_threads"'], id="no-fields"
        ),
        pytest.param(
            '{"summary": "x"}',
            CATEGORIES,
            ['unknown field "summary"', 'valid categories are "facts", "open_threads"'],
            id="summary-in-category-mode",
        ),
        pytest.param(
            '{"facts": "x", "mood": "y", "todo": "z"}',
            CATEGORIES,
            ['unknown fields "mood", "todo"', 'valid categories are "facts", "open_threads"'],
            id="unknown-slugs",
        ),
        pytest.param(
            '{"facts": 3}',
            CATEGORIES,
            ['"facts" must be a string, got number'],
            id="category-number",
        ),
        pytest.param(
            '{"facts": null}',
            CATEGORIES,
            ['"facts" must be a string, got null', 'use "" to clear it'],
            id="category-null",
        ),
        pytest.param(
            '{"facts": "\\ud800"}',
            CATEGORIES,
            ['"facts" contains a lone surrogate'],
            id="category-surrogate",
        ),
    ],
)
def test_parse_refuses(raw: str | None, config: GuildConfig, fragments: list[str]) -> None:
    with pytest.raises(ToolArgumentError) as caught:
        parse_stm_arguments(raw, config)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    ("raw", "config", "message"),
    [
        pytest.param(
            '{"summary": "x", "mood": "y"}',
            SUMMARY,
            'unexpected field "mood"; this tool takes only "summary"',
            id="extra-field",
        ),
        pytest.param(
            '{"summary": null}', SUMMARY, 'field "summary" must be a string, got null', id="null"
        ),
        pytest.param(
            '{"facts": null}',
            CATEGORIES,
            'field "facts" must be a string, got null; use "" to clear it',
            id="category-null",
        ),
        pytest.param(
            '{"summary": "a\\ud800"}',
            SUMMARY,
            'field "summary" contains a lone surrogate (an unpaired \\ud800-\\udfff escape), '
            "which is not valid Unicode; send plain text",
            id="surrogate",
        ),
    ],
)
def test_argument_messages_are_worded_as_before(
    raw: str, config: GuildConfig, message: str
) -> None:
    # The checks are shared with the long-term tools (bot.llm.tools.arguments); each
    # tool's wording stays its own.
    with pytest.raises(ToolArgumentError) as caught:
        parse_stm_arguments(raw, config)
    assert str(caught.value) == message
    assert len(message) < 400  # short enough for the model to read
    assert isinstance(caught.value, ValueError)


def test_error_names_the_field() -> None:
    with pytest.raises(ToolArgumentError) as caught:
        parse_stm_arguments('{"facts": "ok", "open_threads": 1}', CATEGORIES)
    assert caught.value.field == "open_threads"


def test_error_shortens_a_huge_unknown_key() -> None:
    with pytest.raises(ToolArgumentError) as caught:
        parse_stm_arguments(json.dumps({"k" * 5000: "x"}), CATEGORIES)
    assert len(str(caught.value)) < 400


def test_single_value_over_64_kib_is_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    # The raw limit normally catches this first; lift it to reach the per-value check.
    monkeypatch.setattr(stm, "MAX_RAW_ARGUMENT_BYTES", 10 * KIB_64)
    with pytest.raises(ToolArgumentError, match='field "facts" is too large'):
        parse_stm_arguments(json.dumps({"facts": "x" * (KIB_64 + 1)}), CATEGORIES)
    assert parse_stm_arguments(json.dumps({"facts": "x" * KIB_64}), CATEGORIES) == StmUpdate(
        categories={"facts": "x" * KIB_64}
    )


# --- fuzz ---------------------------------------------------------------------------

# Any code point, surrogates included, with NUL and lone surrogates drawn often.
_chars = st.characters(exclude_categories=()) | st.sampled_from(["\x00", "\ud800", "\udfff"])
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(_chars, max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
_keys = st.sampled_from(["summary", "facts", "open_threads", "mood", ""]) | st.text(max_size=8)
_objects = st.dictionaries(_keys, _json_values, max_size=4)
_raw = (
    st.text(_chars)
    | st.none()
    | _json_values.map(json.dumps)
    | _objects.map(json.dumps)
    | _objects.map(lambda obj: json.dumps(obj)[: max(0, len(json.dumps(obj)) - 3)])
    | st.text(_chars).map(lambda s: json.dumps({"summary": s}))
)


@pytest.mark.fuzz
@settings(max_examples=300, deadline=None)
@given(raw=_raw, config=st.sampled_from([SUMMARY, SINGLE_SUMMARY_CATEGORY, CATEGORIES]))
def test_parse_never_raises_anything_else(raw: str | None, config: GuildConfig) -> None:
    try:
        update = parse_stm_arguments(raw, config)
    except ToolArgumentError as exc:
        assert str(exc)
        return
    if config.category_mode:
        assert update.summary is None
        assert update.categories
        assert set(update.categories) <= {c.slug for c in config.categories}
        assert any(value.strip() for value in update.categories.values())
    else:
        assert update.categories is None
        assert update.summary is not None and update.summary.strip()
