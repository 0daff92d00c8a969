"""The tool as the model calls it: raw JSON arguments in, the model-readable result out,
and nothing stored unless the result says so."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from bot.conversation.tools.stm import run_stm_tool
from bot.db.engine import Database
from bot.db.models import ShortTermMemory, StmEvent
from bot.memory.service import MemoryService
from bot.memory.turn.types import (
    REASON_ALREADY_UPDATED,
    REASON_DISABLED,
    REASON_EXPLICIT_INTENT,
    REASON_PROVIDER,
    REASON_STORAGE,
    TurnState,
)
from bot.vocabulary.model import Category, ScopeKey
from tests.helpers.builders import ALICE, CHANNEL, GUILD, make_service, prepare
from tests.helpers.fake_llm import refused_base_url


async def stored_rows(db: Database) -> int:
    async with db.sessions() as session:
        rows = await session.scalar(select(func.count()).select_from(ShortTermMemory))
        events = await session.scalar(select(func.count()).select_from(StmEvent))
    return (rows or 0) + (events or 0)


async def call(service: MemoryService, raw: str | None, **turn_options: bool) -> str:
    prepared = await prepare(service, **turn_options)
    outcome = await run_stm_tool(service, prepared.turn, raw)
    assert outcome.ok == (outcome.content in ("saved", "saved, pending sync"))
    return outcome.content


async def test_a_valid_call_is_saved(service: MemoryService, db: Database) -> None:
    assert await call(service, json.dumps({"summary": "Alice plans the launch."})) == "saved"
    assert (await service.entry(ScopeKey.server(GUILD, CHANNEL))).summary == (
        "Alice plans the launch."
    )
    async with db.sessions() as session:
        rows = list(await session.scalars(select(ShortTermMemory)))
    assert sorted((r.scope_kind, r.summary) for r in rows) == [
        ("server", "Alice plans the launch."),
        ("user", "Alice plans the launch."),
    ]


async def test_a_nul_character_is_stripped_not_a_reason_to_refuse(
    service: MemoryService,
) -> None:
    # SPEC §3: "NUL and other control characters are stripped" before storing.
    raw = '{"summary": "Alice\\u0000 plans\\u0001 the launch."}'
    assert await call(service, raw) == "saved"
    entry = await service.entry(ScopeKey.server(GUILD, CHANNEL))
    assert entry.summary == "Alice plans the launch."


async def test_a_value_of_nothing_but_nul_is_refused_as_empty(
    service: MemoryService, db: Database
) -> None:
    result = await call(service, '{"summary": "\\u0000\\u0000"}')
    assert result.startswith("rejected: "), result
    assert await stored_rows(db) == 0


SUMMARY_MODE_BAD_INPUT = [
    pytest.param("not json at all", "not valid JSON", id="not-json"),
    pytest.param('{"summary": "cut off', "truncated JSON", id="truncated-json"),
    pytest.param('["summary"]', "JSON object", id="not-an-object"),
    pytest.param("{}", '"summary"', id="missing-field"),
    pytest.param('{"summary": "x", "mood": "happy"}', '"mood"', id="extra-field"),
    pytest.param('{"summary": 42}', "string", id="wrong-type"),
    pytest.param(json.dumps({"summary": "x" * 1_000_000}), "too large", id="1mb-string"),
    pytest.param('{"summary": "bad \\ud800 surrogate"}', "surrogate", id="lone-surrogate"),
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
        pytest.param(
            '{"decisions": "", "todo": ""}', "every category would be empty", id="all-empty"
        ),
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


GuardedTurn = tuple[MemoryService, TurnState]


async def _prepare(
    service: MemoryService,
    *,
    explicit_long_term_intent: bool = False,
    provider_allows_stm: bool = True,
) -> TurnState:
    prepared = await prepare(
        service,
        explicit_long_term_intent=explicit_long_term_intent,
        provider_allows_stm=provider_allows_stm,
    )
    return prepared.turn


async def _stm_disabled(service: MemoryService, stack: AsyncExitStack) -> GuardedTurn:
    await service.update_guild_settings(GUILD, ALICE, short_term_memory_enabled=False)
    return service, await _prepare(service)


async def _explicit_intent(service: MemoryService, stack: AsyncExitStack) -> GuardedTurn:
    return service, await _prepare(service, explicit_long_term_intent=True)


async def _provider_excluded(service: MemoryService, stack: AsyncExitStack) -> GuardedTurn:
    return service, await _prepare(service, provider_allows_stm=False)


async def _already_updated(service: MemoryService, stack: AsyncExitStack) -> GuardedTurn:
    turn = await _prepare(service)
    first = await run_stm_tool(service, turn, json.dumps({"summary": "the first update"}))
    assert first.content == "saved"
    return service, turn


async def _storage_unavailable(service: MemoryService, stack: AsyncExitStack) -> GuardedTurn:
    refused = refused_base_url().replace("http://", "postgresql+asyncpg://u:p@") + "db"
    engine = create_async_engine(refused)
    stack.push_async_callback(engine.dispose)
    down = make_service(async_sessionmaker(engine), service.settings)
    return down, await _prepare(down)


GUARDS = [
    pytest.param(_stm_disabled, REASON_DISABLED, id="stm-disabled"),
    pytest.param(_explicit_intent, REASON_EXPLICIT_INTENT, id="explicit-long-term-intent"),
    pytest.param(_provider_excluded, REASON_PROVIDER, id="provider-excluded"),
    pytest.param(_already_updated, REASON_ALREADY_UPDATED, id="already-updated"),
    pytest.param(_storage_unavailable, REASON_STORAGE, id="storage-unavailable"),
]

NOT_JSON = [
    pytest.param("not json at all", id="not-json"),
    pytest.param('{"summary": "cut off', id="truncated-json"),
    pytest.param('{"summary": "x",, }', id="broken-json"),
]


@pytest.mark.parametrize("raw", NOT_JSON)
@pytest.mark.parametrize(("guard", "reason"), GUARDS)
async def test_guards_reject_before_parsing(
    service: MemoryService,
    db: Database,
    guard: Callable[[MemoryService, AsyncExitStack], Awaitable[GuardedTurn]],
    reason: str,
    raw: str,
) -> None:
    """Every guard answers with its own reason even when the arguments are not JSON at
    all: the guards run before parsing, so the model learns why it may not write rather
    than fixing its JSON and trying again."""
    async with AsyncExitStack() as stack:
        target, turn = await guard(service, stack)
        assert turn.stm_block_reason() == reason
        before_rows = await stored_rows(db)
        before_entry = service.cache.get(ScopeKey.server(GUILD, CHANNEL))
        before_summary = before_entry.summary if before_entry is not None else ""

        outcome = await run_stm_tool(target, turn, raw)

        assert outcome.content == f"rejected: {reason}"
        assert not outcome.ok
        assert await stored_rows(db) == before_rows
        assert (await service.entry(ScopeKey.server(GUILD, CHANNEL))).summary == before_summary
        assert target.pending_sync == 0
