"""A Schema Registry stand-in: the Confluent REST API calls that serializers and deserializers make,
in memory, on loopback, for the tests and the demo (no registry server installs from the package
registries here).

Schemas get ids from 1 in the order first registered (an identical schema keeps its id, under any
subject); each subject keeps its versions. `down` answers every call 503, as a registry in an
outage would (`down_after`: once that many calls were answered). Errors are the registry's own
shape: `{"error_code": 40403, "message": ...}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
SCHEMA_NOT_FOUND = 40403
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402


@dataclass(frozen=True)
class Registered:
    schema: str
    schema_type: str  # AVRO, JSON or PROTOBUF
    references: tuple[Any, ...] = ()

    def body(self) -> dict[str, Any]:
        found: dict[str, Any] = {"schema": self.schema}
        if self.schema_type != "AVRO":  # the registry leaves out the default type
            found["schemaType"] = self.schema_type
        if self.references:
            found["references"] = list(self.references)
        return found


@dataclass
class SchemaRegistry:
    """The registry's state and its routes; `url` once running (`serving`)."""

    schemas: list[Registered] = field(default_factory=list)  # id i is schemas[i - 1]
    subjects: dict[str, list[int]] = field(default_factory=dict)  # versions, in order
    down: bool = False
    down_after: int | None = None  # calls answered before it goes down (an outage mid-poll)
    calls: list[str] = field(default_factory=list)  # "METHOD path", each call
    url: str = ""

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """The id of `schema` under `subject`, registered if new (as the REST call does)."""
        registered = Registered(schema, schema_type)
        if registered in self.schemas:
            schema_id = self.schemas.index(registered) + 1
        else:
            self.schemas.append(registered)
            schema_id = len(self.schemas)
        versions = self.subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/schemas/ids/{schema_id:int}", self._by_id, methods=["GET"]),
                Route("/subjects", self._subjects, methods=["GET"]),
                Route("/subjects/{subject}/versions", self._register, methods=["POST"]),
                Route("/subjects/{subject}/versions", self._versions, methods=["GET"]),
                Route("/subjects/{subject}/versions/{version}", self._version, methods=["GET"]),
                Route("/subjects/{subject}", self._lookup, methods=["POST"]),
            ]
        )

    def _outage(self, request: Request) -> Response | None:
        self.calls.append(f"{request.method} {request.url.path}")
        if self.down_after is not None and len(self.calls) > self.down_after:
            self.down = True
        if self.down:
            return _error(503, 50003, "the registry is down (devstack)")
        return None

    async def _by_id(self, request: Request) -> Response:
        if (outage := self._outage(request)) is not None:
            return outage
        schema_id = request.path_params["schema_id"]
        if not 0 < schema_id <= len(self.schemas):
            return _error(404, SCHEMA_NOT_FOUND, "Schema not found")
        return _json(self.schemas[schema_id - 1].body())

    async def _subjects(self, request: Request) -> Response:
        return self._outage(request) or _json(sorted(self.subjects))

    async def _register(self, request: Request) -> Response:
        if (outage := self._outage(request)) is not None:
            return outage
        body = orjson.loads(await request.body())
        schema_id = self.register(
            request.path_params["subject"], body["schema"], body.get("schemaType", "AVRO")
        )
        return _json({"id": schema_id})

    async def _versions(self, request: Request) -> Response:
        if (outage := self._outage(request)) is not None:
            return outage
        versions = self.subjects.get(request.path_params["subject"])
        if versions is None:
            return _error(404, SUBJECT_NOT_FOUND, "Subject not found")
        return _json(list(range(1, len(versions) + 1)))

    async def _version(self, request: Request) -> Response:
        if (outage := self._outage(request)) is not None:
            return outage
        subject = request.path_params["subject"]
        versions = self.subjects.get(subject)
        if versions is None:
            return _error(404, SUBJECT_NOT_FOUND, "Subject not found")
        wanted = request.path_params["version"]
        number = len(versions) if wanted == "latest" else int(wanted)
        if not 0 < number <= len(versions):
            return _error(404, VERSION_NOT_FOUND, "Version not found")
        return self._subject_version(subject, number)

    async def _lookup(self, request: Request) -> Response:
        if (outage := self._outage(request)) is not None:
            return outage
        subject = request.path_params["subject"]
        body = orjson.loads(await request.body())
        wanted = Registered(body["schema"], body.get("schemaType", "AVRO"))
        versions = self.subjects.get(subject, [])
        for number, schema_id in enumerate(versions, start=1):
            if self.schemas[schema_id - 1] == wanted:
                return self._subject_version(subject, number)
        return _error(404, SCHEMA_NOT_FOUND, "Schema not found")

    def _subject_version(self, subject: str, number: int) -> Response:
        schema_id = self.subjects[subject][number - 1]
        found = self.schemas[schema_id - 1].body()
        return _json({"subject": subject, "version": number, "id": schema_id, **found})


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=CONTENT_TYPE)


def _error(status: int, code: int, message: str) -> Response:
    return _json({"error_code": code, "message": message}, status)


@contextlib.asynccontextmanager
async def serving(registry: SchemaRegistry | None = None) -> AsyncIterator[SchemaRegistry]:
    """`registry` (a new one by default) served on a loopback port of its own until the block ends."""
    registry = registry or SchemaRegistry()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(registry.app(), log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it
            await asyncio.sleep(0.01)
        registry.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        yield registry
    finally:
        server.should_exit = True
        await task
        sock.close()
