"""A backfill's checkpoint: per partition the next offset to read and the counts so far, written atomically.

Everything before a partition's `next` offset was either not selected or acknowledged by the
broker on NAME.retry_out when the checkpoint was written, so a backfill started again from it
re-offers at most what it wrote after its last checkpoint. The file is JSON, replaced whole:
written under a temporary name in the same directory, flushed, fsync'ed, renamed over the old
one, and the directory fsync'ed; a crash leaves the old checkpoint or the new one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import orjson
from aiokafka import TopicPartition

from hifi.errors import ConfigError
from hifi.files import STATE_DIR_ENV_VAR, replace_atomically, state_dir

FORMAT = 1


def default_path(dest: str, key: str) -> Path:
    """Where the backfill identified by `key` keeps its checkpoint unless told otherwise."""
    return state_dir() / "backfill" / f"{dest}-{key}.json"


@dataclass(slots=True)
class Cursor:
    """One partition's progress: before `next`, every record was skipped or re-offered and
    acknowledged."""

    topic: str
    partition: int
    start: int  # the first offset to read
    stop: int  # reading ends here at the latest (the end offset when the backfill began)
    next: int  # the first offset not yet done
    done: bool = False  # reached `stop` or a record at or after the end of the range
    scanned: int = 0
    selected: int = 0
    reoffered: int = 0

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def advance(self, last_offset: int, *, scanned: int, selected: int, reoffered: int) -> None:
        """Note records up to `last_offset` done, with what became of them."""
        self.next = last_offset + 1
        self.scanned += scanned
        self.selected += selected
        self.reoffered += reoffered


@dataclass(slots=True)
class Checkpoint:
    """Everything a backfill needs to resume, and what it has done so far."""

    key: str  # identifies the backfill: destination, range and selection
    dest: str
    from_ms: int
    to_ms: int
    selection: str  # "all", or the digest of the missing-events origins
    source: str  # "all", or the missing-events path
    listed: int | None  # origins listed for the destination (None: every record)
    started_ms: int
    run_s: float = 0.0  # seconds spent running, over every run
    finished: bool = False
    cursors: list[Cursor] = field(default_factory=list)

    def totals(self) -> tuple[int, int, int]:
        """(scanned, selected, re-offered) over every partition."""
        return (
            sum(c.scanned for c in self.cursors),
            sum(c.selected for c in self.cursors),
            sum(c.reoffered for c in self.cursors),
        )

    def to_json(self) -> bytes:
        """The file's bytes (orjson encodes, as everywhere in hifi)."""
        return orjson.dumps({"format": FORMAT, **asdict(self)}, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, raw: bytes, path: Path) -> Checkpoint:
        """The checkpoint in `raw`, its fields' types checked (msgspec decodes and validates)."""
        try:
            loaded = msgspec.json.decode(raw, type=dict[str, Any])
            if loaded.pop("format", None) != FORMAT:
                raise ValueError(f"format is not {FORMAT}")
            return msgspec.convert(loaded, cls)
        except (msgspec.MsgspecError, ValueError) as exc:
            raise ConfigError(
                f"checkpoint {path}: not a backfill checkpoint ({exc}); remove it or pass --restart"
            ) from None


def load(path: Path) -> Checkpoint | None:
    """The checkpoint at `path`; None when there is none."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"checkpoint {path}: cannot read: {exc.strerror}") from None
    return Checkpoint.from_json(raw, path)


def save(path: Path, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint at `path` atomically (temporary file, fsync, rename, fsync)."""
    try:
        replace_atomically(path, checkpoint.to_json())
    except OSError as exc:
        raise ConfigError(
            f"checkpoint {path}: cannot write: {exc.strerror}; give a writable --checkpoint"
            f" or {STATE_DIR_ENV_VAR}"
        ) from None
