"""Shared plumbing for every hifi component: errors, Kafka clients, the message envelope, metrics and logging."""
