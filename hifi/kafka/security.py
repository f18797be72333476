"""The TLS context every Kafka client of a process gets from `KafkaSettings`
(docs/kafka-security.md): the CA bundle (or the system's), hostname verification unless turned
off, and for mutual TLS the client certificate chain. A file that cannot be used is a
`ConfigError` naming its variable, raised when the settings are read (`check_files`), not at the
first connection.
"""

from __future__ import annotations

import os
import ssl
from typing import Protocol

from pydantic import SecretStr

from hifi.errors import ConfigError

__all__ = ["TlsFiles", "check_files", "ssl_context", "trust_described"]

_VARS = {
    "ca_file": "HIFI_KAFKA_CA_FILE",
    "cert_file": "HIFI_KAFKA_CERT_FILE",
    "key_file": "HIFI_KAFKA_KEY_FILE",
    "key_password": "HIFI_KAFKA_KEY_PASSWORD",
}


class TlsFiles(Protocol):
    """The TLS part of `hifi.kafka.settings.KafkaSettings`, all this module reads: the settings
    import this module, so it names what it needs here instead of importing them back."""

    @property
    def ca_file(self) -> str | None: ...
    @property
    def cert_file(self) -> str | None: ...
    @property
    def key_file(self) -> str | None: ...
    @property
    def key_password(self) -> SecretStr | None: ...
    @property
    def ssl_check_hostname(self) -> bool: ...


def ssl_context(settings: TlsFiles) -> ssl.SSLContext:
    """The client TLS context of `settings` (which `check_files` accepted)."""
    context = ssl.create_default_context(cafile=settings.ca_file)
    context.check_hostname = settings.ssl_check_hostname
    if settings.cert_file:
        password = settings.key_password.get_secret_value() if settings.key_password else None
        context.load_cert_chain(
            settings.cert_file, settings.key_file, password=password or _no_password
        )
    return context


def trust_described(settings: TlsFiles) -> str:
    """Whose signature a broker's certificate needs, for messages."""
    return (
        f"the CA of {_VARS['ca_file']} ({settings.ca_file})"
        if settings.ca_file
        else (f"the system's CA bundle ({_VARS['ca_file']} is not set)")
    )


def check_files(settings: TlsFiles) -> None:
    """Load the CA bundle and the client certificate and key once; the first file that cannot be
    used raises `ConfigError` naming its variable and why."""
    if settings.ca_file:
        _readable("ca_file", settings.ca_file)
        try:
            ssl.create_default_context(cafile=settings.ca_file)
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(
                f"environment variable {_VARS['ca_file']}: {settings.ca_file}: not a PEM CA"
                f" certificate bundle ({_reason(exc)})"
            ) from None
    if not settings.cert_file:
        return
    _readable("cert_file", settings.cert_file)
    if settings.key_file:
        _readable("key_file", settings.key_file)
    key = settings.key_file or settings.cert_file
    encrypted = _encrypted(key)
    if encrypted and settings.key_password is None:
        raise ConfigError(
            f"environment variable {_VARS['key_file']}: {key} is encrypted; set"
            f" {_VARS['key_password']}"
        )
    password = settings.key_password.get_secret_value() if settings.key_password else _no_password
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(settings.cert_file, settings.key_file, password=password)
    except ssl.SSLError as exc:
        if encrypted:
            raise ConfigError(
                f"environment variable {_VARS['key_password']}: does not decrypt the key {key}"
            ) from None
        raise ConfigError(_chain_error(settings, exc)) from None


def _no_password() -> str:
    """Asked for a password the settings do not have: never OpenSSL's prompt on a terminal."""
    raise ConfigError(f"environment variable {_VARS['key_password']}: needed, not set")


def _encrypted(path: str) -> bool:
    """Whether a PEM file holds an encrypted private key (PKCS#8 or the traditional form)."""
    with open(path, "rb") as file:
        text = file.read(1 << 20)
    return b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in text or b"Proc-Type: 4,ENCRYPTED" in text


def _chain_error(settings: TlsFiles, exc: ssl.SSLError) -> str:
    reason = _reason(exc)
    key = settings.key_file or settings.cert_file
    if "KEY_VALUES_MISMATCH" in reason.upper() or "key values mismatch" in reason:
        return (
            f"environment variables {_VARS['cert_file']} and {_VARS['key_file']}: the key"
            f" {key} does not belong to the certificate {settings.cert_file}"
        )
    return (
        f"environment variable {_VARS['cert_file']}: {settings.cert_file} (with its key {key}):"
        f" not a usable PEM certificate and key ({reason})"
    )


def _readable(field: str, path: str) -> None:
    if not os.path.isfile(path):
        raise ConfigError(f"environment variable {_VARS[field]}: {path}: file does not exist")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"environment variable {_VARS[field]}: {path}: not readable by hifi")


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or exc)
