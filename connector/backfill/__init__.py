"""Going back in a destination's source topics by time: `connector backfill` re-offers a range
(`reoffer`), `connector rewind` moves a stopped connector's offsets (`rewind`).

Both find where a time falls in a partition (`positions`); a backfill reads what to re-offer
(`selection`), resumes from its checkpoint (`checkpoint`), and both show their tables and
progress (`views`). Nothing on the delivery path imports this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from connector.backfill.reoffer import (
        CHECKPOINT_EVERY_S,
        Backfill,
        BackfillRequest,
        BackfillResult,
        Status,
        backfill_key,
        time_key,
    )

__all__ = [
    "CHECKPOINT_EVERY_S",
    "Backfill",
    "BackfillRequest",
    "BackfillResult",
    "Status",
    "backfill_key",
    "time_key",
]


def __getattr__(name: str) -> Any:
    """The backfill's names, imported on first use: `connector rewind` loads no pyarrow."""
    if name in __all__:
        from connector.backfill import reoffer

        return getattr(reoffer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
