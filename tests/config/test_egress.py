"""The catalog's egress keys: `proxy`, `redirect_trusted_origins`, `allow_private_destinations`."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.catalog import Catalog
from config.destination import Destination
from hifi import redaction
from hifi.errors import ConfigError

HEAD = 'url = "https://x.test/"\nsource_topics = ["e"]\n'


def _load(catalog_dir: Path, text: str, environ: dict[str, str] | None = None) -> Destination:
    (catalog_dir / "d.toml").write_text(HEAD + text)
    return Catalog(catalog_dir, environ or {}).load("d")


def _error(catalog_dir: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        _load(catalog_dir, text)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_defaults(catalog_dir: Path) -> None:
    dest = _load(catalog_dir, "")
    assert dest.proxy is None
    assert dest.redirect_trusted_origins == []
    assert dest.allow_private_destinations is False


def test_a_proxy_from_the_environment_is_masked(catalog_dir: Path) -> None:
    environ = {"PROXY_PASSWORD": "pw-0123456789"}
    dest = _load(
        catalog_dir, 'proxy = "http://hifi:${PROXY_PASSWORD}@proxy.internal:3128"\n', environ
    )
    assert dest.proxy is not None
    secret = dest.proxy.get_secret_value()
    assert secret == "http://hifi:pw-0123456789@proxy.internal:3128"
    assert "pw-0123456789" not in repr(dest)
    assert "pw-0123456789" not in redaction.mask("connect to http://hifi:pw-0123456789@proxy")
    # the user name is not a secret: masked, a short one would garble every line naming it
    assert redaction.mask("archive hifi-archive") == "archive hifi-archive"


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("https://user:pw-secret-99@proxy:3128", "must start with http://"),
        ("http://user:pw-secret-99@/", "must name a host"),
        ("http://user:pw-secret-99@proxy:99999", "valid port"),
        ("http://user:pw-secret-99@proxy:3128/path", "nothing after it"),
        ("socks5://user:pw-secret-99@proxy:1080", "must start with http://"),
    ],
)
def test_an_unusable_proxy_is_named_without_its_password(
    catalog_dir: Path, value: str, fragment: str
) -> None:
    message = _error(catalog_dir, f'proxy = "{value}"\n')
    assert "key 'proxy'" in message
    assert fragment in message
    assert "pw-secret-99" not in message


def test_trusted_origins_are_kept_in_one_form(catalog_dir: Path) -> None:
    dest = _load(
        catalog_dir,
        'redirect_trusted_origins = ["https://API.example.com", "http://h.test:8080/"]\n',
    )
    assert dest.redirect_trusted_origins == [
        "https://api.example.com:443",
        "http://h.test:8080",
    ]


@pytest.mark.parametrize(
    "origin", ["api.example.com", "ftp://x.test", "https://x.test/path", "https://x.test:http"]
)
def test_a_trusted_origin_must_be_an_origin(catalog_dir: Path, origin: str) -> None:
    message = _error(catalog_dir, f'redirect_trusted_origins = ["{origin}"]\n')
    assert "key 'redirect_trusted_origins" in message
    assert "SCHEME://HOST[:PORT]" in message
