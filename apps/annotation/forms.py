"""The annotation page's new-queue form; `annotation_queue_create` validates again (the spec, the assignees)."""

from django import forms

from apps.trajectories.models import Purpose, TrajectoryStatus


class QueueCreateForm(forms.Form):
    """A queue: a scored reward spec, a filter over trajectories, labels per item and the assignees."""

    name = forms.CharField(max_length=200)
    spec = forms.TypedChoiceField(coerce=int, label="Reward spec", help_text="What annotators rate.")
    purpose = forms.ChoiceField(
        choices=[("", "any"), *Purpose.choices], required=False, initial=Purpose.PRODUCTION
    )
    status = forms.ChoiceField(
        choices=[("", "any"), *TrajectoryStatus.choices], required=False, initial=TrajectoryStatus.COMPLETE
    )
    agent = forms.CharField(max_length=200, required=False)
    task_id = forms.CharField(max_length=200, required=False, label="Task id")
    sample_size = forms.IntegerField(
        min_value=1,
        max_value=100_000,
        required=False,
        initial=50,
        label="Sample size",
        help_text="How many matching trajectories to sample at random; empty takes them all.",
    )
    annotators_per_item = forms.IntegerField(min_value=1, max_value=10, initial=1, label="Labels per item")
    assignees = forms.TypedMultipleChoiceField(coerce=int, help_text="Members who may label.")

    def __init__(self, *args, specs=(), members=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["spec"].choices = [(spec.pk, f"{spec.name} ({spec.kind})") for spec in specs]
        self.fields["assignees"].choices = [
            (membership.user_id, f"{membership.user.username} ({membership.role})") for membership in members
        ]

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        return {
            "name": data["name"],
            "spec_id": data["spec"],
            "filters": {name: data[name] for name in ("purpose", "status", "agent", "task_id") if data[name]},
            "annotators_per_item": data["annotators_per_item"],
            "assignee_ids": data["assignees"],
            "sample_size": data["sample_size"],
        }
