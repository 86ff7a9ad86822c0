"""The audit page's filter form."""

from django import forms


class AuditFilterForm(forms.Form):
    verb = forms.CharField(required=False, max_length=64)
    actor = forms.CharField(required=False, max_length=200)
    since = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    until = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
