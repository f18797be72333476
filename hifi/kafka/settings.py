"""How every Kafka client of a process connects, read from `HIFI_KAFKA_*` in the environment, and
how its group members join their group (the assignor; a daemon's `--instance-id` for static
membership, docs/rebalancing.md)."""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from hifi import redaction
from hifi.errors import ConfigError

_ENV_KEYS = {
    "bootstrap": "HIFI_KAFKA_BOOTSTRAP",
    "security_protocol": "HIFI_KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "HIFI_KAFKA_SASL_MECHANISM",
    "username": "HIFI_KAFKA_USERNAME",
    "password": "HIFI_KAFKA_PASSWORD",
    "ca_file": "HIFI_KAFKA_CA_FILE",
    "enable_idempotence": "HIFI_KAFKA_ENABLE_IDEMPOTENCE",
    "replication_factor": "HIFI_KAFKA_REPLICATION_FACTOR",
    "assignor": "HIFI_KAFKA_ASSIGNOR",
    "session_timeout_s": "HIFI_KAFKA_SESSION_TIMEOUT_S",
}
INSTANCE_ID_ENV = "HIFI_INSTANCE_ID"  # read by the daemons' --instance-id, never by from_env

#: How a group's leader spreads partitions over the members (aiokafka's assignors; it has no
#: cooperative-sticky one, aio-libs/aiokafka#1126). roundrobin is aiokafka's own default.
Assignor = Literal["roundrobin", "range", "sticky"]

# Kafka's rule for group.instance.id (as for topic names): 1 to 249 of these, not "." or "..".
_INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")


class KafkaSettings(BaseModel):
    """How every aiokafka client of this process connects; the password never appears in a repr."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap: str = Field(default="127.0.0.1:9092", min_length=1)
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    username: str | None = None
    password: SecretStr | None = None
    ca_file: str | None = None
    enable_idempotence: bool = False
    replication_factor: int = Field(default=1, ge=1, le=10)
    assignor: Assignor = "roundrobin"
    # When set, every group member of the process uses it, over its daemon's own choice; Kafka
    # brokers accept 6 s to 30 min by default (group.min/max.session.timeout.ms).
    session_timeout_s: float | None = Field(default=None, ge=6, le=1800)
    # A group member's static identity (KIP-345); only a daemon's --instance-id sets it.
    instance_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,249}$")

    def describe(self) -> dict[str, str]:
        """What a start-up log line says about the connection and the group membership (never
        the password)."""
        described = {"bootstrap": self.bootstrap, "security_protocol": self.security_protocol}
        if self.sasl_mechanism:
            described["sasl_mechanism"] = self.sasl_mechanism
            described["username"] = self.username or ""
        described["assignor"] = self.assignor
        if self.session_timeout_s is not None:
            described["session_timeout_s"] = f"{self.session_timeout_s:g}"
        described["membership"] = "dynamic" if self.instance_id is None else "static"
        if self.instance_id is not None:
            described["instance_id"] = self.instance_id
        return described

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
        """Read `HIFI_KAFKA_*`; an invalid value raises `ConfigError` naming the variable."""
        env = os.environ if environ is None else environ
        raw = {field: env[var] for field, var in _ENV_KEYS.items() if env.get(var, "") != ""}
        try:
            settings = cls.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            field = str(first["loc"][0])
            shown = "" if field == "password" else f" (got {first.get('input')!r})"
            raise ConfigError(
                f"environment variable {_ENV_KEYS[field]}: {first['msg']}{shown}"
            ) from None
        if settings.security_protocol.startswith("SASL") and not (
            settings.sasl_mechanism and settings.username and settings.password
        ):
            raise ConfigError(
                f"environment: {_ENV_KEYS['security_protocol']}={settings.security_protocol} needs "
                f"{_ENV_KEYS['sasl_mechanism']}, {_ENV_KEYS['username']} and {_ENV_KEYS['password']}"
            )
        if settings.password is not None:
            redaction.register([settings.password.get_secret_value()])
        if settings.ca_file:
            _check_ca_file(settings.ca_file)
        return settings


def _check_ca_file(path: str) -> None:
    """The CA bundle must exist and hold certificates Python's TLS can load."""
    where = f"environment variable {_ENV_KEYS['ca_file']}: {path}"
    if not os.path.isfile(path):
        raise ConfigError(f"{where}: file does not exist")
    try:
        ssl.create_default_context(cafile=path)
    except (ssl.SSLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ConfigError(f"{where}: not a PEM CA certificate bundle ({reason})") from None
