"""Two processes' caches on one PostgreSQL stay coherent through LISTEN/NOTIFY.

Each "process" is a full set of memory objects (its own cache, its own listener
connection); the notices travel through the real server.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import URL

import bot.db.notify as notify_module
from bot.config import Settings
from bot.config.urls import async_database_url
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.db.notify import NOTIFY_CHANNEL, CacheListener, ListenerUnavailable, Notice
from bot.db.storage import faults
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.memory.stm.change import REASON_CATEGORIES_CHANGED
from bot.memory.turn.types import REASON_CLEARED
from bot.services import start_services
from bot.vocabulary.errors import DatabaseUnavailable
from bot.vocabulary.model import Category, ScopeKey
from tests.helpers.builders import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL,
    GUILD,
    OTHER_CHANNEL,
    ManualClock,
    make_service,
    prepare,
    turn_for,
    two_services,
)
from tests.helpers.database import make_test_settings
from tests.helpers.faults import outage, own_sessions
from tests.helpers.listening import Process, start_process

KEY = ScopeKey.server(GUILD, CHANNEL)


@pytest.fixture
async def two(
    db: Database, settings: Settings, pg_url: URL
) -> AsyncIterator[tuple[Process, Process]]:
    a = await start_process(db, settings, pg_url)
    b = await start_process(db, settings, pg_url)
    yield a, b
    await a.listener.close()
    await b.listener.close()


async def write(process: Process, summary: str, user: int = ALICE) -> str:
    prepared = await prepare(process.memory, user)
    return str(await process.memory.update_stm(prepared.turn, summary=summary))


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


# ---------------------------------------------------------------- the listener itself


def ignore(_notice: Notice) -> None:
    pass


def refused_url(password: str = "hunter2") -> URL:
    """An asyncpg URL on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return URL.create(
        "postgresql+asyncpg",
        username="kioku",
        password=password,
        host="127.0.0.1",
        port=port,
        database="kioku",
    )


async def notify(db: Database, payload: str) -> None:
    async with db.engine.begin() as connection:
        await connection.execute(
            text("SELECT pg_notify(:channel, :payload)"),
            {"channel": NOTIFY_CHANNEL, "payload": payload},
        )


async def terminate_listeners(db: Database) -> None:
    async with db.engine.connect() as connection:
        await connection.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'kioku-listener'"
            )
        )
        await connection.commit()


class SilencingProxy:
    """A TCP proxy to the test server whose open connections can go silent: bytes are
    swallowed both ways and nothing is closed, as when a NAT or firewall forgets a
    connection (half-open). Connections made afterwards are forwarded again."""

    def __init__(self, upstream: URL) -> None:
        self._upstream = upstream
        self._pairs: list[list[bool]] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.url = upstream

    async def __aenter__(self) -> SilencingProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = self._upstream.set(host="127.0.0.1", port=port).difference_update_query(["host"])
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def silence(self) -> None:
        for pair in self._pairs:
            pair[0] = True

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        socket_dir = self._upstream.query.get("host")
        port = self._upstream.port or 5432
        if isinstance(socket_dir, str):
            up_reader, up_writer = await asyncio.open_unix_connection(
                f"{socket_dir}/.s.PGSQL.{port}"
            )
        else:
            up_reader, up_writer = await asyncio.open_connection(self._upstream.host, port)
        silent = [False]
        self._pairs.append(silent)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink, silent))
            self._tasks.add(task)

    @staticmethod
    async def _pipe(
        source: asyncio.StreamReader, sink: asyncio.StreamWriter, silent: list[bool]
    ) -> None:
        while data := await source.read(65536):
            if not silent[0]:
                sink.write(data)
                await sink.drain()
        sink.close()


async def test_a_half_open_listener_connection_is_found_by_the_ping(
    db: Database, pg_url: URL
) -> None:
    async with SilencingProxy(pg_url) as proxy:
        reset = asyncio.Event()
        arrived = asyncio.Event()
        listener = CacheListener(
            proxy.url,
            on_notice=lambda notice: arrived.set() if notice.get("t") == "after" else None,
            on_reset=reset.set,
            max_backoff_seconds=0.1,
            ping_interval_seconds=0.1,
            ping_timeout_seconds=0.3,
        )
        await listener.start()
        try:
            proxy.silence()  # no FIN, no RST: only a ping can tell
            async with asyncio.timeout(10):
                await reset.wait()
            assert listener.resets == 1
            await notify(db, '{"t":"after"}')
            async with asyncio.timeout(10):
                await arrived.wait()
        finally:
            await listener.close()


