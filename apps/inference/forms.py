"""The backends page's registration form; the service validates again."""

from django import forms

from apps.core.errors import ValidationFailed
from apps.inference.egress import backend_url_validate
from apps.inference.models import BackendKind


class BackendRegisterForm(forms.Form):
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

    def clean_base_url(self):
        try:  # the same check as the service's (egress.py), shown beside the field
            return backend_url_validate(self.cleaned_data["base_url"])
        except ValidationFailed as error:
            raise forms.ValidationError(error.message, code="not_allowed") from None
