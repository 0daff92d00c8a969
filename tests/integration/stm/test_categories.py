"""Category writes: merged, cleared one at a time (never all), bad payloads refused, a removed
category's values dropped, and a turn begun under other categories refused."""

from __future__ import annotations

import pytest

from bot.db.engine import Database
from bot.memory.service import MemoryService
from bot.memory.stm.change import REASON_CATEGORIES_CHANGED
from bot.vocabulary.model import Category
from tests.helpers.builders import ALICE, GUILD, ManualClock
from tests.integration.stm.harness import SERVER_KEY, rows, start_turn, use_categories

# ------------------------------------------------------------------ categories


async def test_category_update_merges_omitted_and_clears_empty(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo", "People")
    turn = await start_turn(service)
    await service.update_stm(turn, categories={"decisions": "ship Friday", "todo": "write docs"})
    turn = await start_turn(service)
    result = await service.update_stm(turn, categories={"todo": "", "people": "Alice leads"})
    assert result.ok
    assert (await service.entry(SERVER_KEY)).categories == {
        "decisions": "ship Friday",
        "people": "Alice leads",
    }
    assert (await rows(db))[0].categories == {"decisions": "ship Friday", "people": "Alice leads"}


async def test_values_of_a_removed_category_go_with_the_next_write(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo")
    turn = await start_turn(service)
    await service.update_stm(turn, categories={"decisions": "ship Friday", "todo": "secret plan"})
    await use_categories(service, "Decisions", "Tasks")  # an admin renamed Todo

    result = await service.update_stm(await start_turn(service), categories={"tasks": "docs"})

    assert result.ok
    expected = {"decisions": "ship Friday", "tasks": "docs"}
    assert (await service.entry(SERVER_KEY)).categories == expected
    assert [r.categories for r in await rows(db)] == [expected, expected]


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"nope": "x"}, "unknown categories ['nope']"),
        ({"todo": ""}, "every category would be empty"),
        ({"decisions": "", "todo": ""}, "every category would be empty"),
        ({}, "give at least one category"),
    ],
)
async def test_bad_category_payloads_are_rejected_and_store_nothing(
    service: MemoryService, db: Database, payload: dict[str, str], fragment: str
) -> None:
    await use_categories(service, "Decisions", "Todo")
    turn = await start_turn(service)
    result = await service.update_stm(turn, categories=payload)
    assert not result.ok and fragment in str(result)
    assert await rows(db) == []


async def test_one_category_is_cleared_on_its_own_while_others_keep_theirs(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo")
    first = await start_turn(service)
    assert (
        await service.update_stm(first, categories={"decisions": "ship Friday", "todo": "docs"})
    ).ok

    result = await service.update_stm(await start_turn(service), categories={"todo": ""})

    assert result.ok, str(result)
    assert (await service.entry(SERVER_KEY)).categories == {"decisions": "ship Friday"}
    assert [r.categories for r in await rows(db)] == [{"decisions": "ship Friday"}] * 2


async def test_clearing_the_last_category_with_a_value_is_refused(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo")
    assert (await service.update_stm(await start_turn(service), categories={"todo": "docs"})).ok

    result = await service.update_stm(await start_turn(service), categories={"todo": ""})

    assert not result.ok and "every category would be empty" in str(result)
    assert [r.categories for r in await rows(db)] == [{"todo": "docs"}] * 2


async def test_a_category_write_drops_the_summary_from_before_categories(
    service: MemoryService, db: Database, clock: ManualClock
) -> None:
    # The summary is no longer shown once categories exist; kept, it would also hold the
    # memory for 24 h where a category-only one lives 12 h.
    assert (await service.update_stm(await start_turn(service), summary="launch Monday")).ok
    await use_categories(service, "Decisions", "Todo")
    turn = await start_turn(service)
    assert (await service.update_stm(turn, categories={"decisions": "launch Friday"})).ok

    assert [(r.summary, r.categories) for r in await rows(db)] == [
        ("", {"decisions": "launch Friday"})
    ] * 2
    clock.advance(hours=12, minutes=1)
    assert service.cache.get(SERVER_KEY) is None, "a category-only memory lives 12 h"


async def test_summary_in_category_mode_is_rejected(service: MemoryService, db: Database) -> None:
    await use_categories(service, "Decisions", "Todo")
    turn = await start_turn(service)
    assert "uses categories" in str(await service.update_stm(turn, summary="x"))
    assert await rows(db) == []


async def test_a_category_value_that_sanitizes_to_nothing_is_refused_not_cleared(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo")
    assert (await service.update_stm(await start_turn(service), categories={"todo": "docs"})).ok
    before = [(r.scope_kind, r.categories, r.version) for r in await rows(db)]
    assert [categories for _, categories, _ in before] == [{"todo": "docs"}] * 2
    result = await service.update_stm(
        await start_turn(service), categories={"decisions": "ship", "todo": "\u200b"}
    )
    assert str(result) == "rejected: categories ['todo'] are empty after removing unsafe content"
    assert (await service.entry(SERVER_KEY)).categories == {"todo": "docs"}
    assert [(r.scope_kind, r.categories, r.version) for r in await rows(db)] == before


async def test_a_turn_begun_under_other_categories_is_refused(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo")
    turn = await start_turn(service)
    await use_categories(service, "Decisions", "Risks")
    result = await service.update_stm(turn, categories={"todo": "buy cake"})
    assert str(result) == f"rejected: {REASON_CATEGORIES_CHANGED}"
    assert await rows(db) == []


async def test_a_turn_begun_before_a_category_was_relabelled_still_writes(
    service: MemoryService, db: Database
) -> None:
    await use_categories(service, "Decisions", "Todo")
    turn = await start_turn(service)
    await service.set_categories(
        GUILD,
        ALICE,
        [Category(0, "todo", "To do", "open tasks"), Category(1, "decisions", "Decided", "")],
    )
    assert (await service.update_stm(turn, categories={"todo": "buy cake"})).ok
    assert [r.categories for r in await rows(db)] == [{"todo": "buy cake"}] * 2
