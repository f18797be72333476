"""A destination's settings: one `NAME.toml` validated into a `Destination`, its accounting and lookups."""

from __future__ import annotations

import itertools
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from config.auth import Auth
from config.decode import Decode
from config.egress import normalized_origin, proxy_problem
from config.env_refs import HEADER_VALUE_RULE, header_value_problem
from config.event_rules import MAX_EVENT_BYTES_LIMIT, distinct_time_field, topic_problem
from config.lookups import Lookups
from config.templates import Template, parse_template
from config.tls_files import (
    EncryptedKeyError,
    client_cert_problem,
    readable_file,
    ssl_cause,
    tls_context,
)
from config.webhooks import Signing, Webhook, single_defaults, webhook_problem
from hifi.errors import ConfigError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,100}$")
_DAY_S = 86_400
MAX_RATE_PER_S = 1_000_000.0  # the highest rate limit accepted (events or requests a second)
# How long the broker may hold a fetch with no data: Kafka answers when data arrives; Tansu looks,
# a quarter of this late and at a CPU cost (performance-history.md, "The dev broker's fetch wait")
FETCH_MAX_WAIT_MS = 20

PositiveSeconds = Annotated[float, Field(gt=0, le=7 * 86400)]
# `max_in_flight` unset: one endpoint's, and a tenant destination's, whose tenants each need a
# request per linger: the limit over the round trip bounds its round (docs/tenants.md)
MAX_IN_FLIGHT = 8
TENANT_MAX_IN_FLIGHT = 64


class Accounting(BaseModel):
    """The `[accounting]` table: the audit trail and the rules of the auditor's tables."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    audit: bool = True  # the connector and the retrier write audit facts
    settle_s: float = Field(
        default=300.0, gt=0, le=7 * _DAY_S
    )  # a minute is final this long after it ends
    retention_min: int = Field(default=360, ge=1, le=7 * 24 * 60)  # minutes kept in memory
    loss_alarm_ratio: float = Field(default=0.0, ge=0, le=1)  # missing/entered above this alarms
    lag_sla_s: float = Field(
        default=1.0, gt=0, le=_DAY_S
    )  # a minute's p95 lag at most this is on time

    @model_validator(mode="after")
    def _check_window(self) -> Self:
        if self.retention_min * 60 < self.settle_s + 60:
            raise ValueError(
                f"key 'retention_min': {self.retention_min} min keeps a minute for less than"
                f" settle_s ({self.settle_s:g} s) after it ends; raise retention_min"
            )
        return self


@dataclass(frozen=True, slots=True)
class Templates:
    """A destination's url and header values as templates (with `[lookups]`)."""

    url: Template
    headers: dict[str, Template]

    @property
    def value_names(self) -> frozenset[str]:
        """Every entry value the templates use (`{tenant}` aside)."""
        return self.url.value_names | self.header_value_names

    @property
    def header_value_names(self) -> frozenset[str]:
        """The entry values rendered into headers: the secrets among an entry's values."""
        return frozenset(name for t in self.headers.values() for name in t.value_names)