async def test_the_listener_start_gives_up_with_a_clear_error_and_logs_each_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = refused_url(password="hunter2")
    listener = CacheListener(
        url,
        on_notice=ignore,
        on_reset=lambda: None,
        max_backoff_seconds=0.05,
        start_timeout_seconds=0.5,
    )
    with caplog.at_level(logging.WARNING, logger="bot.db.notify"):
        async with asyncio.timeout(10):  # before the fix: waited forever, silently
            with pytest.raises(ListenerUnavailable) as caught:
                await listener.start()
    where = f"postgresql at 127.0.0.1:{url.port}/kioku"
    assert str(caught.value) == (
        f"the cache listener could not listen on {where} within 0.5 s (see the warnings above)"
    )
    assert isinstance(caught.value, DatabaseUnavailable)  # `kioku run` prints one line
    retries = [r for r in caplog.records if "cannot connect" in r.getMessage()]
    assert len(retries) >= 2 and all(r.levelno == logging.WARNING for r in retries)
    assert where in retries[0].getMessage()
    assert not any("hunter2" in r.getMessage() for r in caplog.records)


async def test_the_listeners_reconnect_backoff_doubles_from_a_fifth_of_a_second_to_its_cap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each failed attempt logs its number and the wait it then takes."""
    listener = CacheListener(
        refused_url(),
        on_notice=ignore,
        on_reset=lambda: None,
        max_backoff_seconds=0.4,
        start_timeout_seconds=1.5,  # attempts at 0, 0.2, 0.6, 1.0 s (refused at once)
    )
    with (
        caplog.at_level(logging.WARNING, logger="bot.db.notify"),
        pytest.raises(ListenerUnavailable),
    ):
        await listener.start()
    retries = [
        (r.args[1], r.args[-1])
        for r in caplog.records
        if isinstance(r.args, tuple) and "cannot connect" in str(r.msg)
    ]
    assert len(retries) >= 3
    assert retries == [(1, 0.2), (2, 0.4), (3, 0.4), (4, 0.4), (5, 0.4)][: len(retries)]


async def test_an_error_in_the_reset_handler_does_not_end_the_listener(
    db: Database, pg_url: URL, caplog: pytest.LogCaptureFixture
) -> None:
    calls = 0
    recovered = asyncio.Event()

    def on_reset() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("bug in the reset handler")
        recovered.set()

    listener = CacheListener(pg_url, on_notice=ignore, on_reset=on_reset, max_backoff_seconds=0.1)
    await listener.start()
    try:
        with caplog.at_level(logging.WARNING, logger="bot.db.notify"):
            await terminate_listeners(db)
            async with asyncio.timeout(10):
                await recovered.wait()
    finally:
        await listener.close()
    assert calls == 2 and listener.resets == 2
    (failure,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert failure.exc_info is not None and isinstance(failure.exc_info[1], RuntimeError)


async def test_a_dead_supervisor_is_logged_and_start_does_not_wait(
    pg_url: URL, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    listener = CacheListener(pg_url, on_notice=ignore, on_reset=lambda: None)

    async def broken() -> None:
        raise RuntimeError("unexpected")

    monkeypatch.setattr(listener, "_supervise", broken)
    with caplog.at_level(logging.ERROR, logger="bot.db.notify"):
        async with asyncio.timeout(10):  # far below the 30 s start timeout
            with pytest.raises(ListenerUnavailable, match="stopped before listening"):
                await listener.start()
    (record,) = caplog.records
    assert "caches are no longer coherent" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)


async def test_the_listener_connects_with_the_ssl_parameter_settings_produce(
    db: Database, pg_url: URL
) -> None:
    # DATABASE_URL=…?sslmode=require becomes ?ssl=require (asyncpg's name); the listener
    # must read it as the engine does, not hand "ssl" to the server as a setting.
    url = async_database_url(
        pg_url.update_query_dict({"sslmode": "require"}).render_as_string(hide_password=False)
    )
    assert url.query.get("ssl") == "require" and "sslmode" not in url.query
    arrived = asyncio.Event()
    listener = CacheListener(url, on_notice=lambda _n: arrived.set(), on_reset=lambda: None)
    try:
        async with asyncio.timeout(10):
            await listener.start()
            await notify(db, '{"t":"ping"}')
            await arrived.wait()
    finally:
        await listener.close()


async def test_an_opt_out_heard_while_the_opt_in_is_read_is_not_lost(
    db: Database, settings: Settings
) -> None:
    a = make_service(db.sessions, settings, ManualClock())
    b = make_service(own_sessions(db), settings, ManualClock())
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
    a = make_service(db.sessions, settings, ManualClock())
    turn = (await prepare(a)).turn
    assert (await a.update_stm(turn, summary="v1")).ok
    b = make_service(own_sessions(db), settings, ManualClock())
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


# ------------------------------------------------- while the listener cannot reconnect


class FailingReconnect:
    """asyncpg for the listener: the first connect works, later ones fail."""

    def __init__(self) -> None:
        self.calls = 0
        self.retried = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncpg, name)

    async def connect(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            return await asyncpg.connect(*args, **kwargs)
        self.retried.set()
        raise OSError("too many connections (simulated)")


# A, a process without a listener; B, whose listener connected once and can never again;
# and the fake asyncpg B's listener uses.
CutOff = tuple[FailingReconnect, MemoryService, Process]


@pytest.fixture
async def cut_off(
    db: Database, settings: Settings, pg_url: URL, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[CutOff]:
    """Processes A and B, B's listener unable to reconnect once its connection is lost."""
    fake = FailingReconnect()
    monkeypatch.setattr(notify_module, "asyncpg", fake)
    a = make_service(db.sessions, settings, ManualClock())
    b = await start_process(db, settings, pg_url)
    yield fake, a, b
    await b.listener.close()


