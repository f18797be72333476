"""Bisection: a batch refused for its events is split until only the events refused on their own are left.

Only event-level refusals come here (a 4xx that is not a destination fault, `connector.statuses`);
each half sent is a bisection request, which the circuit breaker does not count.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from connector.rebatch import Batch
from hifi.audit import SentBatch
from hifi.errors import DestinationRejected, DestinationUnavailable
from hifi.vocabulary import Reason

if TYPE_CHECKING:
    from connector.delivery import Deliverer


async def isolate(
    deliverer: Deliverer, batch: Batch, first: DestinationRejected, sent: SentBatch
) -> None:
    """Bisect a rejected batch so only the events rejected on their own reach the DLQ; each
    half sent is a bisection request (`hifi_connector_bisection_requests_total`), and each
    fact says how many the batch had spent by then."""
    if first.reason is not Reason.HTTP_4XX:  # a forbidden destination: not the events' fault
        await deliverer.dead_letter(batch, first, sent)
        return
    budget = deliverer.dest.max_bisect_requests
    rejected: deque[tuple[Batch, DestinationRejected]] = deque([(batch, first)])
    while rejected:
        part, exc = rejected.popleft()
        so_far = SentBatch(sent.batch, deliverer.dest.max_bisect_requests - budget)
        if len(part) == 1:
            await deliverer.dead_letter(part, exc, so_far)
            continue
        if budget < 2:
            note = f" (in a rejected group of {len(part)}; bisection budget spent)"
            await deliverer.dead_letter(part, exc, so_far, note)
            continue
        for half in part.halves():
            budget -= 1
            deliverer.bisection_requests.inc()
            so_far = SentBatch(sent.batch, deliverer.dest.max_bisect_requests - budget)
            try:
                status = await deliverer.send_with_retries(half)
            except DestinationUnavailable as transient:
                await deliverer.hand_off(half, transient, so_far)
            except DestinationRejected as again:
                rejected.append((half, again))
            else:
                acknowledged = await deliverer.delivered(half, status, so_far)
                if acknowledged is not None:
                    await acknowledged
