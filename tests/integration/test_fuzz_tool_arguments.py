"""Fuzzing the STM tool against the real memory service and PostgreSQL.

Whatever a model sends as ``update_short_term_memory`` arguments (hostile strings in a
valid shape, wrong types, extra keys, malformed or truncated JSON) and whatever reaches
the service directly (values up to 100 KB, NUL, lone surrogates): no exception escapes,
the model always gets ``saved`` / ``saved, pending sync`` / ``rejected: …``, a rejected
call changes no row, a saved one stores exactly the sanitized value, and every value in
``short_term_memories`` (read back with SQL after each example) is clean: at most 1500
graphemes, no control characters but ``\\n``/``\\t``, no placeholder but the prompt's own,
no planted secret.

One service per test, shared by its examples (the rows it accumulates are re-checked on
every example). ``--fuzz`` runs 20,000 examples per test (see tests/helpers/fuzz.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from sqlalchemy import select

from bot.config import Settings
from bot.conversation.tools.stm import parse_stm_arguments, run_stm_tool
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.llm.tools.base import ToolArgumentError
from bot.memory.service import MemoryService
from bot.memory.turn.types import TurnState
from bot.vocabulary.model import Category, GuildConfig
from bot.vocabulary.sanitize import sanitize_value
from tests.helpers.builders import ALICE, BOB, CHANNEL, GUILD, ManualClock, prepare
from tests.helpers.fuzz import (
    FuzzCounter,
    any_text,
    fuzz_settings,
    hostile_text,
    stored_value_problems,
    weighted,
)

pytestmark = pytest.mark.fuzz

SUMMARY_GUILD = GUILD
CATEGORY_GUILD = GUILD + 1
SINGLE_CATEGORY_GUILD = GUILD + 2  # one category named "summary": summary mode
DISABLED_GUILD = GUILD + 3
DM = None
GUILDS = (SUMMARY_GUILD, CATEGORY_GUILD, SINGLE_CATEGORY_GUILD, DISABLED_GUILD, DM)
CHANNELS = (CHANNEL, CHANNEL + 1)
USERS = (ALICE, BOB)
SLUGS = ("decisions", "open_questions", "people")
OK_RESULTS = ("saved", "saved, pending sync")

RowKey = tuple[str, int | None, int | None, int]


@dataclass(frozen=True)
class Snapshot:
    summary: str
    categories: dict[str, Any]
    version: int


@pytest.fixture
async def service(db: Database, settings: Settings) -> AsyncIterator[MemoryService]:
    service = MemoryService(db.sessions, settings, clock=ManualClock())
    await service.set_categories(
        CATEGORY_GUILD,
        ALICE,
        [
            Category(0, "decisions", "Decisions", "What the group decided"),
            Category(1, "open_questions", "Open questions", "What is still open"),
            Category(2, "people", "People", "Who is who"),
        ],
    )
    await service.set_categories(
        SINGLE_CATEGORY_GUILD, ALICE, [Category(0, "summary", "Summary", "The whole story")]
    )
    await service.update_guild_settings(DISABLED_GUILD, ALICE, short_term_memory_enabled=False)
    yield service


async def read_rows(db: Database) -> dict[RowKey, Snapshot]:
    async with db.sessions() as session:
        rows = await session.execute(
            select(
                ShortTermMemory.scope_kind,
                ShortTermMemory.guild_id,
                ShortTermMemory.user_id,
                ShortTermMemory.channel_id,
                ShortTermMemory.summary,
                ShortTermMemory.categories,
                ShortTermMemory.version,
            )
        )
        return {
            (kind, guild, user, channel): Snapshot(summary, dict(categories), version)
            for kind, guild, user, channel, summary, categories, version in rows
        }


def assert_all_clean(rows: dict[RowKey, Snapshot]) -> None:
    for key, row in rows.items():
        problems = stored_value_problems(row.summary, row.categories)
        assert not problems, f"row {key}: {problems}"


def write_keys(turn: TurnState) -> list[RowKey]:
    return [(k.kind, k.guild_id, k.user_id, k.channel_id) for k in turn.write_keys]


def assert_stored_as_sanitized(
    rows: dict[RowKey, Snapshot], turn: TurnState, summary: str | None, categories: Any
) -> None:
    """A saved write stores exactly what the sanitizer makes of each given value."""
    for key in write_keys(turn):
        row = rows[key]
        if summary is not None:
            assert row.summary == sanitize_value(summary), key
        else:
            for slug, value in categories.items():
                cleaned = sanitize_value(value) if value else ""
                assert row.categories.get(slug, "") == cleaned, (key, slug)


# ----------------------------------------------------------------- strategies

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    any_text(20),
)
json_value = st.recursive(
    json_leaf,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(any_text(8), children, max_size=3)
    ),
    max_leaves=8,
)


def without_surrogates(text: str) -> str:
    return "".join(c for c in text if not "\ud800" <= c <= "\udfff")


field_names = st.sampled_from(["summary", *SLUGS, "Summary", "mood", "", "summary ", "__proto__"])
# Mostly text the parser accepts (so the sanitizer and the database see it; NUL included,
# which the sanitizer strips); lone surrogates, which the parser refuses, stay in one
# value out of four. The sizes reach past the 64 KB argument limit.
text_value = weighted(
    (3, hostile_text(max_size=70_000).map(without_surrogates)),
    (1, hostile_text(max_size=70_000)),
)
EXTRA_KEY = weighted((9, st.just(False)), (1, st.just(True)))
wrong_type = json_value.filter(lambda value: not isinstance(value, str))


@st.composite
def argument_objects(draw: st.DrawFn, category_mode: bool) -> dict[str, Any]:
    """A JSON object the model might send: mostly the right keys for the guild with
    hostile strings; sometimes wrong types, the other mode's keys, or extra keys."""
    shape = draw(st.sampled_from(["right"] * 6 + ["wrong type", "other mode", "anything"]))
    if shape == "other mode":
        category_mode = not category_mode
    obj: dict[str, Any] = {}
    if shape == "anything":
        obj = draw(
            st.dictionaries(field_names, weighted((1, text_value), (1, json_value)), max_size=4)
        )
    elif category_mode:
        for slug in draw(st.lists(st.sampled_from(SLUGS), min_size=1, max_size=3, unique=True)):
            obj[slug] = draw(weighted((1, st.just("")), (3, text_value)))
    else:
        obj["summary"] = draw(text_value)
    if shape == "wrong type" and obj:
        obj[draw(st.sampled_from(sorted(obj)))] = draw(wrong_type)
    if draw(EXTRA_KEY):
        obj[draw(any_text(10))] = draw(json_value)
    return obj


