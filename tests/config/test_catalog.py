"""Catalog validation: every kind of bad file gives one line naming the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.catalog import Catalog, default_catalog_dir
from connector.intake import consumer_options
from hifi.errors import ConfigError
from tests.helpers import write_destination

GOOD = {"url": "https://collector.test/v1/events", "source_topics": ["events"]}


def _error(catalog_dir: Path, text: str, environ: dict[str, str] | None = None) -> str:
    (catalog_dir / "d.toml").write_text(text)
    with pytest.raises(ConfigError) as info:
        Catalog(catalog_dir, environ or {}).load("d")
    message = str(info.value)
    assert "\n" not in message
    assert str(catalog_dir / "d.toml") in message
    return message


def test_minimal_file_gets_documented_defaults(catalog_dir: Path) -> None:
    """Only url and source_topics are required; every other key has the documented default."""
    write_destination(catalog_dir, "d", **GOOD)
    dest = Catalog(catalog_dir, {}).load("d")
    assert dest.name == "d"
    assert dest.format == "json_array"
    assert dest.compression == "none"
    assert (dest.max_batch_records, dest.max_batch_bytes, dest.max_in_flight) == (500, 1048576, 8)
    assert dest.retry_tiers_s == [30, 120, 600, 1800, 7200]
    assert (dest.retry_in_topic, dest.retry_out_topic, dest.dlq_topic) == (
        "d.retry_in",
        "d.retry_out",
        "d.dlq",
    )
    assert dest.connector_group == "hifi.connector.d"
    assert dest.fetch_max_wait_ms == 20


def test_the_fetch_wait_set_is_the_one_the_connector_fetches_with(catalog_dir: Path) -> None:
    write_destination(catalog_dir, "d", **GOOD, fetch_max_wait_ms=100)
    dest = Catalog(catalog_dir, {}).load("d")
    assert consumer_options(dest)["fetch_max_wait_ms"] == 100


def test_shipped_example_is_valid() -> None:
    """config/destinations/tvinsight.toml loads once its token variable is set."""
    dest = Catalog(default_catalog_dir(), {"TVINSIGHT_TOKEN": "abc"}).load("tvinsight")
    assert dest.header_values() == {"Authorization": "Bearer abc"}


def test_syntax_error(catalog_dir: Path) -> None:
    """A TOML syntax error names the file and says it is not valid TOML."""
    assert "not valid TOML" in _error(catalog_dir, 'url = "https://x.test\n')


@pytest.mark.parametrize("key", ["url", "source_topics"])
def test_missing_required_key(catalog_dir: Path, key: str) -> None:
    """A missing required key is named."""
    keys = dict(GOOD)
    del keys[key]
    text = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in keys.items())
    assert f"required key '{key}' is missing" in _error(catalog_dir, text)


def test_unknown_key_lists_allowed_keys(catalog_dir: Path) -> None:
    """A typo'd key is rejected and the allowed keys are listed."""
    message = _error(
        catalog_dir,
        'url = "https://x.test/"\nsource_topics = ["e"]\nmax_in_fligth = 4\n',
    )
    assert "unknown key 'max_in_fligth'" in message
    assert "max_in_flight" in message


@pytest.mark.parametrize(
    ("line", "key", "fragment"),
    [
        ("max_in_flight = 0", "max_in_flight", "greater than or equal to 1"),
        ('max_in_flight = "many"', "max_in_flight", "valid integer"),
        ('format = "xml"', "format", "'json_array', 'ndjson' or 'single'"),
        ('compression = "brotli"', "compression", "'none' or 'gzip'"),
        ("request_timeout_s = -1", "request_timeout_s", "greater than 0"),
        ("retry_tiers_s = [60, 30]", "retry_tiers_s", "must not decrease"),
        ("retry_tiers_s = []", "retry_tiers_s", "at least 1"),
        ("max_batch_bytes = 10", "max_batch_bytes", "greater than or equal to 1024"),
        ('event_time_field = "id"', "event_time_field", "must differ from id_field"),
        ("fetch_max_wait_ms = 0", "fetch_max_wait_ms", "greater than or equal to 1"),
    ],
)
def test_out_of_range_and_wrong_type(catalog_dir: Path, line: str, key: str, fragment: str) -> None:
    """Wrong types and out-of-range values name the key and what is allowed."""
    message = _error(catalog_dir, f'url = "https://x.test/"\nsource_topics = ["e"]\n{line}\n')
    assert f"key '{key}'" in message
    assert fragment in message


def test_bad_url_and_topic(catalog_dir: Path) -> None:
    """A relative URL and an invalid topic name are both reported."""
    message = _error(catalog_dir, 'url = "collector/v1"\nsource_topics = ["no spaces"]\n')
    assert "key 'url'" in message
    assert "http" in message
    assert "key 'source_topics'" in message


