"""Server-side Plotly figures for the release and serving pages (handed to pages with json_script)."""

import json

import plotly.graph_objects as go

from workers.evaluation.analysis import METRICS

COLORS = {"candidate": "#d9480f", "baseline": "#1c7ed6"}


def _figure(figure: go.Figure) -> dict:
    return json.loads(figure.to_json())


def release_figures(analyses) -> dict[str, dict]:
    """One figure per live metric: the candidate's and the baseline's value at each analysis tick. Trace 0 is
    the candidate, trace 1 the baseline, so the page extends them in that order from the WebSocket."""
    series: dict[str, dict[str, list]] = {}
    for run in analyses:
        plotted = set()
        for row in run.measurements:
            if row.get("suite") is not None or row["metric"] in plotted:
                continue  # two guardrails of one metric measure the same values: one point per tick
            plotted.add(row["metric"])
            points = series.setdefault(row["metric"], {"x": [], "candidate": [], "baseline": []})
            points["x"].append(run.at.isoformat())
            points["candidate"].append(row.get("candidate"))
            points["baseline"].append(row.get("baseline"))
    figures = {}
    for metric in sorted(series, key=METRICS.index):
        points = series[metric]
        figure = go.Figure(
            [
                go.Scatter(
                    x=points["x"], y=points[arm], name=arm, mode="lines+markers", line={"color": COLORS[arm]}
                )
                for arm in ("candidate", "baseline")
            ]
        )
        figure.update_layout(
            title=metric.replace("_", " "),
            height=260,
            margin={"l": 40, "r": 10, "t": 40, "b": 30},
            legend={"orientation": "h"},
        )
        figures[metric] = _figure(figure)
    return figures


def serving_figure(events) -> dict:
    """The canary share over time, one step line per model."""
    figure = go.Figure()
    by_model: dict[str, tuple[list, list, list]] = {}
    for event in events:
        x, y, text = by_model.setdefault(event.model, ([], [], []))
        x.append(event.at.isoformat())
        y.append(event.canary_percent)
        text.append(
            f"stable v{event.stable.number}" + (f", canary v{event.canary.number}" if event.canary else "")
        )
    for model, (x, y, text) in by_model.items():
        figure.add_trace(
            go.Scatter(x=x, y=y, text=text, name=model, mode="lines+markers", line={"shape": "hv"})
        )
    figure.update_layout(
        title="Canary share of new sessions (%)",
        height=280,
        yaxis={"range": [0, 100]},
        margin={"l": 40, "r": 10, "t": 40, "b": 30},
    )
    return _figure(figure)
