"""The lifecycle every Kafka consumer daemon of hifi shares (`lifecycle.PartitionWorker`).

- `lifecycle`: poll, take in, spawn, reap, commit, revoke, drain;
- `seams`: what the worker talks to: the consumer (`GroupConsumer`), the daemon's handler
  (`PartitionHandler`), a unit of work (`Work`), the options (`WorkerOptions`);
- `ends`: paused partitions' ends, for a lag that stays true;
- `restarts`: a partition whose topic was created again starts over;
- `session`: a member cut from Kafka waits, and lets its partitions go after a silent session.
"""

from __future__ import annotations

from hifi.worker.lifecycle import PartitionWorker
from hifi.worker.seams import ConsumerOpener, GroupConsumer, PartitionHandler, Work, WorkerOptions

__all__ = [
    "ConsumerOpener",
    "GroupConsumer",
    "PartitionHandler",
    "PartitionWorker",
    "Work",
    "WorkerOptions",
]
