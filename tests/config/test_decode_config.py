"""`[decode]`: the defaults, the password from the environment and masked, each bad value one line
naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.catalog import Catalog
from config.destination import Destination
from hifi import redaction
from hifi.errors import ConfigError

HEAD = 'url = "https://collector.test/in"\nsource_topics = ["events"]\n[decode]\n'


def _load(catalog_dir: Path, text: str, environ: dict[str, str] | None = None) -> Destination:
    (catalog_dir / "d.toml").write_text(HEAD + text)
    return Catalog(catalog_dir, environ or {}).load("d")


def test_defaults_and_the_registry_settings(catalog_dir: Path) -> None:
    dest = _load(catalog_dir, 'kind = "schema_registry"\nurl = "http://registry.test:8081/"\n')
    assert dest.decode is not None
    settings = dest.decode.registry(None)
    assert (settings.url, settings.timeout_s, settings.cache_schemas) == (
        "http://registry.test:8081",
        10.0,
        1000,
    )
    assert settings.client_conf()["max.retries"] == 0
    assert "basic.auth.user.info" not in settings.client_conf()


def test_the_password_comes_from_the_environment_and_is_masked(catalog_dir: Path) -> None:
    environ = {"SR_PASSWORD": "registry-pass-0451"}
    dest = _load(
        catalog_dir,
        'kind = "schema_registry"\nurl = "https://registry.test"\nusername = "svc"\n'
        'password = "${SR_PASSWORD}"\n',
        environ,
    )
    assert dest.decode is not None
    assert dest.decode.registry(None).client_conf()["basic.auth.user.info"] == (
        "svc:registry-pass-0451"
    )
    assert "registry-pass-0451" not in repr(dest)
    assert "registry-pass-0451" not in redaction.mask("auth registry-pass-0451 failed")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('kind = "avro_file"\nurl = "http://r.test"\n', "decode.kind"),
        ('kind = "schema_registry"\n', "required key 'decode.url' is missing"),
        ('kind = "schema_registry"\nurl = "registry:8081"\n', "decode.url"),
        (
            'kind = "schema_registry"\nurl = "http://user:pw@r.test"\n',
            "credentials go in username and password",
        ),
        (
            'kind = "schema_registry"\nurl = "http://r.test"\nusername = "svc"\n',
            "key 'decode.username': set username and password together",
        ),
        ('kind = "schema_registry"\nurl = "http://r.test"\ntimeout_s = 0\n', "decode.timeout_s"),
        ('kind = "schema_registry"\nurl = "http://r.test"\ncache_schemas = 0\n', "cache_schemas"),
        (
            'kind = "schema_registry"\nurl = "http://r.test"\ntls_ca_file = "nope.pem"\n',
            "decode.tls_ca_file",
        ),
    ],
)
def test_bad_values_are_one_line_naming_the_key(
    catalog_dir: Path, text: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _load(catalog_dir, text)
    message = str(info.value)
    assert "\n" not in message
    assert expected in message


def test_a_bad_password_value_is_never_echoed(catalog_dir: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load(
            catalog_dir,
            'kind = "schema_registry"\nurl = "http://r.test"\nusername = "svc"\n'
            "password = 12345678\n",
        )
    assert "decode.password" in str(info.value)
    assert "12345678" not in str(info.value)
