"""The tool as the model calls it: raw JSON arguments in, the model-readable result out,
and nothing stored unless the result says so."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import ShortTermMemory, StmEvent
from bot.llm.tools.stm import run_stm_tool
from bot.memory.model import Category, ScopeKey
from bot.memory.service import MemoryService
from tests.helpers.builders import ALICE, BOT, CHANNEL, GUILD, ManualClock, make_service


@pytest.fixture
def service(db: Database, settings: Settings) -> MemoryService:
    return make_service(db.sessions, settings, ManualClock())


async def stored_rows(db: Database) -> int:
    async with db.sessions() as session:
        rows = await session.scalar(select(func.count()).select_from(ShortTermMemory))
        events = await session.scalar(select(func.count()).select_from(StmEvent))
    return (rows or 0) + (events or 0)


async def call(service: MemoryService, raw: str | None, **turn_options: bool) -> str:
    prepared = await service.prepare_turn(
        channel_id=CHANNEL, user_id=ALICE, guild_id=GUILD, bot_user_id=BOT, **turn_options
    )
    outcome = await run_stm_tool(service, prepared.turn, raw)
    assert outcome.ok == (outcome.content in ("saved", "saved, pending sync"))
    return outcome.content


async def test_a_valid_call_is_saved(service: MemoryService, db: Database) -> None:
    assert await call(service, json.dumps({"summary": "Alice plans the launch."})) == "saved"
    assert (await service.entry(ScopeKey.server(GUILD, CHANNEL))).summary == (
        "Alice plans the launch."
    )


SUMMARY_MODE_BAD_INPUT = [
    pytest.param("not json at all", "not valid JSON", id="not-json"),
    pytest.param('{"summary": "cut off', "truncated JSON", id="truncated-json"),
    pytest.param('["summary"]', "JSON object", id="not-an-object"),
    pytest.param("{}", '"summary"', id="missing-field"),
    pytest.param('{"summary": "x", "mood": "happy"}', '"mood"', id="extra-field"),
    pytest.param('{"summary": 42}', "string", id="wrong-type"),
    pytest.param(json.dumps({"summary": "x" * 1_000_000}), "too large", id="1mb-string"),
    pytest.param('{"summary": "bad \\ud800 surrogate"}', "surrogate", id="lone-surrogate"),
    pytest.param('{"summary": "nul \\u0000 byte"}', "NUL", id="nul-byte"),
    pytest.param(None, "no arguments", id="no-arguments"),
]


@pytest.mark.parametrize(("raw", "fragment"), SUMMARY_MODE_BAD_INPUT)
async def test_bad_arguments_get_a_specific_error_and_store_nothing(
    service: MemoryService, db: Database, raw: str | None, fragment: str
) -> None:
    result = await call(service, raw)
    assert result.startswith("rejected: ")
    assert fragment.lower() in result.lower(), result
    assert await stored_rows(db) == 0
    assert not (await service.entry(ScopeKey.server(GUILD, CHANNEL))).has_content


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        pytest.param('{"weather": "sunny"}', "weather", id="unknown-slug"),
        pytest.param('{"decisions": "", "todo": ""}', "non-empty", id="all-empty"),
        pytest.param('{"summary": "x"}', "summary", id="summary-in-category-mode"),
    ],
)
async def test_bad_category_arguments_store_nothing(
    service: MemoryService, db: Database, raw: str, fragment: str
) -> None:
    await service.set_categories(
        GUILD,
        ALICE,
        [
            Category(0, "decisions", "Decisions", "what was decided"),
            Category(1, "todo", "Todo", "open tasks"),
        ],
    )
    before = await stored_rows(db)
    result = await call(service, raw)
    assert result.startswith("rejected: ") and fragment in result, result
    assert await stored_rows(db) == before


async def test_guards_reject_before_parsing(service: MemoryService, db: Database) -> None:
    result = await call(service, '{"summary": "x"}', explicit_long_term_intent=True)
    assert result.startswith("rejected: the user asked for long-term memory")
    assert await stored_rows(db) == 0
