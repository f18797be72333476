"""The defaults every daemon's `--help` shows and its runtime uses, each defined once.

Light on purpose: `hifi.cli_options` imports it for the flags, and the runtime modules
(`hifi.logging`, `hifi.ops_http`) take their values from here. Environment variable names
live beside it in `hifi.environment`.
"""

from __future__ import annotations

#: the levels `--log-level` takes, as `hifi.logging` configures them
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: where a daemon's ops port listens unless `--metrics-host` says otherwise: reachable from
#: outside only when asked
METRICS_HOST = "127.0.0.1"
#: how the connector names itself to destinations and token endpoints (`User-Agent`)
USER_AGENT = "hifi-connector"
