"""The dashboard's runbook links: one base URL, checked where it is given, and an anchor per
panel that is a heading of docs/alerts.md."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from hifi.cli import run_command
from hifi.errors import ConfigError
from retrier import cli
from retrier.dashboard import runbook
from retrier.dashboard.runbook import ANCHORS, runbook_base, runbook_links

ALERTS = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"
BASE = "https://git.example.com/hifi/blob/main/docs/alerts.md"


def test_every_panel_links_a_heading_of_the_alerts_page() -> None:
    """Each anchor the page links is a `## HifiName` heading of docs/alerts.md in lower case,
    as the alert rules' runbook_url annotations name them."""
    headings = {
        match.group(1).lower()
        for match in re.finditer(r"^## (Hifi\w+)\s*$", ALERTS.read_text(), re.MULTILINE)
    }
    assert set(ANCHORS.values()) <= headings, set(ANCHORS.values()) - headings
    assert ANCHORS["breaker"] == "hifibreakeropen"


def test_links_are_the_base_and_an_anchor_and_none_without_a_base() -> None:
    """With a base every panel gets BASE#anchor; without one there is no link at all."""
    links = runbook_links(runbook_base(BASE + "#"))
    assert links is not None
    assert links["breaker"] == f"{BASE}#hifibreakeropen"
    assert links["loss"] == f"{BASE}#hifilossinfinalminute"
    assert links["availability"] == f"{BASE}#hifiavailabilitybudgetburn"
    assert links["dlq"] == f"{BASE}#hifideadletterqueuegrowing"
    assert links["retry_age"] == f"{BASE}#hifiretryagenearmax"
    assert runbook_links(None) is None


@pytest.mark.parametrize(
    "url", ["ftp://git.example.com/alerts.md", "git.example.com/alerts.md", "https://", f"{BASE}#x"]
)
def test_a_base_that_is_not_an_http_url_is_refused_naming_the_option(url: str) -> None:
    """Not http(s), no host, or an anchor of its own: one line naming the option and the value."""
    with pytest.raises(ConfigError, match=r"^--runbook-url '.*': give the http\(s\) address"):
        runbook_base(url)


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--runbook-url", "ftp://x/alerts.md"], None, "'ftp://x/alerts.md'"),
        ([], "alerts.md", "$HIFI_RUNBOOK_URL 'alerts.md'"),
    ],
)
def test_the_retrier_refuses_a_bad_runbook_url_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    env: str | None,
    said: str,
) -> None:
    """`retrier --runbook-url ftp://...` and `HIFI_RUNBOOK_URL=alerts.md retrier` exit 2 with
    one line naming the option (and the variable), before anything runs."""
    monkeypatch.delenv(runbook.RUNBOOK_URL_ENV, raising=False)
    if env is not None:
        monkeypatch.setenv(runbook.RUNBOOK_URL_ENV, env)
    monkeypatch.setattr(sys, "argv", ["retrier", *args, "--check"])
    with pytest.raises(SystemExit) as exited:
        run_command(cli.cli, cli.PROG)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "Invalid value for '--runbook-url'" in err
    assert said in err
