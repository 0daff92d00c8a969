"""The fetch guard (bot/fetch): no URL, redirect or resolved address reaches inside, and
no body is read past its cap or its time.

Nothing leaves loopback: private, link-local and public addresses are refused or
accepted through the resolver seam (a fake DNS) and a connector that records the address
it would connect to and refuses; the body tests reach a local server through a connector
that routes the pretended outside address there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from bot.fetch import (
    DISCORD_MEDIA,
    PUBLIC_WEB,
    FetchFailed,
    FetchRefused,
    FetchTooLarge,
    GuardedFetcher,
    host_address,
    is_public,
)
from tests.helpers.guarded_http import (
    OUTSIDE,
    PNG,
    Connections,
    FakeResolver,
    MediaServer,
    media_server,
    refusing_sockets,
    routed,
)

MB = 1024 * 1024

# Each non-public address, as a URL's host writes it.
INSIDE = {
    "loopback": "127.0.0.1",
    "loopback v6": "[::1]",
    "v4-mapped loopback": "[::ffff:127.0.0.1]",
    "decimal loopback": "2130706433",
    "hex loopback": "0x7f000001",
    "octal loopback": "0177.0.0.1",
    "short loopback": "127.1",
    "metadata link-local": "169.254.169.254",
    "link-local v6": "[fe80::1]",
    "private 10/8": "10.0.0.5",
    "private 172.16/12": "172.16.3.4",
    "private 192.168/16": "192.168.1.1",
    "unique local fc00::/7": "[fc00::1]",
    "unique local fd00::": "[fd12:3456::1]",
    "multicast": "224.0.0.251",
    "multicast v6": "[ff02::1]",
    "unspecified": "0.0.0.0",
    "shared 100.64/10": "100.64.0.1",
    "reserved 240/4": "240.0.0.1",
    "6to4 of loopback": "[2002:7f00:1::]",
}
# The same addresses as a resolver answers them.
RESOLVED = {name: host.strip("[]") for name, host in INSIDE.items() if "loopback" not in name}
RESOLVED |= {"loopback": "127.0.0.1", "loopback v6": "::1", "v4-mapped": "::ffff:127.0.0.1"}


@pytest.fixture
async def server() -> AsyncIterator[MediaServer]:
    async for running in media_server():
        yield running


def outside_fetcher(
    server: MediaServer, connections: Connections, **names: list[str]
) -> GuardedFetcher:
    """Any public host allowed; ``public.test`` is the local server, other names as given."""
    table = {"public.test": [OUTSIDE], **{k.replace("_", "."): v for k, v in names.items()}}
    return GuardedFetcher(
        PUBLIC_WEB,
        resolver=FakeResolver(table),
        connector=routed(connections, server.port),
        timeout_seconds=2.0,
    )


@pytest.mark.parametrize("host", INSIDE.values(), ids=INSIDE.keys())
def test_every_form_of_an_inside_address_is_not_public(host: str) -> None:
    address = host_address(host.strip("[]"))
    assert address is not None and not is_public(address)


@pytest.mark.parametrize("host", INSIDE.values(), ids=INSIDE.keys())
async def test_a_url_naming_an_inside_address_is_refused_before_any_connection(
    host: str,
) -> None:
    connections = Connections()
    fetcher = GuardedFetcher(
        PUBLIC_WEB, resolver=FakeResolver({}), connector=refusing_sockets(connections)
    )
    try:
        with pytest.raises(FetchRefused):
            await fetcher.fetch(f"http://{host}/latest/meta-data/x.png", max_bytes=MB)
    finally:
        await fetcher.close()
    assert connections.addresses == []


@pytest.mark.parametrize("address", RESOLVED.values(), ids=RESOLVED.keys())
async def test_a_name_resolving_to_an_inside_address_is_refused_before_any_connection(
    address: str,
) -> None:
    connections = Connections()
    resolver = FakeResolver({"images.example": [address]})
    fetcher = GuardedFetcher(PUBLIC_WEB, resolver=resolver, connector=refusing_sockets(connections))
    try:
        with pytest.raises(FetchRefused, match="non-public"):
            await fetcher.fetch("http://images.example/cat.png", max_bytes=MB)
    finally:
        await fetcher.close()
    assert resolver.asked == ["images.example"] and connections.addresses == []


async def test_one_inside_address_among_public_ones_refuses_the_name() -> None:
    connections = Connections()
    resolver = FakeResolver({"images.example": [OUTSIDE, "10.0.0.5"]})
    fetcher = GuardedFetcher(PUBLIC_WEB, resolver=resolver, connector=refusing_sockets(connections))
    try:
        with pytest.raises(FetchRefused):
            await fetcher.fetch("http://images.example/cat.png", max_bytes=MB)
    finally:
        await fetcher.close()
    assert connections.addresses == []


async def test_a_public_address_passes_the_guard_to_the_connector() -> None:
    # The connector records where it would connect and refuses: no packet is sent.
    connections = Connections()
    resolver = FakeResolver({"images.example": [OUTSIDE, "2606:4700::1"]})
    fetcher = GuardedFetcher(PUBLIC_WEB, resolver=resolver, connector=refusing_sockets(connections))
    try:
        with pytest.raises(FetchFailed):
            await fetcher.fetch("http://images.example/cat.png", max_bytes=MB)
    finally:
        await fetcher.close()
    assert {a for a, _ in connections.addresses} <= {OUTSIDE, "2606:4700::1"}
    assert connections.addresses


async def test_a_public_image_is_fetched(server: MediaServer) -> None:
    connections = Connections()
    fetcher = outside_fetcher(server, connections)
    try:
        fetched = await fetcher.fetch("http://public.test/ok.png", max_bytes=MB)
    finally:
        await fetcher.close()
    assert fetched.data == PNG and fetched.content_type == "image/png"
    assert connections.addresses == [(OUTSIDE, 80)]


@pytest.mark.parametrize("host", INSIDE.values(), ids=INSIDE.keys())
async def test_a_redirect_to_an_inside_address_is_refused(server: MediaServer, host: str) -> None:
    connections = Connections()
    fetcher = outside_fetcher(server, connections)
    target = f"http://{host}:{server.port}/ok.png"
    try:
        with pytest.raises(FetchRefused, match="redirect"):
            await fetcher.fetch(f"http://public.test/redirect?to={target}", max_bytes=MB)
    finally:
        await fetcher.close()
    assert len(server.requests) == 1  # the redirect, and nothing after it
    assert connections.addresses == [(OUTSIDE, 80)]


@pytest.mark.parametrize("address", RESOLVED.values(), ids=RESOLVED.keys())
async def test_a_redirect_to_a_name_resolving_inside_is_refused(
    server: MediaServer, address: str
) -> None:
    connections = Connections()
    fetcher = outside_fetcher(server, connections, inside_test=[address])
    try:
        with pytest.raises(FetchRefused, match="non-public"):
            await fetcher.fetch(
                "http://public.test/redirect?to=http://inside.test/ok.png", max_bytes=MB
            )
    finally:
        await fetcher.close()
    assert connections.addresses == [(OUTSIDE, 80)]


async def test_redirects_are_capped(server: MediaServer) -> None:
    connections = Connections()
    fetcher = outside_fetcher(server, connections)
    try:
        with pytest.raises(FetchRefused, match="more than 3 redirects"):
            await fetcher.fetch("http://public.test/loop", max_bytes=MB)
    finally:
        await fetcher.close()
    assert server.requests == ["/loop"] * 4


async def test_a_content_length_over_the_cap_is_refused_without_reading(
    server: MediaServer,
) -> None:
    fetcher = outside_fetcher(server, Connections())
    try:
        with pytest.raises(FetchTooLarge, match="Content-Length"):
            await fetcher.fetch("http://public.test/declared", max_bytes=8 * MB)
    finally:
        await fetcher.close()
    assert server.sent == len(PNG)


async def test_a_chunked_body_is_dropped_at_the_cap(server: MediaServer) -> None:
    fetcher = outside_fetcher(server, Connections())
    try:
        with pytest.raises(FetchTooLarge):
            await fetcher.fetch("http://public.test/chunked", max_bytes=1 * MB)
    finally:
        await fetcher.close()
    await asyncio.wait_for(server.gone.wait(), timeout=5)
    # The cap, and what the sockets' buffers held: far from the 50 MB offered.
    assert server.sent < 16 * MB


async def test_a_dribbling_body_is_cut_off_at_the_timeout(server: MediaServer) -> None:
    fetcher = GuardedFetcher(
        PUBLIC_WEB,
        resolver=FakeResolver({"public.test": [OUTSIDE]}),
        connector=routed(Connections(), server.port),
        timeout_seconds=0.3,
    )
    began = time.monotonic()
    try:
        with pytest.raises(FetchFailed, match=r"within 0\.3 s"):
            await fetcher.fetch("http://public.test/dribble", max_bytes=MB)
    finally:
        await fetcher.close()
    assert time.monotonic() - began < 2
    await asyncio.wait_for(server.gone.wait(), timeout=5)
    assert 0 < server.sent < 100


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://cdn.discordapp.com/attachments/1/2/cat.png?ex=1&hm=2", True),
        ("https://media.discordapp.net/attachments/1/2/cat.png", True),
        ("https://images-ext-1.discordapp.net/external/abc/https/example.com/a.png", True),
        ("https://CDN.discordapp.com./attachments/1/2/cat.png", True),
        ("http://cdn.discordapp.com/attachments/1/2/cat.png", False),
        ("https://cdn.discordapp.com:8443/attachments/1/2/cat.png", False),
        ("https://user:pw@cdn.discordapp.com/a.png", False),
        ("https://cdn.discordapp.com.evil.example/a.png", False),
        ("https://evilcdn.discordapp.com/a.png", False),
        ("https://images.example/photos/sunset.jpg", False),
        ("https://162.159.130.233/attachments/1/2/cat.png", False),
        ("http://127.0.0.1:8080/latest/meta-data/x.png", False),
        ("file:///etc/passwd", False),
        ("not a url", False),
    ],
)
def test_only_discords_cdn_and_media_proxy_are_discord_media(url: str, allowed: bool) -> None:
    assert (DISCORD_MEDIA.refusal(url) is None) is allowed
