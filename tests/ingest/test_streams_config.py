"""The streams catalog: defaults, and every bad file as one line naming the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.streams import default_streams_dir, hash_token, load_stream_file, load_streams
from hifi.errors import ConfigError

HASH = hash_token("s3cret-token")


def _write(directory: Path, text: str, name: str = "clicks") -> Path:
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def _error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_stream_file(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_a_minimal_stream_gets_the_documented_defaults(tmp_path: Path) -> None:
    """Only topic and tokens_sha256 are required; the limits and fields have their defaults."""
    _write(tmp_path, f'topic = "clicks"\ntokens_sha256 = ["{HASH}"]\n')
    stream = load_streams(tmp_path)["clicks"]
    assert (stream.name, stream.topic, stream.id_field, stream.event_time_field) == (
        "clicks",
        "clicks",
        "id",
        "event_time",
    )
    assert stream.max_body_bytes == 4 * 1024 * 1024
    assert (stream.max_events_per_request, stream.max_event_bytes) == (1000, 64 * 1024)
    assert stream.idempotency_window_s == 86400


def test_hash_token_is_the_sha256_hex_of_the_token() -> None:
    """The stored form is what `sha256sum` prints for the token's bytes."""
    assert hash_token("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('tokens_sha256 = ["' + HASH + '"]', "required key 'topic' is missing"),
        ('topic = "clicks"', "required key 'tokens_sha256' is missing"),
        ('topic = "a b"\ntokens_sha256 = ["' + HASH + '"]', "not a valid Kafka topic name"),
        ('topic = "t"\ntokens_sha256 = ["s3cret-token"]', "not a SHA-256 in lower-case hex"),
        ('topic = "t"\ntokens_sha256 = []', "tokens_sha256"),
        (
            'topic = "t"\ntokens_sha256 = ["' + hash_token("") + '"]',
            "the hash of an empty token",
        ),
        ('topic = "t"\ntokens_sha256 = ["' + HASH + '"]\nmax_body_bytes = "1"', "max_body_bytes"),
        (
            'topic = "t"\ntokens_sha256 = ["' + HASH + '"]\nmax_event_bytes = 2048\n'
            "max_body_bytes = 1024",
            "above max_body_bytes",
        ),
        (
            'topic = "t"\ntokens_sha256 = ["' + HASH + '"]\nid_field = "t"\nevent_time_field = "t"',
            "must differ from id_field",
        ),
        ('topic = "t"\ntokens_sha256 = ["' + HASH + '"]\nurl = "x"', "unknown key 'url'"),
        ('topic = "t"\ntokens_sha256 = ["' + HASH + '"]\nname = "x"', "key 'name' is not allowed"),
        (
            'topic = "t"\ntokens_sha256 = ["' + HASH + '"]\nidempotency_window_s = 0',
            "greater than 0",
        ),
        ("topic = [", "not valid TOML"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key(tmp_path: Path, text: str, expected: str) -> None:
    """Each problem names the file and the key, and says what is allowed."""
    assert expected in _error(tmp_path, text)


def test_a_token_written_by_mistake_is_never_echoed(tmp_path: Path) -> None:
    """A plain token in tokens_sha256 is refused without being repeated in the message."""
    message = _error(tmp_path, 'topic = "t"\ntokens_sha256 = ["my-plain-secret-token"]')
    assert "my-plain-secret-token" not in message


def test_the_directory_must_exist_and_hold_streams(tmp_path: Path) -> None:
    """A missing or empty directory, or none named at all, is a one-line ConfigError."""
    with pytest.raises(ConfigError, match="does not exist"):
        load_streams(tmp_path / "nope")
    with pytest.raises(ConfigError, match="has no streams"):
        load_streams(tmp_path)
    with pytest.raises(ConfigError, match="HIFI_STREAMS_DIR"):
        default_streams_dir({})
    assert default_streams_dir({"HIFI_STREAMS_DIR": "/x"}) == Path("/x")
