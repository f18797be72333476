"""The TLS context every Kafka client of a process gets from `KafkaSettings`
(docs/kafka-security.md): the CA bundle (or the system's), hostname verification unless turned
off, and for mutual TLS the client certificate chain. A file that cannot be used is a
`ConfigError` naming its variable, raised when the settings are read (`check_files`), not at the
first connection.
"""

from __future__ import annotations

import os
import ssl
from typing import TYPE_CHECKING

from hifi.errors import ConfigError

if TYPE_CHECKING:
    from hifi.kafka.settings import KafkaSettings

__all__ = ["check_files", "ssl_context", "trust_described"]

_VARS = {
    "ca_file": "HIFI_KAFKA_CA_FILE",
    "cert_file": "HIFI_KAFKA_CERT_FILE",
    "key_file": "HIFI_KAFKA_KEY_FILE",
    "key_password": "HIFI_KAFKA_KEY_PASSWORD",
}


def ssl_context(settings: KafkaSettings) -> ssl.SSLContext:
    """The client TLS context of `settings` (which `check_files` accepted)."""
    context = ssl.create_default_context(cafile=settings.ca_file)
    context.check_hostname = settings.ssl_check_hostname
    if settings.cert_file:
        password = settings.key_password.get_secret_value() if settings.key_password else None
        context.load_cert_chain(settings.cert_file, settings.key_file, password=password)
    return context


def trust_described(settings: KafkaSettings) -> str:
    """Whose signature a broker's certificate needs, for messages."""
    return (
        f"the CA of {_VARS['ca_file']} ({settings.ca_file})"
        if settings.ca_file
        else (f"the system's CA bundle ({_VARS['ca_file']} is not set)")
    )


def check_files(settings: KafkaSettings) -> None:
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
    password = settings.key_password.get_secret_value() if settings.key_password else None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(settings.cert_file, settings.key_file, password=password)
    except ssl.SSLError as exc:
        raise ConfigError(_chain_error(settings, exc)) from None


def _chain_error(settings: KafkaSettings, exc: ssl.SSLError) -> str:
    reason = _reason(exc)
    key = settings.key_file or settings.cert_file
    if "KEY_VALUES_MISMATCH" in reason.upper() or "key values mismatch" in reason:
        return (
            f"environment variables {_VARS['cert_file']} and {_VARS['key_file']}: the key"
            f" {key} does not belong to the certificate {settings.cert_file}"
        )
    if "BAD_DECRYPT" in reason.upper() or "bad decrypt" in reason:
        return (
            f"environment variable {_VARS['key_password']}: does not decrypt the key {key}"
            if settings.key_password
            else f"environment variable {_VARS['key_file']}: {key} is encrypted; set"
            f" {_VARS['key_password']}"
        )
    which = "key_file" if settings.key_file and "KEY" in reason.upper() else "cert_file"
    path = settings.key_file if which == "key_file" else settings.cert_file
    return f"environment variable {_VARS[which]}: {path}: not a usable PEM file ({reason})"


def _readable(field: str, path: str) -> None:
    if not os.path.isfile(path):
        raise ConfigError(f"environment variable {_VARS[field]}: {path}: file does not exist")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"environment variable {_VARS[field]}: {path}: not readable by hifi")


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or exc)
