"""TLS files a destination names: checked at load as Python's ssl will load them, and the context they make."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import httpx


class EncryptedKeyError(Exception):
    """The private key asks for a passphrase (hifi never prompts for one)."""


def refuse_password() -> str:
    raise EncryptedKeyError("the private key is encrypted")


def ssl_cause(exc: BaseException) -> str:
    """An ssl or OS error as short text, without the `(_ssl.c:NNNN)` source position."""
    if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError) and exc.strerror:
        return exc.strerror
    return re.sub(r"\s*\(_ssl\.c:\d+\)", "", str(exc)) or type(exc).__name__


def readable_file(value: object, base_dir: str | Path | None) -> Path | None:
    """A TLS key's value as an existing, readable file; a relative path is taken from `base_dir`
    when given. `ValueError` says what is wrong with it."""
    if value is None:
        return None
    if isinstance(value, Path):
        path = value
    elif isinstance(value, str) and value:
        path = Path(value)
    else:
        raise ValueError("must be the path of a PEM file, as a string")
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    if not path.is_file():
        raise ValueError(f"{path} is not a file")
    try:
        path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path} cannot be read: {exc.strerror}") from None
    return path


def client_cert_problem(cert: Path, key: Path | None) -> str | None:
    """Why the client certificate and key cannot be used, naming the key to fix; None if they can."""
    key_key, key_file = ("tls_client_key", key) if key else ("tls_client_cert", cert)
    try:
        cert_pem, key_pem = cert.read_bytes(), key_file.read_bytes()
    except OSError as exc:
        return f"key 'tls_client_cert': cannot read {cert} or {key_file}: {exc.strerror}"
    if b"-----BEGIN CERTIFICATE-----" not in cert_pem:
        return f"key 'tls_client_cert': {cert} holds no PEM certificate"
    if b"PRIVATE KEY-----" not in key_pem:
        if key is None:
            return (
                f"key 'tls_client_cert': {cert} holds no private key; set tls_client_key to the"
                " file of the certificate's key"
            )
        return f"key 'tls_client_key': {key} holds no PEM private key"
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key, password=refuse_password)
    except EncryptedKeyError:
        return (
            f"key '{key_key}': {key_file} is encrypted; hifi needs the key unencrypted"
            " (protect the file by its permissions)"
        )
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            return f"key '{key_key}': {key_file} does not match the certificate in {cert}"
        return (
            f"key 'tls_client_cert': Python's ssl cannot load {cert} with its key: {ssl_cause(exc)}"
        )
    except OSError as exc:
        return f"key 'tls_client_cert': cannot load {cert}: {ssl_cause(exc)}"
    return None


def tls_context(ca_file: Path | None, cert: Path | None, key: Path | None) -> ssl.SSLContext:
    """A client context trusting `ca_file` (else the default trust), presenting `cert`/`key`."""
    # a client certificate alone: trust what the HTTP client trusts by default
    context = (
        ssl.create_default_context(cafile=ca_file)
        if ca_file is not None
        else httpx.create_ssl_context()
    )
    if cert is not None:
        context.load_cert_chain(cert, key, password=refuse_password)
    return context
