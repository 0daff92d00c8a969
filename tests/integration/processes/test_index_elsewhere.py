"""Another process's /refresh or /forget-me takes the channel out of this process's index of
channels that hold a memory, so its turns no longer show it among other channels."""

from __future__ import annotations

from bot.vocabulary.model import ScopeKey
from tests.helpers.builders import ALICE, BOB, GUILD, OTHER_CHANNEL, prepare
from tests.helpers.listening import Process
from tests.integration.processes.harness import next_of


def indexed(process: Process) -> list[int]:
    return [e.key.channel_id for e in process.memory.cache.server_entries_of_guild(GUILD)]


async def others_seen(process: Process) -> list[str]:
    prepared = await prepare(process.memory, BOB, label_for=lambda entry: "#news")
    return [o.entry.summary for o in prepared.prompt.others if o.entry is not None]


async def news_written_by_a_and_shown_by_b(two: tuple[Process, Process]) -> None:
    """A writes #news's memory (Alice's words); B loads the guild's other channels."""
    a, b = two
    turn = (await prepare(a.memory, ALICE, channel=OTHER_CHANNEL)).turn
    assert (await a.memory.update_stm(turn, summary="news in the other channel")).ok
    assert await others_seen(b) == ["news in the other channel"]
    assert indexed(b) == [OTHER_CHANNEL]


async def test_a_refresh_in_another_process_takes_the_channel_out_of_the_index_here(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    await news_written_by_a_and_shown_by_b(two)

    await a.memory.clear_channel(OTHER_CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    await next_of(b, "clear")

    assert indexed(b) == []
    assert b.memory.cached_entry(ScopeKey.server(GUILD, OTHER_CHANNEL)) is None
    assert await others_seen(b) == []


async def test_a_forget_me_in_another_process_takes_the_channel_out_of_the_index_here(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    await news_written_by_a_and_shown_by_b(two)

    await a.memory.forget_user(ALICE)
    await next_of(b, "forget")

    assert indexed(b) == []
    assert await others_seen(b) == []
