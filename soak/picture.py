"""The soak's picture: lag, throughput and each daemon's memory against minutes since the start."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from soak.model import BROKER, Sample, SoakResult

_PNG_METADATA = {"Software": None}  # no version stamp: the same result gives the same bytes
_DPI = 110
_SIZE_IN = (12.0, 9.0)
_P95_COLOR = "#2f5fc6"
_P50_COLOR = "#9db7e8"
_SLA_COLOR = "#c62f2f"
_BROKER_COLOR = "#7a7a7a"
_BAND_ALPHA = 0.18
_BAND_MIN_S = 6.0  # a kill lasts a second or two: wide enough to see in an hour


def draw_picture(result: SoakResult, path: Path) -> Path:
    """`path` (a PNG): three panels sharing the x axis, minutes since the run started."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (lag, rate, memory) = plt.subplots(
        3, 1, sharex=True, figsize=_SIZE_IN, layout="constrained"
    )
    colors = _kind_colors(result)
    _draw_faults(result, colors, (lag, rate, memory))
    _draw_lag(result, lag, colors)
    _draw_rate(result, rate)
    _draw_memory(result.samples, memory)
    memory.set_xlabel("minutes since the start")
    figure.suptitle(_title(result), fontsize=10)
    figure.savefig(path, dpi=_DPI, metadata=_PNG_METADATA)
    plt.close(figure)
    return path


def _title(result: SoakResult) -> str:
    started = datetime.fromtimestamp(result.started_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")
    return (
        f"hifi soak {started} UTC, seed {result.seed}, {result.duration_s / 60:.0f} min,"
        f" {len(result.faults)} faults\n"
        f"lost {result.account.lost} · dup {result.account.dup_pct:.3f} %"
        f" · late minutes {result.late_minutes}"
        f" · on time with no fault {result.on_time_pct_no_fault:.1f} %"
        f" · p95 with no fault {result.p95_no_fault_ms:,.0f} ms"
        f" · RSS slope {result.rss_slope_mb_per_h:+.1f} MB/h"
        f" · fds slope {result.fds_slope_per_h:+.1f}/h"
    )


def _kind_colors(result: SoakResult) -> dict[str, Any]:
    import matplotlib

    palette = matplotlib.colormaps["tab10"]
    kinds = sorted({fault.kind for fault in result.faults})
    return {kind: palette(i % 10) for i, kind in enumerate(kinds)}


def _minute_x(result: SoakResult, start_ms: int) -> float:
    """The middle of the minute starting at `start_ms`, in minutes since the run started."""
    return (start_ms - result.started_ms) / 60_000 + 0.5


def _draw_faults(result: SoakResult, colors: dict[str, Any], panels: Sequence[Any]) -> None:
    """Every fault as a band on every panel, its kind written at the top of the lag panel's."""
    for fault in result.faults:
        end_s = max(fault.end_s, fault.start_s + _BAND_MIN_S)
        for axes in panels:
            axes.axvspan(
                fault.start_s / 60, end_s / 60, color=colors[fault.kind], alpha=_BAND_ALPHA
            )
        panels[0].text(
            fault.start_s / 60,
            0.98,
            f" {fault.kind}",
            transform=panels[0].get_xaxis_transform(),
            rotation=90,
            ha="left",
            va="top",
            fontsize=7,
            color=colors[fault.kind],
        )


def _draw_lag(result: SoakResult, axes: Any, colors: dict[str, Any]) -> None:
    from matplotlib.patches import Patch

    for name, color, width, label in (
        ("p50_ms", _P50_COLOR, 0.8, "lag p50"),
        ("p95_ms", _P95_COLOR, 1.4, "lag p95"),
        ("broker_p95_ms", _BROKER_COLOR, 1.0, "the broker alone, p95"),
    ):
        points = [
            (_minute_x(result, m.start_ms), value)
            for m in result.minutes
            if (value := getattr(m, name)) is not None and value > 0  # a log axis has no 0
        ]
        if points:
            xs, ys = zip(*points, strict=True)
            axes.plot(xs, ys, color=color, lw=width, marker=".", ms=3, label=label)
    axes.axhline(result.lag_sla_s * 1000, color=_SLA_COLOR, lw=1, ls="--", label="SLA")
    axes.set_yscale("log")
    axes.set_ylabel("lag per minute, ms")
    handles, _ = axes.get_legend_handles_labels()
    kinds = [Patch(color=color, alpha=0.4, label=kind) for kind, color in colors.items()]
    axes.legend(handles=[*handles, *kinds], loc="upper right", fontsize=7, ncols=2)


def _draw_rate(result: SoakResult, axes: Any) -> None:
    axes.plot(
        [_minute_x(result, m.start_ms) for m in result.minutes],
        [m.events / 60 for m in result.minutes],
        color="#3c9d5d",
        lw=1.2,
        marker=".",
        ms=3,
        label="delivered",
    )
    axes.axhline(result.rate_events_per_s, color="#777777", lw=0.8, ls=":", label="offered")
    axes.set_ylim(bottom=0)
    axes.set_ylabel("events/s")
    axes.legend(loc="lower right", fontsize=7)


def _draw_memory(samples: Sequence[Sample], axes: Any) -> Any | None:
    """One line per process life: a daemon's restart (a new pid) breaks its line. The local
    broker (it keeps every record) goes on an axis of its own, on the right, so its gigabytes
    do not flatten the daemons' lines; that axis is returned (None: no broker sampled)."""
    import matplotlib

    palette = matplotlib.colormaps["tab10"]
    lives: dict[tuple[str, int], list[Sample]] = defaultdict(list)
    for sample in sorted(samples, key=lambda s: s.at_s):
        lives[sample.daemon, sample.pid].append(sample)
    daemons = sorted({daemon for daemon, _ in lives if daemon != BROKER})
    labelled: set[str] = set()
    broker_axes = None
    for (daemon, _), life in lives.items():
        minutes, rss_mb = [s.at_s / 60 for s in life], [s.rss_mb for s in life]
        if daemon == BROKER:
            broker_axes = broker_axes or axes.twinx()
            broker_axes.plot(minutes, rss_mb, color="0.45", lw=1.2, ls="--", label=BROKER)
            continue
        axes.plot(
            minutes,
            rss_mb,
            color=palette(daemons.index(daemon) % 10),
            lw=1.2,
            label=f"_{daemon}" if daemon in labelled else daemon,  # "_": not in the legend
        )
        labelled.add(daemon)
    axes.set_ylabel("RSS, MB")
    axes.set_ylim(bottom=0)
    if labelled:  # an empty legend is a warning
        axes.legend(loc="upper left", fontsize=7, ncols=min(len(labelled), 4))
    if broker_axes is not None:
        broker_axes.set_ylabel("broker RSS, MB (dashed)")
        broker_axes.set_ylim(bottom=0)
        broker_axes.legend(loc="lower right", fontsize=7)
    return broker_axes
