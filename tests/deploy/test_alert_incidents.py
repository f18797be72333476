"""One page per incident: the alerts a destination outage, a broker outage and a kill -9 fire
(deploy/prometheus/tests_incidents.yml, the lists promtool asserts), passed minute by minute
through the routes and inhibitions of deploy/prometheus/alertmanager.yml, page once."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.deploy.metric_names import RULES, duration_s, rules

PROMETHEUS_DIR = RULES.parent
ALERTMANAGER = PROMETHEUS_DIR / "alertmanager.yml"
INCIDENTS = PROMETHEUS_DIR / "tests_incidents.yml"
PAGE_RECEIVER = "hifi-page"

Labels = Mapping[str, str]

# What each incident makes of every alert that fires or goes pending: `page` (the one
# notification), `ticket` (sent at some minute), `not sent` (severity none), or held at every
# minute it fires, by inhibitions (the sources that held it, the first rule of
# alertmanager.yml that applies each minute), or by its `for:` (pending, never firing).
EXPECTED = {
    "a destination outage": {
        "HifiBreakerOpen{dest=tvinsight}": "page",
        "HifiAvailabilityBudgetBurn{dest=tvinsight}": (
            "held by HifiBreakerOpen, HifiLagOverSla, HifiOutageAftermath"
        ),
        "HifiLagOverSla{dest=tvinsight}": "held by HifiOutageAftermath",  # the backlog's
        "HifiConsumerLagRising{dest=tvinsight}": (
            "ticket held by HifiBreakerOpen, HifiOutageAftermath"
        ),
        "HifiRetryAgeNearMax{dest=tvinsight}": "ticket held by HifiBreakerOpen",
        "HifiAvailabilityBudgetBurnSlow{dest=tvinsight}": "ticket",  # the budget it spent
        "HifiOutageAftermath{cause=HifiBreakerOpen, dest=tvinsight}": "not sent",
    },
    "a broker outage": {
        **{f"HifiKafkaUnreachable{{instance={i}}}": "page" for i in ("a1", "c1", "c2", "i1", "r1")},
        **{
            f"HifiDaemonNotReady{{instance={i}}}": "held by HifiKafkaUnreachable"
            for i in ("a1", "c1", "c2", "i1", "r1")
        },
        "HifiIngestDown{}": "held by HifiKafkaUnreachable",
        "HifiIngestRefusing{stream=clicks}": "held by HifiKafkaUnreachable, HifiOutageAftermath",
        # the backlog's lag and the catch-up's down minutes
        "HifiLagOverSla{dest=tvinsight}": "held by HifiOutageAftermath",
        "HifiLagOverSla{dest=orders}": "held by HifiOutageAftermath",
        "HifiAvailabilityBudgetBurn{dest=tvinsight}": "held by HifiLagOverSla, HifiOutageAftermath",
        "HifiAvailabilityBudgetBurn{dest=orders}": "held by HifiLagOverSla, HifiOutageAftermath",
        "HifiAvailabilityBudgetBurnSlow{dest=tvinsight}": "ticket",
        "HifiAvailabilityBudgetBurnSlow{dest=orders}": "ticket",
        "HifiOutageAftermath{cause=HifiKafkaUnreachable}": "not sent",
    },
    "kill -9 of connectors": {
        "HifiTargetDown{dest=tvinsight, instance=c1}": "page",
        "HifiTargetDown{dest=orders, instance=c3}": "held by for: 5m",
        "HifiConnectorAbsent{dest=orders}": "held by for: 5m",
        "HifiDaemonNotReady{instance=c2}": "held by for: 10m",
        "HifiDaemonNotReady{instance=c3}": "held by for: 10m",
        "HifiLagOverSla{dest=tvinsight}": "held by for: 10m",
        "HifiAvailabilityBudgetBurn{dest=tvinsight}": "held by for: 10m",
        "HifiAvailabilityBudgetBurn{dest=orders}": "held by for: 10m",
        # only 6h40m of history (see tests_incidents.yml)
        "HifiAvailabilityBudgetBurnSlow{dest=tvinsight}": "ticket held by HifiTargetDown",
        "HifiAvailabilityBudgetBurnSlow{dest=orders}": "ticket",
        "HifiOutageAftermath{cause=HifiTargetDown, dest=tvinsight}": "not sent",
    },
    "kill -9 of orders' only connector": {
        "HifiTargetDown{dest=orders, instance=c3}": "page",
        "HifiConnectorAbsent{dest=orders}": "held by HifiTargetDown",
        "HifiAvailabilityBudgetBurn{dest=orders}": "held by HifiTargetDown",
        "HifiAvailabilityBudgetBurnSlow{dest=orders}": "ticket held by HifiTargetDown",
        "HifiOutageAftermath{cause=HifiConnectorAbsent, dest=orders}": "not sent",
        "HifiOutageAftermath{cause=HifiTargetDown, dest=orders}": "not sent",
    },
}


@dataclass(frozen=True)
class Matcher:
    """One Alertmanager matcher: `name="value"`, `!=`, `=~` or `!~` (a regex matches whole)."""

    name: str
    op: str
    value: str

    @classmethod
    def parse(cls, text: str) -> Matcher:
        found = re.fullmatch(r'\s*(\w+)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|[^"]*?)\s*', text)
        assert found is not None, f"{ALERTMANAGER.name}: matcher {text!r}"
        value = json.loads(found[3]) if found[3].startswith('"') else found[3]
        return cls(found[1], found[2], value)

    def matches(self, labels: Labels) -> bool:
        value = labels.get(self.name, "")
        if self.op in ("=", "!="):
            return (value == self.value) == (self.op == "=")
        return (re.fullmatch(self.value, value) is not None) == (self.op == "=~")


@dataclass(frozen=True)
class InhibitRule:
    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]

    def holder(self, target: Labels, firing: Sequence[Labels]) -> Labels | None:
        """The firing alert that holds `target` by this rule, if any: it matches the source
        side and has the `equal` labels of the target (a label neither has is equal). An alert
        that matches both sides is held only by one that does not (Alertmanager's rule)."""
        if not all(m.matches(target) for m in self.target):
            return None
        two_sided = all(m.matches(target) for m in self.source)
        for source in firing:
            if not all(m.matches(source) for m in self.source):
                continue
            if any(source.get(name, "") != target.get(name, "") for name in self.equal):
                continue
            if two_sided and all(m.matches(source) for m in self.target):
                continue
            return source
        return None


@functools.cache
def config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(ALERTMANAGER.read_text())
    return loaded


@functools.cache
def inhibit_rules() -> tuple[InhibitRule, ...]:
    return tuple(
        InhibitRule(
            tuple(Matcher.parse(text) for text in rule["source_matchers"]),
            tuple(Matcher.parse(text) for text in rule["target_matchers"]),
            tuple(rule.get("equal", [])),
        )
        for rule in config()["inhibit_rules"]
    )


def holder(target: Labels, firing: Sequence[Labels]) -> Labels | None:
    """The alert whose inhibition holds `target` while `firing` fire, if any."""
    for rule in inhibit_rules():
        source = rule.holder(target, firing)
        if source is not None:
            return source
    return None


def route(labels: Labels) -> tuple[str, tuple[str, ...]]:
    """The receiver and the notification's group of an alert: the first child route whose
    matchers match (none continues), else the root; group_by inherited from the root."""
    root = config()["route"]
    for child in root.get("routes", []):
        if all(Matcher.parse(text).matches(labels) for text in child["matchers"]):
            assert not child.get("continue", False)
            group_by = child.get("group_by", root["group_by"])
            return child["receiver"], tuple(labels.get(name, "") for name in group_by)
    return root["receiver"], tuple(labels.get(name, "") for name in root["group_by"])


@dataclass(frozen=True)
class Incident:
    """One test of tests_incidents.yml: every alert that fired (its labels, the seconds it
    first and last fired), those firing at its last minute, and those pending at some minute
    that never fired."""

    name: str
    snapshot_s: int
    fired: dict[str, dict[str, str]]  # key -> labels
    fired_s: dict[str, tuple[int, int]]  # key -> (first, last)
    firing: dict[str, dict[str, str]]  # at the snapshot, with promtool's exp_labels
    held_by_for: dict[str, dict[str, str]]


def key(labels: Labels) -> str:
    """An alert as the tables here name it: its name and the labels that tell it apart."""
    own = ("cause", "dest", "instance", "stream")
    shown = ", ".join(f"{name}={labels[name]}" for name in own if name in labels)
    return f"{labels['alertname']}{{{shown}}}"


def minutes_s(text: str) -> int:
    found = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?", text)
    assert text, "eval_time"
    assert found is not None, text
    return int(found[1] or 0) * 3600 + int(found[2] or 0) * 60


def samples(case: dict[str, Any], external: Labels) -> dict[str, tuple[dict[str, str], int]]:
    """A promql_expr_test's expected samples of ALERTS: key -> (labels, value)."""
    found = {}
    for sample in case["exp_samples"]:
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', sample["labels"]))
        labels = {**external, **labels}
        labels.pop("alertstate", None)
        found[key(labels)] = (labels, int(sample["value"]))
    return found


@functools.cache
def incidents() -> tuple[Incident, ...]:
    """Every test of tests_incidents.yml, read from what promtool asserts there."""
    spec = yaml.safe_load(INCIDENTS.read_text())
    assert spec["rule_files"] == [RULES.name]
    found = []
    for test in spec["tests"]:
        external = {name: str(value) for name, value in test.get("external_labels", {}).items()}
        (snapshot,) = {case["eval_time"] for case in test["alert_rule_test"]}
        firing = {}
        for case in test["alert_rule_test"]:
            for alert in case["exp_alerts"]:
                labels = {**external, **alert["exp_labels"], "alertname": case["alertname"]}
                firing[key(labels)] = {name: str(value) for name, value in labels.items()}
        first, last, pending = test["promql_expr_test"]
        assert first["expr"].startswith("min_over_time(timestamp(ALERTS{alertstate=")
        assert last["expr"].startswith("max_over_time(timestamp(ALERTS{alertstate=")
        assert 'ALERTS{alertstate="pending"}' in pending["expr"]
        firsts, lasts = samples(first, external), samples(last, external)
        assert firsts.keys() == lasts.keys(), test["name"]
        found.append(
            Incident(
                name=test["name"],
                snapshot_s=minutes_s(snapshot),
                fired={name: labels for name, (labels, _) in firsts.items()},
                fired_s={name: (firsts[name][1], lasts[name][1]) for name in firsts},
                firing=firing,
                held_by_for={name: labels for name, (labels, _) in samples(pending, {}).items()},
            )
        )
    return tuple(found)


def verdicts(incident: Incident) -> tuple[dict[str, str], set[tuple[str, ...]]]:
    """What becomes of each alert of the incident, and the page notifications (groups) sent:
    minute by minute, the alerts firing then pass through the inhibitions and the routes."""
    holders: dict[str, set[str]] = {name: set() for name in incident.fired}
    sent: set[str] = set()
    pages: set[tuple[str, ...]] = set()
    for now_s in range(0, incident.snapshot_s + 1, 60):
        firing = [
            labels
            for name, labels in incident.fired.items()
            if incident.fired_s[name][0] <= now_s <= incident.fired_s[name][1]
        ]
        for labels in firing:
            source = holder(labels, firing)
            if source is not None:
                holders[key(labels)].add(source["alertname"])
                continue
            receiver, group = route(labels)
            if receiver == PAGE_RECEIVER:
                pages.add(group)
            sent.add(key(labels))
    found = {}
    for name, labels in incident.fired.items():
        held = "held by " + ", ".join(sorted(holders[name]))
        if labels["severity"] == "none":
            found[name] = "not sent"
        elif labels["severity"] == "ticket":
            found[name] = "ticket" if name in sent else f"ticket {held}"
        else:
            found[name] = "page" if name in sent else held
    for name, labels in incident.held_by_for.items():
        rule = next(rule for rule in rules() if rule.get("alert") == labels["alertname"])
        found[name] = f"held by for: {rule['for']}"
    return found, pages


def test_every_incident_lists_every_alert_and_when_each_fired() -> None:
    """Each incident's test names every alert of the rule file at its last minute (so promtool
    asserts the whole set with its labels and annotations); the alerts firing then are those
    whose last firing is that minute, with the labels the ALERTS samples give them."""
    spec = yaml.safe_load(INCIDENTS.read_text())
    every_alert = {str(rule["alert"]) for rule in rules() if "alert" in rule}
    for test in spec["tests"]:
        named = [case["alertname"] for case in test["alert_rule_test"]]
        assert sorted(named) == sorted(every_alert), test["name"]
    for incident in incidents():
        at_snapshot = {
            n for n, (_, last) in incident.fired_s.items() if last == incident.snapshot_s
        }
        assert incident.firing.keys() == at_snapshot, incident.name
        assert all(incident.fired[name] == labels for name, labels in incident.firing.items())
        assert incident.fired.keys().isdisjoint(incident.held_by_for), incident.name


@pytest.mark.parametrize("title", EXPECTED)
def test_an_incident_pages_once_and_holds_the_rest(title: str) -> None:
    """Through alertmanager.yml's inhibitions and routes, the incident's alerts make exactly
    one page notification; every other alert is held by an inhibition or its `for:`, or is a
    ticket."""
    (incident,) = [i for i in incidents() if i.name.startswith(f"incident: {title}")]
    found, pages = verdicts(incident)
    assert found == EXPECTED[title]
    assert len(pages) == 1, pages


def test_an_outage_of_one_destination_holds_nothing_of_another() -> None:
    """The inhibitions compare `dest`: tvinsight's open breaker or dead connector holds
    tvinsight's burn, not orders'."""
    burn = {"alertname": "HifiAvailabilityBudgetBurn", "severity": "page"}
    for cause in (
        {"alertname": "HifiBreakerOpen", "severity": "page", "dest": "tvinsight"},
        {"alertname": "HifiTargetDown", "severity": "page", "job": "hifi-connector"}
        | {"instance": "c1", "dest": "tvinsight"},
        {"alertname": "HifiConnectorAbsent", "severity": "page", "dest": "tvinsight"},
    ):
        firing = [cause, burn | {"dest": "tvinsight"}, burn | {"dest": "orders"}]
        assert holder(burn | {"dest": "tvinsight"}, firing) == cause
        assert holder(burn | {"dest": "orders"}, firing) is None
        assert holder(cause, firing) is None


def test_one_daemon_waiting_for_kafka_holds_its_own_not_ready_only() -> None:
    """A connector that alone cannot reach Kafka holds its own HifiDaemonNotReady (equal: job,
    instance), not the retrier's, nor the front door's, which only ingest's wait holds."""
    kafka = {"alertname": "HifiKafkaUnreachable", "severity": "page", "job": "hifi-connector"}
    kafka |= {"instance": "c1", "component": "connector"}
    not_ready = {"alertname": "HifiDaemonNotReady", "severity": "page"}
    connector = not_ready | {"job": "hifi-connector", "instance": "c1", "component": "connector"}
    retrier = not_ready | {"job": "hifi-retrier", "instance": "r1", "component": "retrier"}
    ingest_down = {"alertname": "HifiIngestDown", "severity": "page"}
    firing = [kafka, connector, retrier, ingest_down]
    assert holder(connector, firing) == kafka
    assert holder(retrier, firing) is None
    assert holder(ingest_down, firing) is None
    ingest = kafka | {"job": "hifi-ingest", "instance": "i1", "component": "ingest"}
    assert holder(ingest_down, [*firing, ingest]) == ingest


def test_an_inhibition_source_fires_no_later_than_its_targets() -> None:
    """A source alert's `for:` is not longer than that of any page its rules hold: the cause
    is firing when its consequences are; and the inhibitions name alerts that exist."""
    by_name = {str(rule["alert"]): rule for rule in rules() if "alert" in rule}

    def named(matchers: tuple[Matcher, ...]) -> list[str]:
        by_alertname = [m for m in matchers if m.name == "alertname"]
        for matcher in by_alertname:
            assert set(matcher.value.split("|")) <= set(by_name), matcher.value
        return [n for n in by_name if all(m.matches({"alertname": n}) for m in by_alertname)]

    def for_s(name: str) -> int:
        return duration_s(str(by_name[name].get("for", "0s")))

    for rule in inhibit_rules():
        sources, targets = named(rule.source), named(rule.target)
        assert sources, rule
        assert targets, rule
        pages = [n for n in targets if by_name[n]["labels"] == {"severity": "page"}]
        assert max(map(for_s, sources)) <= min(map(for_s, pages), default=86400), rule


def test_matchers_read_as_alertmanager_reads_them() -> None:
    """The model's matchers: equality, negation and whole-value regexes, quoted or not."""
    labels = {"alertname": "HifiTargetDown", "job": "hifi-connector"}
    assert Matcher.parse('alertname="HifiTargetDown"').matches(labels)
    assert Matcher.parse("job=~hifi-.+").matches(labels)
    assert not Matcher.parse('alertname=~"Hifi"').matches(labels)
    assert Matcher.parse('dest!~".+"').matches(labels)
    assert not Matcher.parse('job!="hifi-connector"').matches(labels)
