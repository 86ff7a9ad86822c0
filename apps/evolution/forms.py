from django import forms

from apps.console.rows import add_rows, posted_rows, row_fields, row_values
from apps.evolution.models import ApprovalMode, HarnessProposer, PolicyMode, UpdateKind
from apps.evolution.policies import EDITABLE, KNOWN_ENVIRONMENTS, KNOWN_SIGNALS
from apps.releases.guardrail_rows import GUARDRAIL_COLUMNS, guardrails_from_rows

# A signal rule per row: which signal, which way it fires, at what value (`signals.<name>` errors land here).
SIGNAL_COLUMNS = {
    "name": lambda: forms.ChoiceField(
        required=False,
        label="Signal",
        choices=[("", "—")] + [(name, name.replace("_", " ")) for name in KNOWN_SIGNALS],
    ),
    "op": lambda: forms.ChoiceField(
        required=False, label="Fires when", choices=[(">", "above"), ("<", "below")]
    ),
    "threshold": lambda: forms.FloatField(required=False, label="Threshold"),
}
# The recipe's named settings, each a number field `recipe_<key>`; an empty one leaves the key out.
RECIPE_FIELDS = {
    "learning_rate": lambda: forms.FloatField(
        required=False, label="Learning rate", help_text="In (0, 1]. Empty: the engine's default."
    ),
    "samples_per_step": lambda: forms.IntegerField(
        required=False, label="Samples per step", help_text="1 to 1024."
    ),
    "publish_every": lambda: forms.IntegerField(
        required=False, label="Publish every (steps)", help_text="A new version every so many steps."
    ),
    "staleness_bound": lambda: forms.IntegerField(
        required=False, label="Staleness bound", help_text="Versions a sample may lag behind, ≥ 0."
    ),
    "rollout_bound": lambda: forms.IntegerField(
        required=False,
        label="Rollout bound",
        help_text="Sessions let out ahead of the learner, in steps' worth, ≥ 0. Empty: the staleness bound.",
    ),
    "evaluate_every": lambda: forms.IntegerField(required=False, label="Evaluate every (steps)"),
    "max_steps": lambda: forms.IntegerField(
        required=False, label="Maximum steps", help_text="Empty: the online run's own limit."
    ),
}
PLAN_LIMITS = ("stage_min_seconds", "failure_limit", "inconclusive_limit")


