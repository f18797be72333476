"""Every hostile behaviour through real `connector --dest` processes: each event delivered once,
handed off or dead-lettered as the behaviour demands, and the connector never crashes nor hangs.

Four connectors run at once against one `devstack.hostile` server, each behaviour a tenant
(`[lookups]`, tenant t-NAME -> /b/NAME/RUN) with three events of its own:
- `main`: every plain behaviour, `follow_redirects = true`, the `trusted` listener trusted;
- `nofollow`: the 307/308 behaviours with `follow_redirects = false` (handed off as moved);
- `tls`: the TLS listener that wants a client certificate (none configured);
- `private`: a tenant on 127.0.0.1 without `allow_private_destinations` (dead-lettered).
The run goes on until every event was answered 2xx, handed off or dead-lettered (the retrier does
not run: one tier of an hour), then each connector gets SIGTERM. Expectations come from the
specification of the connector (`devstack.hostile_behaviour.Expect`), not from what it does now.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from devstack.hostile import BEHAVIOURS, Expect, HostileServer
from hifi.kafka.settings import KafkaSettings
from tests.connector.hostile_support import (
    LOCAL_ATTEMPTS,
    TIMEOUT_S,
    TOKEN,
    Case,
    Outcomes,
    api_key,
    cases,
    run_all,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HELD_SLACK_S = 1.0  # a stalled reply's hold, past the timeout: the server notices the close late
PEAK_RSS_KIB = 300 * 1024
CASES = cases()


@pytest.fixture(scope="module")
async def outcomes(
    kafka_settings: KafkaSettings, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Outcomes]:
    """One hostile run of the four connectors; the server stays up while the checks read it."""
    base = tmp_path_factory.mktemp("hostile-e2e")
    async with HostileServer() as server:
        found = await run_all(server, kafka_settings, redis_url, base, "h" + uuid.uuid4().hex[:8])
        print(f"hostile run settled in {found.settled_s:.1f} s")
        yield found


def observed(found: Outcomes, case: Case) -> str:
    """What became of a case's events, in one line (the failure message: the lead's to-do)."""
    delivered = found.delivered(case)
    handed = [found.handoffs.get(i, []) for i in case.ids]
    causes = sorted({cause or "-" for entries in handed for cause, _ in entries})
    errors = sorted({error[:90] for entries in handed for _, error in entries})
    dead = sorted({reason for i in case.ids for reason in found.dead.get(i, [])})
    requests = len(found.server.record(case.name, case.run).requests)
    tenant = f'"tenant": "t-{case.name}"'
    said = [line[:240] for line in found.processes[case.run].log.splitlines() if tenant in line]
    return (
        f"delivered={[delivered[i] for i in case.ids]} handed_off={[len(h) for h in handed]}"
        f" causes={causes} dead={dead} requests={requests} errors={errors} log={said[-3:]}"
    )


@pytest.mark.parametrize("case", CASES, ids=str)
def test_behaviour_ends_as_specified(outcomes: Outcomes, case: Case) -> None:
    """The case's events end as its behaviour demands, each exactly once."""
    found = outcomes
    delivered = found.delivered(case)
    handed = {i: found.handoffs.get(i, []) for i in case.ids}
    dead = {i: found.dead.get(i, []) for i in case.ids}
    requests = found.server.record(case.name, case.run).requests
    what = f"{case}: expected {case.expect.value} ({case.reason}); got {observed(found, case)}"
    if case.expect is Expect.DELIVERED:
        assert all(delivered[i] == 1 for i in case.ids), what
        assert not any(handed.values()), what
        assert not any(dead.values()), what
        if BEHAVIOURS[case.name].secrets_at_landing is None:
            assert len(requests) == 1, what  # no resend of a batch answered 2xx
        return
    assert not delivered, what
    if case.expect is Expect.DEAD_LETTERED:
        assert all(dead[i] == [case.reason] for i in case.ids), what
        assert not any(handed.values()), what
        return
    assert all(len(handed[i]) == 1 for i in case.ids), what
    assert not any(dead.values()), what
    causes = {cause for entries in handed.values() for cause, _ in entries}
    if case.expect is Expect.MOVED:
        assert causes == {"redirect"}, what
    else:
        assert "redirect" not in causes, what
        if case.run == "main":  # each local attempt a new request; one re-send on a fresh
            # connection when a reused one failed before any reply byte
            assert LOCAL_ATTEMPTS <= len(requests) <= 2 * LOCAL_ATTEMPTS, what


