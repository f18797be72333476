"""The ingest daemon: its HTTP port, its ops port, one Kafka producer and Redis, and the drain on SIGTERM.

Shutting down goes in three steps, as every hifi daemon: intake stops (the listening socket
closes, `/readyz` turns 503, a request that still arrives is refused with 503), the requests
in flight finish within `drain_timeout_s` (their events acknowledged and answered, a stream
told to go elsewhere), then what is left is cancelled and the producer flushed and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Mapping
from dataclasses import dataclass

import structlog
import uvicorn

from config.streams import Stream
from hifi import audit
from hifi.audit.accepted import AcceptedTrail
from hifi.errors import ConfigError, HifiError
from hifi.kafka import admin as kafka_admin
from hifi.kafka.producing import Producer, open_producer
from hifi.kafka.reach import KafkaReach
from hifi.kafka.settings import KafkaSettings
from hifi.lookup_cache.redis_hash import RedisSettings
from hifi.ops_http import DEFAULT_HOST, OpsServer, QuietServer
from hifi.redis_keys import connected_keys
from ingest.accepted import Accepted
from ingest.acks import Acks
from ingest.admission import Admission
from ingest.app import IngestApp
from ingest.idempotency import KEY_PREFIX, Idempotency
from ingest.shared import Shared

log = structlog.get_logger(__name__)

DEFAULT_PORT = 8080
DEFAULT_METRICS_PORT = 9403
_BACKLOG = 2048  # as uvicorn's default
_AUDIT_PARTITIONS = 4  # the audit topic's, when ingest is the first to create it (as the auditor)


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """How one ingest process serves: where, how much at once, how long it waits."""

    host: str = "0.0.0.0"  # noqa: S104 - the service's port is meant to be reached
    port: int = DEFAULT_PORT
    metrics_host: str = DEFAULT_HOST
    metrics_port: int | None = DEFAULT_METRICS_PORT  # None: no ops server (tests)
    max_in_flight: int = 1024  # requests read, produced or answered at once
    max_in_flight_bytes: int = 256 * 1024 * 1024  # the body bytes they may hold
    ack_timeout_s: float = 10.0  # a request gets its 503 by then when Kafka does not acknowledge
    drain_timeout_s: float = 30.0  # SIGTERM: in-flight requests finish within this
    keep_alive_s: float = 30.0  # an idle connection is closed after this
    body_timeout_s: float = 30.0  # a request's body must have arrived by then, else 408


class IngestService:
    """Serves the streams until `request_stop`, then drains."""

    def __init__(
        self,
        streams: Mapping[str, Stream],
        kafka_settings: KafkaSettings,
        settings: ServiceSettings,
        *,
        redis: RedisSettings | None = None,
        audit_topic: str | None = None,
    ) -> None:
        self.streams = streams
        #: where the accepted facts go (`HIFI_AUDIT_TOPIC` by default); None: no stream audits
        self.audit_topic = (
            (audit_topic or audit.audit_topic())
            if any(stream.audit for stream in streams.values())
            else None
        )
        self.settings = settings
        self.port = settings.port  #: the port served, once `running` (port 0 picks one)
        self._kafka = kafka_settings
        self._redis = redis
        self._stop = asyncio.Event()
        self.started = asyncio.Event()
        self.ops = OpsServer.on_port(
            settings.metrics_port, host=settings.metrics_host, component="ingest"
        )
        self.reach = KafkaReach(
            "ingest", ops=self.ops
        )  # Kafka answering its start; unready meanwhile

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Serve until asked to stop, then drain and return. A Kafka that does not answer at
        start is waited for (`KafkaReach`), unready; once serving, a write it does not
        acknowledge in time is answered 503 with `Retry-After`."""
        await self.reach.run_daemon(self.ops, self._session, stop=self._stop)

    async def _session(self) -> None:
        settings = self.settings
        async with contextlib.AsyncExitStack() as stack:
            producer = await stack.enter_async_context(
                open_producer(self._kafka, request_timeout_ms=round(settings.ack_timeout_s * 1000))
            )
            trail = await self._accepted_trail(producer)
            await self._say_missing_topics()
            idempotency = None
            if self._redis is not None:
                keys = await stack.enter_async_context(connected_keys(self._redis, KEY_PREFIX))
                idempotency = Idempotency(keys)
            admission = Admission(
                max_requests=settings.max_in_flight, max_bytes=settings.max_in_flight_bytes
            )
            shared = Shared(
                self.streams,
                Acks(producer, ack_timeout_s=settings.ack_timeout_s),
                Accepted(trail, ack_timeout_s=settings.ack_timeout_s),
                admission,
                idempotency,
                body_timeout_s=settings.body_timeout_s,
            )
            await self._serve(IngestApp(shared), admission)

    async def _serve(self, app: IngestApp, admission: Admission) -> None:
        settings = self.settings
        sock = _listen(settings.host, settings.port)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            http="httptools",
            interface="asgi3",
            lifespan="off",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            timeout_keep_alive=round(settings.keep_alive_s),
            timeout_graceful_shutdown=round(settings.drain_timeout_s),
        )
        server = QuietServer(config)
        serving = asyncio.create_task(server.serve(sockets=[sock]), name="ingest-http")
        stopping = asyncio.create_task(self._stop.wait(), name="ingest-stop")
        try:
            self._ready(True)  # the socket listens already: connections wait in its backlog
            log.info("ingest_serving", port=self.port, streams=sorted(self.streams))
            await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._ready(False)
            admission.drain.set()
            log.info("ingest_draining", in_flight=admission.requests)
            server.should_exit = True
            stopping.cancel()
            await asyncio.gather(stopping, return_exceptions=True)
            await serving
            sock.close()
            log.info("ingest_stopped")

    async def _accepted_trail(self, producer: Producer) -> AcceptedTrail | None:
        """The accepted trail on the service's producer, its topic created when missing (an
        existing one keeps its configuration); None when every stream has `audit = false`."""
        if self.audit_topic is None:
            return None
        await kafka_admin.ensure_topics(
            self._kafka,
            [self.audit_topic],
            partitions=_AUDIT_PARTITIONS,
            retention_ms=audit.AUDIT_RETENTION_MS,
        )
        log.info("accepted_trail", topic=self.audit_topic)
        return AcceptedTrail(producer, topic=self.audit_topic, node=audit.node_name("ingest"))

    async def _say_missing_topics(self) -> None:
        """Warn about streams whose topic does not exist: their requests are answered 503
        until it does (hifi creates no source topic)."""
        try:
            existing = await kafka_admin.list_topics(self._kafka)
        except HifiError as exc:
            log.warning("stream_topics_not_listed", error=str(exc))
            return
        missing = sorted({stream.topic for stream in self.streams.values()} - existing)
        if missing:
            log.warning(
                "stream_topics_missing",
                topics=missing,
                effect="requests to their streams are answered 503 until the topics exist",
            )

    def _ready(self, ready: bool) -> None:
        if self.ops is not None:
            self.ops.ready = ready
        if ready:
            self.started.set()


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket for the service; `ConfigError` naming the flag when it cannot bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so, and without it
    # a response's header and body segments wait for the client's delayed ACK (40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"--host/--port {host}:{port}: cannot listen: {exc.strerror}") from None
    sock.listen(_BACKLOG)
    return sock