def test_name_key_is_refused(catalog_dir: Path) -> None:
    """The destination name comes from the file name, never from inside the file."""
    assert "'name' is not allowed" in _error(
        catalog_dir, 'name = "x"\nurl = "https://x.test/"\nsource_topics = ["e"]\n'
    )


def test_env_vars_are_resolved_in_headers(catalog_dir: Path) -> None:
    """${VAR} in a header value is read from the environment at load."""
    write_destination(
        catalog_dir, "d", **GOOD, headers={"Authorization": "Bearer ${TOKEN}", "X-Env": "prod"}
    )
    dest = Catalog(catalog_dir, {"TOKEN": "s3cr3t-value"}).load("d")
    assert dest.header_values() == {"Authorization": "Bearer s3cr3t-value", "X-Env": "prod"}


def test_missing_env_var_is_a_clear_error(catalog_dir: Path) -> None:
    """An unset ${VAR} names the header and the variable."""
    text = 'url = "https://x.test/"\nsource_topics = ["e"]\n[headers]\nAuthorization = "Bearer ${NOPE}"\n'
    message = _error(catalog_dir, text)
    assert "headers.Authorization" in message
    assert "${NOPE}" in message


def test_secrets_are_redacted_from_repr_and_errors(catalog_dir: Path) -> None:
    """Resolved header values never show in reprs, dumps or validation errors."""
    write_destination(catalog_dir, "d", **GOOD, headers={"Authorization": "Bearer ${TOKEN}"})
    dest = Catalog(catalog_dir, {"TOKEN": "s3cr3t-value"}).load("d")
    assert "s3cr3t-value" not in repr(dest)
    assert "s3cr3t-value" not in str(dest.model_dump())
    bad = 'url = "https://x.test/"\nsource_topics = ["e"]\n[headers]\n"bad header" = "${TOKEN}"\n'
    message = _error(catalog_dir, bad, {"TOKEN": "s3cr3t-value"})
    assert "s3cr3t-value" not in message


def test_unknown_destination_lists_known_ones(catalog_dir: Path) -> None:
    """Asking for a destination with no file names the file and the known destinations."""
    write_destination(catalog_dir, "alpha", **GOOD)
    with pytest.raises(
        ConfigError, match=r"destination 'beta': no file .*beta.toml \(known: alpha\)"
    ):
        Catalog(catalog_dir, {}).load("beta")


def test_invalid_destination_name(catalog_dir: Path) -> None:
    """A name that could escape the catalog directory is refused."""
    with pytest.raises(ConfigError, match="invalid"):
        Catalog(catalog_dir, {}).load("../etc/passwd")


@pytest.mark.parametrize(
    ("line", "key", "allowed", "given"),
    [
        ('max_in_flight = "10"', "max_in_flight", "an integer from 1 to 1024", "'10'"),
        ("max_in_flight = 10.0", "max_in_flight", "an integer from 1 to 1024", "10.0"),
        ("max_in_flight = true", "max_in_flight", "an integer from 1 to 1024", "True"),
        ('follow_redirects = "yes"', "follow_redirects", "true or false", "'yes'"),
        ('follow_redirects = "true"', "follow_redirects", "true or false", "'true'"),
        ("follow_redirects = 1", "follow_redirects", "true or false", "1"),
        ('request_timeout_s = "10"', "request_timeout_s", "a number greater than 0", "'10'"),
        ('retry_tiers_s = [30, "60"]', "retry_tiers_s.1", "a number greater than 0", "'60'"),
    ],
)
def test_types_are_strict(catalog_dir: Path, line: str, key: str, allowed: str, given: str) -> None:
    """A quoted number or a quoted boolean is refused, naming the key, what is allowed and the value given."""
    message = _error(catalog_dir, f'url = "https://x.test/"\nsource_topics = ["e"]\n{line}\n')
    assert f"key '{key}'" in message
    assert allowed in message
    assert f"(got {given})" in message


def test_integer_is_accepted_for_a_float_key(catalog_dir: Path) -> None:
    """An integer is a valid value for a float key such as request_timeout_s."""
    write_destination(catalog_dir, "d", **GOOD, request_timeout_s=10, retry_tiers_s=[30, 60])
    dest = Catalog(catalog_dir, {}).load("d")
    assert dest.request_timeout_s == 10.0
    assert dest.retry_tiers_s == [30.0, 60.0]


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("request_timeout_s = nan", "request_timeout_s"),
        ("request_timeout_s = inf", "request_timeout_s"),
        ("local_retry_max_backoff_s = -nan", "local_retry_max_backoff_s"),
        ("max_retry_age_s = +inf", "max_retry_age_s"),
        ("retry_tiers_s = [30, inf]", "retry_tiers_s.1"),
        ("max_in_flight = nan", "max_in_flight"),
        ("max_batch_bytes = inf", "max_batch_bytes"),
    ],
)
def test_nan_and_inf_are_refused(catalog_dir: Path, line: str, key: str) -> None:
    """TOML's nan and inf are refused for every numeric key."""
    message = _error(catalog_dir, f'url = "https://x.test/"\nsource_topics = ["e"]\n{line}\n')
    assert f"key '{key}'" in message
    assert "nan" in message or "inf" in message
    assert "finite number" in message or "an integer from" in message


