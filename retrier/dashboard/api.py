"""The dashboard's routes: the page, its assets, and the JSON it reads and posts.

Every answer is JSON except the page and its assets. Bad input (an unknown destination, a time
that does not parse, a cursor from elsewhere) is a 400 with one line naming what and where;
a refused request is a 401 or 403 saying why. Dead letters are masked before they leave.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import structlog
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from config.destination import Destination
from hifi.errors import ConfigError
from hifi.kafka.settings import KafkaSettings
from hifi.ops_http import json_answer
from hifi.redaction import mask
from retrier.dashboard.access import Access, Refused
from retrier.dashboard.auditor_feed import AuditorFeed
from retrier.dashboard.letters import open_letter
from retrier.dashboard.params import BadInput, cursor_param, int_param, letter_filter, text_param
from retrier.dashboard.replay_jobs import Busy, ReplayJobs
from retrier.dashboard.runbook import runbook_links
from retrier.dlq.index import DeadLetterIndex
from retrier.dlq.letter import REASONS
from retrier.dlq.query import LetterFilter, LetterRow
from retrier.replays import ReplayFilter

log = structlog.get_logger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
PAGE_LIMIT_MAX = 200
_WITHHELD = "(the error text needs the dashboard token)"
_GROWTH_BUCKET_S = 300
_GROWTH_BUCKETS = 12  # the last hour, in 5-minute buckets
_FAILURE_WINDOW_MS = 3600 * 1000
_FAILURE_GROUPS_SHOWN = 10
_WAITING, _REPLAYED = LetterFilter(replayed=False), LetterFilter(replayed=True)
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self';"
        " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_request_body = msgspec.json.Decoder(dict[str, Any])  # a POST's body: one JSON object

T = TypeVar("T")
StatusDocument = Callable[[], dict[str, Any]]
Handler = Callable[[Request], Awaitable[Any]]


@dataclass
class Dashboard:
    """What the page needs from the running retrier."""

    dests: Mapping[str, Destination]
    settings: KafkaSettings
    access: Access
    status_document: StatusDocument  # the `/status` JSON of the tiers
    indexes: Mapping[str, DeadLetterIndex]
    jobs: ReplayJobs
    auditor: AuditorFeed | None
    #: where docs/alerts.md is served (`--runbook-url`, `HIFI_RUNBOOK_URL`): the panels link
    #: their alerts' entries; None: no link
    runbook_url: str | None = None
    #: index reads run in a worker thread, one at a time (a text scan of a million letters takes
    #: a few hundred ms: the event loop, and with it the tiers, never waits for one)
    _reading: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)

    async def _read(self, query: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        async with self._reading:
            return await asyncio.to_thread(query, *args, **kwargs)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/", self._page),
            Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
            Route("/api/overview", _json(self._overview)),
            Route("/api/letters", _json(self._letters)),
            Route("/api/letters/count", _json(self._count)),
            Route("/api/letter", _json(self._letter)),
            Route("/api/find", _json(self._find)),
            Route("/api/replays", _json(self._replay), methods=["POST"]),
            Route("/api/replays/{job_id}", _json(self._replay_job)),
            Route("/api/accounting", _json(self._accounting)),
        ]

    async def _page(self, request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", headers=_SECURITY_HEADERS)

    # --- reading -----------------------------------------------------------------------------

    async def _overview(self, request: Request) -> dict[str, Any]:
        now_ms = _now_ms()
        tiers = self.status_document()
        destinations = {}
        # failure groups quote the letters' error headers: beyond loopback, token holders only
        quote_errors = not self.access.letters_need_token or self.access.has_token(request)
        for name in sorted(self.dests):
            index = self.indexes[name]
            destinations[name] = {
                "tiers": tiers["destinations"].get(name, {}),
                "dlq": await self._read(_dlq_summary, index, now_ms, quote_errors=quote_errors),
                "replays": [job.as_json() for job in self.jobs.recent(name)[:5]],
            }
        return {
            "now_ms": now_ms,
            "backlog_measured": tiers.get("backlog_measured"),
            "can_act": self.access.can_act,
            "letters_need_token": self.access.letters_need_token,
            "has_token": self.access.has_token(request),
            "auditor": self.auditor.base if self.auditor else None,
            "runbook": runbook_links(self.runbook_url),
            "reasons": list(REASONS),
            "destinations": destinations,
        }

    async def _letters(self, request: Request) -> dict[str, Any]:
        self.access.check_read_letters(request)
        params = request.query_params
        index = self._index(params.get("dest"))
        limit = int_param(params.get("limit"), "limit", default=50, low=1, high=PAGE_LIMIT_MAX)
        cursor = cursor_param(params.get("cursor"))
        page = await self._read(index.page, letter_filter(params), before=cursor, limit=limit)
        return {
            "rows": [_row(row) for row in page.rows],
            "next": page.next.token() if page.next is not None else None,
            "total": page.total,
        }

    async def _count(self, request: Request) -> dict[str, Any]:
        params = request.query_params
        if params.get("q"):
            self.access.check_read_letters(request)  # a text query reads bodies
        index = self._index(params.get("dest"))
        flt = letter_filter(params)
        return {"count": await self._read(index.count, flt), "ready": index.ready.is_set()}

    async def _letter(self, request: Request) -> dict[str, Any]:
        self.access.check_read_letters(request)
        params = request.query_params
        dest = self._dest(params.get("dest"))
        partition = int_param(params.get("partition"), "partition", low=0)
        offset = int_param(params.get("offset"), "offset", low=0)
        letter = await open_letter(self.settings, dest, partition, offset)
        if letter is None:
            raise Refused(404, f"no dead letter at {dest.dlq_topic}/{partition}/{offset}")
        mark = await self._read(_indexed_at, self.indexes[dest.name], partition, offset)
        return letter | {
            "replayed_ms": mark.replayed_ms if mark else None,
            "replayed_by": mark.replayed_by if mark else None,
        }

    async def _find(self, request: Request) -> dict[str, Any]:
        self.access.check_read_letters(request)
        params = request.query_params
        index = self._index(params.get("dest"))
        key = (params.get("key") or "").strip()
        if not key:
            raise BadInput("key: give an event id or an origin topic/partition/offset")
        return {"rows": [_row(row) for row in await self._read(index.find, key)]}

    async def _replay_job(self, request: Request) -> dict[str, Any]:
        job = self.jobs.get(request.path_params["job_id"])
        if job is None:
            raise Refused(404, f"no replay {request.path_params['job_id']!r}")
        return job.as_json()

    async def _accounting(self, request: Request) -> dict[str, Any]:
        dest = self._dest(request.query_params.get("dest"))
        if self.auditor is None:
            return {"available": False, "why": "no auditor: start the retrier with --auditor-url"}
        return await self.auditor.minutes(dest.name, now_ms=_now_ms())

    # --- acting ------------------------------------------------------------------------------

    async def _replay(self, request: Request) -> Any:
        """POST {dest, filter | letter: {partition, offset}, dry_run, again}: a dry run counts,
        otherwise a replay starts and its job is answered (202)."""
        self.access.check_action(request)
        try:
            body = _request_body.decode(await request.body())
        except msgspec.ValidationError:
            raise BadInput("the body is not a JSON object") from None
        except (msgspec.DecodeError, RecursionError):
            raise BadInput("the body is not JSON") from None
        dest = self._dest(body.get("dest"))
        index = self.indexes[dest.name]
        again = body.get("again") is True
        chosen, skipped, selection = await self._read(self._chosen, index, body, again=again)
        if body.get("dry_run", True) is not False:
            return {"dry_run": True, "count": _total(chosen), "skipped_replayed": skipped}
        who = self.access.who(request)
        try:
            job = self.jobs.start(dest.name, chosen, by=who, selection=selection)
        except Busy as exc:
            raise Refused(409, str(exc)) from None
        log.warning(
            "dashboard_replay",
            dest=dest.name,
            by=who,
            letters=job.total,
            selection=msgspec.to_builtins(selection),
            replay=job.id,
        )
        return _answer(job.as_json(), status=202)

    def _chosen(
        self, index: DeadLetterIndex, body: dict[str, Any], *, again: bool
    ) -> tuple[dict[int, list[int]], int, ReplayFilter]:
        """The letters a replay request chose (partition -> offsets), how many of those it skips
        as replayed before, and the selection as the replay record keeps it."""
        letter = body.get("letter")
        if letter is not None:
            if not isinstance(letter, dict):
                raise BadInput("letter: give {partition, offset}")
            partition = int_param(text_param(letter.get("partition")), "letter.partition", low=0)
            offset = int_param(text_param(letter.get("offset")), "letter.offset", low=0)
            found = _indexed_at(index, partition, offset)
            if found is None:
                raise Refused(404, f"no dead letter at {index.topic}/{partition}/{offset}")
            replayed = found.replayed_ms is not None
            selection = ReplayFilter(again=again, letter=f"{partition}/{offset}")
            if replayed and not again:
                return {}, 1, selection
            return {partition: [offset]}, 0, selection
        raw = body.get("filter") or {}
        if not isinstance(raw, dict):
            raise BadInput("filter: give an object of reason, from, to, q, replayed")
        flt = letter_filter({key: text_param(value) for key, value in raw.items()})
        selection = ReplayFilter(
            reason=flt.reason,
            since_ms=flt.from_ms,
            until_ms=flt.to_ms,
            text=mask(flt.text) if flt.text else None,
            again=again,
        )
        if again:
            return index.coordinates(flt), 0, selection
        if flt.replayed is True:
            return {}, index.count(flt), selection
        fresh = dataclasses.replace(flt, replayed=False)
        skipped = index.count(dataclasses.replace(flt, replayed=True))
        return index.coordinates(fresh), skipped, selection

    # --- parameters --------------------------------------------------------------------------

    def _dest(self, name: object) -> Destination:
        if not isinstance(name, str) or not name:
            raise BadInput("dest: give a destination name")
        if name not in self.dests:
            raise BadInput(f"dest {mask(name)!r}: not served by this retrier")
        return self.dests[name]

    def _index(self, name: object) -> DeadLetterIndex:
        return self.indexes[self._dest(name).name]


def _json(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A JSON endpoint: bad input is a 400, a refusal its status, each with one line."""

    async def endpoint(request: Request) -> Response:
        try:
            answer = await handler(request)
        except BadInput as exc:
            return _error(400, str(exc))
        except ConfigError as exc:
            return _error(400, str(exc))
        except Refused as exc:
            return _error(exc.status, exc.reason)
        if isinstance(answer, Response):
            answer.headers.update(_SECURITY_HEADERS)
            return answer
        return _answer(answer)

    return endpoint


