"""The operators' HTTP endpoint of a daemon: Prometheus `/metrics`, `/healthz`, `/readyz` and extra JSON routes."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import prometheus_client
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from hifi.defaults import METRICS_HOST
from hifi.errors import ConfigError
from hifi.redaction import mask
from hifi.version import VERSION

JsonProvider = Callable[[Request], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether a part of a daemon lets it serve, and what an operator should know about it."""

    ready: bool
    detail: str


def _tasks() -> float:
    """The event loop's tasks not done; NaN when read outside it (`/metrics` reads it inside)."""
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:
        return float("nan")


class QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to the daemon that embeds it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


DEFAULT_HOST = METRICS_HOST  # reachable from outside only when asked (--metrics-host)

BUILD_INFO = prometheus_client.Gauge(
    "hifi_build_info",
    "Always 1: the hifi version and the component running.",
    ["version", "component"],
)
TASKS = prometheus_client.Gauge(
    "hifi_asyncio_tasks",
    "asyncio tasks not yet done in the daemon's event loop (flat in a daemon that leaks none).",
    ["component"],
)
READY = prometheus_client.Gauge(
    "hifi_ready",
    "1 while the daemon is ready (/readyz answers 200), else 0.",
    ["component"],
)


class OpsServer:
    """Serves health, readiness and metrics next to a daemon's work, in the same event loop."""

    def __init__(
        self,
        *,
        port: int,
        component: str,
        host: str = DEFAULT_HOST,
        registry: prometheus_client.CollectorRegistry = prometheus_client.REGISTRY,
    ) -> None:
        BUILD_INFO.labels(VERSION, component).set(1)
        self.host = host
        self.port = port
        self._ready = False
        #: whether the daemon has been ready once: until then its own routes (`/status`, a
        #: dashboard) may not be mounted yet, and a path not found is answered "starting" (503)
        self._started = False
        self._checks: list[Callable[[], Readiness]] = []
        self._registry = registry
        routes = [
            Route("/metrics", self._metrics),
            Route("/healthz", self._healthz),
            Route("/readyz", self._readyz),
        ]
        self._app = Starlette(routes=routes, exception_handlers={404: self._not_found})
        READY.labels(component).set_function(lambda: float(self.is_ready()))
        TASKS.labels(component).set_function(_tasks)

    @property
    def ready(self) -> bool:
        """The daemon's own readiness (a consumer: set once it has its partitions)."""
        return self._ready

    @ready.setter
    def ready(self, value: bool) -> None:
        self._ready = value
        self._started = self._started or value

    @classmethod
    def on_port(cls, port: int | None, *, host: str, component: str) -> OpsServer | None:
        """The ops server of a daemon, or None when it serves none (`port` None: in tests)."""
        return None if port is None else cls(port=port, host=host, component=component)

    def require(self, check: Callable[[], Readiness]) -> None:
        """Be ready only while `check` says so too (e.g. a cache that must be loaded first);
        `/readyz` shows its detail either way."""
        self._checks.append(check)

    def is_ready(self) -> bool:
        """The daemon is ready and so is everything it `require`s."""
        return self.ready and all(check().ready for check in self._checks)

    def mount(self, routes: list[BaseRoute]) -> None:
        """Serve `routes` too (a dashboard's page and API); may be called while serving. A
        path served already is served by the new route (a daemon's session started again)."""
        paths = {getattr(route, "path", None) for route in routes} - {None}
        kept = [r for r in self._app.router.routes if getattr(r, "path", None) not in paths]
        self._app.router.routes[:] = [*kept, *routes]

    def serve_json(self, path: str, provider: JsonProvider) -> None:
        """Answer GET `path` with the JSON `provider` returns; may be called while serving."""
        self.mount([Route(path, _json_endpoint(provider))])

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        """404, or while the daemon starts a 503 to try again: the path may be one it mounts
        once it has connected (a poller of `/status` must not take "not found" for an answer)."""
        if self._started:
            return json_answer({"error": f"no such page: {request.url.path}"}, status=404)
        return json_answer(
            {"error": "starting: not serving this page yet"},
            status=503,
            headers={"Retry-After": "1"},
        )

    async def _metrics(self, request: Request) -> Response:
        return Response(
            prometheus_client.generate_latest(self._registry),
            media_type=prometheus_client.CONTENT_TYPE_LATEST,
        )

    async def _healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def _readyz(self, request: Request) -> Response:
        """200 `ready` or 503 `not ready`, then a line per required part saying how it is."""
        found = [check() for check in self._checks]
        details = "".join(f"{mask(part.detail)}\n" for part in found)
        if self.ready and all(part.ready for part in found):
            return PlainTextResponse(f"ready\n{details}")
        starting = "" if self.ready else "starting: not serving its partitions yet\n"
        return PlainTextResponse(f"not ready\n{starting}{details}", status_code=503)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[OpsServer]:
        """Serve until the block exits; port 0 picks a free port (`.port` tells which)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"--metrics-host/--metrics-port {self.host}:{self.port}: cannot listen:"
                f" {exc.strerror}"
            ) from None
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        server = QuietServer(config)
        task = asyncio.create_task(server.serve(sockets=[sock]), name="ops-http")
        try:
            yield self
        finally:
            server.should_exit = True
            await task
            sock.close()


def json_answer(
    document: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """A JSON answer, written by orjson (CONTRIBUTING.md, "JSON: one rule")."""
    return Response(
        orjson.dumps(document, option=orjson.OPT_NON_STR_KEYS),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _json_endpoint(provider: JsonProvider) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return json_answer(await provider(request))

    return endpoint
