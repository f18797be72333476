"""What the accounting model reads of a destination's `[accounting]` settings.

`config.destination.Accounting` is the one the catalog gives; the model names only what it
reads, so it lives below `config` with the rest of the shared package.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["AccountingSettings"]


class AccountingSettings(Protocol):
    """A destination's accounting settings, as the ledger and its judgement read them."""

    @property
    def settle_s(self) -> float:
        """How long after a minute ends its events may still arrive before it is final."""

    @property
    def retention_min(self) -> int:
        """Minutes kept in memory."""

    @property
    def loss_alarm_ratio(self) -> float:
        """missing / entered above this alarms."""

    @property
    def lag_sla_s(self) -> float:
        """The end-to-end lag a minute's p95 must stay within to be up."""
