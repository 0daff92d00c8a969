"""Which IP addresses an outside fetch may reach: public unicast ones only."""

from __future__ import annotations

import ipaddress
import re

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# The legacy IPv4 forms ``inet_aton`` (and so getaddrinfo) still takes: one to four parts,
# each decimal, octal (leading 0) or hex (0x): 2130706433, 0x7f000001, 0177.0.0.1, 127.1.
_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _part(text: str) -> int:
    if text[:2].lower() == "0x":
        return int(text[2:] or "0", 16)
    return int(text, 8) if text[:1] == "0" else int(text)


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_PART.fullmatch(p) for p in parts):
        return None
    *leading, last = [_part(p) for p in parts]
    bits = 8 * (4 - len(leading))  # the last part fills what the others leave
    if any(v > 0xFF for v in leading) or last >= 1 << bits:
        return None
    number = 0
    for value in leading:
        number = number << 8 | value
    return ipaddress.IPv4Address(number << bits | last)


def host_address(host: str) -> IPAddress | None:
    """The address a URL's host names literally (any form a resolver would take), or None
    for a name."""
    bare = host.strip("[]").rstrip(".")
    try:
        return ipaddress.ip_address(bare.split("%", 1)[0])  # a zone id does not change it
    except ValueError:
        return _legacy_ipv4(bare)


def _embedded(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 one carries (mapped, 6to4, Teredo, NAT64)."""
    found = [a for a in (address.ipv4_mapped, address.sixtofour) if a is not None]
    if address.teredo is not None:
        found.extend(address.teredo)
    if address in _NAT64:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is a public unicast one: not loopback, private, link-local,
    shared, multicast, reserved or unspecified, nor an IPv6 form of such an IPv4 one."""
    if not address.is_global or address.is_multicast or address.is_reserved:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        return all(is_public(inner) for inner in _embedded(address))
    return True
