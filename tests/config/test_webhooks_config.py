"""`format = "single"`, `[webhook]` and `[signing]`: the defaults, and each bad value one line
naming the key, never the secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.catalog import Catalog
from config.destination import Destination
from hifi import redaction
from hifi.errors import ConfigError

HEAD = 'url = "https://hooks.test/in"\nsource_topics = ["events"]\n'
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # standardwebhooks' own example secret


def _load(catalog_dir: Path, text: str, environ: dict[str, str] | None = None) -> Destination:
    (catalog_dir / "d.toml").write_text(HEAD + text)
    return Catalog(catalog_dir, environ or {}).load("d")


def _error(catalog_dir: Path, text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        _load(catalog_dir, text, environ)
    message = str(info.value)
    assert "\n" not in message
    assert str(catalog_dir / "d.toml") in message
    return message


def test_single_format_defaults(catalog_dir: Path) -> None:
    """One event a request, 64 in flight, the event id in `webhook-id`, JSON bodies."""
    dest = _load(catalog_dir, 'format = "single"\n')
    assert dest.max_batch_records == 1
    assert dest.max_in_flight == 64
    webhook = dest.webhook
    assert webhook is not None
    assert (webhook.content_type, webhook.id_header, webhook.key_header) == (
        "application/json",
        "webhook-id",
        None,
    )


def test_single_format_keeps_a_max_in_flight_given(catalog_dir: Path) -> None:
    dest = _load(catalog_dir, 'format = "single"\nmax_in_flight = 5\n')
    assert dest.max_in_flight == 5


def test_signing_secrets_resolve_from_the_environment_and_are_masked(catalog_dir: Path) -> None:
    """`${VAR}` in `secrets`, the value registered for masking like a header's."""
    environ = {"HOOK_SECRET": "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"}
    dest = _load(
        catalog_dir,
        '[signing]\nkind = "standard_webhooks"\nsecrets = ["${HOOK_SECRET}", "' + SECRET + '"]\n',
        environ,
    )
    signing = dest.signing
    assert signing is not None
    assert [s.get_secret_value() for s in signing.secrets] == [environ["HOOK_SECRET"], SECRET]
    assert environ["HOOK_SECRET"] not in repr(dest)
    assert redaction.mask(f"token {SECRET} here") == "token *** here"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'format = "single"\nmax_batch_records = 10\n',
            "key 'max_batch_records': format = \"single\" sends one event per request",
        ),
        ('[webhook]\nid_header = "X-Id"\n', "key 'webhook': applies to format = \"single\" only"),
        (
            'format = "single"\nbreaker_probe = "empty"\n',
            "key 'breaker_probe': format = \"single\" would post an empty request",
        ),
        (
            'format = "single"\n[webhook]\nid_header = "X Id"\n',
            "key 'webhook.id_header': 'X Id' is not a valid HTTP header name",
        ),
        (
            'format = "single"\n[webhook]\nkey_header = "content-type"\n',
            "key 'webhook.key_header': 'content-type' is a header each request writes itself",
        ),
        (
            'format = "single"\n[webhook]\nkey_header = "X-A"\nrecord_headers = { t = "x-a" }\n',
            "key 'webhook.record_headers.t': 'x-a' is also written by 'key_header'",
        ),
        (
            'format = "single"\n[webhook]\nrecord_headers = { hifi-origin = "X-O" }\n',
            "key 'webhook.record_headers': 'hifi-origin' is not a producer's header",
        ),
        (
            'format = "single"\n[webhook]\ncontent_type = "text/plain\\n"\n',
            "key 'webhook.content_type': the value contains a line break",
        ),
        (
            'format = "single"\n[webhook.cloudevents]\nsource = "/k/{tenant}"\ntype = "t"\n',
            "placeholder {tenant} is unknown",
        ),
        (
            'format = "single"\n[webhook.cloudevents]\nsource = "/k/{topic"\ntype = "t"\n',
            "unmatched brace",
        ),
        (
            'format = "single"\n[webhook.cloudevents]\nsource = "/k"\n',
            "required key 'webhook.cloudevents.type' is missing",
        ),
        (
            '[signing]\nkind = "hmac_sha256"\nsecrets = ["0123456789abcdef0123"]\n',
            "key 'signing.header': hmac_sha256 needs the name of its header",
        ),
        (
            '[signing]\nkind = "hmac_sha256"\nheader = "X-Sig"\nsecrets = ["short"]\n',
            "key 'signing.secrets[0]': shorter than 16 bytes",
        ),
        (
            '[signing]\nkind = "hmac_sha256"\nheader = "X-Sig"\n'
            'secrets = ["0123456789abcdef0123", "0123456789abcdef0124"]\n',
            "key 'signing.secrets': hmac_sha256 sends one signature",
        ),
        (
            '[signing]\nkind = "standard_webhooks"\nheader = "X-Sig"\nsecrets = ["'
            + SECRET
            + '"]\n',
            "key 'signing.header': standard_webhooks writes its own headers",
        ),
        ('[signing]\nkind = "standard_webhooks"\nsecrets = []\n', "signing.secrets"),
        ('[signing]\nkind = "ed25519"\nsecrets = ["x"]\n', "signing.kind"),
        (
            'compression = "gzip"\n[signing]\nkind = "standard_webhooks"\nsecrets = ["'
            + SECRET
            + '"]\n',
            "key 'signing': receivers disagree on whether a compressed body",
        ),
        (
            '[headers]\nwebhook-signature = "x"\n[signing]\nkind = "standard_webhooks"\n'
            'secrets = ["' + SECRET + '"]\n',
            "key 'headers.webhook-signature': [signing] writes this header already",
        ),
    ],
)
def test_bad_values_are_one_line_naming_the_key(
    catalog_dir: Path, text: str, expected: str
) -> None:
    assert expected in _error(catalog_dir, text)


@pytest.mark.parametrize(
    "secret",
    ["whsec_not*base64*at*all!!", "whsec_c2hvcnQ=", "plainly-not-a-key-of-any-kind"],
)
def test_a_bad_standard_webhooks_secret_is_named_never_shown(
    catalog_dir: Path, secret: str
) -> None:
    """A secret that is not `whsec_` and base64 of at least 16 bytes: the key named, its value
    nowhere in the message."""
    message = _error(
        catalog_dir, f'[signing]\nkind = "standard_webhooks"\nsecrets = ["{secret}"]\n'
    )
    assert "key 'signing.secrets[0]'" in message
    assert secret not in message
    assert secret.removeprefix("whsec_") not in message


def test_an_unset_secret_variable_is_named(catalog_dir: Path) -> None:
    message = _error(
        catalog_dir, '[signing]\nkind = "standard_webhooks"\nsecrets = ["${NOT_SET_HERE}"]\n'
    )
    assert "key 'signing.secrets[0]': refers to ${NOT_SET_HERE}" in message
