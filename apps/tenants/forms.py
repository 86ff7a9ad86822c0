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

    def __init__(self, *args, price_table: dict | None = None, pii_patterns: list | None = None, **kwargs):
        """`price_table` and `pii_patterns`: the policy's current ones, shown as rows of fields (two empty
        rows to add one); a post that holds none of a table's fields leaves that table as it is."""
        super().__init__(*args, **kwargs)
        prices = list((price_table or {}).items())
        self.price_rows = max(len(prices), _posted_rows(self.data, "price")) + EMPTY_ROWS
        for index in range(self.price_rows):
            model, row = prices[index] if index < len(prices) else ("", {})
            self.fields[f"price-{index}-model"] = forms.CharField(
                required=False, max_length=200, label="Model", initial=model
            )
            for key, words in PRICE_KEYS.items():
                self.fields[f"price-{index}-{key}"] = forms.DecimalField(
                    required=False,
                    min_value=0,
                    max_digits=12,
                    decimal_places=6,
                    label=words,
                    initial=row.get(key),
                )
        patterns = list(pii_patterns or [])
        self.pattern_rows = max(len(patterns), _posted_rows(self.data, "pattern")) + EMPTY_ROWS
        for index in range(self.pattern_rows):
            pattern = patterns[index] if index < len(patterns) else {}
            self.fields[f"pattern-{index}-name"] = forms.SlugField(
                required=False, max_length=64, label="Name", initial=pattern.get("name", "")
            )
            self.fields[f"pattern-{index}-regex"] = forms.CharField(
                required=False, max_length=500, label="Regular expression", initial=pattern.get("regex", "")
            )

    def settings_fields(self):
        """The policy's own fields (the rows of the two tables come from `price_fields`, `pattern_fields`)."""
        return [self[name] for name in self.fields if not name.startswith(("price-", "pattern-"))]

    def price_fields(self):
        return [
            [self[f"price-{index}-{name}"] for name in ("model", *PRICE_KEYS)]
            for index in range(self.price_rows)
        ]

    def pattern_fields(self):
        return [
            [self[f"pattern-{index}-{name}"] for name in ("name", "regex")]
            for index in range(self.pattern_rows)
        ]

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("late_reward_hours") is None:
            cleaned.pop("late_reward_hours", None)  # left empty: keep the current window
        if cleaned.get("session_idle_seconds") is None:
            cleaned.pop("session_idle_seconds", None)  # left empty: keep the current timeout
        if _posted_rows(self.data, "price"):
            cleaned["price_table"] = self._price_table(cleaned)
        if _posted_rows(self.data, "pattern"):
            cleaned["pii_patterns"] = self._pii_patterns(cleaned)
        for name in [name for name in cleaned if name.startswith(("price-", "pattern-"))]:
            cleaned.pop(name)
        return cleaned

    def _price_table(self, cleaned) -> dict:
        table: dict = {}
        for index in range(self.price_rows):
            model = (cleaned.get(f"price-{index}-model") or "").strip()
            values = {key: cleaned.get(f"price-{index}-{key}") for key in PRICE_KEYS}
            if not model:
                if any(value is not None for value in values.values()):
                    self.add_error(f"price-{index}-model", "Name the model these prices are for.")
                continue
            if model in table:
                self.add_error(f"price-{index}-model", f"{model} has a row already.")
                continue
            for key, value in values.items():
                if value is None:
                    self.add_error(f"price-{index}-{key}", "Give a price (0 for free).")
            table[model] = {key: float(value) for key, value in values.items() if value is not None}
        return table

    def _pii_patterns(self, cleaned) -> list:
        patterns = []
        for index in range(self.pattern_rows):
            name = cleaned.get(f"pattern-{index}-name") or ""
            regex = cleaned.get(f"pattern-{index}-regex") or ""
            if not name and not regex:
                continue
            if not name or not regex:
                self.add_error(f"pattern-{index}-{'name' if not name else 'regex'}", "A pattern needs both.")
                continue
            try:
                patterns_from_policy(
                    [{"name": name, "regex": regex}]
                )  # what the policy service and gateway use
            except InvalidPattern as error:
                self.add_error(f"pattern-{index}-regex", str(error))
                continue
            patterns.append({"name": name, "regex": regex})
        return patterns


EMPTY_ROWS = 2  # empty rows under a table's rows, to add one
PRICE_KEYS = {
    "prompt_per_1k": "Prompt (USD per 1,000 tokens)",
    "completion_per_1k": "Completion (USD per 1,000 tokens)",
}


def _posted_rows(data, prefix: str) -> int:
    """How many rows of the `prefix` table the post holds (its highest row number + 1; 0: none posted)."""
    numbers = [
        int(parts[1])
        for name in data
        if (parts := name.split("-"))[0] == prefix and len(parts) == 3 and parts[1].isdigit()
    ]
    return max(numbers) + 1 if numbers else 0
