"""The ops server: while a daemon starts, a page it has not mounted yet is "try again", not
"not found" (pollers of `/status` and the dashboard's API start before the daemon has connected)."""

from __future__ import annotations

import httpx
import prometheus_client
from starlette.requests import Request

from hifi.ops_http import OpsServer, json_answer


async def test_unmounted_pages_are_starting_until_the_daemon_is_ready_then_not_found() -> None:
    ops = OpsServer(port=0, component="test", registry=prometheus_client.CollectorRegistry())
    async with ops.running(), httpx.AsyncClient(base_url=f"http://127.0.0.1:{ops.port}") as http:
        early = await http.get("/status")
        assert (early.status_code, early.headers["retry-after"]) == (503, "1")
        assert early.json() == {"error": "starting: not serving this page yet"}
        assert (await http.get("/healthz")).status_code == 200

        async def status(request: Request) -> dict[str, str]:
            return {"state": "running"}

        ops.serve_json("/status", status)
        ops.ready = True
        assert (await http.get("/status")).json() == {"state": "running"}
        missing = await http.get("/nowhere")
        assert (missing.status_code, missing.json()) == (404, {"error": "no such page: /nowhere"})
        ops.ready = False  # draining: a page that does not exist is still not found
        assert (await http.get("/nowhere")).status_code == 404


def test_a_json_answer_writes_what_the_pages_hold() -> None:
    """Integer keys (partitions), tuples and None, as `/status` and `/tables` hold them."""
    answer = json_answer({"shares": {0: (1, 2)}, "lag": None}, status=503, headers={"X-A": "1"})
    assert answer.body == b'{"shares":{"0":[1,2]},"lag":null}'
    assert (answer.status_code, answer.headers["x-a"]) == (503, "1")
    assert answer.media_type == "application/json"
