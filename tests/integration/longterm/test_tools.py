"""The long-term tools run against the real service on PostgreSQL: what a call stores,
finds or deletes, and what the model is told about it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from bot.config import Settings
from bot.conversation.tools.longterm import (
    FORGET_TOOL_NAME,
    LONG_TERM_TOOL_NAMES,
    MAX_REMEMBERS_PER_TURN,
    NO_FULL_MATCH,
    RECALL_TOOL_NAME,
    REMEMBER_TOOL_NAME,
    UNAVAILABLE,
    long_term_tools,
)
from bot.db.engine import Database
from bot.llm.tools.loop import ToolSpec
from bot.memory.longterm.facts import LongTermService
from bot.vocabulary.model import Provenance
from tests.helpers.builders import ALICE, BOB, GUILD, ManualClock
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import refused_base_url
from tests.integration.longterm.harness import (
    CAT,
    DISCORD_TOKEN,
    MESSAGE_ID,
    events,
    only_remember_event,
    remember,
    rows,
)


def limited(
    db: Database, pg_url: URL, tmp_path: Path, clock: ManualClock, **longterm: int
) -> LongTermService:
    settings = make_test_settings(pg_url, tmp_path, longterm=longterm)
    return LongTermService(db.sessions, settings, clock)


def tools(
    service: LongTermService, *, guild: int | None = GUILD, opted_in: bool = False
) -> dict[str, ToolSpec]:
    """One turn's tools for Alice, as the turn builds them."""
    return long_term_tools(
        service,
        user_id=ALICE,
        guild_id=guild,
        source_message_id=MESSAGE_ID,
        model="test-model",
        opted_in=opted_in,
    )


async def snapshot(db: Database) -> tuple[list[tuple[Any, ...]], int]:
    """Every fact's stored state (text, provenance, recall counter, times) and how many
    audit events there are."""
    facts = [
        (
            row.id,
            row.user_id,
            row.guild_id,
            row.content,
            row.origin,
            row.source_message_id,
            row.recall_count,
            row.last_recalled_at,
            row.updated_at,
        )
        for row in await rows(db)
    ]
    return facts, len(await events(db))


# ------------------------------------------------------------------ definitions


async def test_the_tools_are_offered_in_order_with_the_fact_limit_from_the_settings(
    db: Database, pg_url: URL, tmp_path: Path, clock: ManualClock
) -> None:
    service = limited(db, pg_url, tmp_path, clock, max_fact_chars=300)
    specs = tools(service)
    assert list(specs) == list(LONG_TERM_TOOL_NAMES)
    remember_fact = specs[REMEMBER_TOOL_NAME].definition["function"]["parameters"]
    assert remember_fact["properties"]["fact"]["maxLength"] == 300

    outcome = await specs[REMEMBER_TOOL_NAME].run('{"fact": "' + "Tofu " * 100 + '"}')
    assert outcome.ok and "(shortened to 300 characters)" in outcome.content
    [row] = await rows(db)
    assert len(row.content) <= 300 and row.content.startswith("Tofu Tofu")


# ------------------------------------------------------------------ running


@pytest.mark.parametrize("name", LONG_TERM_TOOL_NAMES)
async def test_a_malformed_call_is_an_error_and_touches_nothing(
    service: LongTermService, db: Database, name: str
) -> None:
    await remember(service, CAT)
    before = await snapshot(db)
    outcome = await tools(service)[name].run('{"nope": 1}')
    assert not outcome.ok
    assert outcome.content.startswith("rejected: unexpected field")
    assert await snapshot(db) == before


async def test_remember_stores_the_fact_with_the_turns_provenance(
    service: LongTermService, db: Database
) -> None:
    outcome = await tools(service)[REMEMBER_TOOL_NAME].run('{"fact": "My cat is called Miso"}')
    [row] = await rows(db)
    assert outcome.ok and outcome.content == f"saved as fact #{row.id}"
    assert (row.user_id, row.guild_id, row.content) == (ALICE, GUILD, CAT)
    assert (row.origin, row.origin_detail, row.source_message_id) == (
        "model_tool",
        "test-model",
        MESSAGE_ID,
    )
    await only_remember_event(db)


async def test_remember_reports_an_update_of_a_similar_fact(
    service: LongTermService, db: Database
) -> None:
    first = await remember(service, CAT)
    outcome = await tools(service)[REMEMBER_TOOL_NAME].run('{"fact": "My cat is named Tofu"}')
    assert outcome.ok and outcome.content == (
        f"updated fact #{first} (it replaced a similar fact saved earlier)"
    )
    [row] = await rows(db)
    assert (row.id, row.content) == (first, "My cat is named Tofu")


