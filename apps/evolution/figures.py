"""Server-side Plotly figures of a policy's signals (one small chart per signal, handed to the page with
json_script). Trace 0 is the signal, so the page extends it from the `evolution` stream; trace 1, when the
policy watches the signal, is its threshold."""

import json

import plotly.graph_objects as go

from apps.metrics.publish import chart_time


def signal_figures(points, *, thresholds: dict) -> dict[str, dict]:
    """{signal name: figure} for `points` (oldest first) and every signal in `thresholds` ({name: {"op",
    "threshold"}}), watched signals first."""
    series: dict[str, tuple[list, list]] = {name: ([], []) for name in thresholds}
    for point in points:
        x, y = series.setdefault(point.name, ([], []))
        x.append(chart_time(point.at))
        y.append(point.value)
    figures = {}
    for name, (x, y) in series.items():
        traces = [go.Scatter(x=x, y=y, name=name, mode="lines+markers", line={"color": "#1c7ed6"})]
        rule = thresholds.get(name)
        if rule is not None:
            traces.append(
                go.Scatter(
                    x=[x[0], x[-1]] if x else [],
                    y=[rule["threshold"]] * 2 if x else [],
                    name=f"fires when {rule['op']} {rule['threshold']}",
                    mode="lines",
                    line={"color": "#d9480f", "dash": "dash"},
                )
            )
        figure = go.Figure(traces)
        figure.update_layout(
            title=name.replace("_", " "),
            height=200,
            margin={"l": 40, "r": 10, "t": 32, "b": 24},
            showlegend=False,
        )
        figures[name] = json.loads(figure.to_json())
    return figures
