"""The backends page's forms (registration; a backend's provider settings); the service validates again.

A capability flag is a select (the kind's default / yes / no) rather than a checkbox, so a form posted without
it changes nothing instead of turning it off; so is the cap field. The credential field never shows a stored
value."""

from django import forms

from apps.core.errors import ValidationFailed
from apps.inference.credentials import credential_validate
from apps.inference.egress import backend_url_validate
from apps.inference.models import PROVIDER_FIELDS, BackendKind, CapParameter

CAPABILITY_LABELS = {
    "returns_token_ids": "Returns token ids",
    "returns_logprobs": "Returns logprobs",
    "returns_token_versions": "Returns per-token versions",
    "accepts_return_token_ids": "Accepts return_token_ids",
}
UNCHANGED = ""


def _flag(label: str, *, unchanged: str) -> forms.TypedChoiceField:
    return forms.TypedChoiceField(
        label=label,
        choices=[(UNCHANGED, unchanged), ("true", "yes"), ("false", "no")],
        coerce=lambda value: value == "true",
        empty_value=None,
        required=False,
    )


def _cap_field(*, unchanged: str) -> forms.TypedChoiceField:
    return forms.TypedChoiceField(
        label="Cap parameter",
        choices=[(UNCHANGED, unchanged), *CapParameter.choices],
        empty_value=None,
        required=False,
        help_text="The field the server reads a chat completion's cap from (OpenAI: max_completion_tokens).",
    )


def _credential_field(help_text: str) -> forms.CharField:
    return forms.CharField(
        required=False,
        strip=False,
        max_length=4096,
        label="API credential",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=help_text,
    )


class ProviderFieldsForm(forms.Form):
    """What registration and the provider settings share: the credential's check and the flags chosen."""

    def clean_credential(self):
        credential = self.cleaned_data.get("credential") or ""
        if credential:
            try:
                credential_validate(credential)
            except ValidationFailed as error:
                raise forms.ValidationError(error.message, code="invalid") from None
        return credential

    def capabilities(self) -> dict:
        """The flags and the cap field chosen (one left at its first choice is not given)."""
        return {
            field: self.cleaned_data[field]
            for field in PROVIDER_FIELDS
            if self.cleaned_data.get(field) is not None
        }


class BackendRegisterForm(ProviderFieldsForm):
    name = forms.SlugField(max_length=64)
    base_url = forms.URLField(
        max_length=300,
        assume_scheme="http",
        label="Base URL",
        help_text="Server root, e.g. http://127.0.0.1:8100",
    )
    kind = forms.ChoiceField(choices=BackendKind.choices)
    served_model = forms.CharField(max_length=200, label="Served model name")
    model_version = forms.CharField(max_length=64, required=False)
    weight = forms.IntegerField(min_value=0, max_value=1000, initial=1)
    credential = _credential_field(
        "Optional (admins only): a hosted API's key, sent as a bearer token (x-api-key for Anthropic); "
        "stored encrypted and never shown again."
    )
    returns_token_ids = _flag(CAPABILITY_LABELS["returns_token_ids"], unchanged="default for the kind")
    returns_logprobs = _flag(CAPABILITY_LABELS["returns_logprobs"], unchanged="default for the kind")
    returns_token_versions = _flag(
        CAPABILITY_LABELS["returns_token_versions"], unchanged="default for the kind"
    )
    accepts_return_token_ids = _flag(
        CAPABILITY_LABELS["accepts_return_token_ids"], unchanged="default for the kind"
    )
    cap_parameter = _cap_field(unchanged="default for the kind")

    def clean_base_url(self):
        try:  # the same check as the service's (egress.py), shown beside the field
            return backend_url_validate(self.cleaned_data["base_url"])
        except ValidationFailed as error:
            raise forms.ValidationError(error.message, code="not_allowed") from None

    def registration(self) -> dict:
        """The service's keyword arguments."""
        fields = {
            key: self.cleaned_data[key]
            for key in ("name", "base_url", "kind", "served_model", "model_version", "weight")
        }
        return fields | self.capabilities() | {"credential": self.cleaned_data.get("credential", "")}


class BackendProviderForm(ProviderFieldsForm):
    """A registered backend's kind, capability flags and credential (set, rotate or clear)."""

    kind = forms.ChoiceField(choices=BackendKind.choices)
    credential = _credential_field("A new credential replaces the stored one (admins only).")
    clear_credential = forms.BooleanField(required=False, label="Clear the stored credential")
    returns_token_ids = _flag(CAPABILITY_LABELS["returns_token_ids"], unchanged="unchanged")
    returns_logprobs = _flag(CAPABILITY_LABELS["returns_logprobs"], unchanged="unchanged")
    returns_token_versions = _flag(CAPABILITY_LABELS["returns_token_versions"], unchanged="unchanged")
    accepts_return_token_ids = _flag(CAPABILITY_LABELS["accepts_return_token_ids"], unchanged="unchanged")
    cap_parameter = _cap_field(unchanged="unchanged")

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("credential") and cleaned.get("clear_credential"):
            raise forms.ValidationError("Either set a new credential or clear it, not both.")
        return cleaned

    def touches_credential(self) -> bool:
        return bool(self.cleaned_data.get("credential") or self.cleaned_data.get("clear_credential"))

    def changes(self) -> dict:
        """The service's `changes`."""
        changes = {"kind": self.cleaned_data["kind"], **self.capabilities()}
        if self.cleaned_data.get("credential"):
            changes["credential"] = self.cleaned_data["credential"]
        elif self.cleaned_data.get("clear_credential"):
            changes["credential"] = ""
        return changes
