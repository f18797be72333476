"""The auditor's ops pages: `/tables` (the per-minute rows) and `/status` (what it tracks now)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition
from starlette.requests import Request

from auditor.board import STALE_AFTER_S
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.tables import report_row

if TYPE_CHECKING:
    from auditor.accounts import Accounts
    from auditor.merged import DestinationView


class Pages:
    """The JSON pages of one `Accounts`, read from the event loop that feeds it."""

    def __init__(
        self,
        accounts: Accounts,
        now_ms: Callable[[], int],
        started_over: Callable[[], list[dict[str, Any]]] = list,
    ) -> None:
        """`started_over`: the worker's partitions that started over (`PartitionWorker`)."""
        self._accounts = accounts
        self._now_ms = now_ms
        self._started_over = started_over

    async def tables(self, request: Request) -> Any:
        """`/tables?dest=NAME&from=MS&to=MS`: the per-minute rows (all destinations without dest)."""
        params = request.query_params
        views = self._accounts.settling.views
        now_ms = self._now_ms()
        from_ms, to_ms = _ms_param(params.get("from")), _ms_param(params.get("to"))
        wanted = params.get("dest")
        names = [wanted] if wanted else sorted(views)
        return {
            name: [
                report_row(r) for r in views[name].rows(from_ms=from_ms, to_ms=to_ms, now_ms=now_ms)
            ]
            for name in names
            if name in views
        }

    async def status(self, request: Request) -> Any:
        accounts, now_ms = self._accounts, self._now_ms()
        owned, holdings = set(accounts.shares), accounts.settling.holdings
        return {
            "member": accounts.settling.member,
            "owned_shares": sorted(f"{tp.topic}/{tp.partition}" for tp in owned),
            "rebalancing": accounts.rebalancing,
            "dests": {
                name: {
                    "unsettled_minutes": view.unsettled(),
                    "tracked_events": view.waiting_events(),
                    "final_before_ms": view.final_before_ms() or None,
                    "counted_from_ms": counted_from_ms(view.counted_from_ms(), now_ms),
                    "settings": view.dest.accounting.model_dump(),
                    "health": accounts.health[name].view(now_ms),
                    "shares": _shares(view, owned),
                    "stale_shares": _stale(view, now_ms),
                }
                for name, view in accounts.settling.views.items()
            },
            "refused_facts": dict(accounts.refused),
            "recreated_partitions": accounts.incarnations.view(),
            "partitions_started_over": self._started_over(),
            "buffered_rows": accounts.buffered_rows,
            "holdings": None if holdings is None else holdings.view(),
        }


def counted_from_ms(first_minute_ms: int | None, now_ms: int) -> int:
    """Since when the auditor counts a destination's minutes: the first minute any share ever
    accounted for (kept in its snapshot across restarts), else the current minute. Minutes
    before it have no data at all: a day's availability leaves them out instead of counting
    them as up."""
    return first_minute_ms if first_minute_ms is not None else now_ms - now_ms % MINUTE_MS


def _shares(view: DestinationView, owned: set[TopicPartition]) -> dict[str, Any]:
    """Each share of the destination: which member posted it last and when, how far it has
    read, and whether this member owns it."""
    return {
        f"{tp.topic}/{tp.partition}": {
            "member": view.members.get(tp),
            "owned": tp in owned,
            "posted_ms": view.posted_ms.get(tp),
            "progress_ms": view.progress.get(tp),
            "final_before_ms": view.shares[tp]["closed_before_ms"] if tp in view.shares else None,
        }
        for tp in view.partitions
    }


def _stale(view: DestinationView, now_ms: int) -> list[str]:
    """The shares not posted on the board lately (or never): the destination's minutes wait
    for them to become final."""
    since_ms = now_ms - round(STALE_AFTER_S * 1000)
    return [
        f"{tp.topic}/{tp.partition}"
        for tp in view.partitions
        if view.posted_ms.get(tp, since_ms - 1) < since_ms
    ]


def _ms_param(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        return None
