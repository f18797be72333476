"""A tenant entry's rate limits: validated like the other fields, carried into its route."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from config.destination import Destination
from hifi.errors import ConfigError, EntryRefused
from tenants.lookups import RouteDecoder
from tests.tenants.support import route_of, write_tenant_destination

REPO = Path(__file__).resolve().parents[2]
URL = "https://collector.test/{region}/v1/{tenant}/events"
VALUES = {"api_key": "k-0123456789abcdef", "region": "eu"}


@pytest.fixture
def dest(catalog_dir: Path) -> Destination:
    return write_tenant_destination(catalog_dir, "tvrate", URL, "events")


def test_the_route_carries_the_entry_rate_limits(dest: Destination) -> None:
    """An integer or a float is a rate; an entry without them has no limits."""
    route = route_of(
        dest, "acme", values=VALUES, rate_limit_events_per_s=200, rate_limit_requests_per_s=2.5
    )
    assert (route.rate_limit_events_per_s, route.rate_limit_requests_per_s) == (200, 2.5)
    plain = route_of(dest, "globex", values=VALUES)
    assert (plain.rate_limit_events_per_s, plain.rate_limit_requests_per_s) == (None, None)


@pytest.mark.parametrize(
    ("field", "raw", "expected"),
    [
        ("rate_limit_events_per_s", "0", "greater than 0"),
        ("rate_limit_events_per_s", "-5", "greater than 0"),
        ("rate_limit_requests_per_s", '"10"', "valid number"),
        ("rate_limit_requests_per_s", "1e9", "less than or equal to 1000000"),
        ("rate_limit_requests_per_s", "true", "valid number"),
    ],
)
def test_a_bad_rate_limit_refuses_the_entry_in_one_line(
    dest: Destination, field: str, raw: str, expected: str
) -> None:
    """A rate that is not a number above 0 (and at most a million) refuses the entry, naming
    the tenant and the key."""
    body = f'{{"values": {{"api_key": "k", "region": "eu"}}, "{field}": {raw}}}'.encode()
    with pytest.raises(EntryRefused) as info:
        RouteDecoder(dest, "redis hash hifi:tenants:tvrate")("acme", body)
    message = str(info.value)
    assert message.startswith("redis hash hifi:tenants:tvrate: tenant 'acme'")
    assert f"key '{field}'" in message
    assert expected in message
    assert "\n" not in message


def test_hifi_tenants_reads_rate_limits_from_a_file(catalog_dir: Path) -> None:
    """The example entries file's rate limits reach the JSON `hifi-tenants push` writes, and
    a bad one is a one-line error naming the file, the tenant and the key."""
    from tenants.files import read_entries

    dest = write_tenant_destination(
        catalog_dir,
        "tv",
        "https://{region}.collector.example.com/v1/{tenant}/events",
        "events",
        headers='X-Api-Key = "{api_key}"\n',
    )
    env = {f"{name}_API_KEY": "k" for name in ("ACME", "GLOBEX", "INITECH", "UMBRELLA")}
    found = read_entries(REPO / "config" / "tenants.example.toml", dest, env)
    globex = orjson.loads(found["globex"])
    assert (globex["rate_limit_events_per_s"], globex["rate_limit_requests_per_s"]) == (200, 20)
    bad = catalog_dir / "bad.toml"
    bad.write_text(
        '[tenants.acme]\nvalues = { api_key = "k", region = "eu" }\nrate_limit_events_per_s = 0\n'
    )
    with pytest.raises(ConfigError) as info:
        read_entries(bad, dest, {})
    assert "tenant 'acme'" in str(info.value)
    assert "key 'rate_limit_events_per_s'" in str(info.value)
    assert "\n" not in str(info.value)
