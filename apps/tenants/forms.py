"""The console's forms for members, API keys and the policy; the services validate again."""

from django import forms

from apps.tenants.models import MAX_SESSION_IDLE_SECONDS, ConsentMode, PiiMode
from apps.tenants.permissions import Role, Scope
from workers.pii import InvalidPattern, patterns_from_policy

GRACE_CHOICES = [(0, "End now"), (3600, "1 hour"), (86400, "1 day"), (7 * 86400, "7 days")]


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(max_length=120)
    scopes = forms.MultipleChoiceField(
        choices=[(scope.value, scope.value) for scope in Scope], widget=forms.CheckboxSelectMultiple
    )
    expires_in_days = forms.IntegerField(min_value=1, max_value=3650, required=False, label="Expires in days")


class ApiKeyRotateForm(forms.Form):
    grace_seconds = forms.TypedChoiceField(
        choices=GRACE_CHOICES, coerce=int, initial=3600, label="Old key valid for"
    )


# The role select starts on a prompt, never on Admin: an admin picks each person's role on purpose.
ROLE_PROMPT = [("", "Choose a role")]
ROLE_HELP = (
    "Viewer: reads everything. Annotator: labels in annotation queues. Operator: runs training, evaluation "
    "and releases, approves promotions. Admin: all of that, plus members, API keys and the policy."
)


class MemberAddForm(forms.Form):
    user = forms.CharField(
        max_length=254,
        label="Email or username",
        help_text="A person without an account gets one, and you get a link for them to set a password.",
    )
    role = forms.ChoiceField(choices=ROLE_PROMPT + list(Role.choices), help_text=ROLE_HELP)


class InvitationAcceptForm(forms.Form):
    password = forms.CharField(
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}), label="Choose a password"
    )
    repeated = forms.CharField(
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}), label="The same password again"
    )

    def clean(self):
        data = super().clean()
        if data.get("password") and data.get("repeated") and data["password"] != data["repeated"]:
            self.add_error("repeated", "The two passwords differ.")
        return data


class TenantCreateForm(forms.Form):
    slug = forms.SlugField(max_length=64, help_text="Lower-case letters, digits and hyphens; part of URLs.")
    name = forms.CharField(max_length=200)
    admin = forms.CharField(
        max_length=254,
        required=False,
        label="First admin (email or username)",
        help_text="Empty: you become its admin.",
    )


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class PolicyForm(forms.Form):
    allowed_models = forms.CharField(required=False, help_text="Comma-separated; empty allows every model.")
    rate_limit_rpm = forms.IntegerField(min_value=1, required=False, label="Requests per minute")
    rate_limit_tpm = forms.IntegerField(min_value=1, required=False, label="Tokens per minute")
    monthly_budget_usd = forms.DecimalField(min_value=0, max_digits=12, decimal_places=4, required=False)
    consent_mode = forms.ChoiceField(choices=ConsentMode.choices)
    retention_days = forms.IntegerField(min_value=1, max_value=3650)
    pii_mode = forms.ChoiceField(choices=PiiMode.choices, label="PII mode")
    price_table = forms.JSONField(
        required=False, help_text='{"model": {"prompt_per_1k": 0.1, "completion_per_1k": 0.2}}'
    )
    pii_patterns = forms.JSONField(
        required=False, label="PII patterns", help_text='[{"name": "order_id", "regex": "ORD-\\d+"}]'
    )
    late_reward_hours = forms.IntegerField(
        min_value=0,
        max_value=24 * 366,
        required=False,
        label="Late-reward window (hours)",
        help_text="How long after a session ends its rewards are still accepted.",
    )
    session_idle_seconds = forms.IntegerField(
        min_value=0,
        max_value=MAX_SESSION_IDLE_SECONDS,
        required=False,
        label="Session idle timeout (seconds)",
        help_text="An open session with no step for this long is closed, so it can qualify for training. "
        "0 never closes a session by idleness.",
    )
    review_required = forms.BooleanField(
        required=False, label="Trajectories need human review before training"
    )
    two_person_promotion = forms.BooleanField(required=False, label="Promotion needs two different operators")

    def clean_allowed_models(self):
        raw = self.cleaned_data["allowed_models"]
        return [item.strip() for item in raw.split(",") if item.strip()]

    def clean_price_table(self):
        return self.cleaned_data["price_table"] or {}

    def clean_pii_patterns(self):
        patterns = self.cleaned_data["pii_patterns"] or []
        try:
            patterns_from_policy(patterns)  # the validation the policy service and the gateway use
        except InvalidPattern as error:
            raise forms.ValidationError(str(error)) from None
        return patterns

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("late_reward_hours") is None:
            cleaned.pop("late_reward_hours", None)  # left empty: keep the current window
        if cleaned.get("session_idle_seconds") is None:
            cleaned.pop("session_idle_seconds", None)  # left empty: keep the current timeout
        return cleaned
