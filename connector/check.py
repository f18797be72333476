"""`connector --check [--probe [--probe-post]]`: the catalog entry and environment; with --probe
Kafka, tenant entries and the destination (a HEAD), with --probe-post one empty batch POSTed."""

from __future__ import annotations

import gzip
import ssl
import uuid
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import httpx

from config.decode import Decode
from config.destination import Destination
from config.topics import audit_line, audit_retention_wanted, retention_wanted
from connector.bearer import proxy_routes, token_source
from connector.http_client import http_client
from connector.rebatch import encode_values
from connector.webhooks import describe_requests
from hifi.check import CheckReport, probe_kafka
from hifi.errors import ConfigError, EntryRefused, HifiError, TokenRefused, TokenUnavailable
from hifi.kafka.settings import KafkaSettings
from hifi.lookup_cache import redis_hash
from hifi.lookup_cache.redis_hash import RedisSettings
from tenants.keys import tenants_key
from tenants.lookups import RouteDecoder, register_secrets

_PATH = (404, 405)  # the path, or the method on it, is not served there
_CREDENTIALS = (401, 403)  # the destination refuses the token (or its absence)


@dataclass(frozen=True, slots=True)
class Probe:
    """What `--probe` reaches beyond the catalog: with `post`, one empty batch to the destination;
    `tenant`, whose entry renders the url and headers of a destination with `[lookups]`."""

    enabled: bool = False
    post: bool = False
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class _Target:
    """Where the destination probe goes: a URL, the headers a delivery would carry, a name."""

    url: str
    headers: dict[str, str] = field(repr=False)
    label: str


async def check(
    dest: Destination,
    settings: KafkaSettings,
    *,
    probe: Probe,
    redis: RedisSettings | None = None,
) -> CheckReport:
    """What the connector for `dest` would meet at start; the caller prints and exits."""
    needs_tenant(dest, probe)
    report = CheckReport("connector")
    _describe(dest, settings, redis, report)
    if not probe.enabled:
        return report
    await probe_kafka(
        settings,
        report,
        source_topics=dest.source_topics,
        retention_wanted={**retention_wanted(dest), **audit_retention_wanted([dest])},
    )
    if redis is not None:
        await probe_tenants(dest, redis, report)
    if dest.decode is not None:
        await probe_registry(dest.decode, report)
    target = await _target(dest, probe.tenant, redis, report)
    if dest.auth is not None:
        token = await probe_token(dest, report)
        if token is None:
            return report  # the destination would only refuse a request without it
        if target is not None:
            target = replace(target, headers={**target.headers, "Authorization": f"Bearer {token}"})
    if target is not None:
        await probe_destination(dest, target, report, post=probe.post)
    return report


def _describe(
    dest: Destination, settings: KafkaSettings, redis: RedisSettings | None, report: CheckReport
) -> None:
    """What the catalog and the environment say, before anything is reached."""
    auth = "" if dest.auth is None else f", OAuth2 client credentials from {dest.auth.token_url}"
    report.ok(
        f"destination {dest.name}: catalog entry valid, {len(dest.headers)} headers set{auth}"
    )
    report.ok(audit_line(dest))
    if (requests := describe_requests(dest)) is not None:
        report.ok(requests)
    if dest.decode is not None:
        report.ok(
            f"decode: Schema Registry wire format (Avro, JSON Schema), schemas from"
            f" {dest.decode.url} (up to {dest.decode.cache_schemas} kept)"
        )
    report.ok(f"kafka settings: bootstrap {settings.bootstrap}, {settings.security_protocol}")
    report.ok(f"egress: {proxy_routes(dest).summary()}")
    if dest.lookups is not None and redis is not None:
        report.ok(
            f"tenant lookups: field {dest.lookups.tenant_field!r}, entries in hash"
            f" {tenants_key(dest.name)} at {redis.describe()}"
        )