async def test_remember_reports_redaction_and_truncation(
    service: LongTermService, db: Database
) -> None:
    remember_fact = tools(service)[REMEMBER_TOOL_NAME]
    redacted = await remember_fact.run(f'{{"fact": "my token is {DISCORD_TOKEN}"}}')
    long = await remember_fact.run('{"fact": "' + "Kayak " * 200 + '"}')

    secret, kayaks = await rows(db)
    assert redacted.ok and redacted.content == (
        f"saved as fact #{secret.id} (secrets in it were redacted)"
    )
    assert DISCORD_TOKEN not in secret.content
    assert secret.content.startswith("my token is [REDACTED")
    assert long.ok and long.content == (f"saved as fact #{kayaks.id} (shortened to 500 characters)")
    assert len(kayaks.content) <= 500 and kayaks.content.startswith("Kayak Kayak")


async def test_remember_reports_the_fact_it_evicted_when_the_memory_is_full(
    db: Database, pg_url: URL, tmp_path: Path, clock: ManualClock
) -> None:
    service = limited(db, pg_url, tmp_path, clock, max_facts_per_user=2)
    oldest = await remember(service, "likes tea")
    clock.advance(minutes=1)
    await remember(service, "owns a bike")
    clock.advance(minutes=1)

    outcome = await tools(service)[REMEMBER_TOOL_NAME].run('{"fact": "plays chess"}')

    stored = await rows(db)
    assert [row.content for row in stored] == ["owns a bike", "plays chess"]
    assert outcome.ok and outcome.content == (
        f"saved as fact #{stored[-1].id}; the memory was full, so the least-used fact "
        f"#{oldest} was dropped (limit 2 facts)"
    )


async def test_a_fact_empty_after_sanitizing_is_rejected_and_stores_nothing(
    service: LongTermService, db: Database
) -> None:
    outcome = await tools(service)[REMEMBER_TOOL_NAME].run('{"fact": "\\u0001 \\u200b"}')
    assert not outcome.ok and outcome.content == (
        "rejected: the fact is empty after removing unsafe content"
    )
    assert await snapshot(db) == ([], 0)


async def test_a_nul_character_is_stripped_from_a_fact_and_a_query_not_refused(
    service: LongTermService, db: Database
) -> None:
    # SPEC §3: NUL and other control characters are stripped before storing.
    turn = tools(service)
    saved = await turn[REMEMBER_TOOL_NAME].run('{"fact": "My cat\\u0000 is called Miso"}')
    [row] = await rows(db)
    assert saved.ok and row.content == CAT
    found = await turn[RECALL_TOOL_NAME].run('{"query": "cat\\u0000 name"}')
    assert found.ok and CAT in found.content


async def test_a_database_outage_is_unavailable_for_every_tool(
    settings: Settings, clock: ManualClock
) -> None:
    broken = create_async_engine(
        refused_base_url().replace("http://", "postgresql+asyncpg://u:p@") + "db"
    )
    specs = tools(LongTermService(async_sessionmaker(broken), settings, clock))
    try:
        for name, raw in [
            (REMEMBER_TOOL_NAME, '{"fact": "x"}'),
            (RECALL_TOOL_NAME, '{"query": "cat"}'),
            (FORGET_TOOL_NAME, '{"fact_id": 1}'),
        ]:
            outcome = await specs[name].run(raw)
            assert not outcome.ok and outcome.content == UNAVAILABLE, name
    finally:
        await broken.dispose()


async def test_remember_is_limited_per_turn(service: LongTermService, db: Database) -> None:
    facts = ["likes tea", "owns a bike", "speaks Dutch", "plays chess", "grows tomatoes"]
    assert len(facts) == MAX_REMEMBERS_PER_TURN
    remember_fact = tools(service)[REMEMBER_TOOL_NAME]
    for text in facts:
        assert (await remember_fact.run(f'{{"fact": "{text}"}}')).ok
    outcome = await remember_fact.run('{"fact": "one too many"}')
    assert not outcome.ok and "at most 5 facts" in outcome.content
    assert [row.content for row in await rows(db)] == facts

    # A new turn starts afresh.
    assert (await tools(service)[REMEMBER_TOOL_NAME].run('{"fact": "collects stamps"}')).ok
    assert [row.content for row in await rows(db)] == [*facts, "collects stamps"]


