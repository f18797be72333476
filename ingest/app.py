"""The ingest service's HTTP front: a plain ASGI callable that routes, authorizes, admits and answers.

Plain ASGI on uvicorn with httptools, without a framework's routing: a request costs what it
must (one path split, one token hash) and a single-event request stays cheap. Every request
is answered: a refusal with its 4xx (or 503), and anything unexpected with a 500 and a log
line (a defect to fix: the tests send bad input of every kind and never see one).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import structlog

from config.destination import NAME_RE
from hifi.errors import RequestRefused
from ingest import metrics
from ingest.answers import Answer, Send, error_body, send_answer
from ingest.batch import Request, handle_batch
from ingest.bodies import Receive
from ingest.shared import Shared
from ingest.streaming import handle_stream

log = structlog.get_logger(__name__)

PREFIX = "/v1/events/"
STREAM_SUFFIX = ":stream"
_ALLOW = ((b"allow", b"POST"),)


class IngestApp:
    """`POST /v1/events/{stream}` and `POST /v1/events/{stream}:stream`."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan is off; a websocket is refused by uvicorn
            return
        name, streaming = _route(scope["path"])
        label = name if name in self.shared.streams else metrics.UNKNOWN_STREAM
        request = Request(dict(scope), receive, send)
        try:
            answer = await self._serve(scope["method"], name, streaming, request)
        except RequestRefused as exc:
            answer = Answer.refusing(exc)
        except Exception:  # a defect: answered, logged with its traceback, never a crash
            log.exception("request_failed", stream=label)
            answer = Answer(500, error_body("internal error; the service logged it"))
        if answer is not None:
            await send_answer(send, answer)
            metrics.REQUESTS.labels(label, str(answer.status)).inc()

    async def _serve(
        self, method: str, name: str | None, streaming: bool, request: Request
    ) -> Answer | None:
        """The answer to send (None: a streamed answer, sent already)."""
        if name is None:
            raise RequestRefused(
                f"no such path; send POST {PREFIX}STREAM or {PREFIX}STREAM{STREAM_SUFFIX}",
                status=404,
            )
        if method != "POST":
            raise RequestRefused(
                f"method {method} is not allowed; use POST", status=405, headers=_ALLOW
            )
        shared = self.shared
        shared.tokens.authorize(request.header(b"authorization"), name)
        stream = shared.streams[name]
        reserve = request.content_length() or stream.max_body_bytes
        with shared.admission.admitted(min(reserve, stream.max_body_bytes)):
            if not streaming:
                return await handle_batch(shared, stream, request)
            await handle_stream(shared, stream, request)
        metrics.REQUESTS.labels(name, "200").inc()
        return None


def _route(path: str) -> tuple[str | None, bool]:
    """The stream a path names (None: not an events path) and whether it is the streamed one."""
    if not path.startswith(PREFIX):
        return None, False
    name = path[len(PREFIX) :]
    streaming = name.endswith(STREAM_SUFFIX)
    if streaming:
        name = name[: -len(STREAM_SUFFIX)]
    return (name, streaming) if NAME_RE.match(name) else (None, False)
