"""A prompt a cache can keep: a stepped raw window, this turn's notes late, budgets per part."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bot.llm import estimate_tokens
from bot.llm.roles import LATE_NOTE_LINE, alternate_roles
from bot.memory.turn.prompt import (
    MESSAGE_OVERHEAD_TOKENS,
    OtherChannel,
    PromptInput,
    assemble,
    stamp,
)
from bot.memory.turn.window import WindowLimits, window_start
from bot.vocabulary.model import GuildConfig, Marker, RawMessage, ScopeKey, StmEntry

NOW = datetime(2026, 12, 8, 12, 0, tzinfo=UTC)
BOT_ID = 999


def msg(message_id: int, content: str | None = None, *, author_id: int = 100) -> RawMessage:
    return RawMessage(
        message_id=message_id,
        author_id=author_id,
        author_name="Ann",
        content=content if content is not None else f"message {message_id}",
        created_at=NOW - timedelta(minutes=1000 - message_id),
    )


def messages(first: int, last: int) -> list[RawMessage]:
    return [msg(i) for i in range(first, last + 1)]


def entry(channel_id: int, summary: str, *, marker: RawMessage | None = None) -> StmEntry:
    return StmEntry(
        key=ScopeKey.server(1, channel_id),
        updated_at=NOW - timedelta(hours=1),
        summary=summary,
        marker=Marker.of(marker) if marker is not None else None,
    )


def prompt(**fields: Any) -> PromptInput:
    base: dict[str, Any] = {
        "now": NOW,
        "config": GuildConfig(guild_id=1),
        "bot_user_id": BOT_ID,
        "entry": None,
        "window": messages(1, 5),
    }
    base.update(fields)
    return PromptInput(**base)


LIMITS = WindowLimits(messages=30, tokens=10_000, min_tail=4)


def start_id(window: list[RawMessage], previous: int | None, **kwargs: Any) -> int:
    index = window_start(
        window,
        first_uncovered=kwargs.pop("first_uncovered", 0),
        previous=previous,
        limits=kwargs.pop("limits", LIMITS),
        cost=kwargs.pop("cost", lambda m: 10),
    )
    return window[index].message_id


# --- the stepped window ------------------------------------------------------------------


def test_the_window_start_stays_put_while_messages_arrive() -> None:
    first = start_id(messages(1, 10), None)
    assert first == 1
    # Twenty more messages, one turn each: the window grows, its start does not move.
    for last in range(11, 31):
        assert start_id(messages(1, last), first) == 1


def test_a_full_window_steps_ahead_by_a_third_not_by_one() -> None:
    window = messages(1, 31)  # one past the 30-message limit
    start = start_id(window, 1)
    assert start == 12  # 20 messages kept: two thirds of the limit
    # The next ten turns keep that start, until the limit is passed again.
    for last in range(32, 42):
        assert start_id(messages(1, last), start) == 12
    assert start_id(messages(1, 42), 12) == 23


def test_a_first_window_is_as_long_as_the_limit() -> None:
    assert start_id(messages(1, 80), None) == 51


def test_the_token_limit_steps_the_window_too() -> None:
    limits = WindowLimits(messages=500, tokens=300, min_tail=4)
    window = messages(1, 31)  # 31 × 10 tokens: past 300
    assert start_id(window, 1, limits=limits) == 12  # 200 tokens kept


def test_one_message_past_every_limit_is_still_shown() -> None:
    limits = WindowLimits(messages=10, tokens=50, min_tail=4)
    window = messages(1, 3)
    assert start_id(window, 1, limits=limits, cost=lambda m: 500) == 3


def test_a_summary_that_covers_the_start_moves_it_after_the_kept_tail() -> None:
    window = messages(1, 20)
    # The memory covers messages 1-20: the four newest stay shown.
    assert start_id(window, 1, first_uncovered=20) == 17


def test_the_tail_kept_after_a_summary_does_not_slide_with_each_message() -> None:
    start = start_id(messages(1, 20), 1, first_uncovered=20)
    for last in range(21, 30):
        # The marker stays at message 20 while new messages come in.
        assert start_id(messages(1, last), start, first_uncovered=20) == start


def test_a_deleted_start_message_gives_the_next_one() -> None:
    window = [m for m in messages(1, 10) if m.message_id != 4]
    assert start_id(window, 4) == 5


def test_assembled_history_starts_where_the_last_turn_left_it() -> None:
    first = assemble(prompt(window=messages(1, 50), raw_window=30))
    assert first.window_start == 21
    later = assemble(prompt(window=messages(1, 51), raw_window=30, window_start=21))
    # 31 messages from 21: past the limit, so the start steps to keep twenty.
    assert later.window_start == 32
    assert later.history[0]["content"] == "Ann: message 32"
    steady = assemble(prompt(window=messages(1, 52), raw_window=30, window_start=32))
    assert steady.history[: len(later.history)] == later.history


def test_unaddressed_messages_never_pass_the_token_budget() -> None:
    chatter = [msg(i, "word " * 40) for i in range(1, 201)]  # about 50 tokens each
    assembled = assemble(prompt(window=chatter, raw_window=500, raw_window_tokens=1500))
    shown = sum(estimate_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in assembled.history)
    assert 0 < shown <= 1500


# --- this turn's notes late ----------------------------------------------------------------


def test_reply_chain_and_facts_come_after_the_notes_that_stay() -> None:
    assembled = assemble(
        prompt(
            entry=entry(10, "We plan a trip.", marker=msg(3)),
            replied_to=(msg(2, "the replied-to message"),),
            long_term_notes=("Ann's cat is Miso.",),
        )
    )
    assert assembled.late_from == 1
    assert 'source="this channel"' in assembled.stable_notes[0]
    late = "\n".join(assembled.late_notes)
    assert "the replied-to message" in late and "Miso" in late


def test_memory_times_are_absolute_so_the_note_is_the_same_an_hour_later() -> None:
    stored = entry(10, "We plan a trip.")
    now = assemble(prompt(entry=stored)).system_notes[0]
    later = assemble(prompt(entry=stored, now=NOW + timedelta(hours=1))).system_notes[0]
    assert now == later
    assert f'updated="{stamp(stored.updated_at)}"' in now
    assert stamp(stored.updated_at) == "2026-12-08 11:00 UTC"


def test_strict_roles_put_late_notes_into_the_user_message_not_the_system_message() -> None:
    sent = [
        {"role": "system", "content": "persona"},
        {"role": "system", "content": "memory"},
        {"role": "user", "content": "Ann: hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "system", "content": "recalled facts"},
        {"role": "user", "content": "Ann: what is my cat called?"},
    ]
    strict = alternate_roles(sent)
    assert strict[0] == {"role": "system", "content": "persona\n\nmemory"}
    assert [m["role"] for m in strict] == ["system", "user", "assistant", "user"]
    assert strict[-1]["content"] == (
        f"{LATE_NOTE_LINE}\n\nrecalled facts\n\nAnn: what is my cat called?"
    )


# --- other channels within a budget ------------------------------------------------------------


def other(label: str, summary: str, channel_id: int) -> OtherChannel:
    return OtherChannel(label=label, entry=entry(channel_id, summary), window=())


def test_other_channels_unrelated_to_the_message_share_a_small_budget() -> None:
    long_memory = other("#design", "The logo uses teal. " * 30, 20)  # ~150 tokens alone
    short_memory = other("#ops", "Deploys on Tuesday.", 21)
    assembled = assemble(
        prompt(others=[long_memory, short_memory], content="hello there", others_tokens=150)
    )
    notes = "\n".join(assembled.system_notes)
    assert "Deploys on Tuesday." in notes
    assert "logo" not in notes


def test_another_channel_the_message_relates_to_comes_in_late() -> None:
    long_memory = other("#design", "The logo uses teal. " * 30, 20)
    assembled = assemble(
        prompt(others=[long_memory], content="what colour is the logo?", others_tokens=150)
    )
    assert assembled.stable_notes == []
    assert "The logo uses teal." in assembled.late_notes[0]


def test_relatedness_finds_words_in_unspaced_scripts() -> None:
    memory = other("#雑談", "ミソは猫です。" * 40, 22)
    assembled = assemble(prompt(others=[memory], content="猫の名前は?", others_tokens=10))
    assert any("ミソは猫です" in note for note in assembled.late_notes)
    unrelated = assemble(prompt(others=[memory], content="天気は?", others_tokens=10))
    assert unrelated.system_notes == []


def test_cjk_chatter_is_counted_as_the_tokens_it_takes_not_a_quarter_of_its_characters() -> None:
    said = "明日の会議は午後三時からです。資料は共有フォルダにあります。"  # 30 characters
    chatter = [msg(i, said) for i in range(1, 201)]
    assembled = assemble(prompt(window=chatter, raw_window=500, raw_window_tokens=1500))
    chars = sum(len(m["content"]) for m in assembled.history)
    # Characters / 4 would have let about 6,000 characters through; at about a token a
    # character the budget holds a quarter of that.
    assert 0 < chars <= 1500 * 1.1
