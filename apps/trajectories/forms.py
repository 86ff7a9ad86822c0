"""The trajectory browser's filter form."""

from django import forms


class TrajectoryFilterForm(forms.Form):
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
    reward_min = forms.FloatField(required=False)
    reward_max = forms.FloatField(required=False)
    started_after = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    started_before = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