async def probe_registry(decode: Decode, report: CheckReport) -> None:
    """Ask the Schema Registry for its subjects, with the connector's credentials and CA."""
    where = f"schema registry {decode.url}"
    password = None if decode.password is None else decode.password.get_secret_value()
    auth = None if decode.username is None else httpx.BasicAuth(decode.username, password or "")
    verify = ssl.create_default_context(cafile=decode.tls_ca_file)
    if decode.tls_client_cert is not None:
        verify.load_cert_chain(decode.tls_client_cert, decode.tls_client_key)
    try:
        async with httpx.AsyncClient(timeout=decode.timeout_s, auth=auth, verify=verify) as client:
            response = await client.get(f"{decode.url}/subjects")
    except (httpx.TransportError, TimeoutError) as exc:
        report.fail(f"{where}: unreachable: {type(exc).__name__}: {exc}")
        return
    if response.status_code in _CREDENTIALS:
        report.fail(
            f"{where}: answered {response.status_code}: refuses the credentials", refused=True
        )
    elif response.status_code != 200:
        report.fail(f"{where}: answered {response.status_code}")
    else:
        report.ok(f"{where}: reachable")


async def probe_token(dest: Destination, report: CheckReport) -> str | None:
    """Fetch one token as the connector does at start (a line says its route, a proxy or
    direct): the token (never printed), or None and a line saying why (a refusal: exit 2)."""
    source = token_source(dest)
    route = proxy_routes(dest).describe(source.credentials.token_url)
    report.ok(f"{source.credentials.describe()}: route: {route}")
    try:
        async with source:
            token = await source.token()
    except TokenRefused as exc:
        report.fail(str(exc), refused=True)
        return None
    except TokenUnavailable as exc:
        report.fail(str(exc))
        return None
    report.ok(f"{source.credentials.describe()}: token received")
    return token


def per_tenant(dest: Destination) -> bool:
    """True when the url or a header value is rendered from each tenant's entry."""
    if dest.lookups is None:
        return False
    templates = dest.templates()
    return bool(templates.url.names or any(t.names for t in templates.headers.values()))


def needs_tenant(dest: Destination, probe: Probe) -> None:
    """`ConfigError` for a `--tenant` that cannot apply, or a `--probe-post` that needs one."""
    if probe.tenant is not None and dest.lookups is None:
        raise ConfigError(
            f"--tenant {probe.tenant!r}: destination {dest.name!r} has no [lookups];"
            " its url and headers are the same for every event: leave --tenant out"
        )
    if probe.post and probe.tenant is None and per_tenant(dest):
        raise ConfigError(
            f"--probe-post: destination {dest.name!r} renders its url and headers from each"
            " tenant's entry ({tenant} in url); name the tenant to send the empty batch for"
            " with --tenant T"
        )


async def probe_tenants(dest: Destination, redis: RedisSettings, report: CheckReport) -> None:
    """Read every tenant entry once, as the connector's preload would: how many, how many it
    would refuse (each refusal is a warning naming the tenant and why, never the entry)."""
    decode = RouteDecoder(dest, f"redis hash {tenants_key(dest.name)}")
    async with redis_hash.connected(redis, tenants_key(dest.name)) as store:
        try:
            found = await store.read_all()
        except HifiError as exc:
            report.fail(f"tenant entries: {exc}")
            return
    refused = 0
    for tenant, raw in found.items():
        try:
            decode(tenant, raw)
        except EntryRefused as exc:
            refused += 1
            report.warn(str(exc))
    report.ok(
        f"tenant entries: {len(found) - refused} usable, {refused} refused, in {store.describe()}"
    )


