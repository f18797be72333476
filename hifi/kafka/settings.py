"""How every Kafka client of a process connects, read from `HIFI_KAFKA_*` in the environment, and
how its group members join their group (the assignor; a daemon's `--instance-id` for static
membership, docs/rebalancing.md). The security settings are described in docs/kafka-security.md;
`hifi.kafka.security` turns them into a TLS context, `hifi.kafka.oauthbearer` into a token
provider."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Literal, Self

import structlog
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from hifi import redaction
from hifi.errors import ConfigError
from hifi.kafka import security

log = structlog.get_logger(__name__)

ENV_KEYS = {
    "bootstrap": "HIFI_KAFKA_BOOTSTRAP",
    "security_protocol": "HIFI_KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "HIFI_KAFKA_SASL_MECHANISM",
    "username": "HIFI_KAFKA_USERNAME",
    "password": "HIFI_KAFKA_PASSWORD",
    "ca_file": "HIFI_KAFKA_CA_FILE",
    "cert_file": "HIFI_KAFKA_CERT_FILE",
    "key_file": "HIFI_KAFKA_KEY_FILE",
    "key_password": "HIFI_KAFKA_KEY_PASSWORD",
    "ssl_check_hostname": "HIFI_KAFKA_SSL_CHECK_HOSTNAME",
    "oauth_token_url": "HIFI_KAFKA_OAUTH_TOKEN_URL",
    "oauth_client_id": "HIFI_KAFKA_OAUTH_CLIENT_ID",
    "oauth_client_secret": "HIFI_KAFKA_OAUTH_CLIENT_SECRET",
    "oauth_scope": "HIFI_KAFKA_OAUTH_SCOPE",
    "enable_idempotence": "HIFI_KAFKA_ENABLE_IDEMPOTENCE",
    "replication_factor": "HIFI_KAFKA_REPLICATION_FACTOR",
    "assignor": "HIFI_KAFKA_ASSIGNOR",
    "session_timeout_s": "HIFI_KAFKA_SESSION_TIMEOUT_S",
}
_SECRET_FIELDS = ("password", "key_password", "oauth_client_secret")

#: How a group's leader spreads partitions over the members (aiokafka's assignors; it has no
#: cooperative-sticky one, aio-libs/aiokafka#1126). roundrobin is aiokafka's own default.
Assignor = Literal["roundrobin", "range", "sticky"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]

# Kafka's rule for group.instance.id (as for topic names): 1 to 249 of these, not "." or "..".
_INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")


class KafkaSettings(BaseModel):
    """How every aiokafka client of this process connects; no secret appears in a repr."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap: str = Field(default="127.0.0.1:9092", min_length=1)
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    username: str | None = None
    password: SecretStr | None = None
    # TLS (SSL, SASL_SSL): the CA bundle that signed the brokers (None: the system's), and for
    # mutual TLS the client certificate and its key (the key may be in the certificate's file)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: SecretStr | None = None
    ssl_check_hostname: bool = True
    # OAUTHBEARER: client credentials against a token endpoint (hifi.oauth2)
    oauth_token_url: str | None = Field(default=None, pattern=r"^https?://")
    oauth_client_id: str | None = None
    oauth_client_secret: SecretStr | None = None
    oauth_scope: str | None = None
    enable_idempotence: bool = False
    replication_factor: int = Field(default=1, ge=1, le=10)
    assignor: Assignor = "roundrobin"
    # When set, every group member of the process uses it, over its daemon's own choice; Kafka
    # brokers accept 6 s to 30 min by default (group.min/max.session.timeout.ms).
    session_timeout_s: float | None = Field(default=None, ge=6, le=1800)
    # A group member's static identity (KIP-345); only a daemon's --instance-id sets it.
    instance_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,249}$")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """Settings that cannot work together, named by their variables (`ConfigError`)."""
        var = ENV_KEYS
        protocol = f"{var['security_protocol']}={self.security_protocol}"
        if not self.uses_tls:
            given = [var[f] for f in ("ca_file", "cert_file", "key_file") if getattr(self, f)]
            if given:
                raise ConfigError(
                    f"environment: {', '.join(given)} set, but {protocol} does not use TLS"
                    " (SSL or SASL_SSL does)"
                )
        if self.key_file and not self.cert_file:
            raise ConfigError(f"environment: {var['key_file']} needs {var['cert_file']}")
        sasl = self.security_protocol.startswith("SASL")
        if sasl and self.sasl_mechanism is None:
            raise ConfigError(f"environment: {protocol} needs {var['sasl_mechanism']}")
        if not sasl and self.sasl_mechanism is not None:
            raise ConfigError(
                f"environment: {var['sasl_mechanism']}={self.sasl_mechanism} needs"
                f" {var['security_protocol']}=SASL_SSL or SASL_PLAINTEXT, not {self.security_protocol}"
            )
        needed: tuple[str, ...] = ()
        if self.sasl_mechanism == "OAUTHBEARER":
            needed = ("oauth_token_url", "oauth_client_id", "oauth_client_secret")
        elif self.sasl_mechanism is not None:
            needed = ("username", "password")
        missing = [var[f] for f in needed if not getattr(self, f)]
        if missing:
            raise ConfigError(
                f"environment: {var['sasl_mechanism']}={self.sasl_mechanism} needs {', '.join(missing)}"
            )
        return self

    def describe(self) -> dict[str, str]:
        """What a start-up log line says about the connection and the group membership (never
        a secret)."""
        described = {"bootstrap": self.bootstrap, "security_protocol": self.security_protocol}
        if self.uses_tls:
            described["ca"] = self.ca_file or "system"
            described["client_certificate"] = self.cert_file or "none"
            if not self.ssl_check_hostname:
                described["ssl_check_hostname"] = "false"
        if self.sasl_mechanism == "OAUTHBEARER":
            described["sasl_mechanism"] = self.sasl_mechanism
            described["oauth_token_url"] = self.oauth_token_url or ""
            described["oauth_client_id"] = self.oauth_client_id or ""
        elif self.sasl_mechanism:
            described["sasl_mechanism"] = self.sasl_mechanism
            described["username"] = self.username or ""
        described["assignor"] = self.assignor
        if self.session_timeout_s is not None:
            described["session_timeout_s"] = f"{self.session_timeout_s:g}"
        described["membership"] = "dynamic" if self.instance_id is None else "static"
        if self.instance_id is not None:
            described["instance_id"] = self.instance_id
        return described

    def environment(self) -> dict[str, str]:
        """These settings as the `HIFI_KAFKA_*` variables `from_env` reads (secrets included:
        for a child process's environment only), defaults left out."""
        defaults = KafkaSettings()
        env: dict[str, str] = {}
        for field, var in ENV_KEYS.items():
            value = getattr(self, field)
            if value is None or (value == getattr(defaults, field) and field != "bootstrap"):
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            env[var] = str(value).lower() if isinstance(value, bool) else str(value)
        return env

    def as_static_member(self, instance_id: str | None, *, where: str) -> KafkaSettings:
        """These settings with the group instance id a daemon was given (None: dynamic member);
        an id Kafka would refuse raises `ConfigError` naming `where` (the flag or variable)."""
        if instance_id is None:
            return self
        if not _INSTANCE_ID.fullmatch(instance_id) or instance_id in (".", ".."):
            raise ConfigError(
                f"{where}: instance id {instance_id[:60]!r} is not valid; use 1 to 249 letters,"
                " digits, '.', '_' or '-' (a StatefulSet pod name fits), unique in the group"
            )
        return self.model_copy(update={"instance_id": instance_id})

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KafkaSettings:
        """Read `HIFI_KAFKA_*`; an invalid value raises `ConfigError` naming the variable, and the
        TLS files are loaded once (`hifi.kafka.security.check_files`) so a bad one is named now.
        Secrets are registered for masking before anything can fail."""
        env = os.environ if environ is None else environ
        raw = {field: env[var] for field, var in ENV_KEYS.items() if env.get(var, "") != ""}
        redaction.register([raw[field] for field in _SECRET_FIELDS if field in raw])
        try:
            settings = cls.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            field = str(first["loc"][0])
            shown = "" if field in _SECRET_FIELDS else f" (got {first.get('input')!r})"
            raise ConfigError(
                f"environment variable {ENV_KEYS[field]}: {first['msg']}{shown}"
            ) from None
        if settings.uses_tls:
            security.check_files(settings)
            if not settings.ssl_check_hostname:
                log.warning(
                    "kafka_tls_hostname_unchecked",
                    variable=ENV_KEYS["ssl_check_hostname"],
                    risk="any certificate the CA signed is accepted for any broker",
                )
        return settings
