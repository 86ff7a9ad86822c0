"""The evaluation pages' forms: a new suite, a case added to a suite. The services validate again (a case's
messages and scorer configuration) and their field errors are shown beside the fields."""

import json

from django import forms

from apps.evaluation.models import CaseCategory, Scorer, SuiteKind


class SuiteCreateForm(forms.Form):
    name = forms.SlugField(max_length=80)
    kind = forms.ChoiceField(choices=SuiteKind.choices, initial=SuiteKind.REGRESSION)
    agent_name = forms.CharField(max_length=200, required=False, label="Agent")
    description = forms.CharField(max_length=300, required=False)


class CaseCreateForm(forms.Form):
    """One case: a conversation (an optional system message and the user's message), a scorer and its
    configuration as JSON (e.g. {"expected": "Paris"} for exact_match, {"pattern": "..."} for regex)."""

    key = forms.SlugField(max_length=80)
    category = forms.ChoiceField(choices=CaseCategory.choices, initial=CaseCategory.REGRESSION)
    system = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2, "cols": 100}), required=False, label="System"
    )
    user = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 100}), label="User message")
    scorer = forms.ChoiceField(choices=Scorer.choices)
    scorer_config = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 100, "spellcheck": "false"}),
        required=False,
        initial="{}",
        label="Scorer configuration (JSON)",
    )

    def clean_scorer_config(self) -> dict:
        text = self.cleaned_data["scorer_config"].strip() or "{}"
        try:
            config = json.loads(text)
        except ValueError as error:
            raise forms.ValidationError(f"Not JSON: {error}") from None
        if not isinstance(config, dict):
            raise forms.ValidationError("A JSON object.")
        return config

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        messages = [{"role": "system", "content": data["system"]}] if data["system"].strip() else []
        messages.append({"role": "user", "content": data["user"]})
        return {
            "key": data["key"],
            "category": data["category"],
            "input_messages": messages,
            "scorer": data["scorer"],
            "scorer_config": data["scorer_config"],
        }
