"""Why a fetch gave no body: refused by the guard, too large, or failed on the way."""

from __future__ import annotations


class FetchError(Exception):
    """The resource could not be fetched; the message is safe to log (no body)."""


class FetchRefused(FetchError):
    """The guard refused the URL, a redirect, or the address a host resolved to."""


class FetchTooLarge(FetchError):
    """The body is over the byte cap (said by Content-Length, or found while reading)."""


class FetchFailed(FetchError):
    """The host answered with an error, did not answer in time, or the network failed."""


class AddressRefused(OSError):
    """A resolved address is not public: raised inside the connector's resolution."""

    # An OSError, so aiohttp reports it as the DNS failure it stands for
    # (ClientConnectorDNSError) and the fetcher finds it as its ``os_error``.
