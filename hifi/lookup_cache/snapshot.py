"""The lookup cache's snapshot: the last good entries of a full load, in a local file replaced atomically.

A process that starts while its source (Redis) is down becomes ready from it. The file holds
each entry's value as the source gave it and when that value was last loaded, so its age (and
expiry) carries over a restart. The values may hold secrets: the file is written with mode
0600, and what cannot be read is one line that never quotes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec
import orjson
import structlog

from hifi.errors import HifiError
from hifi.files import replace_atomically

log = structlog.get_logger(__name__)

FORMAT = 1


class SnapshotUnusable(HifiError):
    """The snapshot is missing, unreadable or not one this version writes."""


class _Stored(msgspec.Struct, frozen=True):
    loaded_ms: int  # wall clock: when the value was last loaded from the source
    value: str  # the value as the source gave it (entries are UTF-8 text)


class _File(msgspec.Struct, frozen=True):
    format: int
    source: str
    written_ms: int
    entries: dict[str, _Stored]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a snapshot holds: per key the raw value and when it was loaded (epoch ms)."""

    source: str
    written_ms: int
    entries: Mapping[str, tuple[bytes, int]]


_decoder = msgspec.json.Decoder(_File)


def encode(snapshot: Snapshot) -> bytes:
    """The file's bytes; values that are not UTF-8 text are left out (an accepted entry is)."""
    stored = {}
    for key, (raw, loaded_ms) in snapshot.entries.items():
        try:
            stored[key] = {"loaded_ms": loaded_ms, "value": raw.decode("utf-8")}
        except UnicodeDecodeError:
            continue
    return orjson.dumps(
        {
            "format": FORMAT,
            "source": snapshot.source,
            "written_ms": snapshot.written_ms,
            "entries": stored,
        }
    )


def write(path: Path, data: bytes) -> None:
    """Replace the snapshot atomically, readable by this user only; raises `OSError`."""
    replace_atomically(path, data, mode=0o600)


def read(path: Path) -> Snapshot:
    """The snapshot at `path`; `SnapshotUnusable` says why not in one line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SnapshotUnusable(f"no snapshot at {path}") from None
    except OSError as exc:
        raise SnapshotUnusable(f"snapshot {path} cannot be read: {exc.strerror}") from None
    try:
        found = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SnapshotUnusable(f"snapshot {path} is not a lookup snapshot ({exc})") from None
    if found.format != FORMAT:
        raise SnapshotUnusable(f"snapshot {path} has format {found.format}, not {FORMAT}")
    entries = {key: (item.value.encode(), item.loaded_ms) for key, item in found.entries.items()}
    return Snapshot(found.source, found.written_ms, entries)


class SnapshotFile:
    """A cache's snapshot file, if it has one: read when the cache starts, written after each
    full load; `problem` says why it could not be read or written last (empty when it could)."""

    def __init__(self, path: Path | None, dest: str) -> None:
        self.path, self.dest = path, dest
        self.problem = ""

    def read_fresh(
        self, now_ms: int, expire_after_s: float
    ) -> tuple[Snapshot, dict[str, tuple[bytes, int]]] | None:
        """The snapshot and its entries loaded less than `expire_after_s` before `now_ms`."""
        if self.path is None:
            self.problem = "no snapshot file configured"
            return None
        try:
            snapshot = read(self.path)
        except SnapshotUnusable as exc:
            self.problem = str(exc)
            return None
        fresh = {
            key: (raw, loaded_ms)
            for key, (raw, loaded_ms) in snapshot.entries.items()
            if (now_ms - loaded_ms) / 1000 < expire_after_s
        }
        return snapshot, fresh

    async def write(
        self, source: str, written_ms: int, entries: Mapping[str, tuple[bytes, int]]
    ) -> None:
        """Replace the file, in a thread; a failure is logged once per distinct problem."""
        if self.path is None:
            return
        data = encode(Snapshot(source, written_ms, entries))
        try:
            await asyncio.to_thread(write, self.path, data)
        except OSError as exc:
            problem = f"cannot write {self.path}: {exc.strerror}"
            if problem != self.problem:
                log.warning("lookup_snapshot_unwritten", dest=self.dest, error=problem)
            self.problem = problem
            return
        self.problem = ""
