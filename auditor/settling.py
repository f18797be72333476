"""After each commit: a member's shares settled on their destination's clock, posted, the lead's duties done.

Every member reads the board (`auditor/board.py`) and so knows each share's progress: a
destination's clock is the least of its shares' (`DestinationView.progress_ms`), and every
share of it settles its minutes on that clock, as one auditor over every partition does. The
member then posts its own shares, and if it owns a destination's lead share writes the
destination's merged final minutes (`auditor/lead.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from aiokafka import TopicPartition

from auditor import metrics
from auditor.board import board_dir, post, read_board
from auditor.holdings import Holdings
from auditor.intake import Intake
from auditor.lead import final_file, read_final_rows, serve, write_final_rows
from auditor.merged import DestinationView, share_entry
from auditor.missing import Resolve, missing_origins
from auditor.shares import Books, Share
from hifi.accounting.incarnations import Incarnations, key
from hifi.accounting.ledger import Ledger

log = structlog.get_logger(__name__)


class Settling:
    """The settling, posting and lead duties of one member; fed by its event loop only."""

    def __init__(self, books: Books, intake: Intake, *, group_id: str, member: str) -> None:
        self._dests, self._shares, self._archive = books.dests, books.shares, books.archive
        self._intake = intake
        self.member = member
        self.board = board_dir(books.archive.root, group_id)
        self.views: dict[str, DestinationView] = {}
        self._final_mtime: dict[str, float] = {}
        self.holdings: Holdings | None = None  # None: no event is held (`auditor/holdings.py`)
        self.incarnations = Incarnations()  # the member's (`Accounts` sets it)

    def know_partitions(self, partitions: Mapping[str, Sequence[int]]) -> None:
        """The partitions of each source topic: a destination's shares."""
        for name, dest in self._dests.items():
            tps = [TopicPartition(t, p) for t in dest.source_topics for p in partitions.get(t, ())]
            self.views[name] = DestinationView(dest, tps)

    def assigned(self, owned: set[TopicPartition]) -> None:
        """A lead share just taken over: read what its previous member wrote of the final minutes."""
        for name, view in self.views.items():
            if view.lead in owned:
                view.final_rows = read_final_rows(self.board, name)

    def cycle(self, progress: Mapping[TopicPartition, int], now_ms: int) -> list[Resolve]:
        """Settle, post, serve the leads; the missing events to name (share, dest, minute, origins)."""
        board = read_board(self.board)
        for view in self.views.values():
            view.update(board)
        to_resolve: list[Resolve] = []
        for name, view in self.views.items():
            clock_ms = view.progress_ms(progress)
            for tp in view.partitions:
                share = self._shares.get(tp)
                if share is None:
                    continue
                ledger = share.ledgers[name]
                rose = self._hold(tp, name, ledger, progress.get(tp, 0), now_ms)
                for settled in ledger.advance(clock_ms):
                    if ledger.tally(settled.bucket).missing:
                        rose.append(settled.bucket.minute_ms)
                for minute in rose:
                    origins = missing_origins(ledger.buckets[minute], ledger.held_from)
                    to_resolve.append((tp, name, minute, origins))
        own = {
            tp: self._entry(tp, share, progress.get(tp, 0), now_ms)
            for tp, share in self._shares.items()
        }
        for tp, entry in own.items():
            post(self.board, tp, entry)
        for name, view in self.views.items():
            view.update(own)
            self._serve(name, view, now_ms)
        return to_resolve

    def _hold(
        self, tp: TopicPartition, name: str, ledger: Ledger, progress_ms: int, now_ms: int
    ) -> list[int]:
        """Tell the share's ledger where its partition holds events now; the final minutes
        whose missing events rose (to name). A minute it moved is posted as changed."""
        if self.holdings is None:
            return []
        epoch = self.incarnations.epoch(tp.topic, tp.partition)
        held = self.holdings.held_from(name, tp, progress_ms)
        moved, rose = ledger.hold({(key(tp.topic, epoch), tp.partition): held})
        changed = self._intake.changed[tp, name]
        for minute in moved:
            changed[minute] = now_ms
        return rose

    def _entry(
        self, tp: TopicPartition, share: Share, progress_ms: int, now_ms: int
    ) -> dict[str, Any]:
        dests = {}
        for name, ledger in share.ledgers.items():
            view = self.views[name]
            changed = self._intake.changed.get((tp, name), {})
            dests[name] = share_entry(
                ledger, horizon_ms=view.final_before_ms(), changed=changed, now_ms=now_ms
            )
            for minute in [m for m in changed if m not in ledger.buckets]:
                del changed[minute]
        return {
            "member": self.member,
            "written_ms": now_ms,
            "progress_ms": progress_ms,
            "dests": dests,
        }

    def _serve(self, name: str, view: DestinationView, now_ms: int) -> None:
        lead = view.lead
        share = None if lead is None else self._shares.get(lead)
        ledgers = [s.ledgers[name] for s in self._shares.values() if name in s.ledgers]
        metrics.WAITING.labels(name).set(sum(ledger.waiting_events() for ledger in ledgers))
        metrics.REMEMBERED_FACTS.labels(name).set(sum(len(ledger.seen_facts) for ledger in ledgers))
        if share is None:  # another member's: read the final rows it wrote, when they change
            try:
                mtime = final_file(self.board, name).stat().st_mtime
            except OSError:
                return
            if self._final_mtime.get(name) != mtime:
                self._final_mtime[name] = mtime
                view.final_rows = read_final_rows(self.board, name)
            return
        state = share.lead.setdefault(name, {})
        retention_ms = view.dest.accounting.retention_min * 60_000
        wrote = serve(
            view,
            state,
            write_row=lambda row: self._archive.minute(name, row),
            now_ms=now_ms,
            retention_ms=retention_ms,
        )
        if wrote:
            write_final_rows(self.board, name, view.final_rows)
        metrics.UNSETTLED.labels(name).set(view.unsettled())
