"""The auditor's archive: its rows as Hive-partitioned Parquet files, written atomically, and read back.

- `layout`: the paths and schemas writers and readers share (the Spark reconciliation reads by it);
- `writer`: rows buffered per kind, destination and hour, and written by `PendingFiles`;
- `files`: each file written atomically; settings versions and snapshots;
- `read`: minute rows, ids of events, settings versions, the snapshot.
"""

from auditor.archive.files import STALE_TEMP_S, write_settings, write_snapshot
from auditor.archive.writer import Archive, EnteredColumns, PendingFiles

__all__ = [
    "STALE_TEMP_S",
    "Archive",
    "EnteredColumns",
    "PendingFiles",
    "write_settings",
    "write_snapshot",
]
