from django import forms

from apps.evolution.models import ApprovalMode, HarnessProposer, PolicyMode, UpdateKind
from apps.evolution.policies import EDITABLE


class PolicyForm(forms.Form):
    """The console's policy settings: JSON types only; ranges, known names and contradictions are the
    service's, whose field errors (`recipe.learning_rate`, ...) land on the form field they belong to."""

    model = forms.CharField(max_length=200, help_text="The served model it evolves.")
    agent_name = forms.CharField(max_length=200, required=False, help_text="Blank: every agent.")
    mode = forms.ChoiceField(choices=PolicyMode.choices)
    enabled = forms.BooleanField(required=False)
    window_seconds = forms.IntegerField(label="Window (s)", help_text="60 to 86400.")
    signals = forms.JSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 5}),
        help_text='{"correction_rate": {"op": ">", "threshold": 0.2}}',
    )
    update_kinds = forms.MultipleChoiceField(
        choices=UpdateKind.choices, required=False, widget=forms.CheckboxSelectMultiple
    )
    recipe = forms.JSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="learning_rate, samples_per_step, publish_every, staleness_bound, evaluate_every",
    )
    gate = forms.JSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text='{"environment": "weather", "cases": 20, "min_gain": 0} or {"suite_id": 3}',
    )
    release_plan = forms.JSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="stages, stage_min_seconds, guardrails, failure_limit, inconclusive_limit",
    )
    approval_mode = forms.ChoiceField(choices=ApprovalMode.choices)
    cooldown_seconds = forms.IntegerField(label="Cool-down (s)", help_text="At most a day.")
    compute_budget_seconds = forms.IntegerField(label="Training budget (s per day)")
    decision_ttl_seconds = forms.IntegerField(label="A proposal expires after (s)")
    harness_proposer = forms.ChoiceField(
        choices=HarnessProposer.choices, label="Harness proposer", required=False
    )
    harness_model = forms.CharField(
        max_length=200, required=False, help_text="Proposer model: the served model that rewrites the prompt."
    )
    revision = forms.IntegerField(widget=forms.HiddenInput, required=False)

    @classmethod
    def initial_of(cls, policy) -> dict:
        return {**{name: getattr(policy, name) for name in EDITABLE}, "revision": policy.revision}

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        values = {name: data[name] for name in EDITABLE}
        values["harness_proposer"] = values["harness_proposer"] or HarnessProposer.RULE
        for name in ("signals", "recipe", "gate", "release_plan"):
            if values[name] is None:
                values[name] = {}
        return values

    def add_service_errors(self, error) -> None:
        """A domain error's field problems on their form fields (`gate.cases` on `gate`), the rest on top."""
        if not error.fields:
            self.add_error(None, error.message)
        for key, problems in error.fields.items():
            field, _, part = key.partition(".")
            for problem in problems:
                text = f"{part}: {problem}" if part else problem
                self.add_error(field if field in self.fields else None, text)