def test_a_cross_origin_hop_carries_secrets_only_to_a_trusted_origin(outcomes: Outcomes) -> None:
    """A followed redirect's landing has X-Api-Key and Authorization only on the same or a
    trusted origin; on another origin neither."""
    problems = []
    for behaviour in BEHAVIOURS.values():
        if behaviour.secrets_at_landing is None:
            continue
        landings = [r for r in outcomes.server.record(behaviour.name, "main").requests if r.landed]
        for landing in landings:
            key = landing.headers.get("x-api-key")
            authorization = landing.headers.get("authorization")
            if behaviour.secrets_at_landing:
                if key != api_key(behaviour.name) or authorization != f"Bearer {TOKEN}":
                    problems.append(f"{behaviour.name}: secrets missing at {landing.port_kind}")
            elif key is not None or authorization is not None:
                problems.append(f"{behaviour.name}: secrets sent to {landing.port_kind}")
        if not landings:
            problems.append(f"{behaviour.name}: never landed")
    assert problems == []


def test_a_followed_redirect_keeps_the_method_and_the_body(outcomes: Outcomes) -> None:
    """Every hop of a followed 307/308 is a POST carrying the batch's events."""
    for behaviour in BEHAVIOURS.values():
        if behaviour.secrets_at_landing is None:
            continue
        ids = Case("main", behaviour.name, behaviour.expect).ids
        for request in outcomes.server.record(behaviour.name, "main").requests:
            assert (request.method, request.ids) == ("POST", ids), behaviour.name


def test_a_redirect_chain_stops_after_three_hops(outcomes: Outcomes) -> None:
    """A fourth hop is never taken: the landing of r307_four_hops is never reached, and a loop
    costs at most four requests per local attempt."""
    four = outcomes.server.record("r307_four_hops", "main").requests
    assert not [r for r in four if r.landed]
    assert len(outcomes.server.record("redirect_loop", "main").requests) <= 4 * LOCAL_ATTEMPTS


def test_no_reply_is_held_past_the_request_timeout(outcomes: Outcomes) -> None:
    """Each stalled reply (endless, trickled, silent, 1xx forever) is given up within
    request_timeout_s of the request."""
    held = {
        f"{run}:{name}": max(record.held_s)
        for key, record in outcomes.server.records.items()
        if record.held_s
        for name, run in [key.split("/", 1)]
    }
    stalling = {f"main:{b.name}" for b in BEHAVIOURS.values() if b.stalls}
    assert stalling <= set(held), f"stalls never given up: {stalling - set(held)}"
    assert {k: v for k, v in held.items() if v > TIMEOUT_S + HELD_SLACK_S} == {}


def test_connectors_never_crash_and_exit_cleanly(outcomes: Outcomes) -> None:
    """Every connector ran to the SIGTERM, exited 0 and logged no traceback."""
    for process in outcomes.processes.values():
        log = process.log
        assert process.exit_code == 0, f"{process.run}: exit {process.exit_code}\n{log[-3000:]}"
        assert "Traceback" not in log, f"{process.run}: {log[log.index('Traceback') :][:3000]}"


def test_peak_memory_stays_bounded(outcomes: Outcomes) -> None:
    """The connector that met the 1 GiB gzip bombs (and the 8 MiB error body) peaked under 300 MB."""
    peak = outcomes.processes["main"].peak_rss_kib
    assert 0 < peak < PEAK_RSS_KIB, f"peak RSS {peak / 1024:.0f} MiB"


def test_a_tls_refusal_for_want_of_a_client_certificate_is_named(outcomes: Outcomes) -> None:
    """Each hand-off of the TLS run says a client certificate is wanted: "client certificate
    required" when the server's alert was read, or that it may be required when the server's
    reset (it closes with the request unread) came first and the kernel dropped the alert."""
    errors = [
        e
        for i in Case("tls", "tls_client_cert", Expect.RETRIED).ids
        for _, e in outcomes.handoffs.get(i, [])
    ]
    assert errors
    for error in errors:
        said = error.lower()
        assert (
            "client certificate required" in said or "may require a client certificate" in said
        ), error


def test_a_private_tenant_address_is_refused_before_any_request(outcomes: Outcomes) -> None:
    """Without allow_private_destinations the tenant on 127.0.0.1 gets no request at all."""
    assert outcomes.server.record("ok_200", "private").requests == []


def test_reply_anomalies_are_counted(outcomes: Outcomes) -> None:
    """Header values that did not parse (Retry-After, Location) show in
    hifi_connector_reply_anomalies_total."""
    samples = [
        line
        for line in outcomes.processes["main"].metrics.splitlines()
        if line.startswith("hifi_connector_reply_anomalies_total{")
    ]
    assert samples, "no hifi_connector_reply_anomalies_total sample"
    assert any(float(line.rsplit(" ", 1)[1]) > 0 for line in samples), samples
