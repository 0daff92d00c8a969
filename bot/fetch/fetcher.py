"""GET a URL the policy allows, from public addresses only, capped in bytes and time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

from bot.fetch.errors import AddressRefused, FetchFailed, FetchRefused, FetchTooLarge
from bot.fetch.policy import UrlPolicy
from bot.fetch.resolver import GuardedResolver

log = logging.getLogger(__name__)

REDIRECTS = frozenset((301, 302, 303, 307, 308))
MAX_REDIRECTS = 3
TIMEOUT_SECONDS = 30.0
CHUNK_BYTES = 64 * 1024
USER_AGENT = "Kioku (a self-hosted Discord bot)"

# Builds the connection pool around the guarded resolver; tests hand in one that records
# (and refuses, or routes to a local server) the addresses it would connect to.
ConnectorFactory = Callable[[AbstractResolver], aiohttp.BaseConnector]


@dataclass(frozen=True, slots=True)
class Fetched:
    """A fetched body, the type its host declared, and the URL it came from at last."""

    data: bytes
    content_type: str | None
    url: str


class Fetcher(Protocol):
    """What fetches a URL: :class:`GuardedFetcher`, or a test's fake of it."""

    async def fetch(self, url: str, *, max_bytes: int) -> Fetched:
        """The body at ``url``; a :class:`~bot.fetch.FetchError` when there is none."""
        ...


def _connector(resolver: AbstractResolver) -> aiohttp.BaseConnector:
    return aiohttp.TCPConnector(resolver=resolver, limit=20)


class GuardedFetcher:
    """Fetches what ``policy`` allows, every hop checked, through a resolver that refuses
    non-public addresses; bodies over the cap and hosts too slow are cut off."""

    def __init__(
        self,
        policy: UrlPolicy,
        *,
        resolver: AbstractResolver | None = None,
        connector: ConnectorFactory = _connector,
        max_redirects: int = MAX_REDIRECTS,
        timeout_seconds: float = TIMEOUT_SECONDS,
    ) -> None:
        # `resolver`: the one the guard wraps (DNS by default; tests: a fake).
        self.policy = policy
        self._resolver = GuardedResolver(resolver)
        self._connector = connector
        self._max_redirects = max_redirects
        self._timeout = timeout_seconds
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No proxy from the environment (it would connect where the guard cannot
            # see), no cookies, no compression (a small body must not inflate past the cap
            # before it is counted), redirects followed here, each one checked.
            self._session = aiohttp.ClientSession(
                connector=self._connector(self._resolver),
                trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
                auto_decompress=False,
            )
        return self._session

    async def fetch(self, url: str, *, max_bytes: int) -> Fetched:
        """The body at ``url`` (at most ``max_bytes``), within ``timeout_seconds`` in all;
        a caller with a deadline of its own cuts it shorter with ``asyncio.timeout``."""
        try:
            async with asyncio.timeout(self._timeout):
                return await self._follow(URL(url), max_bytes)
        except TimeoutError:
            raise FetchFailed(f"no whole answer within {self._timeout:g} s") from None

    async def _follow(self, url: URL, max_bytes: int) -> Fetched:
        session = self._open()
        for hop in range(self._max_redirects + 1):
            why = self.policy.refusal(url)
            if why is not None:
                raise FetchRefused(why if hop == 0 else f"redirect refused: {why}")
            try:
                async with session.get(url, allow_redirects=False) as response:
                    if response.status in REDIRECTS:
                        location = response.headers.get("Location")
                        if not location:
                            raise FetchFailed(f"HTTP {response.status} without a Location")
                        url = response.url.join(URL(location))
                        continue
                    if response.status != 200:
                        raise FetchFailed(f"HTTP {response.status}")
                    data = await _body(response, max_bytes)
                    return Fetched(data, response.content_type or None, str(response.url))
            except aiohttp.ClientConnectorError as exc:
                if isinstance(exc.os_error, AddressRefused):
                    raise FetchRefused(str(exc.os_error)) from None
                raise FetchFailed(type(exc).__name__) from None
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                raise FetchFailed(type(exc).__name__) from None
        raise FetchRefused(f"more than {self._max_redirects} redirects")

    async def close(self) -> None:
        """Close the connection pool (a later fetch opens another)."""
        if self._session is not None:
            await self._session.close()
            self._session = None


async def _body(response: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """The body, read in chunks and dropped as soon as it is over ``max_bytes``."""
    declared = response.content_length
    if declared is not None and declared > max_bytes:
        raise FetchTooLarge(f"Content-Length {declared} is over {max_bytes} bytes")
    body = bytearray()
    async for chunk in response.content.iter_chunked(CHUNK_BYTES):
        body += chunk
        if len(body) > max_bytes:
            raise FetchTooLarge(f"more than {max_bytes} bytes")
    return bytes(body)