def _answer(document: Any, *, status: int = 200) -> Response:
    return json_answer(document, status=status, headers=_SECURITY_HEADERS)


def _error(status: int, reason: str) -> Response:
    return _answer({"error": mask(reason)}, status=status)


def _dlq_summary(index: DeadLetterIndex, now_ms: int, *, quote_errors: bool) -> dict[str, Any]:
    """The DLQ panel of one destination: size (waiting and replayed), indexing progress,
    reasons (of the letters waiting), growth, failures."""
    groups = index.failure_groups(now_ms - _FAILURE_WINDOW_MS)
    return {
        "size": len(index),
        "waiting": index.count(_WAITING),
        "replayed": index.count(_REPLAYED),
        "ready": index.ready.is_set(),
        "indexed": len(index),
        "expected": index.expected,
        "by_reason": {r: n for r, n in index.counts_by_reason(_WAITING).items() if n},
        "growth": index.growth(now_ms, bucket_s=_GROWTH_BUCKET_S, buckets=_GROWTH_BUCKETS),
        "growth_bucket_s": _GROWTH_BUCKET_S,
        "failure_groups": [
            {"status": status, "error": error if quote_errors else _WITHHELD, "count": count}
            for status, error, count in groups[:_FAILURE_GROUPS_SHOWN]
        ],
    }


def _indexed_at(index: DeadLetterIndex, partition: int, offset: int) -> LetterRow | None:
    """The index's row of the letter at `partition`/`offset` of NAME.dlq, if it holds one."""
    rows = index.find(f"{index.topic}/{partition}/{offset}")
    return next((r for r in rows if (r.partition, r.offset) == (partition, offset)), None)


def _total(chosen: Mapping[int, list[int]]) -> int:
    return sum(len(offsets) for offsets in chosen.values())


def _row(row: LetterRow) -> dict[str, Any]:
    return {
        "partition": row.partition,
        "offset": row.offset,
        "dead_ms": row.dead_ms,
        "dead_at": _iso(row.dead_ms),
        "reason": row.reason,
        "status": row.status,
        "error": row.error,
        "event_id": row.event_id,
        "origin": row.origin,
        "replayed_ms": row.replayed_ms,
        "replayed_by": row.replayed_by,
        "excerpt": row.excerpt,
    }


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


def _now_ms() -> int:
    return int(time.time() * 1000)
