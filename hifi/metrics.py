"""What the daemons' Prometheus metrics share: the bucket sets of their histograms, so a
dashboard compares the nodes bucket by bucket.

Durations are bucketed on one scale of seconds, the lag histograms'
(`hifi.vocabulary.LAG_BUCKETS_S`: 1, 2.5 and 5 a decade from 5 ms to 30 s, then minutes to a
day); a request's time takes that scale up to 30 s, with two finer bounds below 5 ms.
"""

from __future__ import annotations

from hifi.vocabulary import LAG_BUCKETS_S

#: the buckets of a request's handling time (seconds): the connector's HTTP attempt, send to
#: response; the ingest service's request, last body byte to response
REQUEST_BUCKETS_S = (0.001, 0.0025, *(bound for bound in LAG_BUCKETS_S if bound <= 30.0))