async def _target(
    dest: Destination, tenant: str | None, redis: RedisSettings | None, report: CheckReport
) -> _Target | None:
    """The URL and headers to probe: the destination's, or with `tenant` that tenant's route;
    None (and a line saying so) when there is nothing to probe."""
    if tenant is None or redis is None:
        if not per_tenant(dest):
            return _Target(dest.url, dest.header_values(), f"destination {dest.url}")
        origin = urlsplit(dest.url)
        if "{" in origin.netloc:
            report.ok(
                f"destination {dest.name}: its host is rendered per tenant; --tenant T probes"
                " one tenant's"
            )
            return None
        # only whether the host answers: the path is a template, so its status means nothing
        return _Target(
            f"{origin.scheme}://{origin.netloc}/", {}, f"destination host {origin.netloc}"
        )
    where = f"redis hash {tenants_key(dest.name)}"
    async with redis_hash.connected(redis, tenants_key(dest.name)) as store:
        try:
            raw = (await store.read([tenant]))[tenant]
        except HifiError as exc:
            report.fail(f"tenant {tenant!r}: {exc}")
            return None
    if raw is None:
        report.fail(f"--tenant {tenant!r}: no entry in {where}", refused=True)
        return None
    try:
        route = RouteDecoder(dest, where)(tenant, raw)
    except EntryRefused as exc:
        report.fail(str(exc), refused=True)
        return None
    register_secrets([route])
    return _Target(route.url, route.headers, f"destination {route.url} (tenant {tenant!r})")


async def probe_destination(
    dest: Destination, target: _Target, report: CheckReport, *, post: bool
) -> None:
    """TCP, TLS and a HEAD request to the target; with `post` one empty batch as well.

    A HEAD answer is a hint, not a verdict: many endpoints answer HEAD differently from POST,
    so 404/405 (the path?) and 401/403 (the credentials?) are warnings. The empty batch is what
    a delivery sends, without events: there 401/403 is refused credentials and 404/405 a wrong
    path, each exit 2. Without `post` nothing is ever POSTed. The route (a proxy, masked, or
    direct) is a line of its own, before the answers.
    """
    report.ok(f"{target.label}: route: {proxy_routes(dest).describe(target.url)}")
    async with http_client(dest) as client:
        try:
            response = await client.head(target.url, headers=target.headers)
        except (httpx.TransportError, TimeoutError) as exc:
            cause = exc.__cause__ or exc
            report.fail(f"{target.label}: unreachable: {type(cause).__name__}: {cause}")
            return
        _judge_head(target, response.status_code, report, post=post)
        if post and dest.format == "single":
            report.warn(
                f'{target.label}: no empty request posted: format = "single" sends one event'
                " a request, and a webhook receiver would take an empty one for an event"
            )
        elif post:
            await _post_empty_batch(dest, client, target, report)


def _judge_head(target: _Target, status: int, report: CheckReport, *, post: bool) -> None:
    said = f"{target.label}: reachable, but HEAD answered {status}"
    confirm = (
        ""
        if post
        else "; many endpoints answer HEAD differently from POST: --probe-post sends"
        " an empty batch to be sure"
    )
    if status in _PATH:
        report.warn(f"{said}: the path may be wrong{confirm}")
    elif status in _CREDENTIALS:
        report.warn(f"{said}: it may refuse the credentials{confirm}")
    else:
        report.ok(f"{target.label}: reachable (HEAD answered {status})")


async def _post_empty_batch(
    dest: Destination, client: httpx.AsyncClient, target: _Target, report: CheckReport
) -> None:
    """POST a batch of no events (`[]`, or an empty NDJSON body) with the delivery's headers."""
    body, content_type = encode_values([], dest.format)
    if dest.format == "ndjson":
        body = b""  # no line at all, not one empty line
    headers = {
        **target.headers,
        "Content-Type": content_type,
        "Idempotency-Key": f"hifi-probe-{uuid.uuid4().hex}",
    }
    if dest.compression == "gzip":
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    try:
        response = await client.post(target.url, content=body, headers=headers)
    except (httpx.TransportError, TimeoutError) as exc:
        cause = exc.__cause__ or exc
        report.fail(f"{target.label}: empty batch not answered: {type(cause).__name__}: {cause}")
        return
    status, said = response.status_code, f"{target.label}: the empty batch was answered"
    if 200 <= status < 300:
        report.ok(f"{said} {status}: accepted")
    elif status in _CREDENTIALS:
        report.fail(f"{said} {status}: the destination refuses the credentials", refused=True)
    elif status in _PATH:
        report.fail(f"{said} {status}: wrong path (or POST not allowed there)", refused=True)
    elif status >= 500 or status in (408, 429):
        report.fail(f"{said} {status}: the destination is failing now; try again later")
    else:
        report.warn(f"{said} {status}: some endpoints refuse a batch with no events")
