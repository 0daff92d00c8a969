"""The chat turn's prompt on a small context: the conversation being answered outranks
other channels' memories and long-term facts, and the whole prompt fits."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import URL

from bot.config import Settings
from bot.conversation.fitting import context_tokens
from bot.conversation.turn import TurnRequest, TurnRunner
from bot.db.engine import Database
from bot.llm import TokenCounter
from bot.memory import MESSAGE_OVERHEAD_TOKENS
from bot.vocabulary.providers import capabilities
from tests.helpers.builders import (
    ALICE,
    BOB,
    BOT,
    CHANNEL,
    GUILD,
    ManualClock,
    make_longterm,
    make_service,
    message,
    prepare,
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
        # Their whole memories would come in but for the context: the budget is not the test.
        stm={"other_channels_tokens": 10_000},
    )
    service = make_service(db.sessions, settings)
    for channel in OTHER_CHANNELS:
        for i in range(6):
            service.observe_message(channel, message(BOB, f"chatter {i} in {channel} " + "y" * 150))
        prepared = await prepare(service, BOB, channel=channel)
        assert (await service.update_stm(prepared.turn, summary="s" * 1500)).ok
    for i in range(6):
        service.observe_message(CHANNEL, message(ALICE, f"our conversation, part {i}"))
    said = message(ALICE, "so what do you think?")
    service.observe_message(CHANNEL, said)
    request = TurnRequest(
        channel_id=CHANNEL,
        user_id=ALICE,
        source_message_id=said.message_id,
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
    counter = TokenCounter.for_model(settings.model, settings.provider)
    total = sum(counter.count(str(m["content"])) + MESSAGE_OVERHEAD_TOKENS for m in sent)
    budget = context_tokens(capabilities("novelai").context_tokens, settings.llm.max_reply_tokens)
    assert "Alice: our conversation, part 5" in conversation
    assert total <= budget, f"prompt of {total} tokens for a budget of {budget}"
    shown = sum("#channel-" in str(m["content"]) for m in sent if m["role"] == "system")
    assert 0 < shown < len(OTHER_CHANNELS)  # the most recent other channels still fit


# After a restart: memories of channels more private than this one do not crowd out
# the ones it may show.
PUBLIC = CHANNEL + 1
PRIVATE = [CHANNEL + 100 + i for i in range(12)]  # e.g. ticket channels


async def test_after_a_restart_private_channels_do_not_crowd_a_visible_memory_out_of_other_channels(
    db: Database, settings: Settings
) -> None:
    clock = ManualClock()
    before = make_service(db.sessions, settings, clock)
    for channel in [PUBLIC, *PRIVATE]:
        before.observe_message(channel, message(BOB, f"chat in {channel}"))
        turn = (await prepare(before, BOB, channel=channel)).turn
        assert (await before.update_stm(turn, summary=f"memory of {channel}")).ok
        clock.advance(minutes=1)

    def label_for(entry):  # #public is readable here; the private channels are not
        return "#public" if entry.key.channel_id == PUBLIC else None

    said = message(ALICE, "hi")
    before.observe_message(CHANNEL, said)
    shown_before = [o.label for o in (await prepare(before, label_for=label_for)).prompt.others]
    assert shown_before == ["#public"]

    # The same process restarted: same database, same time, empty cache.
    after = make_service(db.sessions, settings, clock)
    after.observe_message(CHANNEL, said)
    shown_after = [o.label for o in (await prepare(after, label_for=label_for)).prompt.others]
    assert shown_after == ["#public"], "the newest rows were all private: #public never loads"


async def test_after_a_restart_an_opted_in_dm_keeps_a_visible_server_memory(
    db: Database, settings: Settings
) -> None:
    dm_channel = 777_777_777_777_777_777
    clock = ManualClock()
    before = make_service(db.sessions, settings, clock)
    await before.set_cross_context_opt_in(ALICE, True)
    for channel in [PUBLIC, *PRIVATE]:  # Alice chatted in #public, then in 10 channels
        before.observe_message(channel, message(ALICE, f"chat in {channel}"))  # she can no
        turn = (await prepare(before, ALICE, channel=channel)).turn  # longer read (left them)
        assert (await before.update_stm(turn, summary=f"memory of {channel}")).ok
        clock.advance(minutes=1)

    def label_for(entry):
        return "#public in Guild" if entry.key.channel_id == PUBLIC else None

    async def dm_others(service) -> list[str]:
        service.observe_message(dm_channel, message(ALICE, "what did we say on the server?"))
        prepared = await prepare(service, channel=dm_channel, guild=None, label_for=label_for)
        return [o.label for o in prepared.prompt.others]

    assert await dm_others(before) == ["#public in Guild"]
    after = make_service(db.sessions, settings, clock)  # restarted
    assert await dm_others(after) == ["#public in Guild"]
