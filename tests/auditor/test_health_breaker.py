"""A destination's circuit breaker in the auditor's health, from the breaker facts of its connector replicas."""

from __future__ import annotations

import msgspec

from auditor.breakers import CLOSED_KEPT_S, STALE_S
from auditor.health import Health
from hifi.audit import BREAKER, FORMAT_MAJOR, FORMAT_MINOR, BreakerChange, Fact

T0 = 1_790_000_000_000
_ids = iter(range(10**6))


def change(
    state: str,
    at_ms: int,
    *,
    replica: str = "a",
    since_ms: int | None = None,
    route: str | None = None,
    error: str | None = None,
) -> Fact:
    """The breaker fact of one change written at `at_ms`."""
    return Fact(
        FORMAT_MAJOR,
        FORMAT_MINOR,
        f"f{next(_ids)}",
        "d",
        f"connector@{replica}",
        BREAKER,
        None,
        None,
        at_ms,
        [],
        breaker=BreakerChange(
            route, state, at_ms if since_ms is None else since_ms, error, replica
        ),
    )


def breaker(health: Health, now_ms: int) -> dict[str, object]:
    seen: dict[str, object] = health.view(now_ms)["breaker"]
    return seen


def test_the_destination_state_is_the_worst_over_two_replicas() -> None:
    """Replica a opens at T0 (HTTP 401), b at T0+2 s: open since T0 with a's error; b's probe
    closes it, a half-opens: half-open; a closes: closed, no error, and nothing counted as
    events or batches."""
    health = Health()
    health.note(change("open", T0, replica="a", error="HTTP 401 a"), T0)
    health.note(change("open", T0 + 2000, replica="b", error="HTTP 401 b"), T0 + 2000)
    seen = breaker(health, T0 + 3000)
    assert seen == {
        "state": "open",
        "since_ms": T0,
        "last_error": "HTTP 401 a",
        "replicas": 2,
        "replicas_not_closed": 2,
        "open_routes": 0,
        "known_routes": 0,
    }
    health.note(change("half_open", T0 + 4000, replica="b", since_ms=T0 + 2000), T0 + 4000)
    health.note(change("closed", T0 + 4100, replica="b"), T0 + 4100)
    health.note(change("half_open", T0 + 5000, replica="a", since_ms=T0), T0 + 5000)
    seen = breaker(health, T0 + 5000)
    assert (seen["state"], seen["since_ms"], seen["replicas_not_closed"]) == (
        "half_open",
        T0,
        1,
    )
    health.note(change("closed", T0 + 5100, replica="a"), T0 + 5100)
    seen = breaker(health, T0 + 5100)
    assert (seen["state"], seen["since_ms"], seen["last_error"], seen["replicas"]) == (
        "closed",
        None,
        None,
        2,
    )
    assert health.view(T0 + 5100)["events"] == 0
    assert health.view(T0 + 5100)["batches"] == 0


def test_an_older_change_read_late_does_not_undo_a_newer_one() -> None:
    """Facts may be read out of order: the newest change per replica wins."""
    health = Health()
    health.note(change("closed", T0 + 1000), T0 + 1000)
    health.note(change("open", T0, error="HTTP 404"), T0 + 1000)
    assert breaker(health, T0 + 1000)["state"] == "closed"


def test_tenant_routes_are_counted_not_named() -> None:
    """Two tenant routes open on two replicas and one closed: two open routes, no names in
    the view; the destination's own breaker stays closed."""
    health = Health()
    health.note(change("open", T0, replica="a", route="acme"), T0)
    health.note(change("open", T0, replica="b", route="acme"), T0)
    health.note(change("open", T0, replica="b", route="globex"), T0)
    health.note(change("closed", T0, replica="a", route="initech"), T0)
    seen = breaker(health, T0)
    assert (seen["state"], seen["open_routes"], seen["known_routes"]) == ("closed", 2, 3)
    assert "acme" not in msgspec.json.encode(health.view(T0)).decode()


def test_old_entries_expire_closed_sooner_than_open() -> None:
    """A closed entry is forgotten after CLOSED_KEPT_S, an open one (a replica that stopped
    while open) after STALE_S."""
    health = Health()
    health.note(change("closed", T0, replica="a"), T0)
    health.note(change("open", T0, replica="b"), T0)
    later = T0 + CLOSED_KEPT_S * 1000 + 1
    assert breaker(health, later)["replicas"] == 1
    assert breaker(health, later)["state"] == "open"
    assert breaker(health, T0 + STALE_S * 1000 + 1)["replicas"] == 0


def test_the_breakers_survive_a_restart_in_the_snapshot() -> None:
    """A restored auditor shows the breaker open as before (the snapshot carries the entries);
    a snapshot of an older auditor restores none."""
    health = Health()
    health.note(change("open", T0, replica="a", error="HTTP 401"), T0)
    restored = Health()
    restored.restore(msgspec.msgpack.decode(msgspec.msgpack.encode(health.snapshot())))
    assert breaker(restored, T0 + 1000) == breaker(health, T0 + 1000)
    older = Health()
    older.restore({"last_delivered_ms": None, "steps": []})
    assert breaker(older, T0)["replicas"] == 0
