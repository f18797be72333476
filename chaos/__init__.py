"""Fault-injection runs of real processes that account for every event id: `make chaos`."""