async def test_an_opt_out_made_elsewhere_is_not_served_stale_while_the_listener_is_down(
    db: Database, cut_off: CutOff
) -> None:
    fake, a, b = cut_off
    await a.set_cross_context_opt_in(ALICE, True)
    await b.next_notice()
    assert await b.memory.cross_context_opt_in(ALICE) is True  # cached in B
    await terminate_listeners(db)
    async with asyncio.timeout(10):
        await fake.retried.wait()  # B knows its notice connection is gone
    await a.set_cross_context_opt_in(ALICE, False)  # the notice B cannot hear
    assert await b.memory.cross_context_opt_in(ALICE) is False


async def test_a_forget_me_made_elsewhere_is_not_served_stale_while_the_listener_is_down(
    db: Database, cut_off: CutOff
) -> None:
    fake, a, b = cut_off
    key = ScopeKey.server(GUILD, CHANNEL)
    turn = (await prepare(a)).turn
    assert (await a.update_stm(turn, summary="Alice's secret plan")).ok
    await b.next_notice()
    assert (await b.memory.entry(key)).summary == "Alice's secret plan"  # cached in B
    await terminate_listeners(db)
    async with asyncio.timeout(10):
        await fake.retried.wait()
    await a.forget_user(ALICE)
    assert (await b.memory.entry(key)).summary == ""


