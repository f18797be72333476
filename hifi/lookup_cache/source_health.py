"""Whether a lookup source is failing: every failure counted, one line when it starts and one when it recovers."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from hifi.errors import HifiError
from hifi.lookup_cache import metrics as lookup_metrics
from hifi.redaction import short_error

log = structlog.get_logger(__name__)


class SourceHealth:
    """The failing state of one cache's source (`kind`: a `full` load or a `key` reload)."""

    def __init__(self, *, dest: str, cache: str, source: str, clock: Callable[[], float]) -> None:
        self._dest, self._cache, self._source, self._clock = dest, cache, source, clock
        self.failing_since_s: float | None = None
        self.failures = 0  # since it started failing
        self.last_error = ""  # masked, one line

    @property
    def failing(self) -> bool:
        return self.failing_since_s is not None

    def failed(self, kind: str, exc: HifiError, *, serving: int) -> None:
        """Count a failed load; log it if the source was not failing already."""
        lookup_metrics.REFRESH_FAILURES.labels(self._dest, self._cache, kind).inc()
        self.failures += 1
        self.last_error = short_error(str(exc))
        if self.failing_since_s is None:
            self.failing_since_s = self._clock()
            log.warning(
                "lookup_source_failing",
                dest=self._dest,
                cache=self._cache,
                source=self._source,
                error=self.last_error,
                entries=serving,
                hint="the last good values keep serving until expire_after_s",
            )

    def succeeded(self, kind: str, started_s: float) -> None:
        """Count a load that succeeded; a load started after the failures began ends them."""
        lookup_metrics.REFRESHES.labels(self._dest, self._cache, kind).inc()
        if self.failing_since_s is not None and started_s >= self.failing_since_s:
            log.info(
                "lookup_source_recovered",
                dest=self._dest,
                cache=self._cache,
                source=self._source,
                failed_for_s=round(self._clock() - self.failing_since_s, 1),
                failures=self.failures,
            )
            self.failing_since_s = None
            self.failures = 0
