"""The reconciliation as a page a person reads: per destination a verdict, then the charts.

At the top of each destination: lossless or not (how many events missing), on time or not
(how many minutes down for lag), the availability per day in percent and nines. Then four
charts (matplotlib, PNG files beside the page): events missing per minute, p95 end-to-end
lag per minute against the SLA line, an availability strip per day (a cell per minute: up,
down for loss, down for lag, not final, outside the range), and the lag contribution of each node.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.tables import DAY_MINUTES, iso_minute, parse_minute
from spark_batch.reconcile import Reconciled
from spark_batch.verdicts import loss_verdict, minute_state

_PNG_METADATA = {"Software": None}  # no version stamp: the same input gives the same bytes
_COLORS = {
    "up": "#3c9d5d",
    "loss": "#c62f2f",
    "lag": "#e69b1c",
    "pending": "#d0d0d0",
    "outside": "#ffffff",
}


def write_report(directory: Path, result: Reconciled, summary: Mapping[str, Any]) -> Path:
    """`report.html` and `charts/*.png` in `directory`."""
    import matplotlib

    matplotlib.use("Agg")
    charts = directory / "charts"
    charts.mkdir()
    by_dest: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in result.minutes:
        by_dest[row["dest"]].append(row)
    sections = []
    for dest, rows in sorted(by_dest.items()):
        about = summary["destinations"][dest]
        images = [
            _loss_chart(charts, dest, rows),
            _lag_chart(charts, dest, rows),
            _strip_chart(charts, dest, rows, about, to_ms=parse_minute(summary["to"])),
            _node_chart(charts, dest, about["nodes"]),
        ]
        sections.append(_section(dest, about, [i for i in images if i is not None]))
    page = directory / "report.html"
    page.write_text(_page(summary, sections))
    return page


def _verdict(about: Mapping[str, Any]) -> str:
    words, tone = loss_verdict(about)
    loss = f'<span class="{tone}">{html.escape(words)}</span>'
    lag_down = sum(day["down_for_lag"] for day in about["days"])
    lag = (
        '<span class="good">on time</span>'
        if lag_down == 0
        else f'<span class="warn">{lag_down:,} minutes down for lag</span>'
    )
    return f"{loss} · {lag}"


def _section(dest: str, about: Mapping[str, Any], images: Sequence[str]) -> str:
    totals = about["totals"]
    days = "".join(
        f"<tr><td>{day['day']}</td><td>{day['minutes']:,} of {day['range_minutes']:,}</td>"
        f"<td>{day['up_minutes']:,}</td><td>{day['down_for_loss']:,}</td>"
        f"<td>{day['down_for_lag']:,}</td><td>{day['pending_minutes']:,}</td>"
        f"<td>{_pct(day['availability_pct'])}</td><td>{_nines(day)}</td></tr>"
        for day in about["days"]
    )
    worst = (
        "".join(
            f"<tr><td>{html.escape(w['minute'])}</td><td>{html.escape(str(w['down_reason']))}</td>"
            f"<td>{w['missing']:,}</td><td>{_ms(w['lag_p95_ms'])}</td><td>{w['entered']:,}</td></tr>"
            for w in about["worst_minutes"]
        )
        or '<tr><td colspan="5">no minute was down</td></tr>'
    )
    figures = "".join(
        f'<img src="charts/{html.escape(name)}" alt="{html.escape(name)}">' for name in images
    )
    counts = ", ".join(f"{key.replace('_', ' ')} {value:,}" for key, value in totals.items())
    return f"""
<section>
<h2>{html.escape(dest)}: {_verdict(about)}</h2>
<p>{counts}.</p>
<p>{_coverage(about)}</p>
<table><tr><th>day (UTC)</th><th>final of range</th>
<th>up</th><th>down: loss</th><th>down: lag</th><th>not final</th>
<th>availability</th><th>nines</th></tr>{days}</table>
<h3>Worst minutes</h3>
<table><tr><th>minute</th><th>why</th><th>missing</th><th>p95 lag</th><th>entered</th></tr>{worst}</table>
{figures}
</section>"""


def _page(summary: Mapping[str, Any], sections: Sequence[str]) -> str:
    title = f"hifi reconciliation {summary['from']} to {summary['to']}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1em; }}
td, th {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }}
img {{ display: block; max-width: 100%; margin: 1em 0; }}
.good {{ color: #2b7a46; }} .bad {{ color: #b32020; }} .warn {{ color: #b06d00; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Archive <code>{html.escape(str(summary["archive"]))}</code>. Counted by event id (set
difference of what entered and what each node said became of it), per event-time minute (UTC).</p>
{"".join(sections)}
</body></html>
"""


def _save(figure: Any, path: Path) -> str:
    figure.savefig(path, dpi=90, bbox_inches="tight", metadata=_PNG_METADATA)
    import matplotlib.pyplot as plt

    plt.close(figure)
    return path.name


def _times(rows: Sequence[Mapping[str, Any]]) -> list[Any]:  # datetimes: matplotlib takes them
    return [datetime.fromtimestamp(row["minute_ms"] / 1000, UTC) for row in rows]


