"""The closing account of a run, by event id: produced versus delivered (2xx) and dead-lettered."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Account:
    """What happened to every produced event; `lost` and `wrong_dlq` must both be zero."""

    produced: int
    delivered: int
    dead_lettered: int
    lost: int
    wrong_dlq: int
    missing_dlq: int
    duplicates: int
    lost_sample: tuple[str, ...]
    wrong_dlq_sample: tuple[str, ...]

    @property
    def duplicated_pct(self) -> float:
        return 100.0 * self.duplicates / self.delivered if self.delivered else 0.0

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.wrong_dlq == 0 and self.missing_dlq == 0


def settle(
    produced: Iterable[str],
    delivered: Iterable[str],
    dead_lettered: Mapping[str, str],
    expected_dlq: Iterable[str],
) -> Account:
    """Set differences by id.

    lost = produced - delivered - dead-lettered; wrong_dlq = dead-lettered ids that were not
    expected there; missing_dlq = expected dead letters that never reached the DLQ (an expected
    poison event that was "delivered" counts here too, since the destination must refuse it).
    """
    produced_ids = set(produced)
    delivered_list = list(delivered)
    delivered_ids = set(delivered_list) & produced_ids
    dead_ids = set(dead_lettered) & produced_ids
    expected = set(expected_dlq)
    lost = produced_ids - delivered_ids - dead_ids
    wrong = dead_ids - expected
    missing = expected - dead_ids
    return Account(
        produced=len(produced_ids),
        delivered=len(delivered_ids),
        dead_lettered=len(dead_ids),
        lost=len(lost),
        wrong_dlq=len(wrong),
        missing_dlq=len(missing),
        duplicates=sum(1 for i in delivered_list if i in produced_ids) - len(delivered_ids),
        lost_sample=tuple(sorted(lost)[:5]),
        wrong_dlq_sample=tuple(sorted(wrong)[:5]),
    )
