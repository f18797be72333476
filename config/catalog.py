"""The destination catalog: `NAME.toml` files validated into `Destination` objects at load time."""

from __future__ import annotations

import codecs
import contextlib
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from config.auth import resolve_auth_env
from config.destination import NAME_RE, Destination
from config.egress import proxy_secrets
from config.env_refs import resolve_env
from config.problems import describe
from hifi import redaction
from hifi.errors import ConfigError

CATALOG_ENV_VAR = "HIFI_CATALOG_DIR"


def default_catalog_dir() -> Path:
    """`HIFI_CATALOG_DIR` if set, else the catalog shipped with hifi."""
    from_env = os.environ.get(CATALOG_ENV_VAR)
    if from_env:
        return Path(from_env)
    return Path(__file__).resolve().parent / "destinations"


class Catalog:
    """A directory of destination files; each file is parsed and validated when it is loaded."""

    def __init__(
        self,
        directory: Path,
        environ: Mapping[str, str] | None = None,
        *,
        for_delivery: bool = True,
    ) -> None:
        """`for_delivery=False` loads what the Kafka side needs (topics, retry settings) without
        the HTTP secrets: `[headers]` and the TLS keys are not required to resolve, so the DLQ
        tools run without the destination's token."""
        self.directory = directory
        self._environ = os.environ if environ is None else environ
        self._for_delivery = for_delivery

    def names(self) -> list[str]:
        """Names of every destination in the catalog, sorted."""
        self._check_directory()
        return sorted(p.stem for p in self.directory.glob("*.toml") if not p.stem.startswith("_"))

    def load(self, name: str) -> Destination:
        """Load and validate one destination; `ConfigError` names the file, key and what is allowed."""
        if not NAME_RE.match(name):
            raise ConfigError(
                f"destination name {name!r} is invalid; use letters, digits, '.', '_' or '-'"
            )
        self._check_directory()
        path = self.directory / f"{name}.toml"
        if not path.is_file():
            known = ", ".join(self.names())
            raise ConfigError(f"destination {name!r}: no file {path} (known: {known or 'none'})")
        return load_destination_file(path, self._environ, for_delivery=self._for_delivery)

    def load_all(self) -> list[Destination]:
        return [self.load(name) for name in self.names()]

    def load_named(self, names: Sequence[str]) -> list[Destination]:
        """The named destinations (each once), or every one when none is named; `ConfigError`
        when the catalog has none."""
        if names:
            return [self.load(name) for name in dict.fromkeys(names)]
        found = self.load_all()
        if not found:
            raise ConfigError(f"catalog {self.directory} has no destinations; add NAME.toml")
        return found

    def _check_directory(self) -> None:
        if not self.directory.exists():
            raise ConfigError(f"catalog directory {self.directory} does not exist")
        if not self.directory.is_dir():
            raise ConfigError(f"catalog directory {self.directory} is not a directory")


def load_destination_file(
    path: Path, environ: Mapping[str, str], *, for_delivery: bool = True
) -> Destination:
    """Parse one catalog file, resolve `${VAR}` in header values, and validate it."""
    try:
        raw = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    if "name" in raw:
        raise ConfigError(
            f"{path}: key 'name' is not allowed; the file name is the destination name"
        )
    raw["name"] = path.stem
    if isinstance(raw.get("decode"), dict) and isinstance(raw["decode"].get("password"), str):
        password = resolve_env(raw["decode"]["password"], path, "password", environ, table="decode")
        raw["decode"] = {**raw["decode"], "password": password}  # the auditor decodes too
    if not for_delivery:
        _without_delivery_secrets(raw, path, environ)
    else:
        _resolve_delivery_secrets(raw, path, environ)
    try:
        destination = Destination.model_validate(raw, context={"base_dir": path.parent})
    except ValidationError as exc:
        raise ConfigError(describe(path, exc, Destination)) from None
    for value in destination.header_values().values():
        redaction.register(redaction.header_secrets(value))
    if destination.proxy is not None:
        redaction.register(proxy_secrets(destination.proxy.get_secret_value()))
    if destination.decode is not None and destination.decode.password is not None:
        redaction.register([destination.decode.password.get_secret_value()])
    if destination.signing is not None:
        redaction.register([secret.get_secret_value() for secret in destination.signing.secrets])
    return destination


def _resolve_delivery_secrets(raw: dict[str, Any], path: Path, environ: Mapping[str, str]) -> None:
    """Resolve `${VAR}` in the secrets the connector sends: `[headers]`, `[auth]`, `proxy` and
    `[signing]`."""
    headers = raw.get("headers")
    if isinstance(headers, dict):
        raw["headers"] = {
            key: resolve_env(value, path, key, environ) if isinstance(value, str) else value
            for key, value in headers.items()
        }
    if "auth" in raw:
        raw["auth"] = resolve_auth_env(raw["auth"], path, environ)
    if isinstance(raw.get("proxy"), str):
        raw["proxy"] = resolve_env(raw["proxy"], path, "proxy", environ, table="")
    if "signing" in raw:
        raw["signing"] = _signing_secrets(raw["signing"], path, environ)


def _signing_secrets(raw: Any, path: Path, environ: Mapping[str, str]) -> Any:
    """`[signing]` with `${VAR}` resolved in each of its secrets (as in `[headers]`)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("secrets"), list):
        return raw
    secrets = [
        resolve_env(value, path, f"secrets[{index}]", environ, table="signing")
        if isinstance(value, str)
        else value
        for index, value in enumerate(raw["secrets"])
    ]
    return {**raw, "secrets": secrets}


def _without_delivery_secrets(raw: dict[str, Any], path: Path, environ: Mapping[str, str]) -> None:
    """Drop `[headers]`, `[auth]` and the TLS keys; still mask the secrets that resolve here."""
    headers = raw.pop("headers", None)
    with contextlib.suppress(ConfigError):
        signing = _signing_secrets(raw.pop("signing", None), path, environ)
        if isinstance(signing, dict):
            redaction.register([s for s in signing.get("secrets", []) if isinstance(s, str)])
    for key in ("tls_ca_file", "tls_client_cert", "tls_client_key"):
        raw.pop(key, None)
    proxy = raw.pop("proxy", None)
    if isinstance(proxy, str):
        with contextlib.suppress(ConfigError):
            redaction.register(proxy_secrets(resolve_env(proxy, path, "proxy", environ, table="")))
    with contextlib.suppress(ConfigError):
        auth = resolve_auth_env(raw.pop("auth", None), path, environ)
        if isinstance(auth, dict) and isinstance(auth.get("client_secret"), str):
            redaction.register([auth["client_secret"]])
    if not isinstance(headers, dict):
        return
    for key, value in headers.items():
        if isinstance(value, str):
            with contextlib.suppress(ConfigError):
                redaction.register(redaction.header_secrets(resolve_env(value, path, key, environ)))


def read_text(path: Path) -> str:
    """The file as text: UTF-8 without a byte-order mark, as TOML requires; else a one-line
    `ConfigError` naming it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    if data.startswith(codecs.BOM_UTF8):
        raise ConfigError(
            f"{path}: starts with a UTF-8 byte-order mark; save it as UTF-8 without the BOM"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start})") from None
