"""The evaluators page's form: a rule evaluator's configuration as JSON, an LLM judge's as its own fields
(rubric, pinned model version, score range and/or verdicts, limits). Checked here by the same pure function
the service uses (workers.rewards.judge), so each problem shows beside its field; the service checks again,
with the model's routing, and its field errors land on the same fields.

The reward specs page's form: a spec's fields as the REST API takes them, categories and source weights as
JSON, the source priority as a comma-separated list; the service validates, and its problems land on the
fields they name."""

import json

from django import forms

from apps.rewards.models import Combination, EvaluatorKind, RewardKind, RewardSource
from workers.rewards.judge import PLACEHOLDERS, judge_config_problems

# The service's field names (`config.<name>`) → this form's fields.
JUDGE_FIELDS = {
    "config.rubric": "rubric",
    "config.model": "judge_model",
    "config.version": "judge_version",
    "config.score": "score_min",
    "config.verdicts": "verdicts",
    "config.max_tokens": "max_tokens",
    "config.timeout_s": "timeout_s",
    "config.retries": "retries",
    "config.temperature": None,
    "config": "config",
    "spec": "spec",
    "kind": "kind",
}


def _verdicts_from_text(text: str) -> dict:
    """`pass=1, fail=0` (or a JSON object) → {label: value}."""
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            raise forms.ValidationError("not valid JSON") from None
        if not isinstance(value, dict):
            raise forms.ValidationError('a JSON object such as {"pass": 1, "fail": 0}')
        return value
    verdicts = {}
    for part in text.replace("\n", ",").split(","):
        if not part.strip():
            continue
        label, separator, number = part.partition("=")
        try:
            verdicts[label.strip()] = float(number) if separator else None
        except ValueError:
            raise forms.ValidationError(f"{part.strip()!r}: write label=value, e.g. pass=1") from None
        if verdicts[label.strip()] is None:
            raise forms.ValidationError(f"{part.strip()!r}: write label=value, e.g. pass=1")
    return verdicts


