"""hifi_ready: /readyz as a gauge, for the alert on a daemon that stays not ready."""

from __future__ import annotations

import prometheus_client

from hifi.ops_http import OpsServer, Readiness


def ready_value(component: str) -> float | None:
    return prometheus_client.REGISTRY.get_sample_value("hifi_ready", {"component": component})


def test_the_ready_gauge_follows_the_daemon_and_every_part_it_requires() -> None:
    """0 while starting, 1 once ready, 0 again while a required part is not ready."""
    ops = OpsServer(port=0, component="test-ready-gauge")
    assert ready_value("test-ready-gauge") == 0
    ops.ready = True
    assert ready_value("test-ready-gauge") == 1
    cache = Readiness(ready=False, detail="tenant cache: loading")
    ops.require(lambda: cache)
    assert ready_value("test-ready-gauge") == 0
    cache = Readiness(ready=True, detail="tenant cache: loaded")
    assert ready_value("test-ready-gauge") == 1
