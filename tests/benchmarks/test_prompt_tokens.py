"""The prompt-token benchmark (``benchmarks/prompt_tokens.py``) on a small conversation.

One run is shared by the module: the real bot on dpytest with the session's PostgreSQL,
the scripted server answering, 12 turns in one channel (memory written every 5 turns, a
"remember that…" fact, a reply to the bot), 12 unaddressed messages, and a channel beside
2 others with memories; then the first channel again with strict roles. The checks: the
parts of every prompt add up to its count, the classifier puts each note of the real
prompts in its part (also once merged for strict roles), and the report's figures.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest

from benchmarks import prompt_tokens
from benchmarks._prompt_parts import (
    COUNTER,
    LLMCORD_PROMPT,
    PARTS,
    kept_prefix,
    llmcord_tokens,
    note_part,
    prompt_parts,
    serialized,
    split_content,
)
from bot.db.engine import Database
from tests.helpers.database import empty_tables

OPTIONS = prompt_tokens.Options(
    turns=12,
    summary_every=5,
    points=(("first turn", 1), ("reply", 9), ("after a summary", 11)),
    unaddressed=12,
    others=2,
    other_turns=5,
    beside_turns=6,
    reply_turn=9,
)


@pytest.fixture(scope="module")
async def results(migrated_database: Database) -> AsyncIterator[prompt_tokens.Results]:
    await empty_tables(migrated_database.engine)
    yield await prompt_tokens.measure(OPTIONS, database=migrated_database)
    await empty_tables(migrated_database.engine)


def _bodies(results: prompt_tokens.Results) -> list[dict[str, object]]:
    return [body for bodies in results.bodies.values() for body in bodies]


def test_every_turn_of_both_roles_was_measured(results: prompt_tokens.Results) -> None:
    assert {roles: len(bodies) for roles, bodies in results.bodies.items()} == {
        "free roles": OPTIONS.turns,
        "strict roles": OPTIONS.turns,
    }
    assert [point.name for point in results.points] == [
        "first turn",
        "reply",
        "after a summary",
        "12 unaddressed",
        "2 other channels with memory",
    ]


def test_the_parts_of_every_prompt_add_up_to_its_count(results: prompt_tokens.Results) -> None:
    for body in _bodies(results):
        parts = prompt_parts(body)
        assert set(parts) == set(PARTS)
        assert all(tokens >= 0 for tokens in parts.values()), parts
        assert sum(parts.values()) == COUNTER.count_messages(body["messages"], body["tools"])
    for point in results.points:
        assert point.total == sum(point.parts.values()) > 0


def test_each_note_of_the_real_prompts_is_put_in_its_part(results: prompt_tokens.Results) -> None:
    by_source = {
        '<memory source="this channel"': "memory",
        '<memory source="long-term memory"': "recall",
        '<memory source="replied-to messages"': "notes",
        '<memory source="#': "other channels",
    }
    seen = set()
    for body in results.bodies["free roles"]:
        notes = [m["content"] for m in body["messages"][1:] if m["role"] == "system"]
        for note in notes:
            expected = next(part for marker, part in by_source.items() if marker in note)
            assert note_part(note) == expected, note
            seen.add(expected)
    assert seen == {"memory", "recall", "notes"}


def test_notes_merged_for_strict_roles_split_back_into_their_parts(
    results: prompt_tokens.Results,
) -> None:
    for body in results.bodies["free roles"]:
        system = [m["content"] for m in body["messages"] if m["role"] == "system"]
        merged = split_content("\n\n".join(system), "persona")
        assert [text for _, text in merged] == system
        assert [part for part, _ in merged] == ["persona", *map(note_part, system[1:])]


def test_each_part_shows_where_the_conversation_puts_it(results: prompt_tokens.Results) -> None:
    first, reply, summary, unaddressed, beside = results.points
    for point in results.points:
        assert point.parts["tools"] > 0 and point.parts["persona"] > 0, point
        assert point.parts["raw window"] > 0, point
    assert first.parts["memory"] == first.parts["notes"] == 0
    assert reply.parts["notes"] > 0 and reply.parts["memory"] > 0
    assert summary.parts["memory"] > reply.parts["memory"]  # the summary at turn 10 grew it
    assert beside.parts["other channels"] > 0
    assert unaddressed.parts["memory"] == unaddressed.parts["other channels"] == 0
    assert unaddressed.messages == OPTIONS.unaddressed + 1
    remembered = [prompt_parts(body)["recall"] for body in results.bodies["free roles"]]
    assert any(remembered[OPTIONS.turns // 4 :]) and not any(remembered[:3])


def test_the_baseline_is_its_system_prompt_and_the_last_25_messages(
    results: prompt_tokens.Results,
) -> None:
    transcript = [{"role": "user", "content": f"Aiko: message {n}"} for n in range(40)]
    at = prompt_tokens.START
    system = LLMCORD_PROMPT.format(date="2025-03-07", time="09:00")
    expected = COUNTER.count_messages([{"role": "system", "content": system}, *transcript[-25:]])
    assert llmcord_tokens(transcript, at) == expected
    line = prompt_tokens.Script.load().line(1)
    asked = {"role": "user", "content": f"{line.author}: {line.text}"}
    first = results.points[0]  # asked at the start: the same date and time
    assert first.llmcord == COUNTER.count_messages([{"role": "system", "content": system}, asked])


def test_kept_prefix_is_the_shared_start_over_the_new_prompt(
    results: prompt_tokens.Results,
) -> None:
    assert kept_prefix("abcdef", "abcxyz") == 0.5
    assert kept_prefix("abc", "abcdef") == 0.5
    assert kept_prefix("same", "same") == 1.0
    for roles, bodies in results.bodies.items():
        kept = results.kept(roles)
        assert len(kept) == len(bodies) - 1
        for (before, after), share in zip(itertools.pairwise(bodies), kept, strict=True):
            shown = serialized(after)
            assert serialized(before).startswith(shown[: round(share * len(shown))])
            assert 0 < share < 1  # the tools stay; the window grows each turn


def test_the_figures_give_each_point_its_budget_and_the_kept_prefix(
    results: prompt_tokens.Results,
) -> None:
    figures = {figure.name: figure for figure in prompt_tokens.figures(results, OPTIONS)}
    for point in results.points:
        figure = figures[f"prompt tokens, {point.name}"]
        assert figure.value.startswith(f"{point.total:,} (")
        assert figure.met == (point.total <= point.llmcord)
        assert f"llmcord-shaped {point.llmcord:,}" in figure.budget
    for roles in ("free roles", "strict roles"):
        figure = figures[f"kept prompt prefix, {roles}"]
        assert figure.value.endswith("%") and isinstance(figure.met, bool)
    assert figures["cl100k count of a turn's prompt"].met is None
    table = prompt_tokens.parts_table(results)
    assert all(part in table for part in PARTS) and "llmcord" in table
