"""Category mode: the model is asked for JSON and its values are merged, unusable answers are
refused, and a switch of mode hands the old memory to the next run."""

from __future__ import annotations

import json

import pytest

from bot.config import Settings
from bot.conversation.summarizer import INVALID_JSON, Summarizer
from bot.db.engine import Database
from bot.memory.service import MemoryService
from tests.helpers.builders import ALICE, CHANNEL, GUILD
from tests.helpers.fake_llm import ScriptedLLM
from tests.integration.summarizer.harness import (
    CATEGORIES,
    SERVER_KEY,
    post,
    rows,
    seed_summary,
    stored,
    summarize,
    user_prompt,
)


async def edited_categories(service: MemoryService, values: dict[str, str]) -> None:
    """The guild uses CATEGORIES, and an admin's edit set the channel's ``values``."""
    await service.set_categories(GUILD, ALICE, CATEGORIES)
    edited = await service.admin_edit(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, categories=values
    )
    assert edited.ok


async def test_category_mode_asks_for_json_and_writes_the_categories(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await edited_categories(service, {"decisions": "Launch on Friday."})
    new = post(service, 3, "venue talk")
    answer = {
        "decisions": "Launch on Friday; the venue is booked.",
        "open_questions": "Who brings snacks?",
        "not_a_category": "ignored",
    }
    llm.reply_text(f"Here you go:\n```json\n{json.dumps(answer)}\n```")

    outcome = await summarize(summarizer)

    assert outcome.status == "updated"
    assert outcome.chars == len(answer["decisions"]) + len(answer["open_questions"])
    system = llm.messages(0)[0]["content"]
    assert "JSON object" in system
    assert '"decisions", "open_questions"' in system
    assert "- open_questions (Open questions): what is still unsettled" in system
    prompt = user_prompt(llm, 0)
    existing = prompt.split("Existing Summary:\n", 1)[1]
    assert json.loads(existing) == {"decisions": "Launch on Friday.", "open_questions": ""}
    for row in await rows(db):
        assert row.categories == {
            "decisions": answer["decisions"],
            "open_questions": answer["open_questions"],
        }
        assert row.origin == "summarizer"
        assert row.covered_through_message_id == new[-1].message_id


async def test_the_answer_may_be_long_enough_for_every_category_at_full_size(
    service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM, quick_settings: Settings
) -> None:
    # Two full categories are about 3,000 characters of JSON: more than the chat reply
    # budget of 1,024 tokens allows, so the summarizer asks for its own.
    await service.set_categories(GUILD, ALICE, CATEGORIES)
    post(service, 3, "venue talk")
    llm.reply_text(json.dumps({"decisions": "Launch on Friday."}))

    assert (await summarize(summarizer)).status == "updated"

    asked = llm.requests[0]["max_tokens"]
    assert quick_settings.llm.max_reply_tokens == 1024
    assert asked > quick_settings.llm.max_reply_tokens
    # 1,500 characters at about 3 per token, plus the JSON around each value.
    assert asked >= len(CATEGORIES) * 600


async def test_category_mode_keeps_values_the_model_left_out(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await edited_categories(
        service, {"decisions": "Launch on Friday.", "open_questions": "Snacks?"}
    )
    post(service, 2, "new")
    llm.reply_text(json.dumps({"open_questions": "Snacks: Bob.", "decisions": ""}))

    assert (await summarize(summarizer)).status == "updated"
    assert (await rows(db))[0].categories == {
        "decisions": "Launch on Friday.",
        "open_questions": "Snacks: Bob.",
    }


@pytest.mark.parametrize(
    ("answer", "status", "error"),
    [
        ("Decisions: launch on Friday.", "failed", INVALID_JSON),
        ('["decisions", "launch"]', "failed", INVALID_JSON),
        ('[{"decisions": "garbage"}]', "failed", INVALID_JSON),
        # The old values quoted first, the update after: storing the first object would
        # lose the update and still move the marker.
        (
            'You had {"decisions": "Launch on Friday."} and now {"decisions": "Moved."}',
            "failed",
            INVALID_JSON,
        ),
        (
            'I cannot do that; the expected format is {"decisions": "..."}.',
            "failed",
            INVALID_JSON,
        ),
        ('{"decisions": "A"}\n{"decisions": "B"}', "failed", INVALID_JSON),
        ('{"decisions": "  ", "other": "x"}', "empty", None),
    ],
)
async def test_category_mode_rejects_unusable_answers(
    db: Database,
    service: MemoryService,
    summarizer: Summarizer,
    llm: ScriptedLLM,
    answer: str,
    status: str,
    error: str | None,
) -> None:
    await edited_categories(service, {"decisions": "Fri."})
    post(service, 2, "new")
    before = await stored(db)
    llm.reply_text(answer)

    outcome = await summarize(summarizer)

    assert outcome.status == status
    if error is not None:
        assert outcome.error == error
    assert await stored(db) == before


# ------------------------------------------------- mode switches, concurrent writes

OLD = "Alice is allergic to peanuts; the launch is on Friday."


async def test_summarizer_after_switch_to_category_mode_is_given_the_old_summary(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    # The channel has a summary (summary mode), then an admin defines categories.
    await seed_summary(service, summary=OLD)
    await service.set_categories(GUILD, ALICE, CATEGORIES)
    # What the chat model is shown as this channel's memory is still the old summary.
    entry = await service.entry(SERVER_KEY)
    assert entry.summary == OLD
    post(service, 3, "venue talk")
    llm.reply_text(json.dumps({"decisions": "The venue is booked."}))

    outcome = await summarize(summarizer)
    assert outcome.status == "updated"
    # The summarizer integrates the new messages into the EXISTING memory: the old
    # summary (what the chat model was shown) is in its prompt, or its facts vanish.
    assert "allergic to peanuts" in user_prompt(llm, 0)
    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.categories) == ("", {"decisions": "The venue is booked."})


async def test_summarizer_after_switch_back_to_summary_mode_is_given_the_old_categories(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await edited_categories(
        service, {"decisions": "Launch on Friday; Alice is allergic to peanuts."}
    )
    await service.set_categories(GUILD, ALICE, [])
    post(service, 3, "venue talk")
    llm.reply_text("The venue is booked.")

    assert (await summarize(summarizer)).status == "updated"
    assert "allergic to peanuts" in user_prompt(llm, 0)
    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.categories) == ("The venue is booked.", {})
