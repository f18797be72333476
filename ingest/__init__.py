"""The ingest service (node A): events over HTTP, answered only once Kafka holds them.

- `cli`: the `ingest` command; `service`: the daemon (HTTP and ops ports, producer, drain);
- `app`: the ASGI front (routing, auth, admission); `batch`, `streaming`: the two endpoints;
- `bodies`: a body read, gunzipped and split within the limits; `events`: one event checked;
- `acks`: events produced and acknowledged; `answers`: the responses; `idempotency`: keys in Redis;
- `auth`, `admission`, `metrics`, `shared`: tokens, in-flight bounds, Prometheus, the parts shared.
"""
