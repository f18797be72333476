"""The defaults the command lines repeat (so `--help` needs none of hifi's runtime) equal their sources."""

from __future__ import annotations

import auditor.cli
import auditor.daemon
import connector.backfill
import connector.cli
import connector.pacing
import hifi.accounting.client
import hifi.cli_options
import hifi.logging
import hifi.ops_http
import retrier.cli
import spark_batch.cli
import spark_batch.session


def test_repeated_defaults_equal_the_modules_that_own_them() -> None:
    """Each value a CLI module states for its flags is the one the runtime module uses."""
    pairs = [
        (hifi.cli_options.LOG_LEVELS, hifi.logging.LOG_LEVELS),
        (hifi.cli_options.METRICS_HOST, hifi.ops_http.DEFAULT_HOST),
        (connector.cli.MAX_RATE_PER_S, connector.pacing.MAX_RATE_PER_S),
        (connector.cli.CHECKPOINT_EVERY_S, connector.backfill.CHECKPOINT_EVERY_S),
        (retrier.cli.AUDITOR_URL_ENV, hifi.accounting.client.AUDITOR_URL_ENV),
        (auditor.cli.GROUP_ID, auditor.daemon.GROUP_ID),
        (auditor.cli.DEFAULT_ROLL_S, auditor.daemon.DEFAULT_ROLL_S),
        (spark_batch.cli.DEFAULT_MASTER, spark_batch.session.DEFAULT_MASTER),
    ]
    for stated, owned in pairs:
        assert stated == owned
