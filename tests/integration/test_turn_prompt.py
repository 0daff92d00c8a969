"""The chat turn's prompt on a small context: the conversation being answered outranks
other channels' memories and long-term facts, and the whole prompt fits."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import URL

from bot.db.engine import Database
from bot.llm.providers import capabilities
from bot.turn import TurnRequest, TurnRunner, context_chars
from tests.helpers.builders import (
    ALICE,
    BOB,
    BOT,
    CHANNEL,
    GUILD,
    make_longterm,
    make_service,
    message,
)
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import ScriptedLLM, openai_client

OTHER_CHANNELS = [CHANNEL + 10, CHANNEL + 11, CHANNEL + 12]


async def test_other_channels_never_crowd_the_conversation_out_of_a_small_context(
    llm: ScriptedLLM, db: Database, pg_url: URL, tmp_path: Path
) -> None:
    # NovelAI: 4,096 tokens, and the summarizer keeps its memories (full summaries).
    settings = make_test_settings(
        pg_url,
        tmp_path,
        model="test-model",
        provider="novelai",
        llm={"max_retries": 0, "timeout_seconds": 5},
    )
    service = make_service(db.sessions, settings)
    for channel in OTHER_CHANNELS:
        for i in range(6):
            service.observe_message(channel, message(BOB, f"chatter {i} in {channel} " + "y" * 150))
        prepared = await service.prepare_turn(
            channel_id=channel, user_id=BOB, guild_id=GUILD, bot_user_id=BOT
        )
        assert (await service.update_stm(prepared.turn, summary="s" * 1500)).ok
    for i in range(6):
        service.observe_message(CHANNEL, message(ALICE, f"our conversation, part {i}"))
    said = message(ALICE, "so what do you think?")
    service.observe_message(CHANNEL, said)
    request = TurnRequest(
        channel_id=CHANNEL,
        user_id=ALICE,
        message_id=said.message_id,
        content=said.content,
        bot_user_id=BOT,
        guild_id=GUILD,
        label_for=lambda entry: f"#channel-{entry.key.channel_id % 100}",
    )
    async with openai_client(llm) as client:
        runner = TurnRunner(
            service, client, settings, longterm=make_longterm(service), persona="You are Kioku."
        )
        llm.reply_text("an answer")
        await runner.run(request)
        await runner.drain()

    sent = llm.messages(0)
    conversation = [m["content"] for m in sent if m["role"] == "user"]
    total = sum(len(str(m["content"])) for m in sent)
    budget = context_chars(capabilities("novelai").context_tokens, settings.llm.max_reply_tokens)
    assert "Alice: our conversation, part 5" in conversation
    assert total <= budget, f"prompt of {total} chars for a budget of {budget}"
    shown = sum("#channel-" in str(m["content"]) for m in sent if m["role"] == "system")
    assert 0 < shown < len(OTHER_CHANNELS)  # the most recent other channels still fit
