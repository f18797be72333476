"""`python -m bench.dlq_index`: the dead-letter index with a million letters, its query times and its peak RSS.

No broker: letters are built in memory as the connector and the retrier write them (1 KB JSON
bodies, `hifi-*` headers with a failure history, five reasons in realistic shares, four
partitions, a week of dead-letter times), in chunks that are indexed and dropped, so the peak
RSS (VmHWM) is the index's and the interpreter's, not the synthetic records'. A destination
token is registered for masking, as the catalog does for an `Authorization` header, so the
texts are masked as they would be in the retrier.

Each query is timed as the dashboard would run it, cold: the first page unfiltered, the first
page by reason, `count()` by reason and time, `count()` and the first page by text (a fresh text
each time: the scan of the spill file, which the page cache holds), and `find()` by event id.
Each figure is the median of a few runs; the machine's other load counts in them. One letter in
a thousand echoes the token in a header: the run fails if a text query can find it. The last
line is the summary:

    bench-dlq-index: letters=N list_ms=L count_ms=C text_count_ms=T find_ms=F rss_mb=R
"""

from __future__ import annotations

import os
import random
import resource
import statistics
import string
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import click
import orjson
from aiokafka.structs import ConsumerRecord

from bench.measure import read_peak_rss_kb
from hifi import redaction
from hifi.vocabulary import Reason
from retrier.dlq.index import DeadLetterIndex, LetterFilter

TOPIC = "bench.dlq"
PARTITIONS = 4
CHUNK_LETTERS = 1_000
BODY_BYTES = 1024
WEEK_MS = 7 * 86_400_000
RUNS = 5
# made up, registered as an Authorization header of the catalog would be
TOKEN = "Zq8Xv2Lp0Rt6Ws4Yn1Mk3Jh5Gf7Dd9SaQ3eWu7"  # noqa: S105
_REASONS = [
    (Reason.HTTP_4XX, 60),
    (Reason.EXPIRED, 30),
    (Reason.MALFORMED, 5),
    (Reason.TOO_LARGE, 3),
    (Reason.REDIRECT, 2),
]
_ERRORS = {
    Reason.HTTP_4XX: (400, "HTTP 400 Bad Request: field 'amount' of event {id} must be positive"),
    Reason.EXPIRED: (503, "HTTP 503 Service Unavailable: upstream busy, retry later"),
    Reason.MALFORMED: (None, "value is not JSON: unexpected character at byte {n}"),
    Reason.TOO_LARGE: (None, "record is {n} bytes, over max_batch_bytes=1048576"),
    Reason.REDIRECT: (301, "HTTP 301 redirect to https://new.example/v2; set follow_redirects"),
}


def event_id(i: int) -> str:
    return f"evt-{i:09d}"


def letters(count: int, *, now_ms: int, seed: int = 7) -> Iterator[list[ConsumerRecord]]:
    """`count` dead letters in chunks, oldest first, spread over the week before `now_ms`."""
    rnd = random.Random(seed)
    words = ["".join(rnd.choices(string.ascii_lowercase, k=rnd.randint(3, 10))) for _ in range(500)]
    reasons = rnd.choices(
        [reason for reason, _ in _REASONS], [share for _, share in _REASONS], k=1024
    )
    offsets = [0] * PARTITIONS
    for start in range(0, count, CHUNK_LETTERS):
        chunk = []
        for i in range(start, min(count, start + CHUNK_LETTERS)):
            partition = i % PARTITIONS
            dead_ms = now_ms - WEEK_MS + WEEK_MS * i // count
            reason = reasons[i % len(reasons)]
            chunk.append(_letter(i, partition, offsets[partition], dead_ms, reason, rnd, words))
            offsets[partition] += 1
        yield chunk