def test_file_that_is_not_utf8(catalog_dir: Path) -> None:
    """A catalog file with a byte that is not UTF-8 names the file and the offset of the byte."""
    (catalog_dir / "d.toml").write_bytes(
        b'url = "https://x.test/"\n# caf\xe9\nsource_topics = ["e"]\n'
    )
    with pytest.raises(ConfigError) as info:
        Catalog(catalog_dir, {}).load("d")
    assert (
        str(info.value) == f"{catalog_dir / 'd.toml'}: not UTF-8 text (invalid byte at offset 29)"
    )


def test_file_with_byte_order_mark(catalog_dir: Path) -> None:
    """A file starting with a UTF-8 byte-order mark is refused with the advice to save it without."""
    path = catalog_dir / "d.toml"
    path.write_bytes(b'\xef\xbb\xbfurl = "https://x.test/"\nsource_topics = ["e"]\n')
    with pytest.raises(ConfigError) as info:
        Catalog(catalog_dir, {}).load("d")
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "byte-order mark" in message
    assert "without the BOM" in message
    assert "\n" not in message


@pytest.mark.parametrize("call", ["load", "load_all", "names"])
def test_missing_catalog_directory(tmp_path: Path, call: str) -> None:
    """A catalog directory that does not exist is named as such by load(), load_all() and names()."""
    missing = tmp_path / "nowhere"
    catalog = Catalog(missing, {})
    with pytest.raises(ConfigError) as info:
        catalog.load("d") if call == "load" else getattr(catalog, call)()
    assert str(info.value) == f"catalog directory {missing} does not exist"


def _header_error(catalog_dir: Path, value: str, environ: dict[str, str] | None = None) -> str:
    """The error for a file whose only header is `Authorization = value` (a TOML basic string)."""
    text = f'url = "https://x.test/"\nsource_topics = ["e"]\n[headers]\nAuthorization = "{value}"\n'
    message = _error(catalog_dir, text, environ)
    assert "key 'headers.Authorization'" in message
    return message


@pytest.mark.parametrize(
    ("value", "environ", "problem"),
    [
        ("Bearer ${TOKEN}", {"TOKEN": "s3cr3t-value\r\nX-Evil: 1"}, "contains a line break"),
        ("Bearer ${TOKEN}", {"TOKEN": "s3cr3t-value\n"}, "contains a line break"),
        ("s3cr3t-value\\nX-Evil: 1", {}, "contains a line break"),
        ("s3cr3t-value-caf\u00e9", {}, "contains a non-ASCII character"),
        ("Bearer ${TOKEN}", {"TOKEN": "s3cr3t-value\u2028"}, "contains a non-ASCII character"),
        ("s3cr3t-value\\tmore", {}, "contains a non-printable character"),
        ("Bearer ${TOKEN}", {"TOKEN": "s3cr3t-value\x00"}, "contains a non-printable character"),
        ("", {}, "is empty"),
        ("${TOKEN}", {"TOKEN": ""}, "is empty"),
    ],
)
def test_bad_header_values_are_refused_without_echo(
    catalog_dir: Path, value: str, environ: dict[str, str], problem: str
) -> None:
    """A line break, a non-ASCII or non-printable character, or no value at all is refused, unshown."""
    message = _header_error(catalog_dir, value, environ)
    assert f"the value (after ${{VAR}} substitution) {problem}" in message
    assert "printable ASCII on one line" in message
    assert "s3cr3t" not in message
    assert "X-Evil" not in message


def test_bad_character_from_a_variable_names_the_variable(catalog_dir: Path) -> None:
    """When the bad character came from an environment variable, the variable is named."""
    message = _header_error(catalog_dir, "Bearer ${TOKEN}", {"TOKEN": "s3cr3t-value\n"})
    assert "(from ${TOKEN})" in message


