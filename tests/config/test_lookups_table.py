"""The `[lookups]` table: defaults, validation in one line, and url and header values as templates."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.catalog import Catalog
from config.templates import parse_template, url_value
from hifi.errors import ConfigError

HEAD = 'url = "https://collector.test/v1/{tenant}/events"\nsource_topics = ["events"]\n'


def _load(catalog_dir: Path, text: str) -> Catalog:
    (catalog_dir / "d.toml").write_text(text)
    return Catalog(catalog_dir, {"TOKEN": "s3cr3t-token-value"})


def _error(catalog_dir: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        _load(catalog_dir, text).load("d")
    message = str(info.value)
    assert "\n" not in message
    assert str(catalog_dir / "d.toml") in message
    return message


def test_defaults_and_templates(catalog_dir: Path) -> None:
    """Only tenant_field is required; the intervals default to 120 s, 30 days and 300 s, the
    buffer to 100,000 events and 64 MiB, the linger to 0.1 s, and
    the url and header values are parsed as templates with the entry values they need."""
    text = HEAD + '[lookups]\ntenant_field = "customer"\n[headers]\nX-Key = "{api_key} ${TOKEN}"\n'
    dest = _load(catalog_dir, text).load("d")
    assert dest.lookups is not None
    assert dest.lookups.tenant_field == "customer"
    assert (dest.lookups.refresh_after_s, dest.lookups.expire_after_s) == (120, 2_592_000)
    assert dest.lookups.bulk_refresh_s == 300
    assert (dest.lookups.buffer_records, dest.lookups.buffer_bytes) == (100_000, 64 * 1024 * 1024)
    assert dest.lookups.max_linger_s == 0.1
    templates = dest.templates()
    assert templates.value_names == {"api_key"}
    assert (
        templates.url.render("a b/c", {}, url_value) == "https://collector.test/v1/a%20b%2Fc/events"
    )
    assert templates.headers["X-Key"].render("t", {"api_key": "k"}) == "k s3cr3t-token-value"


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ("", 8),  # one endpoint
        ('[lookups]\ntenant_field = "customer"\n', 64),  # many tenants, a request each
        ('max_in_flight = 8\n[lookups]\ntenant_field = "customer"\n', 8),  # as written
        ("max_in_flight = 200\n", 200),
    ],
)
def test_in_flight_default_is_wider_for_tenants(
    catalog_dir: Path, lines: str, expected: int
) -> None:
    """`max_in_flight` defaults to 8, and to 64 with `[lookups]`; a value written is kept."""
    assert _load(catalog_dir, HEAD + lines).load("d").max_in_flight == expected


def test_without_lookups_braces_stay_literal(catalog_dir: Path) -> None:
    """A destination without `[lookups]` sends to its url as written, braces and all."""
    dest = _load(catalog_dir, HEAD).load("d")
    assert dest.lookups is None
    assert dest.url == "https://collector.test/v1/{tenant}/events"


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("", "required key 'lookups.tenant_field' is missing"),
        (
            'tenant_field = "c"\ntenant_feld = "d"',
            "unknown key 'lookups.tenant_feld'; allowed keys: buffer_bytes,",
        ),
        (
            'tenant_field = "c"\nrefresh_after_s = 0',
            "key 'lookups.refresh_after_s': Input should be greater than 0",
        ),
        (
            'tenant_field = "c"\nbulk_refresh_s = "300"',
            "key 'lookups.bulk_refresh_s': Input should be a valid number",
        ),
        (
            'tenant_field = "c"\nrefresh_after_s = 60\nexpire_after_s = 30',
            "'lookups.expire_after_s': 30 s is shorter",
        ),
        (
            'tenant_field = "id"',
            "key 'lookups.tenant_field': 'id' is also id_field or event_time_field",
        ),
        (
            'tenant_field = "c"\nbuffer_bytes = 1',
            "buffer_bytes': Input should be greater than or equal to 1048576",
        ),
        (
            'tenant_field = "c"\nbuffer_records = 1',
            "buffer_records': Input should be greater than or equal to 1000",
        ),
        (
            'tenant_field = "c"\nmax_linger_s = -0.5',
            "max_linger_s': Input should be greater than or equal to 0",
        ),
        (
            'tenant_field = "c"\nmax_linger_s = 61',
            "max_linger_s': Input should be less than or equal to 60",
        ),
    ],
)
def test_bad_lookups_table_is_one_line(catalog_dir: Path, table: str, expected: str) -> None:
    """Each problem of the table names the file, the key and what is allowed."""
    assert expected in _error(catalog_dir, HEAD + "[lookups]\n" + table + "\n")


def test_a_bad_placeholder_names_the_key_not_the_value(catalog_dir: Path) -> None:
    """A header template that does not parse names its key and never quotes the value."""
    text = HEAD + '[lookups]\ntenant_field = "c"\n[headers]\nX-Key = "${TOKEN} {api key}"\n'
    message = _error(catalog_dir, text)
    assert "key 'headers.X-Key': placeholder {...} is not a name" in message
    assert "s3cr3t" not in message
    assert "key 'url': has an unmatched brace" in _error(
        catalog_dir, HEAD.replace("{tenant}", "{tenant") + '[lookups]\ntenant_field = "c"\n'
    )


def test_template_syntax() -> None:
    """`{{` and `}}` are literal braces; conversions, specs and positional fields are refused."""
    assert parse_template("a{{b}}{tenant}").render("t", {}) == "a{b}t"
    for bad in ("{0}", "{}", "{a!r}", "{a:>3}", "{a.b}", "{"):
        with pytest.raises(ValueError, match=r"brace|not a name"):
            parse_template(bad)
