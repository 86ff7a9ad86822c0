"""A release plan's guardrails as rows of form fields: the columns and the cleaning of posted rows, shared by the
release form (apps.releases.forms) and the evolution policy form's release plan (apps.evolution.forms). A
module of its own because forms are entry points, which other apps' forms may not import."""

from django import forms

from apps.console.rows import row_values
from workers.evaluation.analysis import METRICS, WORSE_WHEN_HIGHER

GUARDRAIL_COLUMNS = {
    "metric": lambda: forms.ChoiceField(
        required=False,
        label="Metric",
        choices=[("", "—")] + [(metric, metric.replace("_", " ")) for metric in METRICS],
    ),
    "direction": lambda: forms.ChoiceField(
        required=False,
        label="Better when",
        choices=[
            ("", "the metric's own"),
            ("higher_is_better", "higher is better"),
            ("lower_is_better", "lower is better"),
        ],
    ),
    "threshold": lambda: forms.FloatField(required=False, min_value=0, label="Allowed deficit"),
    "min_samples": lambda: forms.IntegerField(required=False, min_value=1, label="Samples per arm"),
    "judge": lambda: forms.ChoiceField(
        required=False,
        label="Judged on",
        choices=[("point", "measured value"), ("interval", "whole 95 % interval")],
    ),
}


def guardrails_from_rows(form: forms.Form, cleaned: dict, *, count: int, prefix: str = "guardrail") -> list:
    """(row number, guardrail) of each filled row of guardrail fields (GUARDRAIL_COLUMNS); a row with a
    threshold but no metric, or a metric but no threshold, gets a field error instead. Used by the release
    form and the evolution policy form (a policy's release plan)."""
    guardrails = []
    for index, row in row_values(cleaned, prefix=prefix, columns=GUARDRAIL_COLUMNS, count=count):
        if not row["metric"]:
            if row["threshold"] is not None or row["min_samples"] is not None:
                form.add_error(f"{prefix}-{index}-metric", "Choose the metric this guardrail watches.")
            continue
        if row["threshold"] is None:
            form.add_error(
                f"{prefix}-{index}-threshold", "How much worse the candidate may be (0: not at all)."
            )
            continue
        worse_when_higher = row["metric"] in WORSE_WHEN_HIGHER
        guardrail = {
            "metric": row["metric"],
            "direction": row["direction"] or ("lower_is_better" if worse_when_higher else "higher_is_better"),
            "threshold": row["threshold"],
            "min_samples": row["min_samples"] or 30,
        }
        if row["judge"] == "interval":
            guardrail["judge"] = "interval"
        guardrails.append((index, guardrail))
    return guardrails
