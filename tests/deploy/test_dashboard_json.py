"""The Grafana dashboard (deploy/grafana/hifi.json): a data source, a destination and a stream
variable that every panel follows, the rows an operator needs, and only series the daemons
expose."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from tests.deploy.metric_names import ROOT, referenced_names, unknown_names

DASHBOARD = ROOT / "deploy" / "grafana" / "hifi.json"
METRICS_DOC = ROOT / "docs" / "metrics.md"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: The variables that filter a series by one of its labels: the label, its filter, its level.
FILTERS = {"dest": ('dest=~"$dest"', "dest:"), "stream": ('stream=~"$stream"', "stream:")}
ROWS = {
    "Service level",
    "Lag",
    "Loss and availability",
    "Throughput",
    "Retries",
    "Dead letters",
    "Ingest",
}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels() -> Iterator[dict[str, Any]]:
    """Every panel but rows, those inside collapsed rows included."""
    for panel in dashboard()["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def exprs() -> list[str]:
    return [target["expr"] for panel in panels() for target in panel["targets"]]


def labelled_by(label: str) -> set[str]:
    """The series names whose metric has label `label`, from docs/metrics.md's tables."""
    names = set()
    for name, labels in re.findall(
        r"^\| `(hifi_\w+)` \| \w+ \| ([^|]*) \|", METRICS_DOC.read_text(), re.M
    ):
        if f"`{label}`" in labels:
            family = name.removesuffix("_total")
            names |= {name, f"{family}_bucket", f"{family}_count", f"{family}_sum"}
    return names


def test_variables_choose_the_data_source_the_destinations_and_the_streams() -> None:
    """A Prometheus data source variable, and multi-value destination and stream variables read
    from it."""
    variables = {var["name"]: var for var in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for label in FILTERS:
        var = variables[label]
        assert (var["type"], var["datasource"]) == ("query", DATASOURCE)
        assert var["multi"]
        assert var["includeAll"]
        series = re.fullmatch(rf"label_values\((\w+), {label}\)", var["query"]["query"])
        assert series is not None
        assert unknown_names([series[1]]) == {}


def test_every_panel_reads_the_chosen_data_source() -> None:
    """No panel or query is bound to one Prometheus: all follow the variable."""
    for panel in panels():
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert all(target["datasource"] == DATASOURCE for target in panel["targets"])
        assert panel["targets"], f"{panel['title']}: no query"


def test_every_query_of_a_destination_or_stream_series_follows_its_variable() -> None:
    """Each selector of a series with a `dest` label (or a recorded per-destination series)
    filters on the chosen destinations, and of one with a `stream` label on the chosen streams."""
    for label, (wanted, level) in FILTERS.items():
        labelled = labelled_by(label)
        assert labelled, f"docs/metrics.md has no series labelled {label}"
        for expr in exprs():
            for name in referenced_names(expr):
                if name in labelled or name.startswith(level):
                    selectors = re.findall(rf"(?<![\w:]){re.escape(name)}(\{{[^}}]*\}})?", expr)
                    assert all(wanted in s for s in selectors), f"{name} in {expr}"


def test_the_rows_cover_what_an_operator_watches() -> None:
    """Lag, loss, availability, throughput, retries, dead letters and ingest each have a row."""
    rows = {panel["title"] for panel in dashboard()["panels"] if panel["type"] == "row"}
    assert rows >= ROWS


def test_the_dashboard_reads_only_series_the_daemons_expose() -> None:
    """Every name a query selects is in the daemons' registry, is `up`, or is recorded by
    deploy/prometheus/hifi.rules.yml; a name that does not exist fails here."""
    assert unknown_names(exprs()) == {}


def test_panel_ids_are_unique_and_panels_do_not_overlap() -> None:
    """Grafana keys panels by id; overlapping grid positions would stack panels."""
    ids = [panel["id"] for panel in dashboard()["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        pos = panel["gridPos"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & mine, panel["title"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        cells |= mine
