"""The board: where the members of an auditor group learn each other's shares.

Each member writes, every `BOARD_INTERVAL_S`, one small file per share it owns under the
archive root the group shares (`ROOT/_state/board-GROUP/TOPIC--PARTITION.board2`, replaced
by rename, never partial): how far the share has read (`progress_ms`), its settled horizon, and
its rows of the minutes it holds (`auditor/share_rows.py`), their distributions packed. Every
member reads the whole board: a destination's tables, its settling clock and its final minutes
are computed over every share, its own from memory and the others' from their files
(`auditor/merged.py`).

A share moved in a rebalance is rewritten by its new owner from its snapshot; a killed
member's files stay as they were until its shares are assigned again, so a minute it held
does not become final meanwhile.

The board's format is in its files' names. A member reads both: `.board2` (this format), and
`.board` (format 1, an earlier release's, its distributions as lists). It posts `.board2` only
and removes the `.board` of a share it posts: a member of the earlier release reads `.board`
only, so during a rolling upgrade it sees the upgraded members' shares as never posted and
holds its destinations' minutes open, rather than summing rows it cannot read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
from aiokafka import TopicPartition

BOARD_INTERVAL_S = 1.0
# A share not posted for this long is stale in `/status`: its member is gone, or the group is
# rebalancing (a killed member's shares wait for its session timeout, 10 s by default).
STALE_AFTER_S = 10.0
_SUFFIX = ".board2"
_FORMAT_1 = ".board"


def board_dir(root: Path, group_id: str) -> Path:
    return root / "_state" / f"board-{group_id}"


def post(directory: Path, tp: TopicPartition, entry: Mapping[str, Any]) -> None:
    """Replace the share's file with `entry` (a temporary file renamed over it)."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{tp.topic}--{tp.partition}{_SUFFIX}"
    temp = directory / f".{final.name}.{os.getpid()}.tmp"
    temp.write_bytes(msgspec.msgpack.encode(entry))
    os.replace(temp, final)
    final.with_suffix(_FORMAT_1).unlink(missing_ok=True)


def read_board(directory: Path) -> dict[TopicPartition, dict[str, Any]]:
    """Every share's entry on the board, the newest where a share has both formats; a file
    being replaced or unreadable is skipped (the next read sees it)."""
    found: dict[TopicPartition, dict[str, Any]] = {}
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return found
    for name in names:
        suffix = _SUFFIX if name.endswith(_SUFFIX) else _FORMAT_1
        if name.startswith(".") or not name.endswith(suffix):
            continue
        topic, _, partition = name.removesuffix(suffix).rpartition("--")
        if not topic or not partition.isdigit():
            continue
        try:
            entry = msgspec.msgpack.decode((directory / name).read_bytes())
        except (OSError, msgspec.DecodeError):
            continue
        tp = TopicPartition(topic, int(partition))
        if tp not in found or _written_ms(entry) > _written_ms(found[tp]):
            found[tp] = entry
    return found


def _written_ms(entry: Mapping[str, Any]) -> int:
    return int(entry.get("written_ms") or 0)
