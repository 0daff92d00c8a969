"""No reply claims a memory without a row: an unstored "remember that…" is extracted, or
the reply says plainly that nothing was saved."""

from __future__ import annotations

import json

from sqlalchemy import select

from bot.conversation.unsaved import NOTHING_SAVED
from bot.db.engine import Database
from bot.db.models import LongTermMemory
from tests.helpers.bot import KiokuHarness

ASKED = "remember that my cat is called Miso"
CLAIM = "Of course! I remember: your cat is called Miso."


async def facts(db: Database) -> list[str]:
    async with db.sessions() as session:
        return [row.content for row in await session.scalars(select(LongTermMemory))]


async def test_an_i_remember_in_prose_gets_the_fact_extracted_and_stored(
    kioku: KiokuHarness, db: Database
) -> None:
    kioku.llm.reply_text(CLAIM)
    kioku.llm.reply_text(json.dumps({"facts": ["The user's cat is called Miso."]}))
    await kioku.env.send(ASKED, mention_bot=True)
    assert await facts(db) == ["The user's cat is called Miso."]
    assert kioku.env.last_sent().content == f"{CLAIM}\n\n(Saved in my memory: 1 fact.)"
    extraction = kioku.llm.request(1)
    assert "tools" not in extraction
    # Dates are resolved from the message's own day.
    assert kioku.bot.memory.clock.now().strftime("%Y-%m-%d") in extraction["messages"][0]["content"]
    assert ASKED in extraction["messages"][-1]["content"]


async def test_an_i_remember_in_prose_with_nothing_stored_says_so(
    kioku: KiokuHarness, db: Database
) -> None:
    kioku.llm.reply_text(CLAIM).reply_text("Sure, I will remember that!")  # no JSON
    await kioku.env.send(ASKED, mention_bot=True)
    assert await facts(db) == []
    assert kioku.env.last_sent().content == f"{CLAIM}\n\n{NOTHING_SAVED}"


async def test_a_remember_call_that_succeeded_needs_no_extraction(
    kioku: KiokuHarness, db: Database
) -> None:
    kioku.llm.reply_tool_calls([("remember", {"fact": "The user's cat is called Miso."})])
    kioku.llm.reply_text("Saved: your cat is Miso.")
    await kioku.env.send(ASKED, mention_bot=True)
    assert await facts(db) == ["The user's cat is called Miso."]
    assert kioku.env.last_sent().content == "Saved: your cat is Miso."
    assert len(kioku.llm.requests) == 2 and kioku.llm.unscripted == 0


async def test_a_refused_remember_call_then_prose_is_not_claimed_saved(
    kioku: KiokuHarness, db: Database
) -> None:
    kioku.llm.reply_tool_calls([("remember", {"fact": ""})])  # refused: empty
    kioku.llm.reply_text(CLAIM).reply_text(json.dumps({"facts": []}))
    await kioku.env.send(ASKED, mention_bot=True)
    assert await facts(db) == []
    assert kioku.env.last_sent().content.endswith(NOTHING_SAVED)
