"""Fetching from outside hosts, guarded against reaching inside: one face for the bot's
image downloads and any later reader of links.

Only URLs a :class:`UrlPolicy` allows are asked for (scheme, host, no literal private
address, in every legacy form); the connector's resolver refuses a host that resolves to
a loopback, private, link-local, shared, multicast or reserved address (IPv4 and IPv6,
mapped forms included), on the first request and on every redirect; redirects are capped,
bodies read in chunks up to a byte cap, and the whole fetch bounded in time.

addresses  which addresses are public; a host's literal address in any form
policy     which URLs may be asked for (DISCORD_MEDIA, PUBLIC_WEB)
resolver   the connector's resolver, refusing non-public answers
fetcher    the GET itself: redirects checked, byte cap, timeout
errors     why nothing was fetched
"""

from bot.fetch.addresses import IPAddress, host_address, is_public
from bot.fetch.errors import AddressRefused, FetchError, FetchFailed, FetchRefused, FetchTooLarge
from bot.fetch.fetcher import MAX_REDIRECTS, ConnectorFactory, Fetched, Fetcher, GuardedFetcher
from bot.fetch.policy import DISCORD_MEDIA, PUBLIC_WEB, UrlPolicy
from bot.fetch.resolver import GuardedResolver

__all__ = [
    "DISCORD_MEDIA",
    "MAX_REDIRECTS",
    "PUBLIC_WEB",
    "AddressRefused",
    "ConnectorFactory",
    "FetchError",
    "FetchFailed",
    "FetchRefused",
    "FetchTooLarge",
    "Fetched",
    "Fetcher",
    "GuardedFetcher",
    "GuardedResolver",
    "IPAddress",
    "UrlPolicy",
    "host_address",
    "is_public",
]
