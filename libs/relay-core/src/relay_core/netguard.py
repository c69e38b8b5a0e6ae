"""Where a callback may go: never inside (loopback, private, link-local, multicast, metadata and
the other special-purpose ranges, IPv4, IPv6 and IPv4-mapped), nor to an IPv6 address that
hands an IPv4 one to a translator or a tunnel (NAT64's prefixes, IPv4-compatible ``::a.b.c.d``,
Teredo), unless an operator names a network on purpose.

Used twice: at registration, a URL whose host is a literal address in a refused range is
refused (including the spellings a resolver accepts: ``0x7f000001``, ``2130706433``,
``127.1``, ``0177.0.0.1``); at delivery, the host is resolved and the connection is made only
to an address that passed (the consumer pins it), so a name that resolves inside, or changes
its answer between the check and the connection, gets nowhere.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class RefusedDestination(ValueError):
    """A callback URL, or an address it resolved to, that Relay will not call."""


def literal_address(host: str) -> Address | None:
    """The address ``host`` spells, if it is one: dotted or bracketed IPv6, and the legacy IPv4
    forms a C resolver takes (hex, octal, a single number, fewer than four parts)."""
    text = host.strip().strip("[]")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if not text or any(c not in "0123456789abcdefxABCDEFX." for c in text):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        return None


@dataclass(frozen=True)
class AddressPolicy:
    allowed_networks: tuple[Network, ...] = ()
    allow_loopback: bool = False
    require_https: bool = False

    @classmethod
    def build(
        cls, networks: Iterable[str], *, allow_loopback: bool, require_https: bool
    ) -> AddressPolicy:
        return cls(
            tuple(ipaddress.ip_network(n.strip(), strict=False) for n in networks if n.strip()),
            allow_loopback,
            require_https,
        )

    def refusal(self, address: Address) -> str | None:
        """Why ``address`` may not be called, or None."""
        if isinstance(address, ipaddress.IPv6Address):
            translated = _translated(address)
            if translated is not None and not any(
                address in network for network in self.allowed_networks
            ):
                return translated
        mapped = getattr(address, "ipv4_mapped", None) or getattr(address, "sixtofour", None)
        checked = mapped or address
        if any(checked in network for network in self.allowed_networks):
            return None
        if checked.is_loopback:
            return None if self.allow_loopback else "a loopback address"
        if checked.is_multicast:
            return "a multicast address"
        if checked.is_link_local:
            return "a link-local address (cloud metadata lives there)"
        if checked.is_private:
            return "a private address"
        if not checked.is_global:
            return "a special-purpose address"
        return None

    def check_url(self, url: str) -> str:
        """The URL as registered, or RefusedDestination saying why not."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RefusedDestination("must be an absolute http(s) URL")
        if self.require_https and parts.scheme != "https":
            raise RefusedDestination("must use https")
        if parts.username or parts.password:
            raise RefusedDestination("must not carry credentials")
        literal = literal_address(parts.hostname)
        if literal is not None and (why := self.refusal(literal)) is not None:
            raise RefusedDestination(f"points at {why} ({literal})")
        return url


# IPv6 addresses that carry an IPv4 one to a translator or a tunnel, which would reach that
# address (loopback and private ones included) on Relay's behalf: never called.
_NAT64 = (
    ipaddress.IPv6Network("64:ff9b::/96"),  # RFC 6052, the well-known prefix
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # RFC 8215, local-use
)
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # ::a.b.c.d (RFC 4291, deprecated)


def _translated(address: ipaddress.IPv6Address) -> str | None:
    if any(address in network for network in _NAT64):
        return "a translated (NAT64) address"
    if address in _IPV4_COMPATIBLE and int(address) > 1:  # (:: and ::1 are judged as such)
        return "an IPv4-compatible address"
    if address.teredo is not None:
        return "a tunnelled (Teredo) address"
    return None


@dataclass
class Resolved:
    host: str
    allowed: list[Address] = field(default_factory=list)
    refused: list[tuple[Address, str]] = field(default_factory=list)


def sort_addresses(policy: AddressPolicy, host: str, addresses: Iterable[str]) -> Resolved:
    """Split what ``host`` resolved to into addresses that may be called and the others."""
    resolved = Resolved(host)
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        why = policy.refusal(address)
        if why is None:
            resolved.allowed.append(address)
        else:
            resolved.refused.append((address, why))
    return resolved
