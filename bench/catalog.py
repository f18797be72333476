"""The bench's destination: every setting at its catalog default (the audit trail on), as the connector loads it."""

from __future__ import annotations

from pathlib import Path

from config.catalog import Destination

DEST = "bench"


def bench_destination(topic: str, url: str = "http://127.0.0.1/") -> Destination:
    """The bench's destination as the connector loads it: every setting at its catalog default."""
    return Destination(name=DEST, url=url, source_topics=[topic])


def write_catalog(directory: Path, *, url: str, topics: list[str], audit: bool = True) -> None:
    """`bench.toml`: the destination with every setting at its catalog default; `audit=False`
    adds `[accounting] audit = false` (no audit trail), for the trail's cost."""
    directory.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(f'"{topic}"' for topic in topics)
    text = f'url = "{url}"\nsource_topics = [{listed}]\n'
    if not audit:
        text += "\n[accounting]\naudit = false\n"
    (directory / f"{DEST}.toml").write_text(text)
