"""The lookup cache: a destination's entries read from memory, reloaded ahead from their source (Redis).

- `refresh_ahead`: the cache (`RefreshAheadCache`), its settings and its source's protocol;
- `entries`: what it holds, expired by load time;
- `snapshot`: the last good entries of a full load, in a local file;
- `source_health`: whether the source is failing, logged when it starts and when it recovers;
- `metrics`: its Prometheus metrics;
- `redis_hash`: the Redis boundary, one hash read and written.
"""
