"""The trajectory browser's filter form."""

from django import forms

from apps.trajectories.search import OUTCOMES


class TrajectoryFilterForm(forms.Form):
    text = forms.CharField(
        required=False,
        max_length=200,
        label="Contains",
        help_text="in a message, an answer or a tool result",
        widget=forms.TextInput(attrs={"type": "search"}),
    )
    session_id = forms.CharField(required=False, max_length=200)
    agent = forms.CharField(required=False, max_length=200)
    task_id = forms.CharField(required=False, max_length=200)
    status = forms.ChoiceField(
        required=False,
        choices=[("", "any"), ("open", "open"), ("complete", "complete"), ("aborted", "aborted")],
    )
    purpose = forms.ChoiceField(
        required=False,
        choices=[
            ("", "any"),
            ("production", "production"),
            ("eval", "eval"),
            ("replay", "replay"),
            ("annotation", "annotation"),
        ],
    )
    model_version = forms.CharField(
        required=False, max_length=64, label="Model version", help_text="a number, 3 or v3"
    )
    outcome = forms.ChoiceField(required=False, choices=[("", "any"), *OUTCOMES.items()])
    reward_min = forms.FloatField(required=False)
    reward_max = forms.FloatField(required=False)
    started_after = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    started_before = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
