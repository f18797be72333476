"""TLS refusals named in one line: an unknown CA, a host name mismatch, a client certificate
required or refused, each as the operator would fix it.

OpenSSL's own text ("sslv3 alert handshake failure", "certificate verify failed: unable to
get local issuer certificate") says what broke, not what to do about it.
"""

from __future__ import annotations

import ssl

__all__ = ["tls_refusal"]

_UNKNOWN_ISSUER = frozenset({2, 18, 19, 20, 21})  # X509_V_ERR_*: no issuer, self-signed chain
_EXPIRED, _HOSTNAME_MISMATCH = 10, 62
_CERT_REQUIRED = frozenset(
    {"TLSV13_ALERT_CERTIFICATE_REQUIRED", "PEER_DID_NOT_RETURN_A_CERTIFICATE"}
)
_CERT_REFUSED = frozenset(
    {
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "TLSV1_ALERT_UNKNOWN_CA",
        "TLSV1_ALERT_ACCESS_DENIED",
    }
)


def tls_refusal(exc: BaseException | None, *, client_cert: bool) -> str | None:
    """What a TLS failure means, in one line; None if `exc` is not one this names.

    `client_cert`: whether a client certificate was offered (the destination's `tls_client_cert`).
    """
    if isinstance(exc, ssl.SSLCertVerificationError):
        return _verification(exc)
    if not isinstance(exc, ssl.SSLError):
        return None
    reason = exc.reason or ""
    if reason in _CERT_REQUIRED:
        return _required(client_cert)
    if reason in _CERT_REFUSED and client_cert:
        return f"TLS: the destination refused the client certificate ({_alert(reason)})"
    if reason == "SSLV3_ALERT_HANDSHAKE_FAILURE":
        hint = (
            "it refused the client certificate, or shares no cipher"
            if client_cert
            else "it may require a client certificate (tls_client_cert), or share no cipher"
        )
        return f"TLS: the destination refused the handshake (handshake failure alert): {hint}"
    return None


def _verification(exc: ssl.SSLCertVerificationError) -> str:
    said = exc.verify_message or "verification failed"
    if exc.verify_code == _HOSTNAME_MISMATCH:
        return (
            f"TLS: hostname mismatch: the destination's certificate is not for this host ({said})"
        )
    if exc.verify_code in _UNKNOWN_ISSUER:
        return (
            f"TLS: unknown CA: the destination's certificate is not signed by a trusted CA ({said});"
            " set tls_ca_file to the CA that signed it"
        )
    if exc.verify_code == _EXPIRED:
        return f"TLS: the destination's certificate has expired ({said})"
    return f"TLS: the destination's certificate was refused ({said})"


def _required(client_cert: bool) -> str:
    if client_cert:
        return "TLS: the destination requires a client certificate and did not accept the one sent"
    return "TLS: client certificate required: the destination wants one; set tls_client_cert"


def _alert(reason: str) -> str:
    return reason.lower().replace("_", " ")