def _loss_chart(charts: Path, dest: str, rows: Sequence[Mapping[str, Any]]) -> str:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(10, 2.6))
    axes.bar(
        _times(rows), [row["missing"] for row in rows], width=1 / DAY_MINUTES, color=_COLORS["loss"]
    )
    axes.set_title(f"{dest}: events missing per minute")
    axes.set_ylabel("missing")
    axes.set_ylim(bottom=0, top=max(1, *(row["missing"] for row in rows)) * 1.1)
    figure.autofmt_xdate()
    return _save(figure, charts / f"{dest}-loss.png")


def _lag_chart(charts: Path, dest: str, rows: Sequence[Mapping[str, Any]]) -> str:
    import matplotlib.pyplot as plt

    lagged = [row for row in rows if row["lag_p95_ms"] is not None]
    figure, axes = plt.subplots(figsize=(10, 2.6))
    axes.plot(_times(lagged), [row["lag_p95_ms"] for row in lagged], color="#2f5fc6", lw=1)
    sla = [row["lag_sla_s"] * 1000 for row in rows]
    axes.plot(_times(rows), sla, color=_COLORS["loss"], lw=1, ls="--", label="SLA")
    axes.set_title(f"{dest}: p95 end-to-end lag per minute")
    axes.set_ylabel("ms")
    axes.set_yscale("symlog", linthresh=10)
    axes.legend(loc="upper right")
    figure.autofmt_xdate()
    return _save(figure, charts / f"{dest}-lag.png")


def strip_states(
    rows: Sequence[Mapping[str, Any]], about: Mapping[str, Any], *, to_ms: int
) -> list[list[str]]:
    """The availability strip's cells: per day of `about`, the state of each of its minutes
    as the day's figures count it (`verdicts.minute_state`)."""
    by_minute = {int(row["minute_ms"]): row for row in rows}
    grid = []
    for day in about["days"]:
        start = int(datetime.fromisoformat(day["day"]).replace(tzinfo=UTC).timestamp() * 1000)
        grid.append(
            [
                minute_state(
                    by_minute.get(minute_ms),
                    minute_ms,
                    counted_from_ms=about["counted_from_ms"],
                    final_before_ms=about["final_before_ms"],
                    to_ms=to_ms,
                )
                for minute_ms in range(start, start + DAY_MINUTES * MINUTE_MS, MINUTE_MS)
            ]
        )
    return grid


def _strip_chart(
    charts: Path,
    dest: str,
    rows: Sequence[Mapping[str, Any]],
    about: Mapping[str, Any],
    *,
    to_ms: int,
) -> str:
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    order = list(_COLORS)
    days = about["days"]
    grid = [
        [order.index(state) for state in states]
        for states in strip_states(rows, about, to_ms=to_ms)
    ]
    figure, axes = plt.subplots(figsize=(10, 0.5 + 0.35 * len(grid)))
    axes.imshow(
        grid,
        aspect="auto",
        interpolation="nearest",
        vmin=0,
        vmax=len(order) - 1,
        cmap=ListedColormap([_COLORS[name] for name in order]),
    )
    axes.set_yticks(range(len(grid)), [day["day"] for day in days])
    axes.set_xticks([h * 60 for h in range(0, 25, 3)], [f"{h:02d}:00" for h in range(0, 25, 3)])
    axes.set_title(
        f"{dest}: availability per minute"
        " (green up, red loss, orange lag, grey not final, white not counted)"
    )
    return _save(figure, charts / f"{dest}-availability.png")


def _node_chart(charts: Path, dest: str, nodes: Sequence[Mapping[str, Any]]) -> str | None:
    import matplotlib.pyplot as plt

    if not nodes:
        return None
    names = [str(node["node"]) for node in nodes]
    figure, axes = plt.subplots(figsize=(10, 0.8 + 0.4 * len(nodes)))
    for offset, (pct, color) in enumerate(((50, "#8fb3e8"), (95, "#2f5fc6"), (99, "#1b356e"))):
        values = [node.get(f"process_p{pct}_ms") or 0 for node in nodes]
        axes.barh(
            [i + offset * 0.27 for i in range(len(nodes))],
            values,
            height=0.25,
            color=color,
            label=f"p{pct}",
        )
    axes.set_yticks([i + 0.27 for i in range(len(nodes))], names)
    axes.set_xlabel("process duration, ms (2xx time minus taken in)")
    axes.set_title(f"{dest}: lag contribution per node")
    axes.legend(loc="lower right")
    return _save(figure, charts / f"{dest}-nodes.png")


def _coverage(about: Mapping[str, Any]) -> str:
    """How many of the range's minutes the availability counts, and why the others are not."""
    final, pending, in_range = (
        about["final_minutes"],
        about["pending_minutes"],
        about["range_minutes"],
    )
    words = f"Availability counts {final:,} final minutes of the range's {in_range:,}"
    words += f"; {pending:,} not final yet" if pending else ""
    before = in_range - final - pending
    if before:
        words += f"; {before:,} before the archive's first minute ({iso_minute(about['counted_from_ms'])}), not counted"
    return f"{words}."


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f} %"


def _nines(day: Mapping[str, Any]) -> str:
    if day["nines"] is None:
        return "all up" if day["all_up"] else "-"
    return f"{day['nines']:.2f}"


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value:,} ms"