def encode(obj: dict[str, Any], ascii_only: bool, indent: int | None) -> str:
    # ensure_ascii=True writes lone surrogates as \\ud800 escapes, as a real server would;
    # ensure_ascii=False passes them through as raw code points.
    return json.dumps(obj, ensure_ascii=ascii_only, indent=indent)


def encoded_objects(category_mode: bool) -> st.SearchStrategy[str]:
    return st.builds(
        encode,
        argument_objects(category_mode),
        st.booleans(),
        st.sampled_from([None, None, 2]),
    )


@st.composite
def truncated(draw: st.DrawFn) -> str:
    raw = draw(encoded_objects(draw(st.booleans())))
    return raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]


malformed = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "",
            "   ",
            "null",
            "[]",
            '"summary"',
            "42",
            "{",
            "}",
            "{summary: 'single quotes'}",
            '{"summary": "a", "summary": "b"}',
            '{"summary": "x"} trailing',
            '\ufeff{"summary": "bom"}',
            '{"summary": NaN}',
            '{"summary": Infinity}',
            '{"summary": "\\ud800"}',
            '{"summary": "\\u0000"}',
            '{"summary": "' + "\\" * 3 + '"}',
            '{"summary": ' + "1" * 5000 + "}",
            "[" * 5000 + "]" * 5000,
            '{"a":' * 3000 + "1" + "}" * 3000,
            '{"summary": "' + "x" * 70_000 + '"}',
        ]
    ),
    any_text(200),
    truncated(),
)


def raw_arguments(category_mode: bool) -> st.SearchStrategy[str | None]:
    well_formed = encoded_objects(category_mode)
    return weighted((4, well_formed), (1, malformed))


RAW_ARGUMENTS = {mode: raw_arguments(mode) for mode in (False, True)}


# ----------------------------------------------------------------------- tests


