"""The audit page's filter form."""

from django import forms


class AuditFilterForm(forms.Form):
    """`verbs`: the verbs the tenant's log holds, offered by the verb select (with each verb's family,
    "release.*", which matches every verb it starts)."""

    verb = forms.ChoiceField(required=False)
    actor = forms.CharField(required=False, max_length=200)
    since = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    until = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))

    def __init__(self, *args, verbs: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        families = sorted({verb.split(".", 1)[0] + "." for verb in verbs if "." in verb})
        self.fields["verb"].choices = [
            ("", "any"),
            ("Families", [(family, f"{family}*") for family in families]),
            ("Verbs", [(verb, verb) for verb in verbs]),
        ]
