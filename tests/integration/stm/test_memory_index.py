"""The index of the channels that hold a memory ("other channels"): a write puts its channel
first, a /refresh takes it out, an evicted one leaves and its next turn brings it back, and a
turn reads only the few it may show, however many channels the guild has."""

from __future__ import annotations

from bot.config import Settings
from bot.db.engine import Database
from bot.memory.prepare import CANDIDATES_PER_SLOT
from bot.memory.service import MemoryService
from bot.vocabulary.model import ScopeKey, StmEntry
from tests.helpers.builders import ALICE, BOB, GUILD, ManualClock, make_service, prepare
from tests.helpers.database import make_test_settings
from tests.integration.stm.harness import start_turn

FIRST = 400_000_000_000_000_000  # channels FIRST, FIRST + 1, ...
ASKING = FIRST - 1  # the channel whose turn shows the others


def indexed(service: MemoryService) -> list[int]:
    """The guild's channels in the index, newest memory first."""
    return [e.key.channel_id for e in service.cache.server_entries_of_guild(GUILD)]


async def shown_in(service: MemoryService, channel: int = ASKING) -> list[int]:
    prepared = await prepare(service, BOB, channel=channel, label_for=lambda e: "#x")
    return [o.entry.key.channel_id for o in prepared.prompt.others if o.entry]


async def write(service: MemoryService, channel: int, summary: str) -> None:
    turn = await start_turn(service, channel=channel)
    assert (await service.update_stm(turn, summary=summary)).ok


async def test_a_write_puts_its_channel_first(service: MemoryService, clock: ManualClock) -> None:
    for n in range(3):
        await write(service, FIRST + n, f"memory {n}")
        clock.advance(minutes=1)
    assert indexed(service) == [FIRST + 2, FIRST + 1, FIRST]

    await write(service, FIRST, "memory 0, later")

    assert indexed(service) == [FIRST, FIRST + 2, FIRST + 1]
    assert await shown_in(service) == [FIRST, FIRST + 2, FIRST + 1]


async def test_a_refresh_takes_its_channel_out(service: MemoryService, clock: ManualClock) -> None:
    await write(service, FIRST, "kept")
    clock.advance(minutes=1)
    await write(service, FIRST + 1, "wiped")
    assert await shown_in(service) == [FIRST + 1, FIRST]

    await service.clear_channel(FIRST + 1, guild_id=GUILD, actor_user_id=BOB)

    assert indexed(service) == [FIRST]
    assert await shown_in(service) == [FIRST]


async def test_a_forget_me_takes_out_the_channels_holding_the_users_words(
    service: MemoryService,
) -> None:
    await write(service, FIRST, "Alice's plan")  # start_turn's user: Alice
    assert indexed(service) == [FIRST]

    await service.forget_user(ALICE)

    assert indexed(service) == []
    assert await shown_in(service) == []


async def test_an_evicted_channel_leaves_and_its_next_turn_brings_it_back(
    db: Database, settings: Settings, clock: ManualClock
) -> None:
    assert db.url is not None
    # The least a cache may hold.
    small = make_test_settings(db.url, settings.data_dir, stm={"cache_max_entries": 100})
    service = make_service(db.sessions, small, clock)
    await write(service, FIRST, "remembered")
    for n in range(1, 60):  # Bob talks in 59 other channels: 118 keys pass through
        await start_turn(service, user=BOB, channel=FIRST + n)
    assert FIRST not in indexed(service)

    await start_turn(service, channel=FIRST)  # its next turn reads it back

    assert indexed(service) == [FIRST]
    assert await shown_in(service) == [FIRST]


async def test_after_a_restart_the_loaded_channels_are_indexed(
    db: Database, settings: Settings, clock: ManualClock
) -> None:
    before = make_service(db.sessions, settings, clock)
    for n in range(3):
        await write(before, FIRST + n, f"memory {n}")
        clock.advance(minutes=1)
    after = make_service(db.sessions, settings, clock)

    assert await shown_in(after) == [FIRST + 2, FIRST + 1, FIRST]  # the guild's rows, once
    assert indexed(after) == [FIRST + 2, FIRST + 1, FIRST]


async def test_a_turn_reads_only_the_few_it_may_show_however_many_channels_there_are(
    service: MemoryService, clock: ManualClock
) -> None:
    for n in range(40):
        await write(service, FIRST + n, f"memory {n}")
        clock.advance(seconds=1)
    clock.advance(minutes=5)
    for n in range(300):  # channels the bot has seen since, none remembered yet
        await start_turn(service, user=BOB, channel=FIRST + 1000 + n)
    await start_turn(service, user=BOB, channel=ASKING)  # its own memory: cached
    hidden = {FIRST + 39, FIRST + 37}  # the newest but one are more private than ASKING
    asked: list[int] = []

    def label_for(entry: StmEntry) -> str | None:
        asked.append(entry.key.channel_id)
        return None if entry.key.channel_id in hidden else "#x"

    # Every read of the (real) cache during the turn, by channel.
    read: list[int] = []
    get = service.cache.get

    def counted_get(key: ScopeKey) -> StmEntry | None:
        read.append(key.channel_id)
        return get(key)

    service.cache.get = counted_get  # type: ignore[method-assign]
    prepared = await prepare(service, BOB, channel=ASKING, label_for=label_for)

    # The candidates the prompt picks from: CANDIDATES_PER_SLOT for each channel shown.
    wanted = 3 * CANDIDATES_PER_SLOT
    visible = [FIRST + n for n in range(39, -1, -1) if FIRST + n not in hidden]
    shown = [o.entry.key.channel_id for o in prepared.prompt.others if o.entry]
    assert shown == visible[:wanted]
    looked_at = [FIRST + n for n in range(39, 39 - wanted - len(hidden), -1)]
    assert asked == looked_at
    assert [channel for channel in read if channel != ASKING] == looked_at
    assert len(service.cache) > 600  # the 300 channels seen are cached, just not read
