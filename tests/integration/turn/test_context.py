"""What ``prepare_turn`` does with a turn's reply chain and thread starter (real database):
dropped when the channel was wiped since the message arrived, when deleted, and (the
starter) when the thread may not show its parent channel."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import URL

from bot.db.engine import Database
from bot.memory.service import MemoryService
from bot.memory.turn.types import PreparedTurn
from bot.vocabulary.model import RawMessage, StmEntry
from tests.helpers.builders import ALICE, BOB, CHANNEL, GUILD, make_service, message, prepare
from tests.helpers.database import make_test_settings

PARENT = CHANNEL + 100


def service_for(db: Database, pg_url: URL, tmp_path: Path) -> MemoryService:
    return make_service(db.sessions, make_test_settings(pg_url, tmp_path))


async def start(
    service: MemoryService,
    trigger: RawMessage,
    *,
    epoch: int,
    replied_to: tuple[RawMessage, ...] = (),
    starter: RawMessage | None = None,
    show_parent: bool = True,
) -> PreparedTurn:
    def label(entry: StmEntry) -> str | None:
        return "#parent" if show_parent else None

    return await prepare(
        service,
        parent_channel_id=PARENT,
        source_message_id=trigger.message_id,
        trigger=trigger,
        trigger_epoch=epoch,
        replied_to=replied_to,
        thread_starter=starter,
        label_for=label,
    )


async def test_the_chain_and_starter_reach_the_prompt_and_their_authors_are_noted(
    db: Database, pg_url: URL, tmp_path: Path
) -> None:
    service = service_for(db, pg_url, tmp_path)
    replied, starter = message(BOB, "the venue is the library"), message(BOB, "plan the party")
    trigger = message(ALICE, "still right?")
    service.observe_message(CHANNEL, trigger)

    prepared = await start(
        service,
        trigger,
        epoch=service.channel_epoch(CHANNEL),
        replied_to=(replied,),
        starter=starter,
    )

    assert list(prepared.prompt.replied_to) == [replied]
    assert prepared.prompt.thread_starter == starter
    assert prepared.prompt.parent is not None and prepared.prompt.parent.label == "#parent"
    assert BOB in prepared.turn.read_authors


async def test_a_wipe_since_the_message_arrived_drops_the_chain(
    db: Database, pg_url: URL, tmp_path: Path
) -> None:
    service = service_for(db, pg_url, tmp_path)
    replied = message(BOB, "the venue is the library")
    trigger = message(ALICE, "still right?")
    service.observe_message(CHANNEL, trigger)
    arrived = service.channel_epoch(CHANNEL)
    await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=ALICE)
    service.observe_message(CHANNEL, later := message(ALICE, "again?"))

    prepared = await start(service, later, epoch=arrived, replied_to=(replied,))

    assert list(prepared.prompt.replied_to) == []


async def test_a_deleted_link_ends_the_chain_and_a_deleted_starter_is_left_out(
    db: Database, pg_url: URL, tmp_path: Path
) -> None:
    service = service_for(db, pg_url, tmp_path)
    direct, deleted, oldest = (message(BOB, f"link {n}") for n in range(3))
    starter = message(BOB, "plan the party")
    trigger = message(ALICE, "still right?")
    service.observe_message(CHANNEL, trigger)
    service.message_deleted(CHANNEL, deleted.message_id)
    service.message_deleted(PARENT, starter.message_id)

    prepared = await start(
        service,
        trigger,
        epoch=service.channel_epoch(CHANNEL),
        replied_to=(direct, deleted, oldest),
        starter=starter,
    )

    assert list(prepared.prompt.replied_to) == [direct]
    assert prepared.prompt.thread_starter is None


async def test_a_thread_that_may_not_show_its_parent_gets_neither_its_memory_nor_its_starter(
    db: Database, pg_url: URL, tmp_path: Path
) -> None:
    service = service_for(db, pg_url, tmp_path)
    trigger = message(ALICE, "hello")
    service.observe_message(CHANNEL, trigger)

    prepared = await start(
        service,
        trigger,
        epoch=service.channel_epoch(CHANNEL),
        starter=message(BOB, "plan the party"),
        show_parent=False,
    )

    assert prepared.prompt.parent is None and prepared.prompt.thread_starter is None
