"""Where a tenant's request may connect: the addresses a name resolves to, checked before the
connection is made, so a name that resolves elsewhere the next time (DNS rebinding) cannot slip
past the check: the connection goes to the address that was checked.

A URL built from a tenant's entry (`[lookups]`) may not reach a loopback, link-local (the
cloud metadata address 169.254.169.254 among them), private or otherwise non-global address,
unless the catalog sets `allow_private_destinations = true`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import httpx

__all__ = ["ForbiddenAddress", "is_public", "public_addresses"]


class ForbiddenAddress(httpx.TransportError):
    """The request's host resolves to an address it may not reach; nothing was sent."""


def is_public(address: str) -> bool:
    """Whether `address` (an IP literal) is a global unicast address: not loopback, link-local,
    private, shared (100.64/10), reserved, multicast or unspecified; an IPv4-mapped IPv6
    address is judged by its IPv4 address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def addresses_of(host: str, port: int) -> list[tuple[int, str]]:
    """The (family, address) pairs `host` resolves to, once each, the families taking turns
    (RFC 8305: the resolver's first, then the other); `OSError` when it does not resolve."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    by_family: dict[int, list[tuple[int, str]]] = {}
    for family, _, _, _, sockaddr in infos:
        pair = (int(family), str(sockaddr[0]))
        if pair not in by_family.setdefault(pair[0], []):
            by_family[pair[0]].append(pair)
    turns = list(by_family.values())
    return [
        turn[i] for i in range(max(map(len, turns), default=0)) for turn in turns if i < len(turn)
    ]


async def public_addresses(host: str, port: int) -> list[tuple[int, str]]:
    """The (family, address) pairs `host` resolves to (`addresses_of`), every one of them
    public; else `ForbiddenAddress` naming the first that is not (a name with one private
    address among public ones is refused whole). `httpx.ConnectError` when the name does not
    resolve."""
    try:
        addresses = await addresses_of(host, port)
    except OSError as exc:
        raise httpx.ConnectError(f"{host}:{port}: {type(exc).__name__}: {exc}") from exc
    for _, address in addresses:
        if not is_public(address):
            raise ForbiddenAddress(
                f"{host} resolves to {address}, a loopback, link-local or private address; a"
                " tenant's URL may not reach it (allow_private_destinations = true allows it)"
            )
    return addresses
