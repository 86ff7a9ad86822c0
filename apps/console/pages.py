"""Helpers every app's console pages share (with `access.console_page`, which resolves the tenant and role)."""

from collections.abc import Callable

from django.contrib import messages

from apps.core.errors import DomainError

PAGE_SIZE = 50  # rows per page of a paginated console list


def console_action(request, call: Callable, *, success: str = ""):
    """Runs a page's service call and returns its result. A domain error becomes an error message on the next
    page and the result None; `success`, when given, becomes a success message once the call succeeded.

    A view acting on an object named in its path looks the object up first, outside this call, so another
    tenant's object answers 404 like a missing one, never a redirect with a message."""
    try:
        result = call()
    except DomainError as error:
        messages.error(request, error.message)
        return None
    if success:
        messages.success(request, success)
    return result


def query_without_page(request) -> str:
    """The list's query string without its page number, for the pager's links."""
    query = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()
