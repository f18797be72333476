"""The `[auth]` table: OAuth2 client credentials loaded with the secret from the environment,
and each bad key refused in one line naming the file and the key, never echoing the secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.catalog import Catalog
from hifi import redaction
from hifi.errors import ConfigError

HEAD = 'url = "https://collector.test/v1/events"\nsource_topics = ["events"]\n'
AUTH = """
[auth]
kind = "oauth2_client_credentials"
token_url = "https://idp.test/oauth2/token"
client_id = "hifi"
client_secret = "${IDP_SECRET}"
scopes = ["events:write", "audit"]
"""
ENV = {"IDP_SECRET": "idp-secret-Hq7vX2pL9"}


def _load(catalog_dir: Path, text: str, environ: dict[str, str] | None = None) -> object:
    (catalog_dir / "d.toml").write_text(HEAD + text)
    return Catalog(catalog_dir, ENV if environ is None else environ).load("d")


def _error(catalog_dir: Path, text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        _load(catalog_dir, text, environ)
    message = str(info.value)
    assert "\n" not in message
    assert str(catalog_dir / "d.toml") in message
    assert ENV["IDP_SECRET"] not in message
    return message


def test_auth_table_loads_with_the_secret_from_the_environment(catalog_dir: Path) -> None:
    """`${VAR}` in client_secret is resolved at load and masked; defaults: basic client auth,
    no audience, 10 s per token request."""
    (catalog_dir / "d.toml").write_text(HEAD + AUTH)
    dest = Catalog(catalog_dir, ENV).load("d")
    assert dest.auth is not None
    creds = dest.auth.credentials()
    assert creds.client_secret == ENV["IDP_SECRET"]
    assert (creds.token_url, creds.client_id) == ("https://idp.test/oauth2/token", "hifi")
    assert creds.scopes == ("events:write", "audit")
    assert (creds.audience, creds.client_auth, creds.timeout_s) == (None, "basic", 10.0)
    assert ENV["IDP_SECRET"] not in repr(dest)
    assert redaction.mask(f"secret {ENV['IDP_SECRET']}") == "secret ***"


def test_dlq_tools_load_without_the_secret(catalog_dir: Path) -> None:
    """Loaded for the Kafka side only, `[auth]` is dropped: its variable need not be set."""
    (catalog_dir / "d.toml").write_text(HEAD + AUTH)
    dest = Catalog(catalog_dir, {}, for_delivery=False).load("d")
    assert dest.auth is None


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (('kind = "oauth2_client_credentials"', 'kind = "api_key"'), "key 'auth.kind'"),
        (('token_url = "https://idp.test/oauth2/token"', 'token_url = "idp/token"'),
         "key 'auth.token_url': must be an absolute"),
        (('client_id = "hifi"', 'client_id = ""'), "key 'auth.client_id'"),
        (('scopes = ["events:write", "audit"]', 'scopes = ["events:write audit"]'),
         "key 'auth.scopes': scope 'events:write audit' is not one scope-token"),
        (('scopes = ["events:write", "audit"]', 'scopes = "events:write"'), "key 'auth.scopes'"),
        (('client_id = "hifi"', 'client_id = "hifi"\nclient_auth = "header"'), "key 'auth.client_auth'"),
        (('client_id = "hifi"', 'client_id = "hifi"\ntimeout_s = 0'), "key 'auth.timeout_s'"),
        (('client_id = "hifi"', 'client_id = "hifi"\nrefresh = true'), "unknown key 'auth.refresh'"),
        (('client_secret = "${IDP_SECRET}"\n', ""), "required key 'auth.client_secret' is missing"),
    ],
)  # fmt: skip
def test_bad_auth_keys_are_one_line_naming_the_key(
    catalog_dir: Path, change: tuple[str, str], expected: str
) -> None:
    """Each bad `[auth]` key is refused in one line naming the file and the key."""
    old, new = change
    assert old in AUTH
    assert expected in _error(catalog_dir, AUTH.replace(old, new))


def test_unset_or_empty_secret_variable_is_refused(catalog_dir: Path) -> None:
    """An unset variable and an empty secret name `auth.client_secret`, never a value."""
    unset = _error(catalog_dir, AUTH, environ={})
    assert "key 'auth.client_secret': refers to ${IDP_SECRET}, which is not set" in unset
    empty = _error(catalog_dir, AUTH.replace('"${IDP_SECRET}"', '" "'))
    assert "key 'auth.client_secret'" in empty


def test_auth_with_an_authorization_header_is_refused(catalog_dir: Path) -> None:
    """[auth] writes the Authorization header: one in [headers] as well is refused."""
    headers = '\n[headers]\nauthorization = "Bearer ${IDP_SECRET}"\n'
    message = _error(catalog_dir, AUTH + headers)
    assert "key 'auth': set together with an Authorization header in [headers]" in message
