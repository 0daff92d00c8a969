"""The cache listener itself: a half-open connection found by its ping, start-up retries and the
reconnect backoff, its handlers' errors, the SSL settings, and what a process serves while it
cannot reconnect."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

import bot.db.notify as notify_module
from bot.config import Settings
from bot.config.urls import async_database_url
from bot.db.engine import Database
from bot.db.notify import NOTIFY_CHANNEL, CacheListener, ListenerUnavailable, Notice
from bot.memory.service import MemoryService
from bot.vocabulary.errors import DatabaseUnavailable
from bot.vocabulary.model import ScopeKey
from tests.helpers.builders import ALICE, CHANNEL, GUILD, make_service, prepare
from tests.helpers.listening import Process, start_process
from tests.integration.processes.harness import terminate_listeners

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
    a = make_service(db.sessions, settings)
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
