"""The base classes of every REST view.

`TenantApi.initial` authenticates, resolves the tenant (from the API key, or for a signed-in person
from the `X-Tenant` header, the console's current tenant, or their only membership), and checks the
action declared for the HTTP method against the role × action table. Subclasses cannot override
`initial` or `get_queryset`, so none can skip the tenant; a deliberate bypass must be named
`dangerously_*`.

`UserApi` is the one deliberate exception, named as such: views scoped to the caller rather than to a
tenant (the tenants a person may act in). It resolves no tenant; its reads go through selectors that take
the user, and its subclasses cannot override `initial` or `get_queryset` either.
"""

from rest_framework.permissions import IsAuthenticated
from rest_framework.views import APIView

from apps.audit.services import Actor
from apps.core.errors import Forbidden, NotFound, ValidationFailed
from apps.core.pagination import PagePagination
from apps.tenants.authentication import KeyPrincipal
from apps.tenants.permissions import PERMISSIONS, Action, role_can, scopes_can
from apps.tenants.selectors import membership_first_for_user, membership_for_user, tenant_get

TENANT_SESSION_KEY = "tenant_slug"
# The widest values an input may carry into a PostgreSQL `integer` / `bigint` column (PositiveIntegerField,
# PositiveBigIntegerField); past them the database refuses the row and the request would answer 500.
INTEGER_COLUMN_MAX = 2**31 - 1
BIG_INTEGER_COLUMN_MAX = 2**63 - 1


def tenant_resolve_for_user(*, request, user):
    """Returns (tenant, membership) for a signed-in person, or raises NotFound."""
    slug = request.headers.get("X-Tenant") or request.session.get(TENANT_SESSION_KEY)
    if slug:
        membership = membership_for_user(user=user, tenant_slug=slug)
        if membership is None:
            raise NotFound(f"no tenant {slug!r} among yours", code="tenant_not_found")
        return membership.tenant, membership
    membership = membership_first_for_user(user=user)
    if membership is None:
        raise NotFound("you are not a member of any tenant", code="tenant_not_found")
    return membership.tenant, membership


def _refuse_scope_bypass(cls, *, scope: str) -> None:
    for name in ("initial", "get_queryset"):
        if name in cls.__dict__:
            raise TypeError(f"{cls.__name__} overrides {name}, which would bypass {scope}")


def _paginated(view, rows, serializer_class):
    paginator = view.pagination_class()
    page = paginator.paginate_queryset(rows, view.request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


class UserApi(APIView):
    """The base of a REST view scoped to the signed-in caller, not to one tenant: it lists what the caller
    may act in, so there is no tenant to resolve. Its reads take the user (`tenant_list_for_user(user=)`) or,
    for an API key, only the key's own tenant; a view reading a tenant's data belongs on `TenantApi`."""

    permission_classes = [IsAuthenticated]
    pagination_class = PagePagination

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _refuse_scope_bypass(cls, scope="the caller's scope")

    def paginated(self, rows, serializer_class):
        return _paginated(self, rows, serializer_class)


class TenantApi(APIView):
    actions: dict[str, Action] = {}
    pagination_class = PagePagination

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _refuse_scope_bypass(cls, scope="tenant resolution")
        unknown = set(cls.actions) - {"GET", "POST", "PUT", "PATCH", "DELETE"}
        if unknown:
            raise TypeError(f"{cls.__name__}.actions names unknown methods {unknown}")

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        for (
            name,
            values,
        ) in request.query_params.lists():  # PostgreSQL text cannot hold NUL: refuse, never 500
            if any("\x00" in value for value in (name, *values)):
                raise ValidationFailed(
                    "query parameters cannot contain NUL characters",
                    code="invalid_query",
                    fields={name.replace("\x00", ""): ["contains a NUL character"]},
                )
        method = "GET" if request.method in {"HEAD", "OPTIONS"} else request.method
        action = self.actions.get(method)
        if action is None:
            self.http_method_not_allowed(request)
        principal = request.user
        if isinstance(principal, KeyPrincipal):
            self.tenant = tenant_get(tenant_id=principal.tenant_id)
            self.membership = None
            self.actor = Actor.api_key(principal)
            if not scopes_can(principal.scopes, action):
                raise Forbidden(
                    f"this API key lacks the scope {PERMISSIONS[action][1]} needed for {action}",
                    code="scope_missing",
                )
        else:
            self.tenant, self.membership = tenant_resolve_for_user(request=request, user=principal)
            self.actor = Actor.user(principal)
            if not role_can(self.membership.role, action):
                raise Forbidden(f"the role {self.membership.role} may not {action}", code="role_forbidden")

    def can(self, action: Action) -> bool:
        if self.membership is not None:
            return role_can(self.membership.role, action)
        return scopes_can(self.request.user.scopes, action)

    def paginated(self, queryset, serializer_class):
        return _paginated(self, queryset, serializer_class)
