"""The `[decode]` table of a destination: its records are in a Schema Registry's wire format, decoded
to JSON before anything else reads them (`hifi.schema_registry`, docs/schema-registry.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from config.tls_files import client_cert_problem, readable_file

if TYPE_CHECKING:  # the decoder's imports are heavy: only a daemon that decodes loads them
    from hifi.schema_registry import RegistrySettings


class Decode(BaseModel):
    """`[decode]`: where the schemas come from and how to reach the registry."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    kind: Literal["schema_registry"]
    url: str
    username: str | None = None  # HTTP Basic, with `password` (`${VAR}` allowed, masked)
    password: SecretStr | None = None
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    cache_schemas: int = Field(default=1000, ge=1, le=1_000_000)  # schemas kept by id
    tls_ca_file: Path | None = None  # a PEM bundle to trust, relative to the catalog file
    tls_client_cert: Path | None = None  # mutual TLS: its certificate (and key, unless below)
    tls_client_key: Path | None = None  # its unencrypted private key

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^\s/?#]+", value):
            raise ValueError("must be an absolute http:// or https:// URL")
        if re.search(r"\$[{A-Za-z_]", value) or "@" in value.split("/", 3)[2]:
            raise ValueError("write the URL alone; credentials go in username and password")
        return value.rstrip("/")

    @field_validator("tls_ca_file", "tls_client_cert", "tls_client_key", mode="before")
    @classmethod
    def _find_tls_file(cls, value: object, info: ValidationInfo) -> Path | None:
        base_dir = info.context.get("base_dir") if isinstance(info.context, dict) else None
        return readable_file(value, base_dir)

    @model_validator(mode="after")
    def _check_credentials(self) -> Self:
        if (self.username is None) != (self.password is None):
            raise ValueError("key 'username': set username and password together, or neither")
        if self.tls_client_key is not None and self.tls_client_cert is None:
            raise ValueError("key 'tls_client_key': set without tls_client_cert; set both")
        cert, key = self.tls_client_cert, self.tls_client_key
        if cert is not None and (problem := client_cert_problem(cert, key)):
            raise ValueError(problem)
        return self

    def registry(self, proxy: str | None) -> RegistrySettings:
        """The decoder's settings; `proxy`: the destination's, if it sets one."""
        from hifi.schema_registry import RegistrySettings

        return RegistrySettings(
            url=self.url,
            username=self.username,
            password=None if self.password is None else self.password.get_secret_value(),
            timeout_s=self.timeout_s,
            cache_schemas=self.cache_schemas,
            ca_file=None if self.tls_ca_file is None else str(self.tls_ca_file),
            client_cert=None if self.tls_client_cert is None else str(self.tls_client_cert),
            client_key=None if self.tls_client_key is None else str(self.tls_client_key),
            proxy=proxy,
        )
