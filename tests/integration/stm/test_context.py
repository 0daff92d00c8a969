"""What a prepared turn shows: the nudge at the cadence, other channels only when allowed and the
most recent ones, server memories in a DM only after opt-in and as the server renders them."""

from __future__ import annotations

from bot.config import Settings
from bot.db.engine import Database
from bot.memory.service import MemoryService
from bot.memory.turn.prompt import assemble
from bot.vocabulary.model import Category
from tests.helpers.builders import (
    ALICE,
    BOB,
    CHANNEL,
    GUILD,
    OTHER_CHANNEL,
    ManualClock,
    make_service,
    message,
    prepare,
)
from tests.integration.stm.harness import fresh_process, start_turn

# ------------------------------------------------------------- turn context


async def test_nudge_is_due_at_the_cadence_and_counts_new_messages(
    service: MemoryService,
) -> None:
    await service.update_guild_settings(GUILD, ALICE, refresh_cadence=2)
    service.observe_message(CHANNEL, message(ALICE, "one"))
    await service.update_stm(await start_turn(service), summary="covers one")
    for text_ in ("two", "three", "four"):
        service.observe_message(CHANNEL, message(BOB, text_))
    prepared = await prepare(service)
    assert prepared.prompt.nudge_new_messages is None
    service.finish_turn(prepared.turn)
    service.finish_turn(prepared.turn)
    prepared = await prepare(service)
    assert prepared.prompt.nudge_new_messages == 3


async def test_other_channels_are_shown_only_when_the_caller_allows(
    service: MemoryService,
) -> None:
    await service.update_stm(await start_turn(service, channel=OTHER_CHANNEL), summary="public")
    private = OTHER_CHANNEL + 1
    await service.update_stm(await start_turn(service, channel=private), summary="secret")
    labels = {OTHER_CHANNEL: "#general", private: None}
    prepared = await prepare(service, label_for=lambda entry: labels[entry.key.channel_id])
    assert [(o.label, o.entry.summary) for o in prepared.prompt.others if o.entry] == [
        ("#general", "public")
    ]


async def test_dm_shows_server_memories_only_after_opt_in(
    service: MemoryService, clock: ManualClock
) -> None:
    await service.update_stm(await start_turn(service), summary="server talk")
    dm_channel = 777

    async def dm_others(svc: MemoryService) -> list[str]:
        prepared = await prepare(
            svc, channel=dm_channel, guild=None, label_for=lambda entry: "#general in Guild"
        )
        return [o.entry.summary for o in prepared.prompt.others if o.entry]

    assert await dm_others(service) == []
    await service.set_cross_context_opt_in(ALICE, True)
    assert await dm_others(service) == ["server talk"]
    # After a restart too (the user's rows are hydrated once, on first use).
    assert await dm_others(fresh_process(service)) == ["server talk"]


async def test_other_channels_are_the_most_recently_updated_ones(
    db: Database, settings: Settings, clock: ManualClock
) -> None:
    writer = make_service(db.sessions, settings, clock)
    channels = [400_000 + i for i in range(15)]  # channels[0] holds the oldest memory
    for i, channel in enumerate(channels):
        await writer.update_stm(await start_turn(writer, channel=channel), summary=f"memory {i}")
        clock.advance(minutes=30)
    restarted = make_service(db.sessions, settings, clock)
    await start_turn(restarted, channel=999_998, label_for=lambda e: "#x")  # guild hydrated
    await start_turn(restarted, channel=channels[0], label_for=lambda e: "#x")  # an old one

    prepared = await prepare(restarted, channel=999_999, label_for=lambda e: "#x")

    # The candidates the prompt picks from (CANDIDATES_PER_SLOT per one shown), newest first.
    shown = [o.entry.summary for o in prepared.prompt.others if o.entry]
    assert shown == [f"memory {i}" for i in range(14, 2, -1)]


async def test_a_dm_shows_a_server_memory_as_that_server_renders_it(
    service: MemoryService,
) -> None:
    # Categories (with the server's own labels) in preference to the summary written
    # before the server chose them; the DM's own settings know nothing of either.
    assert (await service.update_stm(await start_turn(service), summary="OLD: Monday")).ok
    await service.set_categories(
        GUILD,
        ALICE,
        [Category(0, "ri_ben_yu", "日本語", "notes"), Category(1, "todo", "Todo", "t")],
    )
    turn = await start_turn(service)
    assert (await service.update_stm(turn, categories={"ri_ben_yu": "NEW: Friday"})).ok
    await service.set_cross_context_opt_in(ALICE, True)

    dm = await prepare(service, channel=777, guild=None, label_for=lambda e: "#g")

    notes = "\n".join(assemble(dm.prompt).system_notes)
    assert "日本語:\nNEW: Friday" in notes
    assert "OLD" not in notes
