"""Races on one channel: concurrent turns, and clears landing mid-write."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import func, select, text

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import GuildSettings, ShortTermMemory, StmEvent
from bot.db.repositories import stm as stm_repo
from bot.db.storage import faults
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.memory.turn.types import REASON_CLEARED
from bot.vocabulary.model import ScopeKey
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
    turn_for,
    two_services,
)
from tests.helpers.faults import own_sessions

SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)


async def test_fifty_concurrent_turns_write_at_most_once_each_and_cache_equals_database(
    db: Database, service: MemoryService
) -> None:
    users = [1000 + n for n in range(50)]
    turns = [(await prepare(service, user)).turn for user in users]

    async def turn_body(index: int) -> list[str]:
        turn = turns[index]
        # Every turn tries twice, concurrently with all the others.
        first, second = await asyncio.gather(
            service.update_stm(turn, summary=f"from turn {index}"),
            service.update_stm(turn, summary=f"again from turn {index}"),
        )
        return [str(first), str(second)]

    results = await asyncio.gather(*(turn_body(i) for i in range(50)))
    for pair in results:
        assert pair.count("saved") == 1, pair
        (other,) = [r for r in pair if r != "saved"]
        assert other.startswith("rejected: short-term memory was already updated"), pair
    async with db.sessions() as session:
        row = await session.scalar(
            select(ShortTermMemory).where(
                ShortTermMemory.scope_kind == "server", ShortTermMemory.channel_id == CHANNEL
            )
        )
        updates = await session.scalar(
            select(func.count())
            .select_from(StmEvent)
            .where(StmEvent.event == "update", StmEvent.scope_kind == "server")
        )
    assert row is not None and updates == 50
    cached = service.cache.get(SERVER_KEY)
    assert cached is not None
    assert (cached.summary, cached.version) == (row.summary, row.version) == (row.summary, 50)


async def test_clears_interleaved_with_writes_never_leave_a_row_behind(
    db: Database, settings: Settings
) -> None:
    service: MemoryService = make_service(db.sessions, settings)
    for round_ in range(20):
        turn = (await prepare(service, BOB)).turn
        await asyncio.gather(
            service.update_stm(turn, summary=f"round {round_}"),
            service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB),
        )
        async with db.sessions() as session:
            left = await session.scalar(select(func.count()).select_from(ShortTermMemory))
        assert left == 0, f"round {round_} resurrected a cleared memory"
        assert not (await service.entry(SERVER_KEY)).has_content


async def test_a_stale_write_sharing_a_group_commit_fails_alone(
    db: Database, settings: Settings
) -> None:
    first = make_service(db.sessions, settings)
    second = make_service(db.sessions, settings)
    channels = [CHANNEL, CHANNEL + 1, CHANNEL + 2]
    turns = []
    for channel in channels:
        prepared = await prepare(second, BOB, channel=channel)
        turns.append(prepared.turn)
    # Another process moves the first channel on after `second` cached it.
    other = (await prepare(first, BOB)).turn
    assert (await first.update_stm(other, summary="newer elsewhere")).ok
    results = await asyncio.gather(
        *(second.update_stm(turn, summary=f"from second {i}") for i, turn in enumerate(turns))
    )
    assert [str(r) for r in results] == [
        "rejected: a newer version of this memory exists; nothing was saved",
        "saved",
        "saved",
    ]
    async with db.sessions() as session:
        summaries = {
            r.channel_id: r.summary
            for r in await session.scalars(
                select(ShortTermMemory).where(ShortTermMemory.scope_kind == "server")
            )
        }
    assert summaries == {
        CHANNEL: "newer elsewhere",
        CHANNEL + 1: "from second 1",
        CHANNEL + 2: "from second 2",
    }


async def rows_of(db: Database) -> list[tuple[str, str, list[int]]]:
    async with db.sessions() as session:
        found = await session.scalars(select(ShortTermMemory).order_by(ShortTermMemory.scope_kind))
        return [(r.scope_kind, r.summary, list(r.contributor_ids)) for r in found]


async def test_forget_me_racing_a_write_in_flight_leaves_nothing_behind(
    db: Database, service: MemoryService
) -> None:
    turn = (await prepare(service)).turn

    write, receipt = await asyncio.gather(
        service.update_stm(turn, summary="Alice's door code is 4471"),
        service.forget_user(ALICE),
    )

    # Either the write landed first and the deletion took it, or the deletion came first
    # and the write was refused: never a row the receipt missed.
    assert await rows_of(db) == []
    if write.ok:
        assert receipt.user_rows + receipt.contributed_rows == 2
    else:
        assert write.reason == REASON_CLEARED


async def test_a_turn_reading_a_forgotten_users_messages_cannot_store_them(
    db: Database, service: MemoryService
) -> None:
    service.observe_message(CHANNEL, message(ALICE, "my door code is 4471"))
    bob_turn = (await prepare(service, BOB)).turn  # Bob's prompt now holds Alice's message

    await service.forget_user(ALICE)
    result = await service.update_stm(bob_turn, summary="Alice's door code is 4471")

    assert (result.ok, result.reason) == (False, REASON_CLEARED)
    assert await rows_of(db) == []


async def test_a_refresh_during_the_other_channels_load_is_not_undone(
    db: Database, settings: Settings
) -> None:
    writer = make_service(db.sessions, settings)
    wrote = await writer.update_stm(
        (await prepare(writer, channel=OTHER_CHANNEL)).turn,
        summary="wiped secret",
    )
    assert wrote.ok
    service = make_service(own_sessions(db), settings)  # a fresh process
    loaded = faults(service.sessions).hang("loading a guild's memories", at="end", times=1)
    turn = asyncio.create_task(prepare(service, BOB, label_for=lambda entry: "#other"))
    await loaded.reached()  # the /refresh lands while these rows are on their way
    await service.clear_channel(OTHER_CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    loaded.release()
    prepared = await turn

    assert prepared.prompt.others == []
    assert not (await service.entry(ScopeKey.server(GUILD, OTHER_CHANNEL))).has_content


async def test_a_full_group_commit_with_real_snowflakes_is_saved_not_spooled(
    db: Database, service: MemoryService
) -> None:
    # 64 writes of two rows share one transaction; their change notice names 128 keys of
    # 19-digit ids, more than one NOTIFY payload may hold.
    guild, first_channel, first_user = 1_234_567_890_123_456_789, 2 * 10**18, 3 * 10**18
    turns = [
        (await prepare(service, first_user + n, channel=first_channel + n, guild=guild)).turn
        for n in range(100)
    ]

    results = await asyncio.gather(
        *(service.update_stm(turn, summary=f"memory {n}") for n, turn in enumerate(turns))
    )

    assert {str(r) for r in results} == {"saved"}
    async with db.sessions() as session:
        assert await session.scalar(select(func.count()).select_from(ShortTermMemory)) == 200


async def test_a_refresh_in_another_process_refuses_a_turn_that_started_before_it(
    db: Database, settings: Settings
) -> None:
    # Process B never hears of the clear (no notice connection here): only the database
    # can tell its write that the channel was wiped after the turn started.
    clock, a, b = two_services(db.sessions, settings)
    seeded = await a.update_stm(
        (await prepare(a)).turn,
        summary="the plan before the refresh",
    )
    assert seeded.ok
    turn = (await prepare(b, BOB)).turn
    clock.advance(seconds=5)
    await a.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=ALICE)
    clock.advance(seconds=5)

    result = await b.update_stm(turn, summary="the plan before the refresh, written back")

    assert (result.ok, result.reason) == (False, REASON_CLEARED)
    assert await rows_of(db) == []
    later = (await prepare(b, BOB)).turn
    assert (await b.update_stm(later, summary="a new start")).ok  # turns after it may write


async def test_a_clear_and_writes_from_two_processes_never_leave_a_pre_clear_row(
    db: Database, settings: Settings
) -> None:
    clock, a, b = two_services(db.sessions, settings)
    turns = [(await prepare(b, 1000 + n)).turn for n in range(20)]
    clock.advance(seconds=1)

    results = await asyncio.gather(
        *(b.update_stm(turn, summary=f"pre-clear {n}") for n, turn in enumerate(turns)),
        a.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=ALICE),
    )

    # Each write either committed before the clear (and was deleted by it) or was refused.
    assert await rows_of(db) == []
    assert all(str(r) in ("saved", f"rejected: {REASON_CLEARED}") for r in results[:-1])


async def test_a_forget_me_during_a_hydration_is_not_undone_by_it(
    db: Database, service: MemoryService
) -> None:
    turn = (await prepare(service)).turn
    assert (await service.update_stm(turn, summary="Alice's secret plans")).ok
    service.cache.clear()  # e.g. evicted, or dropped after a listener reset
    read = faults(service.sessions).hang("hydrating", at="end", times=1)
    hydrating = asyncio.create_task(service.entry(SERVER_KEY))
    await read.reached()  # the row (Alice's words) is on its way back
    await service.forget_user(ALICE)
    read.release()
    await hydrating

    assert service.cache.get(SERVER_KEY) is None or not service.cache.get(SERVER_KEY).has_content  # type: ignore[union-attr]
    assert (await service.entry(SERVER_KEY)).summary == ""
    assert await rows_of(db) == []


async def test_a_write_of_another_process_that_missed_the_forget_me_notice_is_refused(
    db: Database, settings: Settings
) -> None:
    # Process B's turn started before A's /forget-me, and B has not heard the notice when
    # its write reaches the database: the forget's record there refuses it.
    clock, a, b = two_services(db.sessions, settings)
    b_turn = (await prepare(b)).turn
    clock.advance(seconds=1)
    await a.forget_user(ALICE)
    clock.advance(seconds=1)

    result = await b.update_stm(b_turn, summary="Alice's words, written late")

    assert (str(result), await rows_of(db)) == (f"rejected: {REASON_CLEARED}", [])
    assert b.cache.get(SERVER_KEY) is None


async def test_a_forget_me_heard_by_notice_queues_behind_this_processs_spooled_writes(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    spool = DurableSpool(spool_path(tmp_path))
    b = make_service(db.sessions, settings, spool=spool)
    turn = (await prepare(b)).turn
    spool.append([], [])  # something older waits: B's next write queues behind it
    assert str(await b.update_stm(turn, summary="Alice's words")) == "saved, pending sync"
    # Process A deletes her (the database is up for A) and announces it.
    a = make_service(db.sessions, settings)
    await a.forget_user(ALICE)
    b.apply_notice({"o": a.instance_id, "t": "forget", "u": ALICE})

    await spool.replay(db.sessions)  # B's write replays after A's deletion ...

    assert await rows_of(db) == []  # ... and so does the deletion queued behind it


async def test_forget_me_refuses_a_turn_that_was_shown_the_users_memory_from_another_channel(
    db: Database, settings: Settings
) -> None:
    # Bob's turn in #general was shown Alice's #other memory ("other channels"); no
    # cache entry or raw window of #general holds her, so only the database's record of
    # the /forget-me stops the model's late answer from storing her words again.
    clock = ManualClock()
    service = make_service(db.sessions, settings, clock)
    other = await prepare(service, ALICE, channel=OTHER_CHANNEL)
    assert (await service.update_stm(other.turn, summary="Alice's secret plan")).ok
    clock.advance(seconds=1)
    bobs = await prepare(service, BOB, channel=CHANNEL, label_for=lambda entry: "#other")
    assert ALICE in bobs.turn.shown_contributors()
    await service.forget_user(ALICE)
    clock.advance(seconds=30)  # the model answers Bob after the /forget-me

    result = await service.update_stm(bobs.turn, summary="Bob builds on Alice's secret plan")

    assert (str(result), await rows_of(db)) == (f"rejected: {REASON_CLEARED}", [])


async def test_forget_me_heard_by_notice_refuses_a_turn_shown_the_users_memory_there(
    db: Database, settings: Settings
) -> None:
    clock, a, b = two_services(db.sessions, settings)
    other = await prepare(b, ALICE, channel=OTHER_CHANNEL)
    assert (await b.update_stm(other.turn, summary="Alice's secret plan")).ok
    clock.advance(seconds=1)
    bobs = await prepare(b, BOB, channel=CHANNEL, label_for=lambda entry: "#other")
    await a.forget_user(ALICE)  # her DM is served by process A
    b.apply_notice({"o": a.instance_id, "t": "forget", "u": ALICE})  # as delivered
    clock.advance(seconds=30)

    result = await b.update_stm(bobs.turn, summary="Bob builds on Alice's secret plan")

    assert (str(result), await rows_of(db)) == (f"rejected: {REASON_CLEARED}", [])


async def test_a_user_who_speaks_again_after_forget_me_is_remembered_again(
    db: Database, settings: Settings
) -> None:
    # The forget's record refuses only turns that started before it.
    clock = ManualClock()
    service = make_service(db.sessions, settings, clock)
    await service.forget_user(ALICE)
    clock.advance(seconds=1)

    result = await service.update_stm((await prepare(service, ALICE)).turn, summary="new start")

    assert str(result) == "saved"
    assert [summary for _, summary, _ in await rows_of(db)] == ["new start", "new start"]


async def stored_server_summary(db: Database) -> str | None:
    async with db.sessions() as session:
        row = await stm_repo.load_entry(session, ScopeKey.server(GUILD, CHANNEL))
    return row.summary if row is not None else None


async def test_a_turn_prepared_while_forget_me_commits_does_not_keep_the_forgotten_memory(
    service: MemoryService,
) -> None:
    turn = (await prepare(service, ALICE)).turn
    assert str(await service.update_stm(turn, summary="Alice's secret plan")) == "saved"

    # /forget-me of Alice is on its way to the database (its channel locks are held) ...
    on_its_way = faults(service.sessions).hang("forgetting a user", times=1)
    forgetting = asyncio.create_task(service.forget_user(ALICE))
    await on_its_way.reached()
    # ... when Bob's message in the same channel starts a turn (a cache miss: hydrated).
    await prepare(service, BOB)
    on_its_way.release()
    receipt = await forgetting
    assert receipt.contributed_rows + receipt.user_rows >= 1  # the rows are gone

    # The receipt said everything is deleted, yet this process still shows Alice's memory.
    assert not (await service.entry(SERVER_KEY)).has_content


async def test_a_hydration_during_an_in_flight_write_does_not_cache_the_old_row(
    db: Database, service: MemoryService
) -> None:
    turn = (await prepare(service, ALICE)).turn
    assert str(await service.update_stm(turn, summary="v1")) == "saved"
    second = (await prepare(service, ALICE)).turn

    committing = faults(service.sessions).hang("STM write", times=1)
    writing = asyncio.create_task(service.update_stm(second, summary="v2"))
    await committing.reached()  # v2 is in the cache and on its way to the database ...
    # ... when the notice listener reconnects (the cache is dropped, as after any missed
    # notice) and Bob's message starts a turn in the same channel (a miss: hydrated).
    service.listener_lost()
    service.listening_again()
    await prepare(service, BOB)
    committing.release()
    assert str(await writing) == "saved"
    assert await stored_server_summary(db) == "v2"
    # The cache kept the row as it was before the write committed.
    assert (await service.entry(SERVER_KEY)).summary == "v2"


async def test_always_on_toggled_in_two_processes_at_once_keeps_both_channels(
    db: Database, settings: Settings
) -> None:
    # Each process changes the list it has cached: computed there and written whole, the
    # second write would drop the first one's channel.
    a = make_service(db.sessions, settings)
    b = make_service(db.sessions, settings)

    async def stored() -> list[int]:
        async with db.sessions() as session:
            return sorted(await session.scalar(select(GuildSettings.always_on_channel_ids)) or ())

    await a.guild_config(GUILD)
    await b.guild_config(GUILD)
    await asyncio.gather(
        a.set_always_on(GUILD, CHANNEL, True, ALICE),
        b.set_always_on(GUILD, OTHER_CHANNEL, True, BOB),
    )
    assert await stored() == [CHANNEL, OTHER_CHANNEL]
    await asyncio.gather(
        a.set_always_on(GUILD, CHANNEL, False, ALICE),
        b.set_always_on(GUILD, OTHER_CHANNEL + 1, True, BOB),
        b.set_always_on(GUILD, OTHER_CHANNEL, True, BOB),  # already on: not doubled
    )
    assert await stored() == [OTHER_CHANNEL, OTHER_CHANNEL + 1]
    fresh = make_service(db.sessions, settings)
    assert (await fresh.guild_config(GUILD)).always_on_channels == {
        OTHER_CHANNEL,
        OTHER_CHANNEL + 1,
    }


async def test_a_turn_started_while_a_refresh_waits_for_its_lock_cannot_write_back(
    db: Database, settings: Settings
) -> None:
    """A /refresh waits for the channel's lock (a write of another process is on its way).
    A turn of that other process starting meanwhile still reads the old memory; its write,
    after the refresh commits, must be refused: the refresh counts from when it took the
    lock, not from when it was asked for."""
    clock, a, b = two_services(db.sessions, settings)
    assert (await b.update_stm(await turn_for(b), summary="said before the refresh")).ok
    async with db.sessions() as holder, holder.begin():
        await stm_repo.lock_channels(holder, [CHANNEL], shared=True)  # a write in flight
        clearing = asyncio.create_task(a.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB))
        async with db.sessions() as probe:  # until the refresh waits for that lock
            for _ in range(500):
                waiting = await probe.scalar(
                    text(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    )
                )
                await probe.rollback()
                if waiting:
                    break
            assert waiting
        clock.advance(seconds=1)
        turn = await turn_for(b)  # starts after /refresh was asked for, reads the old memory
        assert (await b.entry(SERVER_KEY)).summary == "said before the refresh"
        clock.advance(seconds=1)
    await clearing  # the lock is free: the refresh commits
    result = await b.update_stm(turn, summary="said before the refresh, and more")
    assert str(result) == f"rejected: {REASON_CLEARED}"
    async with db.sessions() as session:
        assert await session.scalar(select(func.count()).select_from(ShortTermMemory)) == 0


async def test_a_write_built_on_a_deleted_row_cannot_replace_the_new_memory(
    db: Database, settings: Settings
) -> None:
    """A holds version 2 of a memory; B's /forget-me deletes it and B starts a new one
    (version 1 again). A, before hearing of it, writes on its cached version 2: refused
    (it is not built on what the row holds), never "the higher version wins"."""
    clock, a, b = two_services(db.sessions, settings)
    for said in ("first", "second"):
        assert (await a.update_stm(await turn_for(a, ALICE), summary=f"alice: {said}")).ok
    clock.advance(seconds=1)
    await b.forget_user(ALICE)
    clock.advance(seconds=1)
    assert str(await b.update_stm(await turn_for(b, BOB), summary="bob: new plan")) == "saved"
    clock.advance(seconds=1)
    stale = await turn_for(a, BOB)  # A has heard neither notice
    result = await a.update_stm(stale, summary="bob: built on alice's memory")
    assert str(result) == "rejected: a newer version of this memory exists; nothing was saved"
    async with db.sessions() as session:
        rows = list(await session.scalars(select(ShortTermMemory.summary)))
    assert rows == ["bob: new plan", "bob: new plan"]


async def test_a_write_built_on_a_row_deleted_since_does_not_create_it_again(
    db: Database, settings: Settings
) -> None:
    """The row A's cached memory came from is gone (a /refresh elsewhere, unheard): A's
    write on it is refused rather than inserting the deleted memory's successor."""
    clock, a, b = two_services(db.sessions, settings)
    assert (await a.update_stm(await turn_for(a, ALICE), summary="before the refresh")).ok
    turn = await turn_for(a, ALICE)  # starts before the refresh: refused by its time anyway
    clock.advance(seconds=1)
    await b.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    clock.advance(seconds=1)
    later = await turn_for(a, ALICE)  # after it, on A's cached (deleted) memory
    result = await a.update_stm(later, summary="before the refresh, and after")
    assert not result.ok
    assert not (await a.update_stm(turn, summary="also refused")).ok
    async with db.sessions() as session:
        assert await session.scalar(select(func.count()).select_from(ShortTermMemory)) == 0


async def test_a_write_on_a_deleted_row_is_refused_even_at_the_new_rows_version(
    db: Database, settings: Settings
) -> None:
    """Versions count from 1 again after a deletion: A's cached version 1 of the deleted
    memory and B's new version 1 are told apart by when their row was created."""
    clock, a, b = two_services(db.sessions, settings)
    assert (await a.update_stm(await turn_for(a, ALICE), summary="alice: her plan")).ok
    clock.advance(seconds=1)
    await b.forget_user(ALICE)
    clock.advance(seconds=1)
    assert str(await b.update_stm(await turn_for(b, BOB), summary="bob: new plan")) == "saved"
    clock.advance(seconds=1)
    stale = await turn_for(a, BOB)  # A has heard neither notice: it holds version 1 too
    result = await a.update_stm(stale, summary="bob: built on alice's plan")
    assert str(result) == "rejected: a newer version of this memory exists; nothing was saved"
    async with db.sessions() as session:
        rows = list(await session.scalars(select(ShortTermMemory.summary)))
    assert rows == ["bob: new plan", "bob: new plan"]
