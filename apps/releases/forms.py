"""The serving page's form; the service validates again (apps/releases/serving.py)."""

from django import forms


class ProductionSetForm(forms.Form):
    """A model's first production version: it serves every new session from now on."""

    version = forms.TypedChoiceField(coerce=int, label="Version")
    reason = forms.CharField(max_length=300, required=False)

    def __init__(self, *args, versions=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].choices = [(v.pk, f"{v.label} ({v.status})") for v in versions]