async def test_a_spooled_write_that_lost_to_another_processs_same_version_is_not_kept(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    # A spools v2 during a database blip while B writes its own v2 of the same key: the
    # database keeps B's (A's replay is stale), and B's notice makes A read it again.
    spool = DurableSpool(spool_path(tmp_path))
    a = make_service(db.sessions, settings, ManualClock(), spool=spool)
    b = make_service(db.sessions, settings, ManualClock())
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


# ------------------------------------------- rows deleted without naming their keys


def clock_of(process: Process) -> ManualClock:
    clock = process.memory.clock
    assert isinstance(clock, ManualClock)
    return clock


def advance_both(two: tuple[Process, Process], **delta: float) -> None:
    for process in two:
        clock_of(process).advance(**delta)


async def next_of(process: Process, kind: str) -> Notice:
    while (notice := await process.next_notice()).get("t") != kind:
        pass
    return notice


async def category_write(process: Process, values: dict[str, str], user: int = ALICE) -> bool:
    turn = (await prepare(process.memory, user)).turn
    return (await process.memory.update_stm(turn, categories=values)).ok


async def expired_stand_in_in_b(two: tuple[Process, Process]) -> None:
    """A writes v1..v3; three months pass; B serves the channel: the expired row is not
    shown, B keeps only its version (3)."""
    a, b = two
    for text_ in ("v1", "v2", "v3"):
        assert await write(a, text_) == "saved"
        await next_of(b, "stm")
    advance_both(two, days=91)
    stand_in = await b.memory.entry(KEY)
    assert (stand_in.has_content, stand_in.version) == (False, 3)


async def test_a_memory_written_after_the_janitor_purge_elsewhere_is_seen_here(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    await expired_stand_in_in_b(two)
    assert await a.memory.purge_expired_rows() == 2  # the server and user rows
    # A new conversation starts; A writes a fresh memory (version 1 again)...
    assert await write(a, "fresh plan: launch on Friday") == "saved"
    await next_of(b, "stm")
    # ...and B, having heard its notice, serves it.
    assert (await b.memory.entry(KEY)).summary == "fresh plan: launch on Friday"


async def test_the_janitor_purge_elsewhere_drops_the_stand_ins_here(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    await expired_stand_in_in_b(two)
    assert await a.memory.purge_expired_rows() == 2
    await next_of(b, "purge")
    # Its version would outrank the row written next (counted from 1 again).
    assert KEY not in b.memory.cache
    assert (await b.memory.entry(KEY)).version == 0


async def test_a_notice_evicts_a_cached_version_higher_than_its_own(
    two: tuple[Process, Process], db: Database
) -> None:
    # Rows deleted with no notice at all (by hand, or an older bot's janitor): B's stand-in
    # keeps version 3; the next memory written elsewhere is version 1.
    a, b = two
    await expired_stand_in_in_b(two)
    async with db.sessions() as session, session.begin():
        await session.execute(text("DELETE FROM short_term_memories"))
    assert await write(a, "fresh plan: launch on Friday") == "saved"
    notice = await next_of(b, "stm")
    assert [k[4] for k in notice["k"]] == [1, 1]
    assert (await b.memory.entry(KEY)).summary == "fresh plan: launch on Friday"


async def test_a_write_here_after_the_janitor_purge_elsewhere_keeps_the_new_memory(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    await a.memory.set_categories(
        GUILD, ALICE, [Category(0, "goals", "Goals", "g"), Category(1, "mood", "Mood", "m")]
    )
    await next_of(b, "guild")
    for n in range(3):
        assert await category_write(a, {"goals": f"old {n}"})
        await next_of(b, "stm")
    advance_both(two, days=91)
    assert not (await b.memory.entry(KEY)).has_content  # expired: version 3 kept in B
    assert await a.memory.purge_expired_rows() == 2
    assert await category_write(a, {"goals": "launch Friday"})
    await next_of(b, "stm")
    # Bob's turn on B sets only the mood ("omitted categories keep their value").
    assert await category_write(b, {"mood": "excited"}, user=BOB)
    await next_of(a, "stm")
    stored = await a.memory.entry(KEY)
    assert stored.categories == {"goals": "launch Friday", "mood": "excited"}


async def test_a_memory_written_after_a_forget_me_elsewhere_is_seen_here(
    two: tuple[Process, Process],
) -> None:
    # No janitor needed: a memory quiet for a day is expired, and its stand-in in B keeps
    # the old version but no contributors, so the /forget-me notice does not name it.
    a, b = two
    for text_ in ("v1", "v2", "v3"):
        assert await write(a, text_) == "saved"
        await next_of(b, "stm")
    advance_both(two, hours=25)
    assert not (await b.memory.entry(KEY)).has_content  # expired row: version 3 kept in B
    await a.memory.forget_user(ALICE)  # deletes the channel's row (Alice contributed)
    await next_of(b, "forget")
    assert KEY not in b.memory.cache
    assert await write(a, "Bob: the launch is on Friday", user=BOB) == "saved"  # version 1
    await next_of(b, "stm")
    assert (await b.memory.entry(KEY)).summary == "Bob: the launch is on Friday"


@pytest.mark.parametrize(
    ("categories", "alive_h", "dead_h"), [(False, 23.9, 24.0), (True, 11.9, 12.0)]
)
async def test_a_memory_hydrated_in_another_process_expires_on_the_writers_schedule(
    two: tuple[Process, Process], categories: bool, alive_h: float, dead_h: float
) -> None:
    a, b = two
    if categories:
        await a.memory.set_categories(GUILD, ALICE, [Category(0, "goals", "Goals", "g")])
        await next_of(b, "guild")
    advance_both(two, hours=5)
    if categories:
        assert await category_write(a, {"goals": "x"})
    else:
        assert await write(a, "x") == "saved"
    await next_of(b, "stm")
    clock_of(b).advance(hours=alive_h)
    assert (await b.memory.entry(KEY)).has_content
    b.memory.cache.clear()
    assert (await b.memory.entry(KEY)).has_content  # hydrated: the TTL runs from the write
    clock_of(b).advance(hours=dead_h - alive_h)
    assert not (await b.memory.entry(KEY)).has_content
    b.memory.cache.clear()
    assert not (await b.memory.entry(KEY)).has_content


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


async def _server_rows(db: Database) -> list[tuple[str, list[int]]]:
    async with db.sessions() as session:
        rows = await session.scalars(select(ShortTermMemory))
        return [(r.summary, list(r.contributor_ids)) for r in rows]


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


async def _stand_in_then_forget(
    db: Database, settings: Settings, tmp_path: Path, *, spooled: bool
) -> tuple[str, str, str]:
    """Alice's memory (v3) expired; process A holds its stand-in (v3, no content). Alice
    runs /forget-me in A (during a database blip when ``spooled``: replayed after). Then
    process C starts a new memory (version 1 again); A, not having heard C's notice yet,
    runs a turn and writes. Returns (the memory A's turn was shown, A's write result,
    the server row's summary)."""
    clock = ManualClock()
    spool = DurableSpool(spool_path(tmp_path))
    a = make_service(db.sessions, settings, clock, spool=spool)
    b = make_service(db.sessions, settings, clock)
    for n in (1, 2, 3):
        assert (await b.update_stm(await turn_for(b, ALICE), summary=f"alice v{n}")).ok
    clock.advance(hours=30)  # past the 24 h TTL, well within retention
    stand_in = await a.entry(ScopeKey.server(GUILD, CHANNEL))
    assert (stand_in.has_content, stand_in.version) == (False, 3)
    if spooled:
        async with outage(a.sessions):
            assert (await a.forget_user(ALICE)).pending_sync
        assert await spool.replay(db.sessions) == 1
        a.spool_replayed()  # as the replayer does (bot/app.py)
    else:
        assert not (await a.forget_user(ALICE)).pending_sync
    assert await _server_rows(db) == []  # Alice's rows are gone; versions restart at 1

    clock.advance(minutes=5)
    c = make_service(db.sessions, settings, clock)
    assert str(await c.update_stm(await turn_for(c, BOB), summary="bob: new plan")) == "saved"
    # A has not heard C's notice yet (notices are asynchronous).
    carols = await prepare(a, CAROL)
    shown = carols.entry.summary  # the live entry: the write mutates it
    result = await a.update_stm(carols.turn, summary="carol: hello")
    async with db.sessions() as session:
        row = await session.scalar(
            select(ShortTermMemory).where(ShortTermMemory.scope_kind == "server")
        )
    assert row is not None
    return shown, str(result), row.summary


async def test_an_online_forget_drops_stand_ins_so_no_new_memory_is_overwritten(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    shown, result, _ = await _stand_in_then_forget(db, settings, tmp_path, spooled=False)
    # A re-read the key: its write is built on C's memory.
    assert (shown, result) == ("bob: new plan", "saved")


async def test_a_replayed_forget_drops_stand_ins_so_no_new_memory_is_overwritten(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    shown, result, stored = await _stand_in_then_forget(db, settings, tmp_path, spooled=True)
    # A write never shown C's memory must not replace it (it would be refused as stale).
    assert shown == "bob: new plan" or stored == "bob: new plan", (shown, result, stored)


async def test_a_turn_shown_a_memory_forgotten_elsewhere_unheard_cannot_store_it_again(
    db: Database, settings: Settings
) -> None:
    clock, a, b = two_services(db.sessions, settings)
    assert (await a.update_stm(await turn_for(a, ALICE), summary="Alice's sister is Maria")).ok
    # A's notice connection is down: it reads the database on every use, and hears nothing.
    a.listener_lost()
    clock.advance(seconds=1)
    # Bob's turn in A is shown the channel's memory, which holds Alice's words only (none
    # of her messages are in the window any more).
    prepared = await prepare(a, BOB)
    assert prepared.entry.summary == "Alice's sister is Maria"
    clock.advance(seconds=1)
    await b.forget_user(ALICE)  # /forget-me in process B deletes the channel's rows
    clock.advance(seconds=1)

    # The model keeps what it was shown: that is still Alice's words.
    result = await a.update_stm(prepared.turn, summary="Alice's sister is Maria; Bob likes tea")

    assert not result.ok, str(result)
    async with db.sessions() as session:
        summaries = list(await session.scalars(select(ShortTermMemory.summary)))
    assert not any("Maria" in s for s in summaries), summaries
