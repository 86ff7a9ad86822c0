from django import forms

from apps.evolution.models import ApprovalMode, HarnessProposer, PolicyMode, UpdateKind
from apps.evolution.policies import EDITABLE, KNOWN_ENVIRONMENTS


class PolicyForm(forms.Form):
    """The console's policy settings: the gate as fields; signals, recipe and release plan still JSON. Ranges,
    known names and contradictions are the service's, whose field errors (`recipe.learning_rate`,
    `gate.cases`, ...) land on the form field they belong to."""

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
    # The offline gate every update passes, as fields (`gate_dict` builds the service's object from them).
    gate_source = forms.ChoiceField(
        required=False,
        label="Gate",
        choices=[
            ("", "no gate"),
            ("environment", "held-out cases of an environment"),
            ("suite", "an evaluation suite"),
        ],
        help_text="What a new version must pass before it is released. Auto and propose modes need one.",
    )
    gate_environment = forms.ChoiceField(
        required=False, label="Gate environment", choices=[(name, name) for name in KNOWN_ENVIRONMENTS]
    )
    gate_cases = forms.IntegerField(
        required=False, label="Gate cases", help_text="Held-out cases it runs, 1 to 1000."
    )
    gate_seed = forms.IntegerField(
        required=False, min_value=0, label="Gate seed", help_text="Empty: the default."
    )
    gate_suite = forms.TypedChoiceField(coerce=int, empty_value=None, required=False, label="Gate suite")
    gate_min_gain = forms.FloatField(
        required=False,
        label="Minimum gain",
        help_text="How much better than the best production version the candidate must score, -1 to 1.",
    )
    gate_safety_suite = forms.TypedChoiceField(
        coerce=int,
        empty_value=None,
        required=False,
        label="Safety suite",
        help_text="Another suite the candidate must not do worse on.",
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

    def __init__(self, *args, suites=(), gate: dict | None = None, **kwargs):
        """`gate`: the policy's current gate; its settings the fields do not cover (a BFCL gate's categories,
        say) are kept while its environment stays the same."""
        super().__init__(*args, **kwargs)
        self.current_gate = gate if isinstance(gate, dict) else {}
        choices = [("", "—")] + [(suite.pk, suite.name) for suite in suites]
        self.fields["gate_suite"].choices = choices
        self.fields["gate_safety_suite"].choices = choices

    @classmethod
    def initial_of(cls, policy) -> dict:
        initial = {name: getattr(policy, name) for name in EDITABLE if name != "gate"}
        return {**initial, **gate_initial(policy.gate), "revision": policy.revision}

    def gate_dict(self) -> dict:
        """The service's gate object from the gate fields (an unknown shape is the service's to refuse)."""
        data = self.cleaned_data
        gate: dict = {}
        if data.get("gate_source") == "environment":
            gate["environment"] = data.get("gate_environment") or KNOWN_ENVIRONMENTS[0]
            if data.get("gate_cases") is not None:
                gate["cases"] = data["gate_cases"]
            if data.get("gate_seed") is not None:
                gate["seed"] = data["gate_seed"]
            if self.current_gate.get("environment") == gate["environment"]:
                gate.update(
                    {key: value for key, value in self.current_gate.items() if key not in GATE_FIELDS}
                )
        elif data.get("gate_source") == "suite" and data.get("gate_suite") is not None:
            gate["suite_id"] = data["gate_suite"]
        elif data.get("gate_source") == "suite":
            gate["suite_id"] = None
        if gate and data.get("gate_min_gain") is not None:
            gate["min_gain"] = data["gate_min_gain"]
        if gate and data.get("gate_safety_suite") is not None:
            gate["safety_suite_id"] = data["gate_safety_suite"]
        return gate

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        values = {name: data[name] for name in EDITABLE if name != "gate"}
        values["gate"] = self.gate_dict()
        values["harness_proposer"] = values["harness_proposer"] or HarnessProposer.RULE
        for name in ("signals", "recipe", "release_plan"):
            if values[name] is None:
                values[name] = {}
        return values

    def add_service_errors(self, error) -> None:
        """A domain error's field problems on their form fields (`gate.cases` on `gate`), the rest on top."""
        if not error.fields:
            self.add_error(None, error.message)
        for key, problems in error.fields.items():
            field, _, part = key.partition(".")
            if field == "gate":  # gate.cases on its own field; the gate as a whole on the choice of source
                field = GATE_FIELDS.get(part, "gate_source")
            for problem in problems:
                text = f"{part}: {problem}" if part else problem
                self.add_error(field if field in self.fields else None, text)


GATE_FIELDS = {
    "environment": "gate_environment",
    "cases": "gate_cases",
    "seed": "gate_seed",
    "suite_id": "gate_suite",
    "min_gain": "gate_min_gain",
    "safety_suite_id": "gate_safety_suite",
}


def gate_initial(gate: dict) -> dict:
    """The gate fields' initial values from a policy's gate object."""
    gate = gate if isinstance(gate, dict) else {}
    source = "environment" if "environment" in gate else "suite" if "suite_id" in gate else ""
    return {"gate_source": source, **{field: gate.get(key) for key, field in GATE_FIELDS.items()}}
