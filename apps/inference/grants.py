"""Backend address grants: which of the operator's addresses each tenant may register a backend at.

AREAL_BACKEND_ALLOWED_HOSTS (egress.py) says where the platform may connect at all. An address an operator listed
there (allowed by an entry other than `public`) is on the operator's own network, where inference servers that
belong to one tenant listen: a tenant may name it as a backend only when the operator granted it to that tenant,

- by a grant row (`models.BackendAddressGrant`): `manage.py backendgrant TENANT HOST:PORT` writes one, and
  `manage.py registerbackend` grants the host:port it registers (the operator registering is the operator granting);
- or by the setting AREAL_BACKEND_GRANTS: entries `TENANT=PATTERN`, TENANT a slug or `*` (every tenant: only for
  installations where every listed address serves everyone alike, such as the test settings' loopback).

A pattern has the syntax of an allow-list entry (HOST:PORT, HOST a name, an address or a network, PORT a number or
`*`). Even when granted, an address is refused when it is another tenant's: another tenant holds a grant row (or a
slug entry) that allows it, or has a backend on the same server (the same port, an address in common). The refusal
reads the same whatever the reason and never names the other tenant. An address allowed only through `public` (a
hosted API on the internet) needs no grant: it is no server of the operator's, and publication sends it no admin
token. Checked when a backend is registered or moves to another address (REST, console, the commands); a server
that still ends up serving two tenants (rows older than the grants) is never sent weights (apps/training).
"""

import functools

from django.conf import settings

from apps.core.errors import ValidationFailed
from apps.inference.egress import (
    BackendAddressRefused,
    Target,
    address_pattern_parse,
    backend_url_check,
    host_resolve,
    pattern_allows,
    url_parts,
)
from apps.inference.selectors import (
    backend_grant_patterns,
    dangerously_backend_urls_of_other_tenants,
    dangerously_grant_patterns_of_other_tenants,
)
from areal_web.env import ConfigurationError

SETTING = "AREAL_BACKEND_GRANTS"
EVERY_TENANT = "*"


def host_port(url: str) -> str:
    """The exact HOST:PORT pattern of a backend URL's server (IPv6 in brackets)."""
    host, port = url_parts(url)
    return f"[{host}]:{port}" if ":" in host else f"{host.lower()}:{port}"


def grant_pattern_normalize(text: str) -> str:
    """The pattern as stored (trimmed, lowercased), or ValidationFailed on `address` when it is malformed or
    `public` (which is no address of the operator's)."""
    pattern = (text or "").strip().lower()
    if not pattern or pattern == "public":
        raise ValidationFailed(
            "a grant is HOST:PORT (HOST a name, an address or a network; PORT a number or *)",
            fields={"address": ["invalid"]},
        )
    try:
        address_pattern_parse(pattern)
    except ConfigurationError as error:
        raise ValidationFailed(
            str(error).replace("AREAL_BACKEND_ALLOWED_HOSTS: ", ""), fields={"address": ["invalid"]}
        ) from None
    return pattern


@functools.lru_cache(maxsize=8)
def _parse_setting(entries: tuple[str, ...]) -> tuple[tuple[str, object], ...]:
    parsed = []
    for entry in entries:
        tenant, separator, pattern = entry.strip().partition("=")
        if not separator or not tenant.strip() or not pattern.strip():
            raise ConfigurationError(
                f"{SETTING}: entry {entry!r} is not TENANT=HOST:PORT (TENANT a slug or *)"
            )
        try:
            parsed.append((tenant.strip(), address_pattern_parse(pattern.strip().lower())))
        except ConfigurationError as error:
            raise ConfigurationError(f"{SETTING}: entry {entry!r}: {error}") from None
    return tuple(parsed)


def _setting_grants() -> tuple[tuple[str, object], ...]:
    return _parse_setting(tuple(entry for entry in getattr(settings, SETTING, ()) if entry.strip()))


def _own_patterns(tenant) -> list:
    rows = [address_pattern_parse(pattern) for pattern in backend_grant_patterns(tenant=tenant)]
    return rows + [entry for slug, entry in _setting_grants() if slug in (EVERY_TENANT, tenant.slug)]


def _other_tenants_patterns(tenant) -> list:
    rows = [
        address_pattern_parse(pattern)
        for pattern in dangerously_grant_patterns_of_other_tenants(tenant=tenant)
    ]
    return rows + [entry for slug, entry in _setting_grants() if slug not in (EVERY_TENANT, tenant.slug)]


def _refusal(target: Target) -> ValidationFailed:
    return ValidationFailed(
        f"the backend address {target.host}:{target.port} is not granted to this tenant, or not to it alone; an "
        "operator grants an address to one tenant (manage.py backendgrant TENANT HOST:PORT)",
        code="backend_address_not_granted",
        fields={"base_url": ["not_granted"]},
    )


def backend_address_grant_check(*, tenant, base_url: str, backend_id: int | None = None) -> None:
    """Raises ValidationFailed (`base_url: not_granted`) unless `base_url` may be `tenant`'s backend: allowed
    only through `public`, or granted to this tenant and nobody else's (module docstring). `backend_id`: the
    backend that moves there (its own row does not count as another's). Resolves the host (blocking)."""
    try:
        target = backend_url_check(base_url)
    except BackendAddressRefused as error:
        raise ValidationFailed(error.message, fields={"base_url": ["not_allowed"]}) from None
    if not target.operator_listed:
        return

    def allows(entry) -> bool:
        return pattern_allows(entry, host=target.host, addresses=target.addresses, port=target.port)

    if not any(allows(entry) for entry in _own_patterns(tenant)):
        raise _refusal(target)
    if any(allows(entry) for entry in _other_tenants_patterns(tenant)):
        raise _refusal(target)
    if server_used_by_other_tenants(tenant=tenant, target=target):
        raise _refusal(target)


def server_used_by_other_tenants(*, tenant, target: Target) -> bool:
    """Whether a backend of another tenant is on the server `target` names: the same port and an address in
    common (a name resolved now; a row whose host no longer resolves does not count)."""
    try:
        ours = set(host_resolve(target.host, target.port))
    except BackendAddressRefused:
        return False
    for url in dangerously_backend_urls_of_other_tenants(tenant=tenant, port=target.port):
        try:
            host, port = url_parts(url)
            if port != target.port:
                continue
            if host.lower().rstrip(".") == target.host.lower().rstrip(".") or ours & set(
                host_resolve(host, port)
            ):
                return True
        except BackendAddressRefused:
            continue
    return False


def backend_server_shared(*, tenant, base_url: str) -> bool:
    """Whether the server at `base_url` (one of `tenant`'s backends) also serves another tenant: what
    publication asks before sending weights. False when the address does not resolve (the publication's own
    check refuses it then)."""
    try:
        target = backend_url_check(base_url)
    except BackendAddressRefused:
        return False
    return server_used_by_other_tenants(tenant=tenant, target=target)
