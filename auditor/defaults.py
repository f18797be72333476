"""The auditor's defaults that its command line shows and its daemon uses, defined once.

Light on purpose: `auditor --help` imports this module and nothing of the runtime.
"""

from __future__ import annotations

GROUP_ID = "hifi.auditor"  # the consumer group of the source topics and the audit topic
DEFAULT_ROLL_S = 60.0  # seconds between two closes of the archive files (and commits), at most
