"""Dead letters: NAME.dlq read, described and replayed, and the index that lists, counts and searches it.

- `dead_letters`: letters read and filtered, a replay planned and written into NAME.retry_out;
- `letter`: one record of NAME.dlq as the index keeps it, masked;
- `index`: a destination's dead-letter index, without Kafka; `query`: what is asked of it;
- `indexing`: the task that tails every NAME.dlq into its index;
- `columns`, `spill`, `search`: the index's columns in memory, its text on disk, text filters.
"""

from retrier.dlq.dead_letters import (
    DeadLetter,
    ReplayPlan,
    format_age,
    plan_replay,
    read_dead_letters,
    read_marked_letters,
    replay,
    replay_with,
    select_marked,
)

__all__ = [
    "DeadLetter",
    "ReplayPlan",
    "format_age",
    "plan_replay",
    "read_dead_letters",
    "read_marked_letters",
    "replay",
    "replay_with",
    "select_marked",
]
