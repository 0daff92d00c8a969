"""Facts capture distils from a channel (SPEC §6): dated from the messages' own days,
attributed to their speakers, merged or superseded with an audit trail, recalled only
where they were said, gone with /refresh and /forget-me."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import select

from bot.config import Settings
from bot.conversation.summarizer import Summarizer
from bot.db.engine import Database
from bot.db.models import LongTermMemory, StmEvent
from bot.memory import Distilled, LongTermService, MemoryService, dated_lines
from bot.vocabulary import Place, Provenance, RawMessage
from tests.helpers.builders import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL,
    GUILD,
    ManualClock,
    make_longterm,
    make_service,
    recall_notes,
)
from tests.helpers.fake_llm import ScriptedLLM, openai_client

OTHER_CHANNEL = CHANNEL + 1
THREAD = CHANNEL + 2
# A Sunday: "last Friday" is 2026-11-27.
SUNDAY = datetime(2026, 11, 29, 18, 30, tzinfo=UTC)
BY_CAPTURE = Provenance("summarizer", "test-model, capture", ALICE, 1)


def said(author: int, name: str, text: str, at: datetime, message_id: int) -> RawMessage:
    return RawMessage(message_id, author, name, text, at)


def facts_answer(*facts: dict[str, object]) -> str:
    return json.dumps({"facts": list(facts)})


async def captured_rows(db: Database) -> list[LongTermMemory]:
    async with db.sessions() as session:
        query = (
            select(LongTermMemory)
            .where(LongTermMemory.scope == "channel")
            .order_by(LongTermMemory.id)
        )
        return list(await session.scalars(query))


async def capture_events(db: Database) -> list[str]:
    async with db.sessions() as session:
        query = select(StmEvent.event).where(StmEvent.event.like("ltm_%")).order_by(StmEvent.id)
        return list(await session.scalars(query))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(SUNDAY + timedelta(minutes=5))


@pytest.fixture
def memory(db: Database, settings: Settings, clock: ManualClock) -> MemoryService:
    return make_service(db.sessions, settings, clock)


@pytest.fixture
def longterm(memory: MemoryService) -> LongTermService:
    return make_longterm(memory)


async def store(
    longterm: LongTermService,
    *facts: Distilled,
    channel: int = CHANNEL,
    sources: tuple[int, ...] = (ALICE, BOB),
    started_at: datetime | None = None,
) -> object:
    return await longterm.captured.store(
        list(facts),
        guild_id=GUILD,
        place=Place(channel, CHANNEL if channel == THREAD else None),
        sources=list(sources),
        provenance=BY_CAPTURE,
        started_at=started_at or longterm.clock.now(),
    )


# ------------------------------------------------------------------ the summarizer pass


async def test_a_summary_run_stores_the_batchs_facts_dated_and_attributed(
    db: Database, settings: Settings, llm: ScriptedLLM, memory: MemoryService
) -> None:
    longterm = make_longterm(memory)
    summarizer = Summarizer(memory, openai_client(llm), settings, longterm=longterm)
    memory.observe_message(
        CHANNEL, said(ALICE, "Alice", "I went to the pottery class last Friday!", SUNDAY, 101)
    )
    memory.observe_message(
        CHANNEL, said(BOB, "Bob", "Nice. My sister Mia visits next week.", SUNDAY, 102)
    )
    llm.reply_text("Alice went to a pottery class; Bob's sister Mia visits soon.")
    llm.reply_text(
        "Here you go:\n```json\n"
        + facts_answer(
            {"fact": "Alice went to a pottery class.", "date": "2026-11-27", "who": "Alice"},
            {"fact": "Bob's sister Mia visits.", "date": None, "who": "bob"},
        )
        + "\n```"
    )

    outcome = await summarizer.summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="capture"
    )

    assert outcome.updated and outcome.facts == 2 and outcome.calls == 2
    # The facts call saw the messages under their day, so "last Friday" can be resolved.
    facts_prompt = llm.messages(1)[1]["content"]
    assert "2026-11-29" in facts_prompt and "18:30 Alice: I went to the pottery" in facts_prompt
    rows = await captured_rows(db)
    assert [(r.content, r.refers_to, r.user_id, r.channel_id) for r in rows] == [
        ("Alice went to a pottery class.", date(2026, 11, 27), ALICE, CHANNEL),
        ("Bob's sister Mia visits.", None, BOB, CHANNEL),
    ]
    assert all(r.source_user_ids == sorted([ALICE, BOB]) for r in rows)
    detail = f"{settings.model}, capture"
    assert all((r.origin, r.origin_detail) == ("summarizer", detail) for r in rows)
    notes = await recall_notes(longterm, BOB, GUILD, "pottery?", False, channel_ids=[CHANNEL])
    assert notes == ["2026-11-27: Alice went to a pottery class."]


@pytest.mark.parametrize(
    "answer",
    [
        "I could not find any facts.",
        '{"facts": "Alice likes pottery"}',
        '{"facts": [{"fact": ""}, {"who": "Alice"}, 42]}',
        '<tool_call>{"name": "remember", "arguments": {"fact": 1}}</tool_call>',
    ],
)
async def test_an_unusable_facts_answer_stores_nothing_and_keeps_the_summary(
    db: Database, settings: Settings, llm: ScriptedLLM, memory: MemoryService, answer: str
) -> None:
    summarizer = Summarizer(memory, openai_client(llm), settings, longterm=make_longterm(memory))
    memory.observe_message(CHANNEL, said(ALICE, "Alice", "I like pottery", SUNDAY, 101))
    llm.reply_text("Alice likes pottery.").reply_text(answer)

    outcome = await summarizer.summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="capture"
    )

    assert outcome.updated and outcome.facts == 0
    assert await captured_rows(db) == []


async def test_facts_are_not_asked_for_when_capture_facts_is_off(
    db: Database, settings: Settings, llm: ScriptedLLM, memory: MemoryService
) -> None:
    off = settings.model_copy(
        update={"longterm": settings.longterm.model_copy(update={"capture_facts": False})}
    )
    summarizer = Summarizer(memory, openai_client(llm), off, longterm=make_longterm(memory))
    memory.observe_message(CHANNEL, said(ALICE, "Alice", "I like pottery", SUNDAY, 101))
    llm.reply_text("Alice likes pottery.")

    outcome = await summarizer.summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="capture"
    )

    assert outcome.updated and outcome.calls == 1 and len(llm.requests) == 1
    assert await captured_rows(db) == []


# ------------------------------------------------------------------ merge and supersede


async def test_a_restatement_merges_and_a_new_value_supersedes_with_an_audit_trail(
    db: Database, longterm: LongTermService
) -> None:
    first = await store(longterm, Distilled("Alice's flight to Osaka is on March 14."))
    again = await store(
        longterm, Distilled("Alice's flight to Osaka is on March 14"), sources=(ALICE, CAROL)
    )
    assert len(first.created) == 1 and len(again.merged) == 1  # type: ignore[attr-defined]
    (row,) = await captured_rows(db)
    assert row.source_user_ids == sorted([ALICE, BOB, CAROL])

    moved = await store(
        longterm,
        Distilled("Alice's flight to Osaka moved to March 21.", replaces=(row.id,)),
    )

    assert moved.superseded == (row.id,)  # type: ignore[attr-defined]
    assert [r.content for r in await captured_rows(db)] == [
        "Alice's flight to Osaka moved to March 21."
    ]
    assert await capture_events(db) == ["ltm_capture", "ltm_merge", "ltm_supersede", "ltm_capture"]


async def test_a_subject_given_a_new_value_supersedes_without_being_told(
    db: Database, longterm: LongTermService
) -> None:
    await store(longterm, Distilled("Bob's favorite band is Muse"))
    stored = await store(longterm, Distilled("Bob's favorite band is Queen"))

    assert len(stored.superseded) == 1  # type: ignore[attr-defined]
    assert [r.content for r in await captured_rows(db)] == ["Bob's favorite band is Queen"]


async def test_captured_facts_are_sanitized_and_capped_per_channel(
    db: Database, settings: Settings, memory: MemoryService
) -> None:
    small = settings.model_copy(
        update={"longterm": settings.longterm.model_copy(update={"max_facts_per_channel": 2})}
    )
    longterm = LongTermService(memory.sessions, small, memory.clock)
    await store(
        longterm,
        Distilled("Alice's api_key = sk-abcdefghijklmnopqrstuvwxyz123456 is secret"),
        Distilled("Bob plays chess on Tuesdays"),
        Distilled("Alice grows tomatoes"),
    )

    rows = await captured_rows(db)
    assert [r.content for r in rows] == ["Bob plays chess on Tuesdays", "Alice grows tomatoes"]
    assert "ltm_evict" in await capture_events(db)


# ------------------------------------------------------------------ where they are recalled


async def test_captured_facts_are_recalled_in_their_channel_and_its_threads_only(
    longterm: LongTermService,
) -> None:
    await store(longterm, Distilled("Alice adopted a cat named Miso", date(2026, 11, 20)))

    def recall(channels: list[int], guild: int | None = GUILD) -> object:
        return recall_notes(longterm, BOB, guild, "cat?", False, channel_ids=channels)

    assert await recall([CHANNEL]) == ["2026-11-20: Alice adopted a cat named Miso"]
    assert await recall([THREAD, CHANNEL]) == ["2026-11-20: Alice adopted a cat named Miso"]
    assert await recall([OTHER_CHANNEL]) == []
    assert await recall([CHANNEL], guild=None) == []  # never in a DM


async def test_recall_keeps_to_its_budget_whatever_is_captured(
    db: Database, settings: Settings, memory: MemoryService
) -> None:
    budget = settings.model_copy(
        update={"longterm": settings.longterm.model_copy(update={"recall_char_budget": 120})}
    )
    longterm = LongTermService(memory.sessions, budget, memory.clock)
    await store(
        longterm,
        *(Distilled(f"Alice's garden {i} grows beans and peas in rows") for i in range(10)),
    )

    notes = await recall_notes(longterm, BOB, GUILD, "garden beans", False, channel_ids=[CHANNEL])

    assert 1 <= len(notes) < 10
    assert sum(len(note) for note in notes) <= 120


# ------------------------------------------------------------------ wipes


async def test_refresh_deletes_the_channels_captured_facts(
    db: Database, memory: MemoryService, longterm: LongTermService
) -> None:
    await store(longterm, Distilled("Alice adopted a cat named Miso"))
    await store(longterm, Distilled("Bob adopted a dog"), channel=OTHER_CHANNEL)

    await memory.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)

    assert [r.channel_id for r in await captured_rows(db)] == [OTHER_CHANNEL]


async def test_facts_from_a_run_begun_before_a_refresh_or_forget_me_are_refused(
    db: Database, memory: MemoryService, longterm: LongTermService, clock: ManualClock
) -> None:
    began = clock.now()
    clock.advance(seconds=1)
    await memory.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    refused = await store(longterm, Distilled("Alice adopted a cat"), started_at=began)
    assert refused.refused is not None and "refresh" in refused.refused  # type: ignore[attr-defined]

    began = clock.now()
    clock.advance(seconds=1)
    await memory.forget_user(BOB)
    refused = await store(
        longterm, Distilled("Alice adopted a cat"), channel=OTHER_CHANNEL, started_at=began
    )
    assert refused.refused is not None and "forget-me" in refused.refused  # type: ignore[attr-defined]
    assert await captured_rows(db) == []


async def test_forget_me_deletes_every_captured_fact_made_from_the_members_words(
    db: Database, memory: MemoryService, longterm: LongTermService
) -> None:
    await store(longterm, Distilled("Alice and Bob planned a hike"), sources=(ALICE, BOB))
    await store(longterm, Distilled("Carol bakes bread"), sources=(CAROL,))

    receipt = await memory.forget_user(BOB)

    assert receipt.long_term == 1
    assert [r.content for r in await captured_rows(db)] == ["Carol bakes bread"]


async def test_a_rejected_summary_still_leaves_the_facts_and_they_are_not_distilled_twice(
    db: Database, settings: Settings, llm: ScriptedLLM, memory: MemoryService
) -> None:
    # A small model that copies the transcript: the summary is refused twice, nothing is
    # covered, but the facts call still keeps the dates.
    summarizer = Summarizer(memory, openai_client(llm), settings, longterm=make_longterm(memory))
    lines = [
        said(
            ALICE, "Alice", f"I booked the pottery class for next Friday, slot {i}", SUNDAY, 101 + i
        )
        for i in range(3)
    ]
    for line in lines:
        memory.observe_message(CHANNEL, line)
    copied = "\n".join(dated_lines(lines))  # what the model read, word for word
    llm.reply_text(copied).reply_text(copied)
    llm.reply_text(facts_answer({"fact": "Alice has a pottery class.", "date": "2026-12-04"}))

    outcome = await summarizer.summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="capture"
    )

    assert outcome.status == "failed" and outcome.facts == 1 and outcome.calls == 3
    assert [(r.content, r.refers_to) for r in await captured_rows(db)] == [
        ("Alice has a pottery class.", date(2026, 12, 4))
    ]
    # The next run reads the same uncovered messages: the summary is tried again, the
    # facts are not asked for again.
    llm.reply_text(copied).reply_text(copied)
    again = await summarizer.summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="capture"
    )
    assert again.calls == 2 and len(llm.requests) == 5 and llm.unscripted == 0