class _OwnTopic:
    """A topic hifi keeps for each destination, named `NAME.<suffix>`: read as `dest.<attribute>`."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix

    def __get__(self, dest: Destination, owner: type[Destination]) -> str:
        return f"{dest.name}.{self.suffix}"


class Destination(BaseModel):
    """Everything hifi needs to deliver to one HTTP destination; immutable once loaded."""

    # strict: "10" is not an integer nor "true" a boolean (an integer is a valid float);
    # allow_inf_nan=False: TOML's nan and inf are refused for every number
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        ignored_types=(_OwnTopic,),
    )

    name: str
    url: str
    source_topics: list[str] = Field(min_length=1)
    id_field: str = Field(default="id", min_length=1)
    event_time_field: str = Field(default="event_time", min_length=1)
    format: Literal["json_array", "ndjson", "single"] = "json_array"  # single: docs/webhooks.md
    compression: Literal["none", "gzip"] = "none"
    max_batch_records: int = Field(default=500, ge=1, le=100_000)
    max_batch_bytes: int = Field(
        default=1_048_576,
        ge=1024,
        le=MAX_EVENT_BYTES_LIMIT,
        description=(
            "15 MiB at most: every event must fit in one Kafka record of the hand-off and"
            " dead-letter topics, whose producer limit is 16 MiB"
        ),
    )
    max_in_flight: int = Field(default=MAX_IN_FLIGHT, ge=1, le=1024)  # with [lookups]: 64
    # adaptive concurrency: "adaptive" moves the in-flight limit between 1 and max_in_flight
    # (AIMD on round-trip time, connector/concurrency.py); "fixed" keeps it at max_in_flight
    concurrency: Literal["adaptive", "fixed"] = "adaptive"
    request_timeout_s: float = Field(default=10.0, gt=0, le=600)
    local_retry_attempts: int = Field(default=3, ge=1, le=50)
    local_retry_max_backoff_s: float = Field(default=2.0, ge=0, le=600)
    retry_after_max_s: float = Field(default=30.0, ge=0, le=3600)
    retry_tiers_s: list[PositiveSeconds] = Field(
        default_factory=lambda: [30.0, 120.0, 600.0, 1800.0, 7200.0], min_length=1, max_length=20
    )
    max_retry_age_s: float = Field(default=86400.0, gt=0, le=30 * 86400)
    dlq_retention_days: float = Field(default=30.0, ge=0, le=36_500)  # 0: keep forever
    # redirects (docs/destinations.md): 307 and 308 followed with the body, at most 3 hops;
    # a hop to another origin carries no secret unless that origin is listed here
    follow_redirects: bool = False
    redirect_trusted_origins: list[str] = Field(default_factory=list, max_length=100)
    # egress: an HTTP proxy for every request of the destination (else HTTPS_PROXY, HTTP_PROXY
    # and NO_PROXY from the environment); a tenant's URL may reach a private address only if set
    proxy: SecretStr | None = None
    allow_private_destinations: bool = False
    max_bisect_requests: int = Field(default=64, ge=0, le=10_000)
    commit_interval_s: float = Field(default=1.0, gt=0, le=300)
    fetch_max_wait_ms: int = Field(default=FETCH_MAX_WAIT_MS, ge=1, le=60_000)  # fetch.max.wait.ms
    shutdown_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    internal_topic_partitions: int = Field(default=4, ge=1, le=1000)
    # the circuit breaker (docs/destinations.md): statuses that fault the destination, not the
    # events (never bisected, dead-lettered whole); consecutive destination-level failures that
    # open it; its longest open time; what its half-open probe sends
    destination_fault_statuses: list[int] = Field(default_factory=lambda: [401, 403, 404, 405, 407])
    breaker_failures: int = Field(default=5, ge=1, le=1000)
    breaker_max_open_s: float = Field(default=300.0, ge=1, le=86_400)
    breaker_probe: Literal["event", "empty"] = "event"
    # rate limits (docs/destinations.md): token buckets with a burst of one second's worth; each
    # attempt of a request takes a request token and a token per event; None: no limit
    rate_limit_events_per_s: float | None = Field(default=None, gt=0, le=MAX_RATE_PER_S)
    rate_limit_requests_per_s: float | None = Field(default=None, gt=0, le=MAX_RATE_PER_S)
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    auth: Auth | None = None  # where the Authorization header's credential comes from ([auth])
    accounting: Accounting = Field(default_factory=Accounting)
    decode: Decode | None = None  # records in a Schema Registry's wire format, decoded to JSON
    webhook: Webhook | None = None  # format = "single": the request of one event
    signing: Signing | None = None  # every request signed (docs/webhooks.md)
    lookups: Lookups | None = None  # per-tenant routing; None: every event goes to `url` as is
    # PEM files; a relative path is read from the catalog file's directory
    tls_ca_file: Path | None = None  # CA bundle to trust instead of the default one
    tls_client_cert: Path | None = None  # client certificate (and its key, unless tls_client_key)
    tls_client_key: Path | None = None  # the client certificate's unencrypted private key

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """With `[lookups]` and no `max_in_flight`, the tenant destination's default; the
        single format's (`single_defaults`)."""
        if isinstance(data, dict) and data.get("lookups") is not None:
            data = {"max_in_flight": TENANT_MAX_IN_FLIGHT, **data}
        return single_defaults(data) if isinstance(data, dict) else data

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if re.search(r"\$[{A-Za-z_]", value):
            raise ValueError(
                "environment references are resolved only in [headers], not in url (no ${NAME}"
                " nor $NAME here); write the URL itself"
            )
        if not re.match(r"^https?://[^\s/?#]+", value):
            raise ValueError("must be an absolute http:// or https:// URL")
        return value

    @field_validator("proxy")
    @classmethod
    def _check_proxy(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and (problem := proxy_problem(value.get_secret_value())):
            raise ValueError(problem)
        return value

    @field_validator("redirect_trusted_origins")
    @classmethod
    def _check_origins(cls, value: list[str]) -> list[str]:
        return [normalized_origin(origin) for origin in value]

    @field_validator("source_topics")
    @classmethod
    def _check_topics(cls, value: list[str]) -> list[str]:
        for topic in value:
            if problem := topic_problem(topic):
                raise ValueError(f"topic {problem}")
        return value

    @field_validator("retry_tiers_s")
    @classmethod
    def _check_tiers(cls, value: list[float]) -> list[float]:
        if any(later < earlier for earlier, later in itertools.pairwise(value)):
            raise ValueError("tiers must not decrease")
        return value

    @field_validator("destination_fault_statuses")
    @classmethod
    def _check_fault_statuses(cls, value: list[int]) -> list[int]:
        for status in value:
            if not 400 <= status < 500 or status == 429:
                raise ValueError(
                    f"{status} is not a 4xx status other than 429; list 4xx statuses that say the"
                    " destination, not its events, is at fault (5xx and 429 are always retried)"
                )
        return sorted(set(value))

    _check_time_field = field_validator("event_time_field")(distinct_time_field)

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for key, secret in value.items():
            if not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", key):
                raise ValueError(f"header name {key!r} is not a valid HTTP token")
            text = secret.get_secret_value()
            problem = header_value_problem(text) or ("is empty" if not text.strip(" ") else None)
            if problem:
                raise ValueError(f"header {key!r}: the value {problem}; {HEADER_VALUE_RULE}")
        return value

    @field_validator("tls_ca_file", "tls_client_cert", "tls_client_key", mode="before")
    @classmethod
    def _find_tls_file(cls, value: object, info: ValidationInfo) -> Path | None:
        """An existing, readable file; relative to `base_dir` of the validation context if given."""
        base_dir = info.context.get("base_dir") if isinstance(info.context, dict) else None
        return readable_file(value, base_dir)

    @field_validator("tls_ca_file")
    @classmethod
    def _check_ca_file(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                ssl.create_default_context(cafile=value)
            except (ssl.SSLError, OSError) as exc:
                raise ValueError(
                    f"{value} is not a PEM CA bundle Python's ssl can load: {ssl_cause(exc)}"
                ) from None
        return value

    @model_validator(mode="after")
    def _check_tls(self) -> Self:
        """Client certificate and key load together; TLS keys need an https:// URL."""
        if self.tls_client_key is not None and self.tls_client_cert is None:
            raise ValueError(
                "key 'tls_client_key': set without tls_client_cert; set both, or"
                " tls_client_cert alone when its file holds the key too"
            )
        if self.tls_client_cert is not None:
            problem = client_cert_problem(self.tls_client_cert, self.tls_client_key)
            if problem:
                raise ValueError(problem)
        tls_keys = [
            key
            for key in ("tls_ca_file", "tls_client_cert", "tls_client_key")
            if getattr(self, key) is not None
        ]
        if tls_keys and not self.url.startswith("https://"):
            raise ValueError(
                f"key 'url': is not https:// but {', '.join(tls_keys)} is set; use an https:// URL"
                " or remove the TLS keys"
            )
        return self

    @model_validator(mode="after")
    def _check_webhook(self) -> Self:
        webhook, signing = self.webhook, self.signing
        if problem := webhook_problem(
            self.format, webhook, signing, self.compression, self.headers
        ):
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _check_auth(self) -> Self:
        """`[auth]` writes the Authorization header: a second one in `[headers]` is refused."""
        if self.auth is not None and any(k.lower() == "authorization" for k in self.headers):
            raise ValueError(
                "key 'auth': set together with an Authorization header in [headers]; [auth]"
                " sends the Authorization header itself: remove the header"
            )
        return self

    @model_validator(mode="after")
    def _check_lookups(self) -> Self:
        """The tenant field is a field of its own; url and header values parse as templates."""
        if self.lookups is None:
            return self
        field = self.lookups.tenant_field
        if field in (self.id_field, self.event_time_field):
            raise ValueError(
                f"key 'lookups.tenant_field': {field!r} is also id_field or event_time_field;"
                " name the event field that holds the tenant"
            )
        self.templates()
        return self

    def templates(self) -> Templates:
        """The url and header values as templates; `ValueError` names the key that does not parse."""
        try:
            url = parse_template(self.url)
        except ValueError as exc:
            raise ValueError(f"key 'url': {exc}") from None
        headers = {}
        for key, secret in self.headers.items():
            try:
                headers[key] = parse_template(secret.get_secret_value())
            except ValueError as exc:
                raise ValueError(f"key 'headers.{key}': {exc}") from None
        return Templates(url, headers)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context of the `tls_*` keys (certificates and hostnames verified); None: the default."""
        if self.tls_ca_file is None and self.tls_client_cert is None:
            return None
        try:
            return tls_context(self.tls_ca_file, self.tls_client_cert, self.tls_client_key)
        except (ssl.SSLError, OSError, EncryptedKeyError) as exc:
            raise ConfigError(
                f"destination {self.name!r}: cannot load its TLS files: {ssl_cause(exc)}"
            ) from None

    retry_in_topic = _OwnTopic("retry_in")  # hand-offs to the retrier
    retry_out_topic = _OwnTopic("retry_out")  # what the retrier offers back
    dlq_topic = _OwnTopic("dlq")
    dlq_replays_topic = _OwnTopic("dlq_replays")  # each replay of NAME.dlq: which letters, by whom

    @property
    def dlq_retention_ms(self) -> int:
        """`retention.ms` of NAME.dlq and NAME.dlq_replays: -1 (Kafka's "forever") when
        `dlq_retention_days` is 0."""
        if self.dlq_retention_days == 0:
            return -1
        return max(1, round(self.dlq_retention_days * _DAY_S * 1000))

    @property
    def retry_retention_ms(self) -> int:
        """`retention.ms` of NAME.retry_in, NAME.retry_out and the tier topics: `max_retry_age_s` + 1 day."""
        return round((self.max_retry_age_s + _DAY_S) * 1000)

    @property
    def connector_group(self) -> str:
        return f"hifi.connector.{self.name}"

    def header_values(self) -> dict[str, str]:
        """The configured HTTP headers with secrets revealed, for the wire only."""
        return {key: secret.get_secret_value() for key, secret in self.headers.items()}
