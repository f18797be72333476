"""The names of the environment variables hifi's commands show in `--help` and its runtime reads, each defined once.

Light on purpose: a command's `--help` imports this module, and the module that reads a variable
imports its name from here (`config.streams`, `hifi.lookup_cache.redis_hash`).
"""

from __future__ import annotations

#: the ingest streams' directory (`config.streams`; `ingest --streams`)
STREAMS_ENV_VAR = "HIFI_STREAMS_DIR"
#: where Redis is (`hifi.lookup_cache.redis_hash.RedisSettings.from_env`)
REDIS_URL_ENV_VAR = "HIFI_REDIS_URL"
#: a running auditor's ops address, for the retrier's dashboard (`retrier --auditor-url`)
AUDITOR_URL_ENV = "HIFI_AUDITOR_URL"
#: a daemon's static group membership (`--instance-id`; never read by `KafkaSettings.from_env`)
INSTANCE_ID_ENV = "HIFI_INSTANCE_ID"
#: the daemons' event loop, `uvloop` (the default where it is installed) or `asyncio`
#: (`hifi.event_loop`)
EVENT_LOOP_ENV = "HIFI_EVENT_LOOP"
#: glibc's malloc arenas; a daemon keeps two unless this is set (`hifi.allocators`)
MALLOC_ARENAS_ENV = "MALLOC_ARENA_MAX"
#: Arrow's allocator; a daemon has Arrow use the C library's (`system`) unless this is set
#: (`hifi.allocators`)
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
