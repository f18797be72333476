"""`make bench`: ceiling, throughput, lag and scale rating of the connector on one machine."""
