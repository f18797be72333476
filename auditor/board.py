"""The board: where the members of an auditor group learn each other's shares.

Each member writes, every `BOARD_INTERVAL_S`, one small file per share it owns under the
archive root the group shares (`ROOT/_state/board-GROUP/TOPIC--PARTITION.board`, replaced by
rename, never partial): how far the share has read (`progress_ms`), its settled horizon, and its
rows of the minutes it holds (`auditor/share_rows.py`). Every member reads the whole board: a
destination's tables, its settling clock and its final minutes are computed over every share,
its own from memory and the others' from their files (`auditor/merged.py`).

A share moved in a rebalance is rewritten by its new owner from its snapshot; a killed
member's files stay as they were until its shares are assigned again, so a minute it held
does not become final meanwhile.
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
_SUFFIX = ".board"


def board_dir(root: Path, group_id: str) -> Path:
    return root / "_state" / f"board-{group_id}"


def post(directory: Path, tp: TopicPartition, entry: Mapping[str, Any]) -> None:
    """Replace the share's file with `entry` (a temporary file renamed over it)."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{tp.topic}--{tp.partition}{_SUFFIX}"
    temp = directory / f".{final.name}.{os.getpid()}.tmp"
    temp.write_bytes(msgspec.msgpack.encode(entry))
    os.replace(temp, final)


def read_board(directory: Path) -> dict[TopicPartition, dict[str, Any]]:
    """Every share's entry on the board; a file being replaced or unreadable is skipped (the
    next read sees it)."""
    found: dict[TopicPartition, dict[str, Any]] = {}
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return found
    for name in names:
        if name.startswith(".") or not name.endswith(_SUFFIX):
            continue
        topic, _, partition = name.removesuffix(_SUFFIX).rpartition("--")
        if not topic or not partition.isdigit():
            continue
        try:
            entry = msgspec.msgpack.decode((directory / name).read_bytes())
        except (OSError, msgspec.DecodeError):
            continue
        found[TopicPartition(topic, int(partition))] = entry
    return found
