"""/refresh and /forget-me: every scope wiped in cache and rows, no turn begun before writing
back, every copy derived from the user found, and the audit events naming nobody."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select, text

from bot.db.engine import Database
from bot.db.models import LongTermMemory, StmEvent
from bot.memory.service import MemoryService
from bot.memory.turn.prompt import assemble
from bot.memory.turn.types import REASON_CLEARED
from tests.helpers.builders import ALICE, BOB, CHANNEL, GUILD, OTHER_CHANNEL, message, prepare
from tests.integration.stm.harness import ALICE_KEY, SERVER_KEY, rows, start_turn

# ----------------------------------------------------------------- deletion


async def test_clear_channel_wipes_every_scope_in_cache_and_rows(
    service: MemoryService, db: Database
) -> None:
    service.observe_message(CHANNEL, message(ALICE, "hi"))
    await service.update_stm(await start_turn(service), summary="to be wiped")
    receipt = await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    assert (receipt.rows, receipt.cache_entries) == (2, 2)
    assert await rows(db) == []
    assert SERVER_KEY not in service.cache and ALICE_KEY not in service.cache
    assert service.windows.get(CHANNEL) == ()
    async with db.sessions() as session:
        events = [e.event for e in await session.scalars(select(StmEvent).order_by(StmEvent.id))]
    assert events[-1] == "refresh"


async def test_a_turn_started_before_a_clear_cannot_write_back(
    service: MemoryService, db: Database
) -> None:
    await service.update_stm(await start_turn(service), summary="old")
    turn = await start_turn(service)
    await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    result = await service.update_stm(turn, summary="resurrected?")
    assert str(result) == f"rejected: {REASON_CLEARED}"
    assert await rows(db) == []
    assert not (await service.entry(SERVER_KEY)).has_content


async def test_a_clear_racing_a_write_always_ends_empty(
    service: MemoryService, db: Database
) -> None:
    turn = await start_turn(service)
    await asyncio.gather(
        service.update_stm(turn, summary="racing"),
        service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB),
    )
    assert await rows(db) == []
    assert not (await service.entry(SERVER_KEY)).has_content


async def test_forget_user_deletes_everything_derived_from_them(
    service: MemoryService, db: Database
) -> None:
    service.observe_message(CHANNEL, message(BOB, "Bob's idea"))
    service.observe_message(CHANNEL, message(ALICE, "Alice agrees"))
    await service.update_stm(await start_turn(service), summary="Bob had an idea")
    await service.update_stm(await start_turn(service, channel=OTHER_CHANNEL), summary="Alice only")
    async with db.sessions() as session, session.begin():
        session.add(LongTermMemory(user_id=BOB, content="Bob likes tea", origin="user_command"))
    receipt = await service.forget_user(BOB)
    # Bob's message was covered by the channel's memory: the server row and Alice's
    # copy of that conversation go too.
    assert (receipt.contributed_rows, receipt.long_term, receipt.raw_messages) == (2, 1, 1)
    remaining = await rows(db)
    assert {(r.scope_kind, r.channel_id) for r in remaining} == {
        ("server", OTHER_CHANNEL),
        ("user", OTHER_CHANNEL),
    }
    assert all(BOB not in r.contributor_ids for r in remaining)
    async with db.sessions() as session:
        assert await session.scalar(select(func.count()).select_from(LongTermMemory)) == 0
        bob_events = await session.scalar(
            select(func.count())
            .select_from(StmEvent)
            .where((StmEvent.user_id == BOB) | (StmEvent.actor_user_id == BOB))
        )
    assert bob_events == 0
    assert SERVER_KEY not in service.cache
    assert all(m.author_id != BOB for m in service.windows.get(CHANNEL))


async def test_forget_user_removes_their_own_rows(service: MemoryService, db: Database) -> None:
    await service.update_stm(await start_turn(service, user=BOB), summary="Bob's channel talk")
    receipt = await service.forget_user(BOB)
    assert (receipt.user_rows, receipt.contributed_rows) == (1, 1)
    assert await rows(db) == []


async def test_forget_me_reaches_a_memory_written_from_another_channels_messages(
    service: MemoryService, db: Database
) -> None:
    # The prompt shows other channels' recent messages; a memory written from them is
    # derived from their authors too.
    await service.update_stm(await start_turn(service, channel=OTHER_CHANNEL), summary="release")
    service.observe_message(OTHER_CHANNEL, message(BOB, "my phone number is 555-0199"))
    service.observe_message(CHANNEL, message(ALICE, "what's Bob's number again?"))
    prepared = await prepare(service, label_for=lambda e: "#g")
    assert "555-0199" in "\n".join(assemble(prepared.prompt).system_notes)
    written = await service.update_stm(prepared.turn, summary="Bob's number: 555-0199.")
    assert written.ok

    await service.forget_user(BOB)

    assert [r.summary for r in await rows(db) if "555-0199" in r.summary] == []


async def test_forget_me_reaches_other_users_copies_of_the_conversation(
    service: MemoryService, db: Database
) -> None:
    service.observe_message(CHANNEL, message(ALICE, "my door code is 4471"))
    await service.update_stm(await start_turn(service), summary="Alice's door code is 4471.")
    service.observe_message(CHANNEL, message(BOB, "hi"))
    await service.update_stm(
        await start_turn(service, user=BOB), summary="Alice's door code is 4471. Bob said hi."
    )
    await service.forget_user(ALICE)
    assert [r for r in await rows(db) if "4471" in r.summary] == []
    assert all("4471" not in e.summary for e in service.cache.entries())


async def test_forget_me_writes_a_forget_event_that_does_not_name_the_user(
    service: MemoryService, db: Database
) -> None:
    service.observe_message(CHANNEL, message(BOB, "Bob's private plan"))
    await service.update_stm(await start_turn(service, user=BOB), summary="Bob's private plan")

    await service.forget_user(BOB)

    async with db.sessions() as session:
        events = list(await session.scalars(select(StmEvent).order_by(StmEvent.id)))
    forgets = [e for e in events if e.event == "forget"]
    # One for the channel (its server's /stm history shows a member's memories went:
    # Bob's copy and the channel's memory he took part in), one for the request.
    assert [
        (e.guild_id, e.channel_id, e.user_id, e.actor_user_id, e.message_id, e.chars_before)
        for e in forgets
    ] == [
        (GUILD, CHANNEL, None, None, None, 2 * len("Bob's private plan")),
        (None, None, None, None, None, None),
    ]
    async with db.engine.connect() as connection:
        dump = (await connection.execute(text("SELECT stm_events::text FROM stm_events"))).all()
    assert not any(str(BOB) in row[0] or "private plan" in row[0] for row in dump)
