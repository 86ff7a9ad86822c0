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


def deficit(row: dict) -> tuple[float | None, float | None, float | None]:
    """How much worse the candidate is than the baseline in one guardrail's measurement (positive = worse,
    whichever way the metric points), with the 95 % interval of that deficit where one was computed."""
    candidate, baseline = row.get("candidate"), row.get("baseline")
    low, high = row.get("low"), row.get("high")
    higher_is_better = row.get("direction") == "higher_is_better"
    sign = -1.0 if higher_is_better else 1.0
    point = None if candidate is None or baseline is None else sign * (candidate - baseline)
    if low is None or high is None:
        return point, None, None
    bounds = sorted((sign * low, sign * high))
    return point, bounds[0], bounds[1]


def guardrail_figures(analyses, guardrails: list[dict]) -> dict[str, dict]:
    """One figure per guardrail (keyed by its index): the candidate's deficit against the baseline at each
    tick, the 95 % interval around it as a ribbon, and the allowed deficit as a shaded band above which the
    guardrail fails. Traces: 0 the interval's upper edge, 1 its lower edge (filled to trace 0), 2 the deficit,
    so the page extends them in that order from the WebSocket."""
    series: dict[int, dict[str, list]] = {
        index: {"x": [], "point": [], "low": [], "high": []} for index in range(len(guardrails))
    }
    for run in analyses:
        for row in run.measurements:
            index = row.get("guardrail")
            if row.get("suite") is not None or index not in series:
                continue
            point, low, high = deficit(row)
            points = series[index]
            points["x"].append(run.at.isoformat())
            points["point"].append(point)
            points["low"].append(low)
            points["high"].append(high)
    figures = {}
    for index, guardrail in enumerate(guardrails):
        points = series[index]
        threshold = float(guardrail.get("threshold", 0))
        figure = go.Figure(
            [
                go.Scatter(
                    x=points["x"],
                    y=points["high"],
                    name="95 % interval",
                    mode="lines",
                    line={"width": 0, "color": COLORS["candidate"]},
                    showlegend=False,
                    hoverinfo="skip",
                ),
                go.Scatter(
                    x=points["x"],
                    y=points["low"],
                    name="95 % interval",
                    mode="lines",
                    line={"width": 0, "color": COLORS["candidate"]},
                    fill="tonexty",
                    fillcolor="rgba(217, 72, 15, 0.18)",
                ),
                go.Scatter(
                    x=points["x"],
                    y=points["point"],
                    name="candidate worse by",
                    mode="lines+markers",
                    line={"color": COLORS["candidate"]},
                ),
            ]
        )
        figure.add_hrect(
            y0=threshold,
            y1=max([threshold * 3 or 1.0, *(value for value in points["high"] + points["point"] if value)]),
            fillcolor="rgba(192, 54, 44, 0.10)",
            line_width=0,
            annotation_text=f"fails above {threshold:g}",
            annotation_position="top left",
        )
        figure.add_hline(y=0, line={"color": "#868e96", "width": 1, "dash": "dot"})
        figure.update_layout(
            title=f"{guardrail.get('metric', '').replace('_', ' ')}: candidate worse than baseline by",
            height=260,
            margin={"l": 40, "r": 10, "t": 40, "b": 30},
            legend={"orientation": "h"},
        )
        figures[str(index)] = _figure(figure)
    return figures
