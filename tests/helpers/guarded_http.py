"""Seams for testing the fetch guard without a packet beyond loopback.

``FakeResolver`` answers names from a table (the DNS the guard wraps); ``refusing_sockets``
is a connector whose socket factory records each address it is asked to connect to and
refuses, so nothing is sent; ``routed`` is a connector that sends what it is asked to
connect to at :data:`OUTSIDE` to a local server instead. ``MediaServer`` is that local
aiohttp server: it answers images, redirects, over-large and dribbling bodies, and counts
what it sent.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from bot.fetch import ConnectorFactory

# A public address the tests pretend a name resolves to; never connected to.
OUTSIDE = "93.184.215.14"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


class FakeResolver(AbstractResolver):
    """Answers names from ``table`` (name -> addresses) and records the names asked."""

    def __init__(self, table: Mapping[str, Sequence[str]]) -> None:
        self.table = dict(table)
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError(f"{host}: no such name (fake resolver)")
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=0,
            )
            for address in self.table[host]
        ]

    async def close(self) -> None:
        pass


class Connections:
    """The addresses a test connector was asked to connect to, in order."""

    def __init__(self) -> None:
        self.addresses: list[tuple[str, int]] = []


def refusing_sockets(connections: Connections) -> ConnectorFactory:
    """A connector that records every address it would connect to and connects to none."""

    def socket_factory(addr_info: Any) -> socket.socket:
        connections.addresses.append(tuple(addr_info[4][:2]))
        raise OSError("the test connector refuses every connection")

    def build(resolver: AbstractResolver) -> aiohttp.BaseConnector:
        return aiohttp.TCPConnector(resolver=resolver, socket_factory=socket_factory)

    return build


class _Routed(aiohttp.TCPConnector):
    def __init__(self, connections: Connections, port: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._connections = connections
        self._port = port

    async def _wrap_create_connection(self, *args: Any, addr_infos: Any, **kwargs: Any) -> Any:
        # After the guarded resolver approved the address: record it, and reach the
        # local server instead when it is the pretended outside one (else refuse).
        self._connections.addresses.extend(tuple(info[4][:2]) for info in addr_infos)
        if any(info[4][0] != OUTSIDE for info in addr_infos):
            raise aiohttp.ClientConnectionError("the test connector only routes OUTSIDE")
        local = [
            (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", self._port))
        ]
        return await super()._wrap_create_connection(*args, addr_infos=local, **kwargs)


def routed(connections: Connections, port: int) -> ConnectorFactory:
    """A connector that sends connections to :data:`OUTSIDE` to ``127.0.0.1:port``."""

    def build(resolver: AbstractResolver) -> aiohttp.BaseConnector:
        return _Routed(connections, port, resolver=resolver)

    return build


class MediaServer:
    """A local HTTP server; ``sent`` counts body bytes written, ``gone`` is set once a
    streaming client went away."""

    def __init__(self) -> None:
        self.sent = 0
        self.gone = asyncio.Event()
        self.released = asyncio.Event()  # set at stop: handlers still waiting end
        self.requests: list[str] = []
        app = web.Application()
        app.router.add_get("/ok.png", self._ok)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/loop", self._loop)
        app.router.add_get("/declared", self._declared)
        app.router.add_get("/chunked", self._chunked)
        app.router.add_get("/dribble", self._dribble)
        self._runner = web.AppRunner(app)
        self.port = 0

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.released.set()
        await self._runner.cleanup()

    async def _ok(self, request: web.Request) -> web.Response:
        self.requests.append(request.path_qs)
        return web.Response(body=PNG, content_type="image/png")

    async def _redirect(self, request: web.Request) -> web.Response:
        self.requests.append(request.path_qs)
        raise web.HTTPFound(request.query["to"])

    async def _loop(self, request: web.Request) -> web.Response:
        self.requests.append(request.path_qs)
        raise web.HTTPFound("/loop")

    async def _declared(self, request: web.Request) -> web.StreamResponse:
        """Says 50 MB in Content-Length, sends a first chunk and waits for the test's end."""
        response = web.StreamResponse(headers={"Content-Type": "image/png"})
        response.content_length = 50 * 1024 * 1024
        await response.prepare(request)
        await self._write(response, PNG)
        await self.released.wait()
        return response

    async def _chunked(self, request: web.Request) -> web.StreamResponse:
        """50 MB without a length, as fast as the client reads."""
        response = web.StreamResponse(headers={"Content-Type": "image/png"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        chunk = b"\x00" * (64 * 1024)
        while self.sent < 50 * 1024 * 1024 and await self._write(response, chunk):
            pass
        return response

    async def _dribble(self, request: web.Request) -> web.StreamResponse:
        """One byte, then another each tick, for as long as the client stays."""
        response = web.StreamResponse(headers={"Content-Type": "image/png"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        while await self._write(response, b"\x00"):
            try:
                # The pace of the dribble (not a wait for the test): a byte per tick.
                await asyncio.wait_for(self.released.wait(), timeout=0.05)
            except TimeoutError:
                continue
            break
        return response

    async def _write(self, response: web.StreamResponse, data: bytes) -> bool:
        """Write ``data``; False (and ``gone`` set) once the client went away."""
        try:
            await response.write(data)
        except (ConnectionError, RuntimeError):
            self.gone.set()
            return False
        self.sent += len(data)
        return True


async def media_server() -> AsyncIterator[MediaServer]:
    server = MediaServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