def _letter(
    i: int,
    partition: int,
    offset: int,
    dead_ms: int,
    reason: Reason,
    rnd: random.Random,
    words: list[str],
) -> ConsumerRecord:
    ident = event_id(i)
    status, error = _ERRORS[reason]
    error = error.format(id=ident, n=rnd.randint(10, 99999))
    body = orjson.dumps(
        {
            "id": ident,
            "event_time": dead_ms - 60_000,
            "customer": {"id": rnd.randint(1, 10**6), "name": " ".join(rnd.choices(words, k=2))},
            "items": [
                {
                    "sku": rnd.choice(words),
                    "qty": rnd.randint(1, 9),
                    "note": " ".join(rnd.choices(words, k=6)),
                }
                for _ in range(14)
            ],
        }
    )[:BODY_BYTES]
    history = [
        {"at_ms": dead_ms - 1000 * k, "attempt": k, "error": error, "status": status}
        for k in range(3)
    ]
    headers = [
        ("trace", f"tr-{i:x}".encode()),
        ("Authorization-Echo", f"Bearer {TOKEN}".encode()) if i % 1000 == 0 else ("x", b"y"),
        ("hifi-reason", reason.encode()),
        ("hifi-dest", b"bench"),
        ("hifi-attempt", b"3"),
        ("hifi-first-failure-ms", str(dead_ms - 3000).encode()),
        ("hifi-handoff-ms", str(dead_ms).encode()),
        ("hifi-error", error.encode()),
        ("hifi-origin", f"bench.src/{partition}/{offset * 7}".encode()),
        ("hifi-history", orjson.dumps(history)),
        ("hifi-event-time-ms", str(dead_ms - 60_000).encode()),
        ("hifi-event-id", ident.encode()),
    ]
    if status is not None:
        headers.append(("hifi-status", str(status).encode()))
    return ConsumerRecord(
        TOPIC, partition, offset, dead_ms, 0, ident.encode(), body, None, 0, len(body), headers
    )


def timed_ms(query: Callable[[], object]) -> float:
    start = time.perf_counter()
    query()
    return (time.perf_counter() - start) * 1000


def median_ms(queries: list[Callable[[], object]]) -> float:
    return statistics.median(timed_ms(query) for query in queries)


def measure(index: DeadLetterIndex, count: int, now_ms: int) -> dict[str, float]:
    """Cold query times (ms), each a median of `RUNS`; fresh texts, so no run finds a cached scan."""
    rnd = random.Random(11)
    day_ago = now_ms - 86_400_000
    reasons = [reason.value for reason, _ in _REASONS]
    ids = [event_id(rnd.randrange(count)) for _ in range(RUNS * 3)]
    commons = ["amount", "busy", "qty", "redirect", "history"]
    page, counted, find = index.page, index.count, index.find
    return {
        "list_ms": median_ms([partial(page, LetterFilter(), limit=50)] * RUNS),
        "reason_list_ms": median_ms(
            [partial(page, LetterFilter(reason=r), limit=50) for r in reasons]
        ),
        "count_ms": median_ms(
            [partial(counted, LetterFilter(reason=r, from_ms=day_ago)) for r in reasons]
        ),
        "text_count_ms": median_ms([partial(counted, LetterFilter(text=t)) for t in ids[:RUNS]]),
        "common_text_count_ms": median_ms(
            [partial(counted, LetterFilter(text=t)) for t in commons]
        ),
        "text_list_ms": median_ms(
            [partial(page, LetterFilter(text=t), limit=50) for t in ids[RUNS : 2 * RUNS]]
        ),
        "find_ms": median_ms([partial(find, t) for t in ids[2 * RUNS :]]),
    }


def rss_mb() -> float:
    peak_kb = read_peak_rss_kb(os.getpid())
    if peak_kb is None:  # no /proc: getrusage says the same in kB on Linux
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak_kb / 1024


@click.command()
@click.option(
    "--letters", "count", type=click.IntRange(min=1), default=1_000_000, show_default=True
)
@click.option("--spill-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
def main(count: int, spill_dir: Path | None) -> None:
    """Index COUNT synthetic dead letters, time the dashboard's queries, report the peak RSS."""
    redaction.register(redaction.header_secrets(f"Bearer {TOKEN}"))
    now_ms = int(time.time() * 1000)
    baseline_mb = rss_mb()
    with DeadLetterIndex(TOPIC, spill_dir=spill_dir) as index:
        start = time.perf_counter()
        for chunk in letters(count, now_ms=now_ms):
            index.add(chunk)
        index_s = time.perf_counter() - start
        assert len(index) == count, (len(index), count)
        figures = measure(index, count, now_ms)
        peak_mb = rss_mb()
        leaked = index.count(LetterFilter(text=TOKEN[:8]))
        if leaked:
            raise click.ClickException(f"the token is searchable in {leaked} letters: not masked")
        click.echo(
            f"indexed {count} letters in {index_s:.1f} s ({count / index_s:,.0f}/s);"
            f" index {index.size_bytes / 2**20:.0f} MiB in memory,"
            f" {index.spill_bytes / 2**20:.0f} MiB spilled; baseline rss {baseline_mb:.0f} MB"
        )
        click.echo(" ".join(f"{name}={value:.1f}" for name, value in figures.items()))
        click.echo(
            f"bench-dlq-index: letters={count} list_ms={figures['list_ms']:.0f}"
            f" count_ms={figures['count_ms']:.0f} text_count_ms={figures['text_count_ms']:.0f}"
            f" find_ms={figures['find_ms']:.0f} rss_mb={peak_mb:.0f}"
        )


if __name__ == "__main__":
    main()
