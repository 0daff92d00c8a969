"""/forget-me finds what a summary or a model write read, whatever the window holds by the write."""

from __future__ import annotations

import asyncio

from sqlalchemy import select

from bot.config import Settings
from bot.conversation.summarizer import Summarizer
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.memory.service import MemoryService
from bot.memory.turn.prompt import assemble
from bot.memory.turn.types import REASON_CHANGED
from tests.helpers.builders import ALICE, BOB, CAROL, CHANNEL, GUILD, message, prepare
from tests.helpers.fake_llm import ScriptedLLM
from tests.integration.summarizer.harness import SERVER_KEY


async def _channel_summaries(db: Database) -> list[str]:
    async with db.sessions() as session:
        rows = await session.scalars(
            select(ShortTermMemory).where(ShortTermMemory.channel_id == CHANNEL)
        )
        return [row.summary for row in rows]


async def test_a_message_deleted_while_summarizing_still_makes_its_author_a_contributor(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    """Carol's message is read by the summarizer; she deletes it while the model answers.
    The stored summary holds her words, so /forget-me must find the row from her."""
    service.observe_message(CHANNEL, message(ALICE, "where should we send the invites?"))
    carol = message(CAROL, "send mine to 12 Elm Street, Springfield", name="Carol")
    service.observe_message(CHANNEL, carol)
    service.observe_message(CHANNEL, message(ALICE, "thanks!"))

    gate = llm.hold()
    llm.reply_text("Invites: Carol's go to 12 Elm Street, Springfield.")
    task = asyncio.create_task(
        summarizer.summarize(guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="t")
    )
    await llm.wait_for_requests(1)
    assert "12 Elm Street" in str(llm.messages(0))  # the model read Carol's message
    service.windows.delete(CHANNEL, carol.message_id)  # Carol deletes it meanwhile
    gate.set()
    assert (await task).status == "updated"

    receipt = await service.forget_user(CAROL)
    left = await _channel_summaries(db)
    assert not any("Elm Street" in s for s in left), (receipt, left)


async def test_a_message_scrolled_out_while_summarizing_still_makes_its_author_a_contributor(
    db: Database,
    quick_settings: Settings,
    service: MemoryService,
    summarizer: Summarizer,
    llm: ScriptedLLM,
) -> None:
    """No deletion needed: the raw window is full (50, the default) and one new message
    arrives while the model answers, pushing Carol's (the oldest read) out of it."""
    assert quick_settings.stm.raw_window == 50
    carol = message(CAROL, "my flat is 12 Elm Street, Springfield", name="Carol")
    service.observe_message(CHANNEL, carol)
    for i in range(49):
        service.observe_message(CHANNEL, message(ALICE, f"chatter {i}"))

    gate = llm.hold()
    for i in range(3):  # 50 messages: batches of 20 + 20 + 10
        llm.reply_text(f"Carol lives at 12 Elm Street, Springfield; chatter part {i}.")
    task = asyncio.create_task(
        summarizer.summarize(guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="t")
    )
    await llm.wait_for_requests(1)
    assert "Elm Street" in str(llm.messages(0))
    service.observe_message(CHANNEL, message(ALICE, "one more"))  # Carol's scrolls out
    gate.set()
    outcome = await task
    assert (outcome.status, outcome.new_messages) == ("updated", 50)

    await service.forget_user(CAROL)
    left = await _channel_summaries(db)
    assert not any("Elm Street" in s for s in left), left


async def test_model_write_after_the_window_scrolled_keeps_the_shown_authors(
    db: Database, service: MemoryService
) -> None:
    """The same for the model's own tool write: the prompt showed Carol's message; one
    message arrives before the tool call and Carol is not recorded as a contributor."""
    service.observe_message(CHANNEL, message(CAROL, "my flat is 12 Elm Street", name="Carol"))
    for i in range(49):
        service.observe_message(CHANNEL, message(ALICE, f"chatter {i}"))
    prepared = await prepare(service)
    assert "12 Elm Street" in str(assemble(prepared.prompt).history)  # the model sees it
    service.observe_message(CHANNEL, message(BOB, "a new message meanwhile"))
    result = await service.update_stm(prepared.turn, summary="Carol lives at 12 Elm Street.")
    assert result.ok
    await service.forget_user(CAROL)
    left = await _channel_summaries(db)
    assert not any("Elm Street" in s for s in left), left


async def test_a_trimmed_turn_does_not_claim_what_the_summarizer_covered_meanwhile(
    service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    """A turn whose oldest messages were cut to fit the context keeps the marker where it
    was; if a summary moved it meanwhile, the turn's write (built on the old memory and
    only the newest messages) is refused instead of claiming the cut messages."""
    service.observe_message(CHANNEL, message(ALICE, "old"))
    llm.reply_text("Old summary.")
    first = await summarizer.summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="t"
    )
    assert first.updated
    trimmed = message(ALICE, "the launch moved to Friday")  # cut from the turn's prompt
    service.observe_message(CHANNEL, trimmed)
    service.observe_message(CHANNEL, message(ALICE, "what snacks?"))
    prepared = await prepare(service)
    prepared.turn.marker = None  # as TurnRunner.run does when the history was cut
    prepared.turn.history_trimmed = True
    llm.reply_text("Old summary. Launch moved to Friday; snacks discussed.")
    second = await summarizer.summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="t"
    )
    assert second.updated
    result = await service.update_stm(prepared.turn, summary="Old summary. Snacks: chips.")
    entry = await service.entry(SERVER_KEY)
    assert str(result) == f"rejected: {REASON_CHANGED}"
    assert "Friday" in entry.summary
