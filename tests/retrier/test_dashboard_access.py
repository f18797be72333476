"""Who may read dead letters and who may act on the dashboard: token, loopback, cross-site requests."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.requests import Request

from hifi import redaction
from hifi.errors import ConfigError
from retrier.dashboard.access import TOKEN_ENV, Access, Refused, is_loopback, read_token

TOKEN = "Xq4-Lm82-Rt5Zk9Yw-Vb7"


def _request(method: str = "GET", **headers: str) -> Request:
    scope = {
        "type": "http",
        "method": method,
        "path": "/api/replays",
        "headers": [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("10.1.2.3", 5555),
    }
    return Request(scope)


def test_loopback_hosts() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("10.0.0.7")
    assert not is_loopback("example.internal")


def test_without_a_token_the_dashboard_is_read_only() -> None:
    access = Access(token=None, loopback=True)
    assert not access.can_act
    with pytest.raises(Refused) as refused:
        access.check_action(_request("POST", x_hifi_token=TOKEN, host="127.0.0.1:9401"))
    assert refused.value.status == 403
    assert "read-only" in refused.value.reason
    access.check_read_letters(_request())  # loopback: reading stays open


def test_an_action_needs_the_right_token_and_the_same_origin() -> None:
    access = Access(token=TOKEN, loopback=True)
    host = "127.0.0.1:9401"
    access.check_action(_request("POST", x_hifi_token=TOKEN, host=host))  # curl, the CLI
    access.check_action(_request("POST", x_hifi_token=TOKEN, host=host, origin=f"http://{host}"))
    cases = {
        "no token": ({"host": host}, 401),
        "wrong token": ({"x_hifi_token": TOKEN + "x", "host": host}, 401),
        "other origin": ({"x_hifi_token": TOKEN, "host": host, "origin": "https://evil.test"}, 403),
        "null origin": ({"x_hifi_token": TOKEN, "host": host, "origin": "null"}, 403),
        "cross-site": ({"x_hifi_token": TOKEN, "host": host, "sec_fetch_site": "cross-site"}, 403),
    }
    for name, (headers, status) in cases.items():
        with pytest.raises(Refused) as refused:
            access.check_action(_request("POST", **headers))
        assert refused.value.status == status, name


def test_beyond_loopback_letters_need_the_token() -> None:
    access = Access(token=TOKEN, loopback=False)
    with pytest.raises(Refused) as refused:
        access.check_read_letters(_request())
    assert refused.value.status == 401
    access.check_read_letters(_request(x_hifi_token=TOKEN))
    unconfigured = Access(token=None, loopback=False)
    with pytest.raises(Refused):
        unconfigured.check_read_letters(_request(x_hifi_token="anything-at-all-here"))


def test_who_names_the_operator_and_address_masked() -> None:
    access = Access(token=TOKEN, loopback=True)
    assert access.who(_request(x_hifi_operator="alice")) == "alice@10.1.2.3"
    assert access.who(_request()) == "dashboard@10.1.2.3"
    redaction.register([TOKEN])
    assert TOKEN not in access.who(_request(x_hifi_operator=TOKEN))


def test_read_token_from_env_or_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert read_token(None) is None
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert read_token(None) == TOKEN
    assert redaction.mask(f"token={TOKEN}") == "token=***"
    path = tmp_path / "token"
    path.write_text(f"{TOKEN}-from-file\n")
    assert read_token(path) == f"{TOKEN}-from-file"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", "the file is empty"),
        ("short", "at least 16 characters"),
        ("with a space in it!", "without spaces"),
    ],
)
def test_bad_tokens_are_one_line_naming_where(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(ConfigError) as error:
        read_token(path)
    assert str(error.value).startswith(f"--dashboard-token-file {path}: ")
    assert expected in str(error.value)
    assert "\n" not in str(error.value)


def test_a_missing_token_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        read_token(tmp_path / "absent")


def test_failure_groups_quote_errors_only_when_letters_may_be_read() -> None:
    """Beyond loopback without the token, the DLQ panel counts failures but withholds the error
    text (an error header may quote personal data)."""
    from aiokafka.structs import ConsumerRecord

    from retrier.dashboard.api import _dlq_summary
    from retrier.dlq.index import DeadLetterIndex

    headers = [
        ("hifi-reason", b"http_4xx"),
        ("hifi-status", b"400"),
        ("hifi-error", b"bad email x@y.z"),
    ]
    record = ConsumerRecord("t.dlq", 0, 0, 1_000, 0, b"k", b"{}", None, 0, 2, headers)
    with DeadLetterIndex("t.dlq") as index:
        index.add([record])
        quoted = _dlq_summary(index, 2_000, quote_errors=True)["failure_groups"]
        withheld = _dlq_summary(index, 2_000, quote_errors=False)["failure_groups"]
    assert [(g["status"], g["count"]) for g in quoted] == [("400", 1)]
    assert "x@y.z" in quoted[0]["error"]
    assert [(g["status"], g["count"]) for g in withheld] == [("400", 1)]
    assert "x@y.z" not in withheld[0]["error"]
