"""The ingest streams catalog: one `NAME.toml` per stream, validated into a `Stream` at load time.

A stream is what `POST /v1/events/NAME` writes to: its Kafka topic, the fields its events' id
and time are read from (by the same rules as a destination's, `hifi.envelope`), the hashes of
the bearer tokens that may write to it, and its limits. Its directory is its own (`--streams
DIR` or `HIFI_STREAMS_DIR`), never the destinations' catalog: a stream file there would be
refused as a destination, and a destination file here as a stream.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from config.catalog import read_text
from config.destination import NAME_RE
from config.event_rules import MAX_EVENT_BYTES_LIMIT, distinct_time_field, topic_problem
from config.problems import describe
from hifi.environment import STREAMS_ENV_VAR
from hifi.errors import ConfigError

_SHA256_HEX_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_BODY_BYTES_LIMIT = 64 * 1024 * 1024
_DAY_S = 86_400
_SECRET_KEYS = ("tokens_sha256",)  # never echoed: a token pasted in by mistake is a secret


def hash_token(token: str) -> str:
    """The form a token is stored in a stream file: the SHA-256 of its UTF-8 bytes, in lower-case hex."""
    return hashlib.sha256(token.encode()).hexdigest()


_EMPTY_TOKEN_SHA256 = hash_token("")


class Stream(BaseModel):
    """One ingest stream: where its events go, how they are read, who may write, how much."""

    # as a destination: "10" is not an integer, nan and inf are refused
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    name: str
    topic: str
    id_field: str = Field(default="id", min_length=1)
    event_time_field: str = Field(default="event_time", min_length=1)
    tokens_sha256: list[str] = Field(
        min_length=1,
        description="the SHA-256 of each bearer token, in hex: `ingest hash-token` prints one",
    )
    max_body_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1024,
        le=MAX_BODY_BYTES_LIMIT,
        description="a request's body, after gzip is undone",
    )
    max_events_per_request: int = Field(default=1000, ge=1, le=100_000)
    max_event_bytes: int = Field(
        default=64 * 1024,
        ge=64,
        le=MAX_EVENT_BYTES_LIMIT,
        description="at most the max_batch_bytes of every destination fed by the topic",
    )
    idempotency_window_s: float = Field(default=86_400.0, gt=0, le=30 * _DAY_S)
    audit: bool = Field(
        default=True,
        description="the ingest service writes the accepted facts of the stream's events"
        " (as a destination's [accounting] audit); false: the auditor counts none of them as"
        " accepted, and loss only from what it saw enter",
    )

    @field_validator("topic")
    @classmethod
    def _check_topic(cls, value: str) -> str:
        if problem := topic_problem(value):
            raise ValueError(problem)
        return value

    @field_validator("tokens_sha256")
    @classmethod
    def _check_hashes(cls, value: list[str]) -> list[str]:
        for position, digest in enumerate(value):
            if not _SHA256_HEX_RE.match(digest):
                raise ValueError(
                    f"entry {position} is not a SHA-256 in lower-case hex (64 characters);"
                    " store the hash of a token, never the token: `ingest hash-token` prints it"
                )
            if digest == _EMPTY_TOKEN_SHA256:
                raise ValueError(f"entry {position} is the hash of an empty token; use a real one")
        return value

    _check_time_field = field_validator("event_time_field")(distinct_time_field)

    @model_validator(mode="after")
    def _check_sizes(self) -> Self:
        if self.max_event_bytes > self.max_body_bytes:
            raise ValueError(
                f"key 'max_event_bytes': {self.max_event_bytes} is above max_body_bytes"
                f" ({self.max_body_bytes}); an event cannot be larger than the body it comes in"
            )
        return self


def default_streams_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`HIFI_STREAMS_DIR`; there is no default: a `ConfigError` says how to name one."""
    env = os.environ if environ is None else environ
    found = env.get(STREAMS_ENV_VAR)
    if not found:
        raise ConfigError(
            f"no streams directory: pass --streams DIR or set {STREAMS_ENV_VAR}"
            " (one NAME.toml per stream, docs/ingest.md)"
        )
    return Path(found)


def load_streams(directory: Path) -> dict[str, Stream]:
    """Every stream of `directory`, by name; `ConfigError` for the first bad file, or none."""
    if not directory.exists():
        raise ConfigError(f"streams directory {directory} does not exist")
    if not directory.is_dir():
        raise ConfigError(f"streams directory {directory} is not a directory")
    paths = sorted(p for p in directory.glob("*.toml") if not p.stem.startswith("_"))
    if not paths:
        raise ConfigError(f"streams directory {directory} has no streams; add NAME.toml")
    return {path.stem: load_stream_file(path) for path in paths}


def load_stream_file(path: Path) -> Stream:
    """Parse and validate one stream file; its name is the file's."""
    if not NAME_RE.match(path.stem):
        raise ConfigError(
            f"{path}: stream name {path.stem!r} is invalid; use letters, digits, '.', '_' or '-'"
        )
    try:
        raw = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    if "name" in raw:
        raise ConfigError(f"{path}: key 'name' is not allowed; the file name is the stream name")
    raw["name"] = path.stem
    try:
        return Stream.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(describe(path, exc, Stream, secret_keys=_SECRET_KEYS)) from None
