"""The global retrier: delay tiers between NAME.retry_in and NAME.retry_out, expiry to NAME.dlq."""

from retrier.daemon import GROUP_ID, Retrier

__all__ = ["GROUP_ID", "Retrier"]
