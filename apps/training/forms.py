from django import forms

from apps.training.jobs import training_hyperparameters
from apps.training.models import Algorithm
from workers.models.templates import MAX_TEMPLATE_CHARS

SCHEDULES = [("constant", "constant"), ("linear", "linear"), ("cosine", "cosine")]


class TrainingJobForm(forms.Form):
    """The console's new-job form; the service validates the rest (the engine config, the snapshot)."""

    base_version = forms.TypedChoiceField(coerce=int, label="Base version")
    algorithm = forms.ChoiceField(choices=Algorithm.choices)
    learning_rate = forms.FloatField(min_value=1e-9, max_value=1.0, initial=1e-5)
    schedule = forms.ChoiceField(choices=SCHEDULES, initial="constant")
    warmup_steps = forms.IntegerField(min_value=0, initial=0)
    batch_size = forms.IntegerField(min_value=1, max_value=4096, initial=16)
    total_steps = forms.IntegerField(min_value=1, max_value=100000, initial=10)
    checkpoint_every = forms.IntegerField(min_value=1, initial=10)
    staleness_bound = forms.IntegerField(
        min_value=0,
        required=False,
        label="Staleness bound η",
        help_text="Empty: no bound. 0: only data of the base version.",
    )
    lora_rank = forms.IntegerField(
        min_value=0, max_value=256, initial=0, label="LoRA rank", help_text="0: full fine-tuning."
    )
    agent = forms.CharField(required=False, max_length=200)
    task_id = forms.CharField(required=False, max_length=200, label="Task id")
    max_trajectories = forms.IntegerField(min_value=1, required=False)
    description = forms.CharField(required=False, max_length=300)

    def __init__(self, *args, versions=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["base_version"].choices = [(v.pk, f"{v.label} ({v.status})") for v in versions]

    def clean(self):
        data = super().clean()
        if (
            data.get("warmup_steps")
            and data.get("total_steps")
            and data["warmup_steps"] >= data["total_steps"]
        ):
            self.add_error("warmup_steps", "Warm-up must be shorter than the run.")
        return data

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        return {
            "base_version_id": data["base_version"],
            "algorithm": data["algorithm"],
            "hyperparameters": training_hyperparameters(
                learning_rate=data["learning_rate"],
                schedule=data["schedule"],
                warmup_steps=data["warmup_steps"],
                lora_rank=data["lora_rank"],
            ),
            "batch_size": data["batch_size"],
            "total_steps": data["total_steps"],
            "checkpoint_every": data["checkpoint_every"],
            "staleness_bound": data["staleness_bound"],
            "agent": data["agent"] or None,
            "task_id": data["task_id"] or None,
            "max_trajectories": data["max_trajectories"],
            "description": data["description"],
        }


class ChatTemplateForm(forms.Form):
    """The model page's chat-template form: a new candidate version over the chosen version's weights."""

    version = forms.TypedChoiceField(coerce=int, label="Over the weights of")
    chat_template = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 16, "cols": 100, "spellcheck": "false"}),
        max_length=MAX_TEMPLATE_CHARS,
        strip=False,
        label="Chat template (jinja)",
        help_text="Checked by rendering a conversation with a tool, a tool call, a tool result and a generation "
        "prompt; tool calls must be written as <tool_call>{json}</tool_call>.",
    )

    def __init__(self, *args, versions=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].choices = [(v.pk, f"{v.label} ({v.status})") for v in versions]


class ModelRegisterForm(forms.Form):
    """The models page's registration form (admins): a directory of the tenant's model inbox as a new version."""

    name = forms.RegexField(
        regex=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
        max_length=100,
        label="Model name",
        help_text="The name agents ask for. A new name is version 0; an existing model gets its next version.",
        error_messages={
            "invalid": "1 to 100 letters, digits, '.', '-' or '_', starting with a letter or digit."
        },
    )
    directory = forms.CharField(
        max_length=500,
        help_text="A Hugging Face model directory in this tenant's model inbox, named relative to the inbox.",
    )
    description = forms.CharField(max_length=300, required=False)


class OnlineRunForm(forms.Form):
    """The console's start form of an online run (AReaL's online decoupled PPO); the service validates again."""

    base_version = forms.TypedChoiceField(coerce=int, label="Learn from")
    learning_rate = forms.FloatField(min_value=1e-9, max_value=1.0, initial=1e-5)
    samples_per_step = forms.IntegerField(min_value=1, max_value=4096, initial=16, label="Samples per step")
    publish_every = forms.IntegerField(min_value=1, initial=1, label="A version every (steps)")
    staleness_bound = forms.IntegerField(min_value=0, initial=1, label="Staleness bound η")
    rollout_bound = forms.IntegerField(
        min_value=0,
        required=False,
        label="Rollout bound ρ",
        help_text="Sessions let out ahead of the learner, in steps' worth. Empty: η.",
    )
    max_steps = forms.IntegerField(min_value=1, required=False, help_text="Empty: until stopped.")
    publish_to_backends = forms.BooleanField(
        required=False,
        initial=True,
        label="Serve each version",
        help_text="On: each version is loaded onto the model's backends and serves at once. Off: versions are only "
        "registered, and releases decide what serves.",
    )

    def __init__(self, *args, versions=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["base_version"].choices = [(v.pk, f"{v.label} ({v.status})") for v in versions]

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        return {
            "hyperparameters": {"learning_rate": data["learning_rate"]},
            "samples_per_step": data["samples_per_step"],
            "publish_every": data["publish_every"],
            "staleness_bound": data["staleness_bound"],
            "rollout_bound": data["rollout_bound"],
            "max_steps": data["max_steps"],
            "publish_to_backends": data["publish_to_backends"],
        }


class AliasMoveForm(forms.Form):
    """A model page's alias form: point a named alias (not `production`, which moves with what serves) at a
    version."""

    alias = forms.SlugField(
        max_length=40, help_text="e.g. candidate, staging; production moves with releases."
    )
    version = forms.TypedChoiceField(coerce=int)
    reason = forms.CharField(max_length=300, required=False)

    def __init__(self, *args, versions=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].choices = [(v.pk, f"{v.label} ({v.status})") for v in versions]