async def test_recall_lists_the_matches_with_their_ids(
    service: LongTermService, clock: ManualClock
) -> None:
    cat = await remember(service, CAT)
    clock.advance(hours=1)
    sleepy = await remember(service, "My cat sleeps all day")
    in_dm = await remember(service, "My cat hates the vet", guild=None)
    await remember(service, "I live in Lisbon")

    opted_in = await tools(service, guild=None, opted_in=True)[RECALL_TOOL_NAME].run(
        '{"query": "cat"}'
    )
    assert opted_in.ok
    assert sorted(opted_in.content.splitlines()) == sorted(
        [
            f"#{cat} (saved 2026-11-01, in a server): {CAT}",
            f"#{sleepy} (saved 2026-11-01, in a server): My cat sleeps all day",
            f"#{in_dm} (saved 2026-11-01, in DMs): My cat hates the vet",
        ]
    )
    # Without the opt-in a DM sees only what was said in DMs. (The date is not checked
    # here: see test_a_recalled_fact_keeps_the_date_it_was_saved.)
    dm_only = await tools(service, guild=None)[RECALL_TOOL_NAME].run('{"query": "cat"}')
    assert dm_only.ok and "\n" not in dm_only.content
    assert dm_only.content.startswith(f"#{in_dm} (saved ")
    assert dm_only.content.endswith(", in DMs): My cat hates the vet")

    empty = await tools(service)[RECALL_TOOL_NAME].run('{"query": "spaceships"}')
    assert empty.ok and empty.content == "no saved facts match that query"


async def test_a_recalled_fact_keeps_the_date_it_was_saved(
    service: LongTermService, db: Database
) -> None:
    cat = await remember(service, CAT)
    recall = tools(service)[RECALL_TOOL_NAME]
    line = f"#{cat} (saved 2026-11-01, in a server): {CAT}"
    assert (await recall.run('{"query": "cat"}')).content == line
    assert (await recall.run('{"query": "cat"}')).content == line
    [row] = await rows(db)
    assert row.recall_count == 2
    assert row.updated_at == row.created_at


async def test_forget_by_id_and_by_query(service: LongTermService, db: Database) -> None:
    cat = await remember(service, CAT)
    await remember(service, "I live in Lisbon")
    bobs = (
        await service.remember(
            BOB, GUILD, "Bob owns a boat", Provenance("model_tool", "m", BOB, None)
        )
    ).id
    forget = tools(service)[FORGET_TOOL_NAME]

    outcome = await forget.run(f'{{"fact_id": {cat}}}')
    assert (
        outcome.ok and outcome.content == f"deleted #{cat} (saved 2026-11-01, in a server): {CAT}"
    )
    assert [row.content for row in await rows(db)] == ["I live in Lisbon", "Bob owns a boat"]
    event = (await events(db))[-1]
    assert (event.event, event.user_id, event.actor_user_id, event.message_id) == (
        "ltm_forget",
        ALICE,
        ALICE,
        MESSAGE_ID,
    )

    for fact_id in (cat, bobs):  # already gone; another user's
        outcome = await forget.run(f'{{"fact_id": {fact_id}}}')
        assert outcome.ok and outcome.content == (
            f"nothing deleted: this user has no fact #{fact_id}"
        )
    outcome = await forget.run('{"query": "spaceships"}')
    assert outcome.ok and outcome.content == NO_FULL_MATCH
    assert [row.content for row in await rows(db)] == ["I live in Lisbon", "Bob owns a boat"]

    outcome = await forget.run('{"query": "lisbon"}')
    assert outcome.ok and outcome.content.endswith("in a server): I live in Lisbon")
    assert [row.content for row in await rows(db)] == ["Bob owns a boat"]


async def test_forget_by_query_lists_the_facts_holding_every_word_and_deletes_none(
    service: LongTermService, db: Database
) -> None:
    maria = await remember(service, "My sister is called Maria")
    anna = await remember(service, "My other sister is called Anna, " + "she likes tea " * 30)
    await remember(service, "My brother is called Tom")
    forget = tools(service)[FORGET_TOOL_NAME]

    outcome = await forget.run('{"query": "sister called"}')

    assert outcome.ok
    head, *listed = outcome.content.splitlines()
    assert head == (
        "nothing deleted: 2 saved facts hold every word of that query; call forget_memory "
        "again with the fact_id of the one the user means (or ask them which):"
    )
    saved = "(saved 2026-11-01, in a server): "
    assert f"#{maria} {saved}My sister is called Maria" in listed
    [long] = [line for line in listed if line.startswith(f"#{anna} ")]
    assert long.endswith("…") and len(long.removeprefix(f"#{anna} {saved}")) <= 200
    assert len(await rows(db)) == 3

    outcome = await forget.run(f'{{"fact_id": {maria}}}')
    assert outcome.content.startswith(f"deleted #{maria} ")


async def test_recall_and_forget_find_a_word_in_a_language_written_without_spaces(
    service: LongTermService, db: Database
) -> None:
    cat = await remember(service, "私の猫の名前はミソです")
    await remember(service, "私の犬の名前はポチです")
    specs = tools(service)

    found = await specs[RECALL_TOOL_NAME].run('{"query": "猫"}')
    assert found.ok
    assert found.content == f"#{cat} (saved 2026-11-01, in a server): 私の猫の名前はミソです"

    outcome = await specs[FORGET_TOOL_NAME].run('{"query": "猫"}')
    assert outcome.ok and outcome.content.startswith(f"deleted #{cat} ")
    assert [row.content for row in await rows(db)] == ["私の犬の名前はポチです"]
