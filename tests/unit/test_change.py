"""One STM write, apart from storage: its shape checks, sanitized values, and what it
does to an entry (``bot.memory.stm.change``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from bot.memory.stm.change import (
    apply_change,
    keeps_a_value,
    sanitized_change,
    write_shape,
)
from bot.vocabulary.model import Category, GuildConfig, Marker, Provenance, ScopeKey, StmEntry

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SUMMARY_MODE = GuildConfig(guild_id=1)
CATEGORY_MODE = GuildConfig(
    guild_id=1,
    categories=(
        Category(0, "plans", "Plans", "what is planned"),
        Category(1, "people", "People", "who is who"),
    ),
)


def entry(**fields: Any) -> StmEntry:
    return StmEntry(key=ScopeKey.server(1, 10), updated_at=NOW, **fields)


def apply(
    target: StmEntry,
    config: GuildConfig,
    *,
    summary: str | None = None,
    categories: dict[str, str] | None = None,
    marker: Marker | None = None,
    contributors: frozenset[int] = frozenset({7}),
) -> None:
    apply_change(
        target,
        summary=summary,
        categories=categories,
        config=config,
        marker=marker,
        contributors=set(contributors),
        provenance=Provenance("model_tool", "m", 7, 99),
        now=NOW,
    )


@pytest.mark.parametrize(
    ("config", "summary", "categories", "reason"),
    [
        (SUMMARY_MODE, None, None, "give either a summary or categories"),
        (SUMMARY_MODE, "a", {"plans": "b"}, "give either a summary or categories"),
        (CATEGORY_MODE, "a summary", None, "this server uses categories"),
        (SUMMARY_MODE, None, {"plans": "x"}, "this server uses a single summary"),
        (CATEGORY_MODE, None, {"nope": "x"}, "unknown categories ['nope']"),
        (CATEGORY_MODE, None, {}, "give at least one category value"),
        (SUMMARY_MODE, "\x00\x01", None, "the summary is empty after removing unsafe content"),
        (CATEGORY_MODE, None, {"plans": "\x00"}, "categories ['plans'] are empty"),
    ],
)
def test_sanitized_change_refuses_with_a_specific_reason(
    config: GuildConfig,
    summary: str | None,
    categories: dict[str, str] | None,
    reason: str,
) -> None:
    result = sanitized_change(config, summary, categories)
    assert not isinstance(result, tuple)
    assert not result.ok
    assert result.reason is not None and result.reason.startswith(reason)


def test_sanitized_change_sanitizes_values_and_keeps_clears() -> None:
    result = sanitized_change(CATEGORY_MODE, None, {"plans": "meet\x00 at {noon}", "people": ""})
    assert result == (None, {"plans": "meet at noon", "people": ""})


def test_write_shape_ignores_labels_and_order_but_not_slugs() -> None:
    relabelled = GuildConfig(
        guild_id=1,
        categories=(
            Category(0, "people", "Folks", "renamed"),
            Category(1, "plans", "Agenda", "renamed"),
        ),
    )
    other = GuildConfig(guild_id=1, categories=(Category(0, "plans", "Plans", ""),))
    assert write_shape(relabelled) == write_shape(CATEGORY_MODE)
    assert write_shape(other) != write_shape(CATEGORY_MODE)
    assert write_shape(SUMMARY_MODE) == (False, frozenset())


def test_keeps_a_value_refuses_emptying_every_category() -> None:
    held = entry(categories={"plans": "picnic"})
    assert not keeps_a_value(held, {"plans": ""}, CATEGORY_MODE)
    assert keeps_a_value(held, {"people": ""}, CATEGORY_MODE)
    assert keeps_a_value(entry(), {"people": "Ana"}, CATEGORY_MODE)


def test_apply_change_merges_categories_and_drops_undefined_ones() -> None:
    target = entry(categories={"plans": "picnic", "people": "Ana", "gone": "old"}, version=3)
    apply(target, CATEGORY_MODE, categories={"plans": "", "people": "Ana and Bo"})
    assert target.categories == {"people": "Ana and Bo"}
    assert target.summary == ""
    assert target.version == 4


def test_apply_change_summary_supersedes_categories() -> None:
    target = entry(categories={"plans": "picnic"})
    apply(target, SUMMARY_MODE, summary="a summary")
    assert (target.summary, target.categories) == ("a summary", {})


def test_apply_change_bookkeeping() -> None:
    kept = Marker(5, "h")
    target = entry(marker=kept, contributor_ids=[3], turns_since_refresh=4, last_refreshed_turn=2)
    apply(target, SUMMARY_MODE, summary="s", contributors=frozenset({7, 3}))
    assert target.marker == kept  # no marker given: the entry's own stays
    assert target.contributor_ids == [3, 7]
    assert (target.turns_since_refresh, target.last_refreshed_turn) == (0, 3)
    assert (target.updated_at, target.created_at) == (NOW, NOW)
    assert target.provenance == Provenance("model_tool", "m", 7, 99)
    apply(target, SUMMARY_MODE, summary="t", marker=Marker(6, "i"))
    assert target.marker == Marker(6, "i")
