"""The connector's resolver, refusing any answer that holds a non-public address."""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from bot.fetch.addresses import host_address, is_public
from bot.fetch.errors import AddressRefused


class GuardedResolver(AbstractResolver):
    """Resolves through ``inner``, and refuses the host when any address is not public."""

    # All the answer, not just the first: a name answering a public and a private address
    # would otherwise reach the private one when the public one does not answer.
    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self._inner = inner if inner is not None else DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The addresses ``host`` resolves to, all public; :class:`AddressRefused` if not."""
        answers = await self._inner.resolve(host, port, family)
        for answer in answers:
            address = host_address(answer["host"])
            if address is None or not is_public(address):
                raise AddressRefused(f"{host} resolves to a non-public address")
        if not answers:
            raise AddressRefused(f"{host} resolves to no address")
        return answers

    async def close(self) -> None:
        await self._inner.close()
