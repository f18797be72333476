"""The global retrier: delay tiers between NAME.retry_in and NAME.retry_out, expiry to NAME.dlq.

The daemon is `retrier.daemon.Retrier`; `retrier.cli` is its command, which loads the daemon
only to run it (`retrier --help` stays light).
"""
