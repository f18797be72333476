"""Values a lookup cache's decoder refused: counted each time, logged once per distinct bad value."""

from __future__ import annotations

import hashlib

import structlog

from hifi.errors import EntryRefused
from hifi.lookup_cache import metrics as lookup_metrics
from hifi.redaction import short_error

log = structlog.get_logger(__name__)


class RefusedValues:
    """The bad value last logged per key (a digest), so a value refused at every refresh is
    logged once, and again only when it changes."""

    def __init__(self, dest: str, name: str) -> None:
        self.dest, self.name = dest, name
        self._digests: dict[str, str] = {}  # key -> digest of the bad value last logged

    def note(self, key: str, raw: bytes, exc: EntryRefused, *, kept: bool) -> None:
        """Count a refused value; log it unless it is the one logged last for `key`."""
        lookup_metrics.REFUSED_ENTRIES.labels(self.dest, self.name).inc()
        digest = hashlib.sha256(raw).hexdigest()[:16]
        if self._digests.get(key) == digest:
            return  # logged already for this bad value
        self._digests[key] = digest
        log.warning(
            "lookup_entry_refused",
            dest=self.dest,
            cache=self.name,
            key=key,
            error=short_error(str(exc)),
            serving="the previous good value" if kept else "nothing for this key",
        )

    def cleared(self, key: str) -> None:
        """`key` holds a good value again (or none): a later bad value is logged anew."""
        self._digests.pop(key, None)
