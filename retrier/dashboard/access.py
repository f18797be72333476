"""Who may read dead letters and who may act: the dashboard token, loopback and cross-site checks.

- Tier and count panels are open to anyone who reaches the ops port (as `/metrics` is).
- Dead-letter bodies and headers, which often hold personal data, are open while the port is
  bound to loopback; bound beyond it (Kubernetes probes and scraping), they need the token.
- Every action that changes something needs the token, sent in the `X-Hifi-Token` header, and
  a same-origin request: a page of another site can neither read the token nor send that header
  without a CORS preflight, which this server never grants; `Origin` and `Sec-Fetch-Site` are
  checked as well. Without a configured token the dashboard is read-only.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from starlette.requests import Request

from hifi import redaction
from hifi.errors import ConfigError

TOKEN_ENV = "HIFI_DASHBOARD_TOKEN"  # noqa: S105 (the name of the variable, not a token)
TOKEN_HEADER = "x-hifi-token"  # noqa: S105 (a header name)
MIN_TOKEN_CHARS = 16


class Refused(Exception):
    """A request the dashboard will not serve: its HTTP status and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def read_token(token_file: Path | None) -> str | None:
    """The dashboard token from `token_file` or `HIFI_DASHBOARD_TOKEN`; None: read-only.

    The token is registered as a secret, so no log line, page or error ever shows it.
    """
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"--dashboard-token-file {token_file}: {exc.strerror}") from None
        where = f"--dashboard-token-file {token_file}"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        where = f"${TOKEN_ENV}"
    if not token:
        if token_file is not None:
            raise ConfigError(f"{where}: the file is empty")
        return None
    if len(token) < MIN_TOKEN_CHARS or any(ch.isspace() for ch in token):
        raise ConfigError(
            f"{where}: use at least {MIN_TOKEN_CHARS} characters without spaces"
            " (e.g. `openssl rand -hex 24`)"
        )
    redaction.register([token])
    return token


def is_loopback(host: str) -> bool:
    """Whether an ops port bound to `host` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Access:
    """The dashboard's rules for one ops port: `token` (None: read-only) and whether it is bound
    to loopback."""

    token: str | None
    loopback: bool

    @property
    def can_act(self) -> bool:
        return self.token is not None

    @property
    def letters_need_token(self) -> bool:
        return not self.loopback

    def has_token(self, request: Request) -> bool:
        sent = request.headers.get(TOKEN_HEADER)
        return (
            self.token is not None
            and sent is not None
            and hmac.compare_digest(sent.encode(), self.token.encode())
        )

    def check_read_letters(self, request: Request) -> None:
        """Dead-letter bodies and headers: open on loopback, else only with the token."""
        if self.letters_need_token and not self.has_token(request):
            raise Refused(
                401,
                "dead letters need the dashboard token while the ops port is bound beyond loopback",
            )

    def check_action(self, request: Request) -> None:
        """An action: a same-origin request carrying the token."""
        if self.token is None:
            raise Refused(
                403,
                f"the dashboard is read-only: set {TOKEN_ENV} or --dashboard-token-file to act",
            )
        _check_same_origin(request)
        if not self.has_token(request):
            raise Refused(401, "a missing or wrong dashboard token")

    def who(self, request: Request) -> str:
        """Who acted, for the log and the replay record: the page's operator name and address."""
        name = request.headers.get("x-hifi-operator", "").strip()[:64] or "dashboard"
        client = request.client.host if request.client else "unknown"
        return redaction.mask(f"{name}@{client}")


def _check_same_origin(request: Request) -> None:
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        raise Refused(403, "a cross-site request")
    origin = request.headers.get("origin")
    if origin is None:
        return  # not a browser's cross-origin request (curl, the CLI); the token decides
    host = request.headers.get("host", "")
    if origin == "null" or urlsplit(origin).netloc != host:
        raise Refused(403, "a request from another origin")
