"""Console page: the audit log, filtered by verb, actor and time, paginated."""

from django.core.paginator import Paginator
from django.shortcuts import render

from apps.audit import forms
from apps.audit.selectors import audit_event_list, audit_verbs
from apps.console.access import console_page
from apps.console.pages import PAGE_SIZE, query_without_page
from apps.tenants.permissions import Action


@console_page(Action.AUDIT_VIEW)
def audit(request):
    form = forms.AuditFilterForm(request.GET or None, verbs=audit_verbs(tenant=request.tenant))
    filters = {key: value for key, value in form.cleaned_data.items() if value} if form.is_valid() else {}
    page = Paginator(audit_event_list(tenant=request.tenant, **filters), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    return render(
        request, "console/audit.html", {"form": form, "page": page, "query": query_without_page(request)}
    )