@fuzz_settings(1_200, database=True)
@given(
    data=st.data(),
    guild=st.sampled_from([*GUILDS, SUMMARY_GUILD, CATEGORY_GUILD]),
    channel=st.sampled_from(CHANNELS),
    user=st.sampled_from(USERS),
)
async def test_tool_arguments_never_escape_and_only_clean_values_are_stored(
    service: MemoryService,
    db: Database,
    fuzz_counter: FuzzCounter,
    data: st.DataObject,
    guild: int | None,
    channel: int,
    user: int,
) -> None:
    raw = data.draw(RAW_ARGUMENTS[guild == CATEGORY_GUILD], label="raw arguments")
    before = await read_rows(db)
    prepared = await prepare(service, user, channel=channel, guild=guild, model="fuzz-model")
    turn = prepared.turn

    outcome = await run_stm_tool(service, turn, raw)  # must not raise

    assert isinstance(outcome.content, str)
    assert outcome.ok == (outcome.content in OK_RESULTS), outcome.content
    if not outcome.ok:
        assert outcome.content.startswith("rejected: ") and len(outcome.content) > 10
    after = await read_rows(db)
    assert_all_clean(after)
    if outcome.ok:
        update = parse_stm_arguments(raw, turn.config)  # it was accepted, so it parses
        assert_stored_as_sanitized(after, turn, update.summary, update.categories)
        fuzz_counter.tick("saved")
    else:
        assert after == before, "a rejected call changed stored memory"
        fuzz_counter.tick("rejected")
    if guild == DISABLED_GUILD:
        assert not outcome.ok


def config_values(config: GuildConfig) -> st.SearchStrategy[dict[str, str]]:
    slugs = [c.slug for c in config.categories]
    return st.dictionaries(
        st.sampled_from(slugs), st.one_of(st.just(""), hostile_text()), min_size=1
    )


@fuzz_settings(300, database=True)
@given(
    data=st.data(),
    guild=st.sampled_from((SUMMARY_GUILD, CATEGORY_GUILD, DM)),
    channel=st.sampled_from(CHANNELS),
    origin=st.sampled_from(["model_tool", "admin"]),
)
async def test_hostile_values_reaching_the_service_are_stored_clean(
    service: MemoryService,
    db: Database,
    fuzz_counter: FuzzCounter,
    data: st.DataObject,
    guild: int | None,
    channel: int,
    origin: str,
) -> None:
    """The service's own guard, below the tool's argument checks: huge values (up to
    100 KB), NUL and lone surrogates are sanitized, never stored or raised."""
    config = await service.guild_config(guild)
    summary: str | None = None
    categories: dict[str, str] | None = None
    if config.category_mode:
        categories = data.draw(config_values(config), label="categories")
    else:
        summary = data.draw(hostile_text(), label="summary")
    before = await read_rows(db)
    if origin == "admin":
        result = await service.admin_edit(
            guild_id=guild,
            channel_id=channel,
            actor_user_id=ALICE,
            summary=summary,
            categories=categories,
        )
        turn = TurnState(channel, ALICE, guild, config, service.channel_epoch(channel))
    else:
        prepared = await prepare(service, channel=channel, guild=guild)
        turn = prepared.turn
        result = await service.update_stm(turn, summary=summary, categories=categories)

    after = await read_rows(db)
    assert_all_clean(after)
    if result.ok:
        assert_stored_as_sanitized(after, turn, summary, categories)
        fuzz_counter.tick("saved")
    else:
        assert result.reason, result
        assert after == before
        fuzz_counter.tick("rejected")


@fuzz_settings(100, database=True)
@given(text=hostile_text(max_pieces=6, max_size=20_000).map(without_surrogates))
async def test_a_tool_call_and_an_admin_edit_store_the_same_text(
    service: MemoryService, db: Database, fuzz_counter: FuzzCounter, text: str
) -> None:
    """The two write paths share one sanitizer: the same summary is stored identically
    whether the model wrote it or an admin typed it."""
    raw = json.dumps({"summary": text})
    try:
        parse_stm_arguments(raw, await service.guild_config(SUMMARY_GUILD))
    except ToolArgumentError:
        assume(False)  # blank: the tool refuses what an admin edit may not
    prepared = await prepare(service, guild=SUMMARY_GUILD)
    by_model = await run_stm_tool(service, prepared.turn, raw)
    by_admin = await service.admin_edit(
        guild_id=SUMMARY_GUILD, channel_id=CHANNEL + 1, actor_user_id=ALICE, summary=text
    )
    assert by_model.ok == by_admin.ok
    rows = await read_rows(db)
    assert_all_clean(rows)
    if by_admin.ok:
        model_row = rows[("server", SUMMARY_GUILD, None, CHANNEL)]
        admin_row = rows[("server", SUMMARY_GUILD, None, CHANNEL + 1)]
        assert model_row.summary == admin_row.summary
    fuzz_counter.tick()
