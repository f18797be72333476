"""A destination's `[auth]` table: how the connector gets the credential it sends (OAuth2 client
credentials), validated at load; the tokens themselves come from `hifi.oauth2`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from config.env_refs import resolve_env
from hifi import redaction
from hifi.oauth2 import ClientCredentials

#: the `[auth]` keys whose values may hold `${VAR}` references (resolved at load)
ENV_KEYS = ("client_secret",)
_SCOPE_RE = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]+$")  # RFC 6749 3.3 scope-token


class OAuth2ClientCredentials(BaseModel):
    """`[auth] kind = "oauth2_client_credentials"`: a bearer token from `token_url`, refreshed
    before it expires and once when the destination answers 401 (docs/destinations.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    kind: Literal["oauth2_client_credentials"]
    token_url: str
    client_id: str = Field(min_length=1)
    client_secret: SecretStr  # write ${VAR}: the secret stays out of the file
    scopes: list[str] = Field(default_factory=list)  # sent space-joined as `scope`
    audience: str | None = Field(default=None, min_length=1)
    # "basic": client_id and client_secret by HTTP Basic auth; "body": as form fields
    client_auth: Literal["basic", "body"] = "basic"
    timeout_s: float = Field(default=10.0, gt=0, le=300)  # one request to the token endpoint

    @field_validator("token_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^\s/?#]+", value) or re.search(r"\s", value):
            raise ValueError("must be an absolute http:// or https:// URL")
        return value

    @field_validator("client_secret")
    @classmethod
    def _check_secret(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value().strip():
            raise ValueError('is empty; write client_secret = "${VAR}" with VAR set')
        redaction.register([value.get_secret_value()])
        return value

    @field_validator("scopes")
    @classmethod
    def _check_scopes(cls, value: list[str]) -> list[str]:
        for scope in value:
            if not _SCOPE_RE.match(scope):
                raise ValueError(
                    f"scope {scope!r} is not one scope-token (printable ASCII without spaces,"
                    " '\"' or '\\\\'); list each scope as its own string"
                )
        return value

    def credentials(self) -> ClientCredentials:
        """The settings of a `hifi.oauth2.TokenSource`, the secret revealed."""
        return ClientCredentials(
            token_url=self.token_url,
            client_id=self.client_id,
            client_secret=self.client_secret.get_secret_value(),
            scopes=tuple(self.scopes),
            audience=self.audience,
            client_auth=self.client_auth,
            timeout_s=self.timeout_s,
        )


Auth = OAuth2ClientCredentials  # one kind so far; a union discriminated by `kind` when more come


def resolve_auth_env(raw: Any, path: Path, environ: Mapping[str, str]) -> Any:
    """The `[auth]` table with `${VAR}` resolved in its secret values (as in `[headers]`)."""
    if not isinstance(raw, dict):
        return raw
    return {
        key: resolve_env(value, path, key, environ, table="auth")
        if key in ENV_KEYS and isinstance(value, str)
        else value
        for key, value in raw.items()
    }
