"""Hostile redirects: 301/302/303 are never followed for a POST; 307/308 are (with
`follow_redirects = true`), at most 3 hops, secrets kept from origins not trusted.

A followed redirect lands on `/b/NAME/TAG/landed` (at whichever listener the Location names),
where the server answers 200 and records the request's headers.
"""

from __future__ import annotations

from devstack.hostile.behaviour import Exchange, Expect, behaviour

_BODY = b'{"moved":true}'


async def _redirect(x: Exchange, status: int, location: str | bytes | None) -> None:
    headers = [] if location is None else [("Location", location)]
    await x.reply(status, "Moved", headers, _BODY)


def _landing(x: Exchange, origin: str = "") -> str:
    return f"{x.origins[origin] if origin else ''}{x.base}/landed"


@behaviour(Expect.MOVED)
async def r301(x: Exchange) -> None:
    """301 Moved Permanently to a landing on the same origin: never followed for a POST."""
    await _redirect(x, 301, _landing(x))


@behaviour(Expect.MOVED)
async def r302(x: Exchange) -> None:
    """302 Found to a landing on the same origin: never followed for a POST."""
    await _redirect(x, 302, _landing(x))


@behaviour(Expect.MOVED)
async def r303(x: Exchange) -> None:
    """303 See Other to a landing on another origin: never followed (it would become a GET)."""
    await _redirect(x, 303, _landing(x, "other"))


@behaviour(Expect.MOVED)
async def r302_no_location(x: Exchange) -> None:
    """302 with no Location at all."""
    await _redirect(x, 302, None)


@behaviour(Expect.MOVED)
async def r301_non_ascii_location(x: Exchange) -> None:
    """301 whose Location is invalid UTF-8 bytes."""
    await _redirect(x, 301, b"/b/\xff\xfe\xc3(/landed")


@behaviour(Expect.MOVED)
async def r307_no_location(x: Exchange) -> None:
    """307 with no Location: nothing to follow."""
    await _redirect(x, 307, None)


@behaviour(Expect.MOVED)
async def r307_non_ascii_location(x: Exchange) -> None:
    """307 whose Location is invalid UTF-8 bytes and a space."""
    await _redirect(x, 307, b"http://127.0.0.1:1/\xff \xfe")


@behaviour(Expect.DELIVERED, unfollowed=Expect.MOVED, secrets_at_landing=True)
async def r307_same(x: Exchange) -> None:
    """307 to a landing on the same origin: followed with the same method and body."""
    await _redirect(x, 307, _landing(x))


@behaviour(Expect.DELIVERED, unfollowed=Expect.MOVED, secrets_at_landing=True)
async def r308_same(x: Exchange) -> None:
    """308 to a landing on the same origin (a relative Location): followed with the body."""
    await _redirect(x, 308, x.base.rsplit("/", 1)[-1] + "/landed")


@behaviour(Expect.DELIVERED, unfollowed=Expect.MOVED, secrets_at_landing=True)
async def r307_three_hops(x: Exchange) -> None:
    """307 three times (hop1, hop2, landing): the third hop is the last one allowed."""
    hops = {"": f"{x.base}/hop1", "hop1": f"{x.base}/hop2", "hop2": _landing(x)}
    await _redirect(x, 307, hops[x.step])


@behaviour(Expect.MOVED)
async def r307_four_hops(x: Exchange) -> None:
    """307 four times before the landing: one hop too many, handed off as a redirect."""
    hops = {"": "hop1", "hop1": "hop2", "hop2": "hop3", "hop3": "landed"}
    await _redirect(x, 307, f"{x.base}/{hops[x.step]}")


@behaviour(Expect.MOVED)
async def redirect_loop(x: Exchange) -> None:
    """308 to itself, forever."""
    await _redirect(x, 308, x.request.path)


@behaviour(Expect.DELIVERED, unfollowed=Expect.MOVED, secrets_at_landing=False)
async def r307_cross_origin(x: Exchange) -> None:
    """307 to another origin (another port) not trusted: followed without any secret header."""
    await _redirect(x, 307, _landing(x, "other"))


@behaviour(Expect.DELIVERED, unfollowed=Expect.MOVED, secrets_at_landing=True)
async def r308_trusted_origin(x: Exchange) -> None:
    """308 to another origin listed in redirect_trusted_origins: followed with its headers."""
    await _redirect(x, 308, _landing(x, "trusted"))
