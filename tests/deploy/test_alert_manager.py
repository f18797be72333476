"""The Alertmanager configuration (deploy/prometheus/alertmanager.yml) under Debian's own
tools: `amtool check-config` accepts it, `amtool config routes test` routes every alert as the
model of test_alert_incidents.py does, and a real Alertmanager holds, of each incident's
alerts, those the model says its inhibitions hold."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from devstack.ports import free_port
from tests.deploy.metric_names import rules
from tests.deploy.test_alert_incidents import (
    ALERTMANAGER,
    EXPECTED,
    Incident,
    Labels,
    config,
    holder,
    incidents,
    key,
    route,
)
from tests.helpers import until_blocking

pytestmark = pytest.mark.integration


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(
            f"no {name}: `make test` installs Debian's prometheus-alertmanager (make amtool)"
        )
    return found


def test_amtool_checks_the_configuration() -> None:
    """`amtool check-config` accepts alertmanager.yml, its receivers and every inhibition."""
    done = subprocess.run(
        [tool("amtool"), "check-config", str(ALERTMANAGER)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    assert f" - {len(config()['inhibit_rules'])} inhibit rules" in done.stdout
    assert f" - {len(config()['receivers'])} receivers" in done.stdout


def test_amtool_routes_each_alert_where_the_model_does() -> None:
    """Each alert of the incidents (and of the rule file, and one not hifi's) goes to the
    receiver the model routes it to: pages to hifi-page, tickets to hifi-ticket, the rest to
    hifi-null."""
    label_sets: dict[str, Labels] = {"other": {"alertname": "Watchdog", "severity": "none"}}
    for rule in rules():
        if "alert" in rule:
            labels = rule["labels"]
            assert isinstance(labels, dict)
            label_sets[str(rule["alert"])] = {"alertname": str(rule["alert"]), **labels}
    for incident in incidents():
        label_sets |= incident.fired | incident.held_by_for
    amtool = tool("amtool")
    running = {
        name: subprocess.Popen(
            [amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER}"]
            + [f"{label}={value}" for label, value in labels.items()],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for name, labels in label_sets.items()
    }
    routed = {name: process.communicate(timeout=60)[0].strip() for name, process in running.items()}
    assert routed == {name: route(labels)[0] for name, labels in label_sets.items()}
    assert {routed["other"], routed["HifiBreakerOpen"], routed["HifiConsumerLagRising"]} == {
        "hifi-null",
        "hifi-page",
        "hifi-ticket",
    }


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """Debian's Alertmanager with alertmanager.yml on a loopback port, alone (no cluster)."""
    binary = tool("prometheus-alertmanager")
    port = free_port()
    storage: Path = tmp_path_factory.mktemp("alertmanager")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={ALERTMANAGER}",
            f"--storage.path={storage}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:

            def ready() -> bool:
                assert process.poll() is None, "prometheus-alertmanager exited"
                try:
                    return client.get("/-/ready").status_code == 200
                except httpx.TransportError:
                    return False

            assert until_blocking(ready, 30), "prometheus-alertmanager not ready in 30 s"
            yield client
    finally:
        process.terminate()
        process.wait(timeout=10)


def post(client: httpx.Client, alerts: Sequence[Labels], ends: datetime) -> None:
    """Send `alerts` as Prometheus does, firing until `ends` (resolved if it has passed)."""
    now = datetime.now(UTC)
    body = [
        {
            "labels": dict(labels),
            "startsAt": (now - timedelta(minutes=10)).isoformat(),
            "endsAt": ends.isoformat(),
        }
        for labels in alerts
    ]
    client.post("/api/v2/alerts", json=body).raise_for_status()


def held(client: httpx.Client) -> dict[str, bool]:
    """Each active alert's name (as the model's tables name it) and whether it is inhibited."""
    answer = client.get("/api/v2/alerts")
    answer.raise_for_status()
    return {key(alert["labels"]): bool(alert["status"]["inhibitedBy"]) for alert in answer.json()}


@pytest.mark.parametrize("title", EXPECTED)
def test_alertmanager_holds_what_the_model_holds(alertmanager: httpx.Client, title: str) -> None:
    """With every alert of the incident's last minute firing, the real Alertmanager inhibits
    exactly those the model's reading of the inhibit_rules holds."""
    (incident,) = [i for i in incidents() if i.name.startswith(f"incident: {title}")]
    alerts = list(incident.firing.values())
    expected = {
        name: holder(labels, alerts) is not None for name, labels in incident.firing.items()
    }
    post(alertmanager, alerts, datetime.now(UTC) + timedelta(hours=1))
    try:
        until_blocking(lambda: held(alertmanager) == expected, 10)
        assert held(alertmanager) == expected
    finally:
        post(alertmanager, alerts, datetime.now(UTC) - timedelta(seconds=1))
        wait_resolved(alertmanager, incident)


def wait_resolved(client: httpx.Client, incident: Incident) -> None:
    """Until the incident's alerts no longer show as active (the next one starts clean)."""
    until_blocking(lambda: not set(held(client)) & set(incident.firing), 10)
