"""The operators' HTTP endpoint of a daemon: Prometheus `/metrics`, `/healthz`, `/readyz` and extra JSON routes."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import prometheus_client
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from hifi.errors import ConfigError
from hifi.version import VERSION

JsonProvider = Callable[[Request], Awaitable[Any]]


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to the daemon that embeds it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


DEFAULT_HOST = "127.0.0.1"  # reachable from outside only when asked (--metrics-host)

BUILD_INFO = prometheus_client.Gauge(
    "hifi_build_info",
    "Always 1: the hifi version and the component running.",
    ["version", "component"],
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
        self.ready = False
        self._registry = registry
        routes = [
            Route("/metrics", self._metrics),
            Route("/healthz", self._healthz),
            Route("/readyz", self._readyz),
        ]
        self._app = Starlette(routes=routes)

    @classmethod
    def on_port(cls, port: int | None, *, host: str, component: str) -> OpsServer | None:
        """The ops server of a daemon, or None when it serves none (`port` None: in tests)."""
        return None if port is None else cls(port=port, host=host, component=component)

    def mount(self, routes: list[BaseRoute]) -> None:
        """Serve `routes` too (a dashboard's page and API); may be called while serving."""
        self._app.router.routes.extend(routes)

    def serve_json(self, path: str, provider: JsonProvider) -> None:
        """Answer GET `path` with the JSON `provider` returns; may be called while serving."""
        self._app.router.routes.append(Route(path, _json_endpoint(provider)))

    async def _metrics(self, request: Request) -> Response:
        return Response(
            prometheus_client.generate_latest(self._registry),
            media_type=prometheus_client.CONTENT_TYPE_LATEST,
        )

    async def _healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def _readyz(self, request: Request) -> Response:
        if self.ready:
            return PlainTextResponse("ready\n")
        return PlainTextResponse("not ready\n", status_code=503)

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
        server = _QuietServer(config)
        task = asyncio.create_task(server.serve(sockets=[sock]), name="ops-http")
        try:
            yield self
        finally:
            server.should_exit = True
            await task
            sock.close()


def _json_endpoint(provider: JsonProvider) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return JSONResponse(await provider(request))

    return endpoint
