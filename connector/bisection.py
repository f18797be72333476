"""Bisection: the plan that splits a batch refused for its events until only the events refused on their own are left.

Only event-level refusals come here (a 4xx that is not a destination fault, `connector.reply_policy`).
The plan sends nothing: it says what to do next (`Send` a half, or `DeadLetter` a part) and is
told which halves were refused again; `connector.delivery.Deliverer` carries it out. Each half
sent is a bisection request, which the circuit breaker does not count.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from connector.rebatch import Batch
from hifi.errors import DestinationRejected
from hifi.vocabulary import Reason

__all__ = ["Bisection", "DeadLetter", "Send"]


@dataclass(frozen=True, slots=True)
class Send:
    """Send this half once (with local retries); tell the plan if it is refused again."""

    batch: Batch
    #: bisection requests spent on the batch, this one included
    spent: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Dead-letter this part: refused on its own, or its group once the budget ran out."""

    batch: Batch
    error: DestinationRejected
    #: bisection requests spent on the batch by then
    spent: int
    note: str = ""


class Bisection:
    """The steps that isolate the events of a rejected batch, within `budget` requests.

    `next()` gives the next step (None: done); after a `Send` whose half was refused again,
    `rejected(half, exc)` queues that half to be split in turn. Halves of one part are sent
    one after the other, then the parts refused are split in the order they were refused."""

    def __init__(self, batch: Batch, first: DestinationRejected, *, budget: int) -> None:
        self._budget = budget
        self._left = budget
        self._to_send: deque[Batch] = deque()
        self._rejected: deque[tuple[Batch, DestinationRejected]] = deque()
        self._whole: DeadLetter | None = None
        if first.reason is not Reason.HTTP_4XX:  # a forbidden destination: not the events' fault
            self._whole = DeadLetter(batch, first, 0)
        else:
            self._rejected.append((batch, first))

    @property
    def spent(self) -> int:
        """Bisection requests spent so far."""
        return self._budget - self._left

    def next(self) -> Send | DeadLetter | None:
        """The next step, or None once every part has its outcome."""
        if self._whole is not None:
            step, self._whole = self._whole, None
            return step
        if self._to_send:
            self._left -= 1
            return Send(self._to_send.popleft(), self.spent)
        if not self._rejected:
            return None
        part, exc = self._rejected.popleft()
        if len(part) == 1:
            return DeadLetter(part, exc, self.spent)
        if self._left < 2:
            note = f" (in a rejected group of {len(part)}; bisection budget spent)"
            return DeadLetter(part, exc, self.spent, note)
        self._to_send.extend(part.halves())
        return self.next()

    def rejected(self, half: Batch, exc: DestinationRejected) -> None:
        """A half sent was refused again: it is split in its turn."""
        self._rejected.append((half, exc))
