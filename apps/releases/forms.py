"""The serving page's form; the service validates again (apps/releases/serving.py)."""

from django import forms

from apps.console.rows import add_rows, row_fields
from apps.releases.guardrail_rows import GUARDRAIL_COLUMNS, guardrails_from_rows


def version_choice(version) -> str:
    """A version in a select, by its label: "policy-small v3 (candidate)"."""
    return f"{version.name} v{version.number} ({version.status})"


class ProductionSetForm(forms.Form):
    """A model's first production version: it serves every new session from now on."""

    version = forms.TypedChoiceField(coerce=int, label="Version")
    reason = forms.CharField(max_length=300, required=False)

    def __init__(self, *args, versions=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].choices = [(v.pk, version_choice(v)) for v in versions]


DEFAULT_GUARDRAILS = [
    {"metric": "reward_mean", "direction": "higher_is_better", "threshold": 0.1, "min_samples": 30},
    {"metric": "error_rate", "direction": "lower_is_better", "threshold": 0.05, "min_samples": 30},
]


class ReleaseCreateForm(forms.Form):
    """The releases page's new-release form; `release_create` validates the plan again (field errors)."""

    candidate = forms.TypedChoiceField(coerce=int, label="Candidate")
    baseline = forms.TypedChoiceField(
        coerce=int,
        required=False,
        empty_value=None,
        label="Baseline",
        help_text="Empty: the model's production.",
    )
    stages = forms.CharField(
        initial="5, 25, 50, 100", help_text="Percent of new sessions on the candidate per stage, rising."
    )
    stage_min_seconds = forms.IntegerField(min_value=0, initial=300, label="Minimum seconds per stage")
    eval_suites = forms.TypedMultipleChoiceField(
        coerce=int,
        required=False,
        label="Evaluation suites",
        help_text="Run on both versions before the canary.",
    )
    failure_limit = forms.IntegerField(min_value=0, initial=0)
    inconclusive_limit = forms.IntegerField(min_value=0, initial=3)

    def __init__(self, *args, candidates=(), versions=(), suites=(), **kwargs):
        super().__init__(*args, **kwargs)
        # Guardrails as rows of fields (two empty rows to add one): a metric, which way is better, the
        # deficit allowed, the samples each arm needs and how it is judged.
        self.guardrail_rows = add_rows(
            self,
            prefix="guardrail",
            columns=GUARDRAIL_COLUMNS,
            rows=DEFAULT_GUARDRAILS if not self.is_bound else [],
        )
        self.fields["candidate"].choices = [(v.pk, version_choice(v)) for v in candidates]
        self.fields["baseline"].choices = [("", "production")] + [(v.pk, version_choice(v)) for v in versions]
        self.fields["eval_suites"].choices = [(suite.pk, suite.name) for suite in suites]

    def clean_stages(self) -> list:
        try:
            return [
                float(part)
                for part in self.cleaned_data["stages"].replace(";", ",").split(",")
                if part.strip()
            ]
        except ValueError:
            raise forms.ValidationError("Numbers separated by commas, e.g. 5, 25, 50, 100.") from None

    def main_fields(self):
        return [self[name] for name in self.fields if not name.startswith("guardrail-")]

    def guardrail_fields(self):
        return row_fields(self, prefix="guardrail", columns=GUARDRAIL_COLUMNS, count=self.guardrail_rows)

    def clean(self):
        cleaned = super().clean()
        cleaned["guardrails"] = [
            guardrail for _, guardrail in guardrails_from_rows(self, cleaned, count=self.guardrail_rows)
        ]
        return cleaned

    def add_guardrail_error(self, key: str, problem: str) -> bool:
        """A service's `guardrails[1].threshold` problem on that row's field; False when it names none."""
        index, _, column = key.removeprefix("guardrails[").partition("]")
        name = f"guardrail-{index}-{column.lstrip('.')}"
        if key.startswith("guardrails[") and name in self.fields:
            self.add_error(name, problem)
            return True
        return False

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        return {
            "candidate_id": data["candidate"],
            "baseline_id": data["baseline"],
            "stages": data["stages"],
            "guardrails": data["guardrails"],
            "eval_suite_ids": data["eval_suites"],
            "failure_limit": data["failure_limit"],
            "inconclusive_limit": data["inconclusive_limit"],
            "stage_min_seconds": data["stage_min_seconds"],
        }
