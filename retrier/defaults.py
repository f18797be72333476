"""The retrier's defaults that its command line shows and its daemon uses, defined once.

Light on purpose: `retrier --help` imports this module and nothing of the runtime.
"""

from __future__ import annotations

#: the consumer group of the hand-off and tier topics, unless `--group` splits the catalog
RETRIER_GROUP_ID = "hifi.retrier"
