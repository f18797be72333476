"""Real local services for development, tests, the demo and benchmarks.

Kafka (Tansu), Redis and a scriptable HTTP destination.
"""
