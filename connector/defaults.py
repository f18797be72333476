"""The connector's defaults and bounds that its command line shows and its code uses, defined once.

Light on purpose: `connector --help` imports this module and nothing of the runtime.
"""

from __future__ import annotations

MAX_RATE_PER_S = 1_000_000.0  # the highest `connector backfill --rate` accepted
CHECKPOINT_EVERY_S = 10.0  # seconds between two backfill checkpoints, at most (the default)
CHECKPOINT_EVERY_RECORDS = 10_000  # records scanned between two backfill checkpoints, at most
