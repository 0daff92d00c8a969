"""Two processes' caches on one PostgreSQL stay coherent through LISTEN/NOTIFY.

Each "process" is a full set of memory objects (its own cache, its own listener
connection); the notices travel through the real server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.engine import URL

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.db.notify import Notice
from bot.db.storage import faults
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.memory.stm.change import REASON_CATEGORIES_CHANGED
from bot.memory.turn.types import REASON_CLEARED
from bot.services import start_services
from bot.vocabulary.model import Category, ScopeKey
from tests.helpers.builders import (
    ALICE,
    BOB,
    CHANNEL,
    GUILD,
    OTHER_CHANNEL,
    make_service,
    prepare,
    turn_for,
)
from tests.helpers.database import make_test_settings
from tests.helpers.faults import outage, own_sessions
from tests.helpers.listening import Process
from tests.integration.processes.harness import (
    KEY,
    category_write,
    next_of,
    terminate_listeners,
    write,
)


async def test_a_write_in_one_process_evicts_the_stale_entry_in_the_other(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    assert await write(a, "v1") == "saved"
    await b.next_notice()
    assert (await b.memory.entry(KEY)).summary == "v1"  # cached in b now
    assert await write(a, "v2") == "saved"
    notice = await b.next_notice()
    assert notice["t"] == "stm"
    assert KEY not in b.memory.cache  # evicted, not patched
    assert (await b.memory.entry(KEY)).summary == "v2"


async def test_a_clear_elsewhere_stops_an_in_flight_turn_here(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    await write(b, "before the refresh", user=BOB)
    await a.next_notice()
    in_flight = (await prepare(b.memory, BOB)).turn
    await a.memory.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=ALICE)
    assert (await b.next_notice())["t"] == "clear"
    assert KEY not in b.memory.cache
    result = await b.memory.update_stm(in_flight, summary="resurrected?")
    assert str(result) == f"rejected: {REASON_CLEARED}"
    assert not (await b.memory.entry(KEY)).has_content


async def test_a_late_notice_never_resurrects_a_cleared_entry(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    await write(a, "old")
    stale_notice = await b.next_notice()
    await a.memory.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=ALICE)
    await b.next_notice()
    b.memory.apply_notice(stale_notice)  # arrives late, out of order
    assert KEY not in b.memory.cache
    assert not (await b.memory.entry(KEY)).has_content


async def test_guild_settings_changed_elsewhere_are_reloaded(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    assert (await b.memory.guild_config(GUILD)).refresh_cadence == 5
    await a.memory.update_guild_settings(GUILD, ALICE, refresh_cadence=11)
    assert (await b.next_notice())["t"] == "guild"
    assert (await b.memory.guild_config(GUILD)).refresh_cadence == 11


async def test_a_cross_context_choice_made_elsewhere_reaches_this_process(
    two: tuple[Process, Process],
) -> None:
    # DMs are served by shard 0's process; the user may flip the setting in a server
    # served by another one.
    a, b = two
    assert await b.memory.cross_context_opt_in(ALICE) is False
    await a.memory.set_cross_context_opt_in(ALICE, True)
    assert (await b.next_notice())["t"] == "opt-in"
    assert await b.memory.cross_context_opt_in(ALICE) is True


async def test_forget_me_elsewhere_drops_the_users_entries_here(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    await write(a, "Alice's plan")
    await b.next_notice()
    await b.memory.entry(ScopeKey.user(ALICE, CHANNEL, GUILD))
    await a.memory.forget_user(ALICE)
    assert (await b.next_notice())["t"] == "forget"
    assert [e for e in b.memory.cache.entries() if e.key.user_id == ALICE] == []


async def test_a_lost_listener_connection_drops_the_whole_cache(
    two: tuple[Process, Process], db: Database
) -> None:
    a, b = two
    await write(a, "cached everywhere")
    await b.next_notice()
    await b.memory.entry(KEY)
    assert len(b.memory.cache) > 0
    await terminate_listeners(db)  # both listener connections are lost
    async with asyncio.timeout(10):
        await b.resets.get()
    assert len(b.memory.cache) == 0
    # ... and it listens again afterwards.
    await write(a, "after the reconnect")
    while (await b.next_notice()).get("t") != "stm":
        pass


async def test_two_bot_instances_share_one_database_coherently(
    db: Database, pg_url: URL, tmp_path: Path
) -> None:
    bots = [
        await start_services(
            make_test_settings(pg_url, tmp_path / name), db, owns_database=False, janitor=False
        )
        for name in ("one", "two")
    ]
    first, second = bots
    arrived = asyncio.Event()
    apply = second.memory.apply_notice

    def spy(notice: Notice) -> None:
        apply(notice)
        if notice.get("t") == "stm":
            arrived.set()

    assert second.listener is not None
    second.listener._on_notice = spy
    try:
        assert (await second.memory.entry(KEY)).summary == ""
        turn = (await prepare(first.memory)).turn
        assert (await first.memory.update_stm(turn, summary="from bot one")).ok
        async with asyncio.timeout(10):
            await arrived.wait()
        assert (await second.memory.entry(KEY)).summary == "from bot one"
        assert first.memory.cache is not second.memory.cache
    finally:
        for bot in bots:
            await bot.close()


async def test_a_read_overtaken_by_a_notice_is_not_cached(two: tuple[Process, Process]) -> None:
    a, b = two
    await write(a, "v1")
    await b.next_notice()
    read = faults(b.memory.sessions).hang("hydrating", at="end", times=1)
    hydrating = asyncio.create_task(b.memory.entry(KEY))
    await read.reached()  # v2 is written and announced while v1 is on its way
    await write(a, "v2")
    assert (await b.next_notice())["t"] == "stm"
    read.release()

    assert (await hydrating).summary == "v2"
    assert b.memory.cache.get(KEY) is not None and b.memory.cache.get(KEY).summary == "v2"  # type: ignore[union-attr]


async def test_a_memory_written_elsewhere_reaches_other_channels_here(
    two: tuple[Process, Process],
) -> None:
    # Process B serves #general and has loaded the guild's other channels once; A (say,
    # the same guild on another shard after a reshard) writes #news's memory.
    a, b = two

    async def others_seen_by_b() -> list[str]:
        prepared = await prepare(b.memory, BOB, label_for=lambda entry: f"#{entry.key.channel_id}")
        return [o.entry.summary for o in prepared.prompt.others if o.entry is not None]

    assert await others_seen_by_b() == []
    prepared = await prepare(a.memory, channel=OTHER_CHANNEL)
    await a.memory.update_stm(prepared.turn, summary="news in the other channel")
    assert (await b.next_notice())["t"] == "stm"

    assert await others_seen_by_b() == ["news in the other channel"]


async def test_an_opt_out_heard_while_the_opt_in_is_read_is_not_lost(
    db: Database, settings: Settings
) -> None:
    a = make_service(db.sessions, settings)
    b = make_service(own_sessions(db), settings)
    await a.set_cross_context_opt_in(ALICE, True)
    read = faults(b.sessions).hang("loading privacy settings", at="end")
    loading = asyncio.create_task(b.cross_context_opt_in(ALICE))
    await read.reached()  # the opt-out happens while "on" is on its way to B
    await a.set_cross_context_opt_in(ALICE, False)
    b.apply_notice({"o": a.instance_id, "t": "opt-in", "u": ALICE})
    faults(b.sessions).clear()
    await loading

    assert await b.cross_context_opt_in(ALICE) is False


async def test_a_read_overtaken_on_every_retry_is_used_once_and_not_cached(
    db: Database, settings: Settings
) -> None:
    a = make_service(db.sessions, settings)
    turn = (await prepare(a)).turn
    assert (await a.update_stm(turn, summary="v1")).ok
    b = make_service(own_sessions(db), settings)
    read = faults(b.sessions).hang("hydrating", at="end")
    reading = asyncio.create_task(b.entry(KEY))
    while True:  # every read, once it has its row, is overtaken by a notice
        reached = asyncio.ensure_future(read.reached())
        await asyncio.wait([reading, reached], return_when=asyncio.FIRST_COMPLETED)
        if reading.done():
            reached.cancel()
            break
        b.apply_notice({"o": "elsewhere", "t": "stm", "k": [["server", GUILD, None, CHANNEL, 7]]})
        read.release()
    await reading

    assert read.met > 1 and b.cache.get(KEY) is None


async def test_a_spooled_write_that_lost_to_another_processs_same_version_is_not_kept(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    # A spools v2 during a database blip while B writes its own v2 of the same key: the
    # database keeps B's (A's replay is stale), and B's notice makes A read it again.
    spool = DurableSpool(spool_path(tmp_path))
    a = make_service(db.sessions, settings, spool=spool)
    b = make_service(db.sessions, settings)
    assert (await a.update_stm(await turn_for(a), summary="v1")).ok
    b_turn = await turn_for(b, BOB)
    async with outage(a.sessions):
        assert str(await a.update_stm(await turn_for(a), summary="A's v2")) == (
            "saved, pending sync"
        )
    assert (await b.update_stm(b_turn, summary="B's v2")).ok
    a.apply_notice({"o": b.instance_id, "t": "stm", "k": [["server", GUILD, None, CHANNEL, 2]]})
    await spool.replay(db.sessions)
    a.spool_replayed()

    assert (await a.entry(KEY)).summary == "B's v2"


# ------------------------------------------------ settings changed under a running turn


async def test_a_turn_in_flight_cannot_write_the_old_category_schema_over_a_summary(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    await a.memory.set_categories(GUILD, ALICE, [Category(0, "goals", "Goals", "goals")])
    await next_of(b, "guild")
    # B's turn starts while the guild is in category mode (the model is offered `goals`).
    in_flight = (await prepare(b.memory, BOB)).turn
    # Meanwhile the admin (served by A) goes back to summary mode, and A's turn writes one.
    await a.memory.set_categories(GUILD, ALICE, [])
    await next_of(b, "guild")
    assert await write(a, "Decided: the launch moves to Friday.") == "saved"
    await next_of(b, "stm")
    # B's turn now calls the tool with the schema it was offered.
    result = await b.memory.update_stm(in_flight, categories={"goals": "ship it"})
    assert str(result) == f"rejected: {REASON_CATEGORIES_CHANGED}"
    entry = await b.memory.entry(KEY)
    assert (entry.summary, entry.categories) == ("Decided: the launch moves to Friday.", {})


async def test_categories_changed_while_a_write_waits_for_the_channel_lock(
    two: tuple[Process, Process], db: Database
) -> None:
    # While B's write waits for the channel's lock (in production: another write of the
    # channel in its database round trip, or a /refresh), the admin adds a category in
    # process A and A's turn stores a value under it. B's write, shaped for the old
    # categories, is refused (settings checked again under the lock) rather than
    # dropping that value as "an undefined category".
    a, b = two
    await a.memory.set_categories(GUILD, ALICE, [Category(0, "decisions", "Decisions", "")])
    await next_of(b, "guild")
    in_flight = (await prepare(b.memory, BOB)).turn
    lock = b.memory._state.locks(CHANNEL)
    async with lock:  # the channel's lock is busy
        task = asyncio.create_task(
            b.memory.update_stm(in_flight, categories={"decisions": "ship on friday"})
        )
        # One yield runs it up to the lock: everything before it is cached (no await
        # suspends), as the assertion shows.
        await asyncio.sleep(0)
        assert lock._waiters and not task.done()
        await a.memory.set_categories(
            GUILD,
            ALICE,
            [Category(0, "decisions", "Decisions", ""), Category(1, "risks", "Risks", "")],
        )
        await next_of(b, "guild")
        assert await category_write(a, {"risks": "the vendor may be late"})
        await next_of(b, "stm")
    result = await task
    async with db.sessions() as session:
        row = await session.scalar(
            select(ShortTermMemory).where(ShortTermMemory.scope_kind == "server")
        )
    assert row is not None
    assert row.categories.get("risks") == "the vendor may be late", (str(result), row.categories)
