"""The global retrier: delay tiers between NAME.retry_in and NAME.retry_out, expiry to NAME.dlq."""
