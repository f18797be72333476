"""The runbook links of the dashboard's panels: one base URL and an anchor per panel.

The base is where docs/alerts.md is served (`--runbook-url`, `HIFI_RUNBOOK_URL`), the same base
the alert rules' `runbook_url` annotations use; each panel links the entry of the alert that
watches what it shows, whose anchor is the alert's name in lower case (`#hifibreakeropen`).
Without a base the page shows no link.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from hifi.errors import ConfigError

RUNBOOK_URL_ENV = "HIFI_RUNBOOK_URL"  # the base, as the retrier takes it from the environment
OPTION = "--runbook-url"
#: a panel of the page -> the anchor of its alert's entry in docs/alerts.md
ANCHORS = {
    "breaker": "hifibreakeropen",
    "loss": "hifilossinfinalminute",
    "availability": "hifiavailabilitybudgetburn",
    "dlq": "hifideadletterqueuegrowing",
    "retry_age": "hifiretryagenearmax",
}


def runbook_base(url: str, *, option: str = OPTION) -> str:
    """`url` without a trailing `#`; a `ConfigError` naming `option` unless it is an http(s)
    URL with a host and no fragment of its own."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment:
        raise ConfigError(
            f"{option} {url!r}: give the http(s) address where docs/alerts.md is served,"
            " without a #anchor (e.g. https://git.example.com/hifi/blob/main/docs/alerts.md)"
        )
    return url.strip().rstrip("#")


def runbook_links(base: str | None) -> dict[str, str] | None:
    """Each panel's link into the runbook; None without a base."""
    if base is None:
        return None
    return {panel: f"{base}#{anchor}" for panel, anchor in ANCHORS.items()}
