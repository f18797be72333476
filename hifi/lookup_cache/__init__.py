"""The lookup cache: a destination's entries read from memory, reloaded ahead from their source (Redis).

- `refresh_ahead`: the cache (`RefreshAheadCache`): reads, loads, what operators see;
- `source`: where its entries live (`Source`) and how it refreshes them (`CacheSettings`);
- `entries`: what it holds, expired by load time;
- `snapshot`: the last good entries of a full load, in a local file;
- `refusals`, `background`: values the decoder refused, and failures of its background loops;
- `source_health`: whether the source is failing, logged when it starts and when it recovers;
- `metrics`: its Prometheus metrics;
- `redis_hash`: the Redis boundary, one hash read and written.
"""
