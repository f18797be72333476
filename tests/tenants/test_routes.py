"""Tenant entries and their routes: one-line validation, templates rendered once, secrets, filter, projection."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from config.destination import Destination
from hifi import redaction
from hifi.errors import EntryRefused
from tenants.keys import tenants_key
from tenants.lookups import RouteDecoder, register_secrets
from tests.tenants.support import route_of, write_tenant_destination

URL = "https://collector.test/{region}/v1/{tenant}/events"


@pytest.fixture
def dest(catalog_dir: Path) -> Destination:
    return write_tenant_destination(catalog_dir, "tv", URL, "events")


def test_key_layout() -> None:
    """Every destination's entries are one hash, named after it."""
    assert tenants_key("tvinsight") == "hifi:tenants:tvinsight"


def test_templates_are_rendered_once_per_entry(dest: Destination) -> None:
    """The url and headers are rendered from the tenant and its values; URL values are
    percent-encoded; an entry without filter or projection passes every event as it is."""
    route = route_of(dest, "acme/eu", values={"api_key": "k-0123456789abcdef", "region": "eu"})
    assert route.url == "https://collector.test/eu/v1/acme%2Feu/events"
    assert route.headers == {"X-Api-Key": "k-0123456789abcdef", "X-Tenant": "acme/eu"}
    assert route.passes_all
    assert route.admit(b'{"id":"1"}') == b'{"id":"1"}'


def test_header_values_are_secrets_and_the_tenant_is_not(dest: Destination) -> None:
    """Values rendered into a header are registered for masking; the tenant id and values only
    in the URL are not, so logs and /status still name the tenant and the region."""
    route = route_of(dest, "globex", values={"api_key": "gx-s3cr3t-9f8e7d6c", "region": "us"})
    assert "gx-s3cr3t-9f8e7d6c" in route.secrets
    assert "globex" not in route.secrets
    assert "us" not in route.secrets
    register_secrets([route])
    assert redaction.mask("tenant globex sent gx-s3cr3t-9f8e7d6c to us") == (
        "tenant globex sent *** to us"
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"{not json", "the entry is not JSON"),
        (b'{"enabled": "yes"}', "key 'enabled': Input should be a valid boolean"),
        (b'{"values": {"api_key": 42}}', "key 'values.api_key': Input should be a valid string"),
        (b'{"enabeld": false}', "unknown key 'enabeld'; allowed keys: enabled, filter, project"),
        (b'{"values": {"api_key": "k"}}', "key 'values': region missing"),
        (b'{"project": {"keep": ["a"], "drop": ["b"]}}', "key 'project': give keep or drop"),
        (b'{"filter": {"field": "type", "inn": ["a"]}}', "unknown key 'filter.inn'"),
    ],
)
def test_bad_entries_are_refused_in_one_line(dest: Destination, raw: bytes, expected: str) -> None:
    """A bad entry names where it is, the tenant and the key, and never quotes a value."""
    with pytest.raises(EntryRefused) as info:
        RouteDecoder(dest, "redis hash hifi:tenants:tv")("acme", raw)
    message = str(info.value)
    assert message.startswith("redis hash hifi:tenants:tv: tenant 'acme'")
    assert expected in message
    assert "\n" not in message


def test_a_rendered_header_must_be_a_header_value(dest: Destination) -> None:
    """A value that would put a line break in a header is refused without quoting it."""
    with pytest.raises(EntryRefused, match="header 'X-Api-Key' rendered from its values contains"):
        route_of(dest, "acme", values={"api_key": "a\r\nInjected: 1", "region": "eu"})


def test_filter_and_projection(dest: Destination) -> None:
    """A filter delivers the listed values only (or all but them); a projection keeps or drops
    top-level fields and always keeps the id; dropping the id is refused."""
    values = {"api_key": "k", "region": "eu"}
    keep = route_of(
        dest,
        "a",
        values=values,
        project={"keep": ["type"]},
        filter={"field": "type", "in": ["play", 7]},
    )
    assert not keep.passes_all
    assert orjson.loads(keep.admit(b'{"id":"1","type":"play","x":[1]}') or b"") == {
        "id": "1",
        "type": "play",
    }
    assert keep.admit(b'{"id":"2","type":7}') == b'{"id":"2","type":7}'
    assert keep.admit(b'{"id":"3","type":"stop"}') is None
    assert keep.admit(b'{"id":"4"}') is None
    skip = route_of(dest, "b", values=values, filter={"field": "type", "not_in": ["debug"]})
    assert skip.admit(b'{"id":"1","type":"debug"}') is None
    assert skip.admit(b'{"id":"2","type":{"nested":1}}') == b'{"id":"2","type":{"nested":1}}'
    assert skip.admit(b'{"id":"3"}') == b'{"id":"3"}'
    drop = route_of(dest, "c", values=values, project={"drop": ["secret_field"]})
    assert drop.admit(b'{"id":"1","secret_field":1,"big":123456789012345678901234567890}') == (
        b'{"id":"1","big":123456789012345678901234567890}'
    )
    with pytest.raises(EntryRefused, match="'id' is the destination's id_field"):
        route_of(dest, "d", values=values, project={"drop": ["id"]})
