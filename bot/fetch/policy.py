"""Which URLs a fetch may ask for: the scheme, the host, and no literal private address."""

from __future__ import annotations

import re
from dataclasses import dataclass

from yarl import URL

from bot.fetch.addresses import host_address, is_public


@dataclass(frozen=True, slots=True)
class UrlPolicy:
    """The URLs allowed: ``schemes``, and hosts matching ``hosts`` (None: any name)."""

    schemes: frozenset[str]
    # Matched against the whole host, lowercased; None lets any host name through (the
    # resolved address is still checked, see GuardedResolver).
    hosts: re.Pattern[str] | None = None
    # Only the scheme's default port: a port is how a URL reaches another service.
    default_port_only: bool = False

    def refusal(self, url: str | URL) -> str | None:
        """Why ``url`` is refused, or None when it may be fetched."""
        try:
            parsed = url if isinstance(url, URL) else URL(url)
            host = parsed.raw_host
            port = parsed.port
        except ValueError:
            return "not a URL"
        if parsed.scheme not in self.schemes:
            return f"scheme {parsed.scheme or '(none)'!r} is not allowed"
        if not host:
            return "no host"
        if parsed.user is not None or parsed.password is not None:
            return "credentials in the URL"
        if self.default_port_only and not parsed.is_default_port():
            return f"port {port} is not allowed"
        address = host_address(host)
        if address is not None and not is_public(address):
            return f"address {address} is not public"
        if self.hosts is not None and (
            address is not None or not self.hosts.fullmatch(host.lower().rstrip("."))
        ):
            return f"host {host!r} is not allowed"
        return None


# Discord's CDN and media proxy: attachments (cdn., media.), embeds' proxied copies
# (images-ext-N.), as discord.py builds its asset and sticker URLs.
DISCORD_MEDIA = UrlPolicy(
    schemes=frozenset({"https"}),
    hosts=re.compile(
        r"cdn\.discordapp\.com|media\.discordapp\.net|images-ext-\d+\.discordapp\.net"
    ),
    default_port_only=True,
)
# Any public web page (a later "read a link" feature): every address is still checked.
PUBLIC_WEB = UrlPolicy(schemes=frozenset({"http", "https"}))