class PolicyForm(forms.Form):
    """The console's policy settings as fields: signals and the release plan's guardrails as rows, the recipe,
    gate and release plan as fields of their own. Ranges, known names and contradictions are the service's
    (validate_policy), whose field errors (`signals.<name>`, `recipe.learning_rate`, `gate.cases`,
    `release_plan.guardrails[0]`, ...) land on the form field they belong to."""

    model = forms.CharField(max_length=200, help_text="The served model it evolves.")
    agent_name = forms.CharField(max_length=200, required=False, help_text="Blank: every agent.")
    mode = forms.ChoiceField(choices=PolicyMode.choices)
    enabled = forms.BooleanField(required=False)
    window_seconds = forms.IntegerField(label="Window (s)", help_text="60 to 86400.")
    update_kinds = forms.MultipleChoiceField(
        choices=UpdateKind.choices, required=False, widget=forms.CheckboxSelectMultiple
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
    # The release plan a decision's new version is released under (its guardrails are rows, below).
    plan_stages = forms.CharField(
        required=False,
        label="Release stages (%)",
        help_text="Percent of new sessions on the candidate per stage, rising, e.g. 5, 25, 50, 100."
        " Empty: 5, 25, 50, 100.",
    )
    plan_stage_min_seconds = forms.IntegerField(
        required=False, label="Minimum seconds per stage", help_text="Empty: 0."
    )
    plan_failure_limit = forms.IntegerField(
        required=False, label="Failed guardrail checks allowed", help_text="Empty: 0."
    )
    plan_inconclusive_limit = forms.IntegerField(
        required=False, label="Inconclusive checks allowed", help_text="Empty: 3."
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

    def __init__(self, *args, suites=(), policy=None, **kwargs):
        """`policy`: the policy edited (None: a new one). Its rows (signals, guardrails) are the rows shown; its
        recipe's settings the fields do not cover (an engine's `lr_schedule`, say) are kept, and so are its gate's
        (a BFCL gate's categories) while the gate's environment stays the same. A post without any row of a
        list leaves that list as it is."""
        super().__init__(*args, **kwargs)
        current = {
            name: getattr(policy, name, None) for name in ("gate", "signals", "recipe", "release_plan")
        }
        current = {name: value if isinstance(value, dict) else {} for name, value in current.items()}
        self.current_gate, self.current_signals = current["gate"], current["signals"]
        self.current_recipe, self.current_plan = current["recipe"], current["release_plan"]
        choices = [("", "—")] + [(suite.pk, suite.name) for suite in suites]
        self.fields["gate_suite"].choices = choices
        self.fields["gate_safety_suite"].choices = choices
        for key, make in RECIPE_FIELDS.items():
            self.fields[f"recipe_{key}"] = make()
        self.signal_rows = add_rows(
            self,
            prefix="signal",
            columns=SIGNAL_COLUMNS,
            rows=[] if self.is_bound else signal_rows_of(self.current_signals),
        )
        guardrails = self.current_plan.get("guardrails")
        self.guardrail_rows = add_rows(
            self,
            prefix="guardrail",
            columns=GUARDRAIL_COLUMNS,
            rows=[] if self.is_bound or not isinstance(guardrails, list) else guardrails,
        )
        self.signal_row_of: dict[str, int] = {}  # signal name -> its row, for the service's errors
        self.guardrail_row_numbers: list[int] = []  # the plan's guardrail i -> its row

    @classmethod
    def initial_of(cls, policy) -> dict:
        initial = {
            name: getattr(policy, name)
            for name in EDITABLE
            if name not in {"gate", "signals", "recipe", "release_plan"}
        }
        return {
            **initial,
            **gate_initial(policy.gate),
            **recipe_initial(policy.recipe),
            **plan_initial(policy.release_plan),
            "revision": policy.revision,
        }

    def field_group(self, group: str) -> list:
        """The bound fields of a group of the template: `recipe`, `gate`, `plan` (by their prefix), `main` (what
        comes before them) or `decisions` (after them); the rows have their own (`signal_fields`, ...)."""
        groups = {"recipe": "recipe_", "gate": "gate_", "plan": "plan_"}
        if group in groups:
            return [self[name] for name in self.fields if name.startswith(groups[group])]
        rows_or_grouped = ("signal-", "guardrail-", *groups.values())
        ungrouped = [
            name for name in self.fields if not name.startswith(rows_or_grouped) and not self[name].is_hidden
        ]
        first_after = ungrouped.index("approval_mode")
        chosen = ungrouped[:first_after] if group == "main" else ungrouped[first_after:]
        return [self[name] for name in chosen]

    def main_fields(self):
        return self.field_group("main")

    def recipe_fields(self):
        return self.field_group("recipe")

    def gate_fields(self):
        return self.field_group("gate")

    def plan_fields(self):
        return self.field_group("plan")

    def decision_fields(self):
        return self.field_group("decisions")

    def signal_fields(self):
        return row_fields(self, prefix="signal", columns=SIGNAL_COLUMNS, count=self.signal_rows)

    def guardrail_fields(self):
        return row_fields(self, prefix="guardrail", columns=GUARDRAIL_COLUMNS, count=self.guardrail_rows)

    def kept_recipe_settings(self) -> dict:
        """The recipe's settings no field covers: an edit keeps them as they are."""
        return {key: value for key, value in self.current_recipe.items() if key not in RECIPE_FIELDS}

    def clean_plan_stages(self) -> list | None:
        text = self.cleaned_data["plan_stages"].replace(";", ",")
        try:
            stages = [float(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise forms.ValidationError("Numbers separated by commas, e.g. 5, 25, 50, 100.") from None
        return [int(stage) if stage.is_integer() else stage for stage in stages] or None

    def clean(self):
        cleaned = super().clean()
        if posted_rows(self.data, "signal"):
            cleaned["signals"] = self._signals_from_rows(cleaned)
        else:
            row_values(cleaned, prefix="signal", columns=SIGNAL_COLUMNS, count=self.signal_rows)
            cleaned["signals"] = self.current_signals
        if posted_rows(self.data, "guardrail"):
            rows = guardrails_from_rows(self, cleaned, count=self.guardrail_rows)
            self.guardrail_row_numbers = [index for index, _ in rows]
            cleaned["guardrails"] = [guardrail for _, guardrail in rows]
        else:
            row_values(cleaned, prefix="guardrail", columns=GUARDRAIL_COLUMNS, count=self.guardrail_rows)
            cleaned["guardrails"] = self.current_plan.get("guardrails") or []
        return cleaned

    def _signals_from_rows(self, cleaned: dict) -> dict:
        signals = {}
        for index, row in row_values(
            cleaned, prefix="signal", columns=SIGNAL_COLUMNS, count=self.signal_rows
        ):
            name = row["name"]
            if not name:
                if row["threshold"] is not None:
                    self.add_error(f"signal-{index}-name", "Choose the signal this threshold is for.")
                continue
            if name in signals:
                self.add_error(f"signal-{index}-name", "This signal is watched in a row above already.")
                continue
            if row["threshold"] is None:
                self.add_error(f"signal-{index}-threshold", "The value at which the signal fires.")
                continue
            signals[name] = {"op": row["op"] or ">", "threshold": row["threshold"]}
            self.signal_row_of[name] = index
        return signals

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

    def recipe_dict(self) -> dict:
        """The service's recipe: the settings kept from the policy's, then the filled recipe fields."""
        recipe = self.kept_recipe_settings()
        for key in RECIPE_FIELDS:
            if self.cleaned_data.get(f"recipe_{key}") is not None:
                recipe[key] = self.cleaned_data[f"recipe_{key}"]
        return recipe

    def plan_dict(self) -> dict:
        """The service's release plan; an empty field leaves its key out (the service's default)."""
        data = self.cleaned_data
        plan: dict = {}
        if data.get("plan_stages"):
            plan["stages"] = data["plan_stages"]
        for name in PLAN_LIMITS:
            if data.get(f"plan_{name}") is not None:
                plan[name] = data[f"plan_{name}"]
        if data.get("guardrails"):
            plan["guardrails"] = data["guardrails"]
        return plan

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        values = {name: data[name] for name in EDITABLE if name not in {"gate", "recipe", "release_plan"}}
        values["gate"] = self.gate_dict()
        values["recipe"] = self.recipe_dict()
        values["release_plan"] = self.plan_dict()
        values["harness_proposer"] = values["harness_proposer"] or HarnessProposer.RULE
        return values

    def add_service_errors(self, error) -> None:
        """A domain error's field problems on their form fields (`gate.cases` on `gate_cases`, a signal's on its
        row, `release_plan.guardrails[1]` on that guardrail's row), the rest on top."""
        if not error.fields:
            self.add_error(None, error.message)
        for key, problems in error.fields.items():
            for problem in problems:
                field, text = self._error_place(key, problem)
                self.add_error(field if field in self.fields else None, text)

    def _error_place(self, key: str, problem: str) -> tuple[str | None, str]:
        """(form field or None, text) of one of the service's problems."""
        field, _, part = key.partition(".")
        named = f"{part}: {problem}" if part else f"{field}: {problem}"
        if field == "gate":  # gate.cases on its own field; the gate as a whole on the choice of source
            return GATE_FIELDS.get(part, "gate_source"), f"{part}: {problem}" if part else problem
        if field == "signals":
            if part not in self.signal_row_of:
                return ("signal-0-name" if not part else None), named
            column = "name" if "unknown" in problem else "op" if problem.startswith("op") else "threshold"
            return f"signal-{self.signal_row_of[part]}-{column}", problem
        if field == "recipe":
            return (f"recipe_{part}", problem) if part in RECIPE_FIELDS else (None, named)
        if field == "release_plan":
            return self._plan_error_place(part, problem)
        return field, named if part else problem

    def _plan_error_place(self, part: str, problem: str) -> tuple[str | None, str]:
        if part in {"stages", *PLAN_LIMITS}:
            return f"plan_{part}", problem
        if part == "limits":
            return "plan_failure_limit", problem
        if part == "guardrails":
            return "guardrail-0-metric", problem
        if part.startswith("guardrails["):
            number = int(part.removeprefix("guardrails[").rstrip("]"))
            if number < len(self.guardrail_row_numbers):
                column, _, text = problem.partition(": ")
                column = column if column in GUARDRAIL_COLUMNS else "metric"
                return f"guardrail-{self.guardrail_row_numbers[number]}-{column}", text or problem
        return None, f"release plan: {part + ': ' if part else ''}{problem}"


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


def signal_rows_of(signals: dict) -> list[dict]:
    """A policy's signal rules as rows of SIGNAL_COLUMNS."""
    return [
        {"name": name, "op": rule.get("op"), "threshold": rule.get("threshold")}
        for name, rule in signals.items()
        if isinstance(rule, dict)
    ]


def recipe_initial(recipe: dict) -> dict:
    recipe = recipe if isinstance(recipe, dict) else {}
    return {f"recipe_{key}": recipe.get(key) for key in RECIPE_FIELDS}


def plan_initial(plan: dict) -> dict:
    """The release plan fields' initial values (its guardrails are rows)."""
    plan = plan if isinstance(plan, dict) else {}
    stages = plan.get("stages")
    initial = {f"plan_{name}": plan.get(name) for name in PLAN_LIMITS}
    if isinstance(stages, list):
        initial["plan_stages"] = ", ".join(
            f"{stage:g}" if _is_number(stage) else str(stage) for stage in stages
        )
    return initial


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