def _verdicts_as_text(verdicts: dict) -> str:
    """Highest value first, then by label: PostgreSQL's jsonb keeps no key order."""
    ordered = sorted(verdicts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{label}={value:g}" for label, value in ordered)


class EvaluatorForm(forms.Form):
    name = forms.CharField(max_length=120)
    version = forms.CharField(max_length=40, initial="1", help_text="A changed meaning is a new version.")
    kind = forms.ChoiceField(choices=EvaluatorKind.choices, initial=EvaluatorKind.LLM_JUDGE)
    agent_name = forms.CharField(max_length=200, required=False, help_text="Blank: every agent.")
    spec = forms.ChoiceField(
        required=False, label="Reward spec", help_text="Blank: the agent's training spec."
    )
    enabled = forms.BooleanField(required=False, initial=True)
    config = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        label="Configuration (rule kinds)",
        help_text='JSON, e.g. {"pattern": "\\\\d+"} for regex. Not used by llm_judge.',
    )
    rubric = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8}),
        required=False,
        max_length=20_000,
        help_text="Placeholders: "
        + ", ".join("{" + name + "}" for name in PLACEHOLDERS)
        + "; {{ }} for braces.",
    )
    judge_model = forms.CharField(max_length=200, required=False, help_text="A model the gateway routes.")
    judge_version = forms.CharField(
        max_length=64, required=False, help_text="The version the judge is pinned to."
    )
    score_min = forms.FloatField(required=False, label="Score from")
    score_max = forms.FloatField(required=False, label="Score to")
    clamp = forms.BooleanField(
        required=False, initial=True, help_text="A score outside the range is clamped."
    )
    normalize = forms.BooleanField(required=False, help_text="Store (score − from) / (to − from), in [0, 1].")
    verdicts = forms.CharField(required=False, help_text="Categorical verdicts, e.g. pass=1, fail=0.")
    max_tokens = forms.IntegerField(required=False, initial=256, min_value=1, max_value=4096)
    timeout_s = forms.FloatField(required=False, initial=30, min_value=1, max_value=300, label="Timeout (s)")
    retries = forms.IntegerField(required=False, initial=2, min_value=0, max_value=5)

    def __init__(self, *args, spec_names=(), editing=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["spec"].choices = [("", "—"), *((name, name) for name in spec_names)]
        if editing:  # a version's identity does not change
            for name in ("name", "version"):
                self.fields[name].disabled = True
                self.fields[name].required = False

    @classmethod
    def initial_for(cls, evaluator) -> dict:
        """The form's values for an existing evaluator."""
        config = evaluator.config or {}
        initial = {
            "name": evaluator.name,
            "version": evaluator.version,
            "kind": evaluator.kind,
            "agent_name": evaluator.agent_name,
            "spec": evaluator.spec.name if evaluator.spec else "",
            "enabled": evaluator.enabled,
        }
        if evaluator.kind != EvaluatorKind.LLM_JUDGE:
            return initial | {"config": json.dumps(config)}
        score = config.get("score") or {}
        return initial | {
            "rubric": config.get("rubric", ""),
            "judge_model": config.get("model", ""),
            "judge_version": config.get("version", ""),
            "score_min": score.get("min"),
            "score_max": score.get("max"),
            "clamp": score.get("clamp", True),
            "normalize": score.get("normalize", False),
            "verdicts": _verdicts_as_text(config.get("verdicts") or {}),
            "max_tokens": config.get("max_tokens", 256),
            "timeout_s": config.get("timeout_s", 30),
            "retries": config.get("retries", 2),
        }

    def clean_verdicts(self):
        return _verdicts_from_text(self.cleaned_data.get("verdicts") or "")

    def _judge_config(self, data: dict) -> dict:
        config = {
            "rubric": data.get("rubric") or "",
            "model": (data.get("judge_model") or "").strip(),
            "version": (data.get("judge_version") or "").strip(),
            "max_tokens": data.get("max_tokens") or 256,
            "timeout_s": data.get("timeout_s") or 30,
            "retries": 2 if data.get("retries") is None else data["retries"],
        }
        if data.get("score_min") is not None or data.get("score_max") is not None:
            config["score"] = {
                "min": data.get("score_min"),
                "max": data.get("score_max"),
                "clamp": bool(data.get("clamp")),
                "normalize": bool(data.get("normalize")),
            }
        if data.get("verdicts"):
            config["verdicts"] = data["verdicts"]
        return config

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        if data.get("kind") == EvaluatorKind.LLM_JUDGE:
            data["config"] = self._judge_config(data)
            self.add_service_fields(judge_config_problems(data["config"]))
            return data
        try:
            config = json.loads(data.get("config") or "{}")
        except ValueError:
            self.add_error("config", "not valid JSON")
            return data
        if not isinstance(config, dict):
            self.add_error("config", "a JSON object")
        data["config"] = config
        return data

    def add_service_fields(self, problems: dict) -> None:
        """Field problems named as the service names them (`config.rubric`) on this form's fields."""
        for key, problem in problems.items():
            for text in problem if isinstance(problem, list) else [problem]:
                field = JUDGE_FIELDS.get(key, key)
                self.add_error(field if field in self.fields else None, text)

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        return {
            "kind": data["kind"],
            "config": data["config"],
            "agent_name": data.get("agent_name") or "",
            "enabled": bool(data.get("enabled")),
            "spec_name": data.get("spec") or "",
        }


def _numbers_by_name(text: str, *, example: str) -> dict[str, float]:
    """A JSON object of names to numbers (`{"good": 1, "bad": 0}`); blank is {}."""
    text = text.strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise forms.ValidationError("not valid JSON") from None
    if not isinstance(value, dict):
        raise forms.ValidationError(f"a JSON object such as {example}")
    numbers = {}
    for name, number in value.items():
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise forms.ValidationError(f"{name!r}: the value must be a number")
        numbers[name] = float(number)
    return numbers


class RewardSpecForm(forms.Form):
    """One reward spec, as `services.reward_spec_create` takes it (the REST API's fields)."""

    name = forms.CharField(max_length=120)
    agent_name = forms.CharField(max_length=200, required=False, help_text="Blank: every agent.")
    kind = forms.ChoiceField(choices=RewardKind.choices, initial=RewardKind.NUMERIC)
    minimum = forms.FloatField(required=False, help_text="Numeric: the lowest value allowed (blank: none).")
    maximum = forms.FloatField(required=False, help_text="Numeric: the highest value allowed (blank: none).")
    categories = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        help_text='Categorical only: JSON {"label": value}, e.g. {"good": 1, "bad": 0}.',
    )
    is_training_reward = forms.BooleanField(
        required=False, label="Training reward", help_text="The reward training optimizes: one per agent."
    )
    combination = forms.ChoiceField(
        choices=Combination.choices,
        initial=Combination.PRIORITY,
        help_text="How the rewards of several sources become one.",
    )
    source_priority = forms.CharField(
        max_length=200,
        required=False,
        help_text="Priority: sources, most trusted first, comma-separated (blank: the default order). Sources: "
        + ", ".join(RewardSource.values)
        + ".",
    )
    source_weights = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        help_text='Weighted sum: JSON {"source": weight}, e.g. {"user": 0.7, "evaluator": 0.3}.',
    )
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)

    def clean_categories(self) -> dict[str, float]:
        return _numbers_by_name(self.cleaned_data.get("categories") or "", example='{"good": 1, "bad": 0}')

    def clean_source_weights(self) -> dict[str, float]:
        return _numbers_by_name(self.cleaned_data.get("source_weights") or "", example='{"user": 1}')

    def clean_source_priority(self) -> list[str]:
        text = self.cleaned_data.get("source_priority") or ""
        return [source.strip() for source in text.split(",") if source.strip()]

    def add_service_fields(self, problems: dict) -> None:
        """The service's field problems (`{"maximum": ["must not be below minimum"]}`) beside their fields."""
        for field, problem in problems.items():
            for text in problem if isinstance(problem, list) else [problem]:
                self.add_error(field if field in self.fields else None, text)

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        arguments = {
            "name": data["name"],
            "agent_name": (data.get("agent_name") or "").strip(),
            "kind": data["kind"],
            "minimum": data.get("minimum"),
            "maximum": data.get("maximum"),
            "is_training_reward": bool(data.get("is_training_reward")),
            "combination": data["combination"],
            "description": data.get("description") or "",
        }
        # Left out when empty, as the REST API leaves out what its body does not name (the model's defaults).
        for name in ("categories", "source_priority", "source_weights"):
            if data.get(name):
                arguments[name] = data[name]
        return arguments