@pytest.mark.parametrize(
    ("value", "advice"),
    [
        ("Bearer ${BAD NAME}", "${NAME}"),
        ("Bearer ${}", "${NAME}"),
        ("Bearer ${1TOKEN}", "${NAME}"),
        ("Bearer ${TOKEN-x}", "${NAME}"),
        ("Bearer ${TOKEN", "no closing"),
        ("Bearer $TOKEN", "write ${NAME}"),
        ("Bearer s3cr3t$", "$$"),
        ("Bearer s3cr3t$5", "$$"),
    ],
)
def test_unresolvable_reference_syntax_is_refused(
    catalog_dir: Path, value: str, advice: str
) -> None:
    """${BAD NAME}, ${}, an unclosed ${, a bare $VAR or a lone $ is refused with how to write it, without echo."""
    message = _header_error(catalog_dir, value, {"TOKEN": "s3cr3t-value", "BAD NAME": "x"})
    assert advice in message
    assert "a literal $ is written $$" in message
    assert "s3cr3t" not in message
    assert "Bearer" not in message


def test_double_dollar_is_a_literal_dollar(catalog_dir: Path) -> None:
    """$$ in a header value stands for one $, and $${VAR} for the literal text ${VAR}."""
    write_destination(
        catalog_dir, "d", **GOOD, headers={"X-Price": "$$5 ${A}$$", "X-Ref": "$${TOKEN}"}
    )
    dest = Catalog(catalog_dir, {"A": "a", "TOKEN": "t"}).load("d")
    assert dest.header_values() == {"X-Price": "$5 a$", "X-Ref": "${TOKEN}"}


def test_substituted_value_is_not_substituted_again(catalog_dir: Path) -> None:
    """A variable's value is taken literally: a $ or ${...} inside it is not read again."""
    write_destination(catalog_dir, "d", **GOOD, headers={"Authorization": "Bearer ${TOKEN}"})
    dest = Catalog(catalog_dir, {"TOKEN": "a$b${C}$$"}).load("d")
    assert dest.header_values() == {"Authorization": "Bearer a$b${C}$$"}


@pytest.mark.parametrize(
    "url", ["https://${HOST}/v1", "https://$HOST/v1", "https://x.test/${PATH}", "${URL}"]
)
def test_environment_references_in_url_are_refused(catalog_dir: Path, url: str) -> None:
    """${VAR} or $VAR in url is refused: environment references are resolved only in [headers]."""
    message = _error(
        catalog_dir, f'url = "{url}"\nsource_topics = ["e"]\n', {"HOST": "h", "PATH": "p"}
    )
    assert "key 'url'" in message
    assert "environment references are resolved only in [headers]" in message


def test_max_batch_bytes_at_most_15_mib(catalog_dir: Path) -> None:
    """max_batch_bytes above 15 MiB is refused, so every event fits in one Kafka record of 16 MiB."""
    write_destination(catalog_dir, "ok", **GOOD, max_batch_bytes=15 * 1024 * 1024)
    assert Catalog(catalog_dir, {}).load("ok").max_batch_bytes == 15 * 1024 * 1024
    message = _error(
        catalog_dir,
        f'url = "https://x.test/"\nsource_topics = ["e"]\nmax_batch_bytes = {15 * 1024 * 1024 + 1}\n',
    )
    assert "key 'max_batch_bytes'" in message
    assert "an integer from 1024 to 15728640" in message
    assert "16 MiB" in message


def test_dlq_retention_defaults_to_30_days(catalog_dir: Path) -> None:
    """dlq_retention_days defaults to 30; retry topics keep events max_retry_age_s plus one day."""
    write_destination(catalog_dir, "d", **GOOD)
    dest = Catalog(catalog_dir, {}).load("d")
    assert dest.dlq_retention_days == 30
    assert dest.dlq_retention_ms == 30 * 86_400_000
    assert dest.retry_retention_ms == (86_400 + 86_400) * 1000


def test_dlq_retention_zero_is_forever(catalog_dir: Path) -> None:
    """dlq_retention_days = 0 keeps the DLQ forever: retention.ms -1, as Kafka writes it."""
    write_destination(catalog_dir, "d", **GOOD, dlq_retention_days=0, max_retry_age_s=3600)
    dest = Catalog(catalog_dir, {}).load("d")
    assert dest.dlq_retention_ms == -1
    assert dest.retry_retention_ms == (3600 + 86_400) * 1000


def test_dlq_retention_fractional_days(catalog_dir: Path) -> None:
    """A fractional number of days is converted to whole milliseconds."""
    write_destination(catalog_dir, "d", **GOOD, dlq_retention_days=0.5)
    assert Catalog(catalog_dir, {}).load("d").dlq_retention_ms == 43_200_000


@pytest.mark.parametrize(
    "line", ["dlq_retention_days = -1", 'dlq_retention_days = "30"', "dlq_retention_days = inf"]
)
def test_dlq_retention_must_be_a_number_of_days(catalog_dir: Path, line: str) -> None:
    """A negative, quoted or infinite dlq_retention_days is refused with what is allowed."""
    message = _error(catalog_dir, f'url = "https://x.test/"\nsource_topics = ["e"]\n{line}\n')
    assert "key 'dlq_retention_days'" in message
    assert "a number from 0 to" in message
