"""Writes for the backend registry, health results and session routing."""

from django.db import IntegrityError, connections, router, transaction
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, DomainError, ValidationFailed
from apps.core.selectors import get_in_tenant
from apps.inference.credentials import (
    CredentialUnreadable,
    credential_decrypt,
    credential_encrypt,
    credential_validate,
)
from apps.inference.egress import (
    BackendAddressRefused,
    address_pattern_parse,
    backend_url_validate,
    host_resolve,
    pattern_allows,
    url_parts,
)
from apps.inference.grants import backend_address_grant_check, grant_pattern_normalize
from apps.inference.models import (
    CAPABILITY_FIELDS,
    PROVIDER_FIELDS,
    BackendAddressGrant,
    BackendKind,
    BackendState,
    CapParameter,
    InferenceBackend,
    SessionAffinity,
)
from apps.inference.selectors import (
    backend_candidates,
    dangerously_backend_list_all_tenants,
    dangerously_grant_patterns_of_other_tenants,
)
from apps.inference.served import served_forget, served_version_declare
from apps.metrics.publish import metrics_publish
from apps.tenants.models import Tenant

EDITABLE_FIELDS = (
    "base_url",
    "kind",
    "served_model",
    "model_version",
    "weight",
    "state",
    *PROVIDER_FIELDS,
    "credential",
)
# What a backend of each kind returns and accepts when its registration does not say. Every kind but Anthropic's
# defaults to all on (what the gateway always assumed before the flags existed); a hosted OpenAI-compatible API
# is registered with them off. The Messages API returns no token data at all: its flags are always off.
KIND_CAPABILITIES = {kind: dict.fromkeys(CAPABILITY_FIELDS, True) for kind in BackendKind.values}
KIND_CAPABILITIES[BackendKind.ANTHROPIC] = dict.fromkeys(CAPABILITY_FIELDS, False)
# The cap field of each kind when its registration does not say: OpenAI's current name for another
# OpenAI-compatible server (hosted reasoning models refuse max_tokens), max_tokens for the rest (the Messages
# API knows no other).
KIND_CAP_PARAMETER = dict.fromkeys(BackendKind.values, CapParameter.MAX_TOKENS.value)
KIND_CAP_PARAMETER[BackendKind.OPENAI_COMPATIBLE] = CapParameter.MAX_COMPLETION_TOKENS.value


class NoBackendAvailable(DomainError):
    status = 503
    code = "no_backend_available"
    type = "service_unavailable_error"


def _validate(fields: dict) -> None:
    if "kind" in fields and fields["kind"] not in BackendKind.values:
        raise ValidationFailed(
            f"kind must be one of {', '.join(BackendKind.values)}", fields={"kind": ["invalid"]}
        )
    if "base_url" in fields:
        backend_url_validate(fields["base_url"])  # form, and every address it resolves to (egress.py)
    if "state" in fields and fields["state"] not in {
        BackendState.UP,
        BackendState.DOWN,
        BackendState.DRAINING,
        BackendState.UNKNOWN,
    }:
        raise ValidationFailed("unknown state", fields={"state": ["invalid"]})
    for field in CAPABILITY_FIELDS:
        if field in fields and not isinstance(fields[field], bool):
            raise ValidationFailed(f"{field} must be true or false", fields={field: ["invalid"]})
    if fields.get("cap_parameter") is not None and fields["cap_parameter"] not in CapParameter.values:
        raise ValidationFailed(
            f"cap_parameter must be one of {', '.join(CapParameter.values)}",
            fields={"cap_parameter": ["invalid"]},
        )
    if fields.get("credential"):
        credential_validate(fields["credential"])


def _capabilities(*, kind: str, given: dict) -> dict:
    """The flags and the cap field to store: those given (None: not given), the rest the kind's defaults. An
    Anthropic backend cannot claim token data (a flag given as true is refused) nor another cap field."""
    flags: dict[str, bool | str] = dict(KIND_CAPABILITIES[kind])
    for field in CAPABILITY_FIELDS:
        if given.get(field) is not None:
            if kind == BackendKind.ANTHROPIC and given[field]:
                raise ValidationFailed(
                    "an anthropic backend returns no token ids, logprobs or versions and accepts no "
                    "return_token_ids",
                    fields={field: ["not_supported_by_kind"]},
                )
            flags[field] = given[field]
    cap = given.get("cap_parameter")
    if kind == BackendKind.ANTHROPIC and cap not in (None, CapParameter.MAX_TOKENS):
        raise ValidationFailed(
            "an anthropic backend takes its cap as max_tokens",
            fields={"cap_parameter": ["not_supported_by_kind"]},
        )
    flags["cap_parameter"] = cap if cap is not None else KIND_CAP_PARAMETER[kind]
    return flags


def _store_credential(backend: InferenceBackend, credential: str) -> None:
    if credential:
        backend.credential_encrypted = credential_encrypt(credential)
        backend.credential_last4 = credential[-4:]
    else:
        backend.credential_encrypted = backend.credential_last4 = ""
    backend.credential_updated_at = timezone.now()


@transaction.atomic
def backend_register(
    *,
    tenant: Tenant,
    actor: Actor,
    name: str,
    base_url: str,
    kind: str,
    served_model: str,
    model_version: str = "",
    weight: int = 1,
    credential: str = "",
    returns_token_ids: bool | None = None,
    returns_logprobs: bool | None = None,
    returns_token_versions: bool | None = None,
    accepts_return_token_ids: bool | None = None,
    cap_parameter: str | None = None,
) -> InferenceBackend:
    """Registers a replica; its state is `unknown` until the first health check. 409 on a taken name. An address
    of the operator's must be granted to this tenant and be nobody else's (apps/inference/grants.py: 400
    `base_url: not_granted`).
    `credential` (optional) is stored encrypted; capability flags not given take the kind's defaults
    (KIND_CAPABILITIES), and so does the cap field (KIND_CAP_PARAMETER). The audit event says whether a
    credential was set, never what it is."""
    given = {
        "returns_token_ids": returns_token_ids,
        "returns_logprobs": returns_logprobs,
        "returns_token_versions": returns_token_versions,
        "accepts_return_token_ids": accepts_return_token_ids,
        "cap_parameter": cap_parameter,
    }
    _validate(
        {"base_url": base_url, "kind": kind, "credential": credential}
        | {field: value for field, value in given.items() if value is not None}
    )
    backend_address_grant_check(tenant=tenant, base_url=base_url)  # granted to this tenant, and only to it
    capabilities = _capabilities(kind=kind, given=given)
    backend = InferenceBackend(
        tenant=tenant,
        name=name,
        base_url=base_url.rstrip("/"),
        kind=kind,
        served_model=served_model,
        model_version=model_version,
        weight=weight,
        **capabilities,
    )
    if credential:
        _store_credential(backend, credential)
    try:
        with transaction.atomic():
            backend.save(force_insert=True)
    except IntegrityError:
        raise Conflict(
            f"this tenant already has a backend named {name!r}", code="backend_name_taken"
        ) from None
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="backend.register",
        target=backend,
        data={
            "name": name,
            "base_url": backend.base_url,
            "kind": kind,
            "served_model": served_model,
            "model_version": model_version,
            "weight": weight,
            **capabilities,
            "credential_set": bool(credential),
        },
    )
    return backend


@transaction.atomic
def backend_grant_create(*, tenant: Tenant, actor: Actor, address: str) -> tuple[BackendAddressGrant, bool]:
    """The operator grants `address` (HOST:PORT, a network, PORT a number or *) to `tenant`: its backends may be
    registered there (apps/inference/grants.py). Idempotent: (the grant, whether it is new). 409
    `backend_address_granted_elsewhere` when another tenant holds the same pattern or has a backend the pattern
    allows (an address is one tenant's). Audited as `backend.grant`. Only for the operator's commands."""
    pattern = grant_pattern_normalize(address)
    existing = BackendAddressGrant.objects.for_tenant(tenant).filter(address=pattern).first()
    if existing is not None:
        return existing, False
    if pattern in dangerously_grant_patterns_of_other_tenants(tenant=tenant) or _pattern_in_use_elsewhere(
        tenant=tenant, pattern=pattern
    ):
        raise Conflict(
            f"{pattern} is already another tenant's (a grant or a backend there); an address is granted to "
            "one tenant",
            code="backend_address_granted_elsewhere",
        )
    grant = BackendAddressGrant.objects.create(tenant=tenant, address=pattern)
    audit_record(tenant=tenant, actor=actor, verb="backend.grant", target=grant, data={"address": pattern})
    return grant, True


def _pattern_in_use_elsewhere(*, tenant: Tenant, pattern: str) -> bool:
    entry = address_pattern_parse(pattern)
    for backend in dangerously_backend_list_all_tenants().exclude(tenant=tenant).only("base_url"):
        try:
            host, port = url_parts(backend.base_url)
            if entry.port is not None and entry.port != port:
                continue  # another server: no lookup
            if pattern_allows(entry, host=host, addresses=host_resolve(host, port), port=port):
                return True
        except BackendAddressRefused:
            continue
    return False


@transaction.atomic
def backend_grant_revoke(*, tenant: Tenant, actor: Actor, address: str) -> bool:
    """Takes a grant back (audited as `backend.grant_revoke`); whether there was one. Backends registered under
    it stay (remove them with backend_remove); no new one may be registered there."""
    pattern = grant_pattern_normalize(address)
    grant = BackendAddressGrant.objects.for_tenant(tenant).filter(address=pattern).first()
    if grant is None:
        return False
    audit_record(
        tenant=tenant, actor=actor, verb="backend.grant_revoke", target=grant, data={"address": pattern}
    )
    grant.delete()
    return True


def _lock(*, tenant: Tenant, backend_id) -> InferenceBackend:
    return get_in_tenant(
        InferenceBackend.objects.select_for_update(), tenant=tenant, pk=backend_id, code="backend_not_found"
    )


@transaction.atomic
def backend_update(*, tenant: Tenant, actor: Actor, backend_id, changes: dict) -> InferenceBackend:
    """Changes address, kind, model, version, weight, state (`draining` takes no new sessions), capability
    flags and the cap field (a change of kind resets those not given to the new kind's defaults) and the
    credential (`credential`: a new one sets or rotates it, "" or None clears it). Audited as `backend.update` (the diff,
    without the credential) and, for the credential, `backend.credential_set`, `backend.credential_rotate` or
    `backend.credential_clear` (with the last four characters, never the credential). A new
    `model_version` is declared to the gateways on commit (`served.served_version_declare`)."""
    changes = dict(changes)
    unknown = set(changes) - set(EDITABLE_FIELDS)
    if unknown:
        raise ValidationFailed(f"unknown backend fields: {', '.join(sorted(unknown))}")
    _validate(changes)
    credential = changes.pop("credential", False)  # False: not given
    backend = _lock(tenant=tenant, backend_id=backend_id)
    if "base_url" in changes and changes["base_url"].rstrip("/") != backend.base_url:
        backend_address_grant_check(tenant=tenant, base_url=changes["base_url"], backend_id=backend.pk)
    kind = changes.get("kind", backend.kind)
    current = {field: getattr(backend, field) for field in PROVIDER_FIELDS}
    given = {field: changes.get(field) for field in PROVIDER_FIELDS}
    if kind == backend.kind:
        given = {field: given[field] if given[field] is not None else current[field] for field in given}
        if kind == BackendKind.ANTHROPIC:  # always all off; only what was asked is checked
            given = {field: changes.get(field) for field in PROVIDER_FIELDS}
    changes.update(_capabilities(kind=kind, given=given))
    diff = {}
    for field, value in changes.items():
        if field == "base_url":
            value = value.rstrip("/")
        if getattr(backend, field) != value:
            diff[field] = {"old": getattr(backend, field), "new": value}
            setattr(backend, field, value)
    if diff:
        backend.save()
        audit_record(tenant=tenant, actor=actor, verb="backend.update", target=backend, data=diff)
    if "model_version" in diff:
        _declare_served_version(backend.pk, diff["model_version"]["old"], diff["model_version"]["new"])
    if credential is not False:
        _credential_change(tenant=tenant, actor=actor, backend=backend, credential=credential or "")
    return backend


def _declare_served_version(backend_id: int, old: str, new: str) -> None:
    """On commit: gateways stamp tokens of this backend with `new` from now on (apps/inference/served.py)."""
    transaction.on_commit(
        lambda: served_version_declare(backend_id=backend_id, from_version=old, to_version=new)
    )


def _stored_credential(backend: InferenceBackend) -> str | None:
    try:
        return credential_decrypt(backend.credential_encrypted)
    except CredentialUnreadable:
        return None


def _credential_change(*, tenant: Tenant, actor: Actor, backend: InferenceBackend, credential: str) -> None:
    had_one, previous_last4 = backend.credential_set, backend.credential_last4
    if not credential and not had_one:
        return
    if credential and had_one and _stored_credential(backend) == credential:
        return  # the same credential again (an idempotent `registerbackend`): nothing to rotate
    _store_credential(backend, credential)
    backend.save(update_fields=["credential_encrypted", "credential_last4", "credential_updated_at"])
    if not credential:
        verb, data = "backend.credential_clear", {"previous_last4": previous_last4}
    elif had_one:
        verb, data = "backend.credential_rotate", {"previous_last4": previous_last4, "last4": credential[-4:]}
    else:
        verb, data = "backend.credential_set", {"last4": credential[-4:]}
    audit_record(tenant=tenant, actor=actor, verb=verb, target=backend, data=data)


@transaction.atomic
def backend_remove(*, tenant: Tenant, actor: Actor, backend_id) -> None:
    backend = _lock(tenant=tenant, backend_id=backend_id)
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="backend.remove",
        target=backend,
        data={"name": backend.name, "base_url": backend.base_url},
    )
    backend_id = backend.pk
    backend.delete()
    transaction.on_commit(lambda: served_forget(backend_id=backend_id))


@transaction.atomic
def backend_record_health(
    *, backend_id: int, healthy: bool, error: str = "", reported_version: str | None = None
) -> InferenceBackend | None:
    """Stores a health-check result (and the version the server said it serves, when it said). A draining
    backend stays draining; otherwise up or down. A change of state is published to the tenant's `backends`
    stream."""
    backend = InferenceBackend.objects.select_for_update().filter(pk=backend_id).first()
    if backend is None:
        return None
    previous = backend.state
    if backend.state != BackendState.DRAINING:
        backend.state = BackendState.UP if healthy else BackendState.DOWN
    backend.last_checked_at = timezone.now()
    backend.last_error = "" if healthy else error[:500]
    fields = ["state", "last_checked_at", "last_error"]
    if reported_version is not None:
        backend.reported_version = reported_version[:64]
        fields.append("reported_version")
    backend.save(update_fields=fields)
    if backend.state != previous:
        metrics_publish(
            tenant_id=backend.tenant_id,
            stream="backends",
            payload={"backend": backend.name, "state": backend.state, "error": backend.last_error},
        )
    return backend


def backend_check(*, backend: InferenceBackend) -> InferenceBackend | None:
    """Probes the backend now (its address checked first, see egress.py) and records the result. The probe runs
    outside any transaction; the record is its own. None: the backend was deleted meanwhile."""
    from apps.inference.credentials import CredentialUnreadable, credential_headers
    from apps.inference.health import Probe, backend_probe

    try:
        probe = backend_probe(
            base_url=backend.base_url, kind=backend.kind, headers=credential_headers(backend)
        )
    except CredentialUnreadable as error:
        probe = Probe(False, error.message)
    return backend_record_health(
        backend_id=backend.pk, healthy=probe.healthy, error=probe.error, reported_version=probe.version
    )


def dangerously_backends_check_all() -> dict[int, bool]:
    """Probes every tenant's backends (crosses tenants: only for the beat task inference.check_backends) and
    records each result; returns {backend id: healthy} (a draining backend keeps its state). Idempotent: a
    probe result overwrites the last; a backend removed while it was probed is left out."""
    states = {}
    for backend in dangerously_backend_list_all_tenants().only(
        "id", "base_url", "kind", "credential_encrypted"
    ):
        checked = backend_check(backend=backend)  # the address is checked against the allow-list first
        if checked is not None:
            states[backend.pk] = checked.last_error == ""
    return states


def backend_register_and_check(*, tenant: Tenant, actor: Actor, **fields) -> InferenceBackend | None:
    """Registers a replica (`backend_register`: audited, its own transaction; raises its domain errors) and
    probes it at once, so whoever registered it sees its state. Call it outside any transaction: the probe
    runs after the registration committed. None: the backend was deleted before the probe was recorded."""
    backend = backend_register(tenant=tenant, actor=actor, **fields)
    return backend_check(backend=backend)


def backend_for_session(
    *, tenant: Tenant, served_model: str, session_id: str, model_version: str | None = None
) -> InferenceBackend:
    """Routes a session: its pinned backend while that stays up (and serves the asked version);
    otherwise the healthy replica with the fewest active sessions per unit of weight, and pins it.
    Concurrent first calls of one session agree on one backend (the unique pin wins)."""
    now = timezone.now()
    pin = (
        SessionAffinity.objects.select_related("backend")
        .filter(tenant=tenant, served_model=served_model, session_id=session_id)
        .first()
    )
    if (
        pin is not None
        and pin.backend.state == BackendState.UP
        and (not model_version or pin.backend.model_version == model_version)
    ):
        SessionAffinity.objects.filter(pk=pin.pk).update(last_used_at=now)
        return pin.backend
    candidates = list(
        backend_candidates(tenant=tenant, served_model=served_model, model_version=model_version)
    )
    if not candidates:
        raise NoBackendAvailable(
            f"no healthy backend serves {served_model!r}"
            + (f" at version {model_version}" if model_version else "")
        )
    chosen = min(
        candidates,
        key=lambda backend: (backend.active_sessions / backend.weight, backend.active_sessions, backend.pk),
    )
    if pin is not None:
        SessionAffinity.objects.filter(pk=pin.pk).update(backend=chosen, last_used_at=now)
        return chosen
    try:
        with transaction.atomic():
            SessionAffinity.objects.create(
                tenant=tenant,
                served_model=served_model,
                session_id=session_id,
                backend=chosen,
                last_used_at=now,
            )
    except IntegrityError:
        winner = SessionAffinity.objects.select_related("backend").get(
            tenant=tenant, served_model=served_model, session_id=session_id
        )
        return winner.backend
    return chosen


def session_pins_record(*, pins: list[tuple[int, str, str, int]]) -> None:
    """Pins sessions the gateway routed itself (sessions it just created) to their backends, given as
    (tenant id, served model, session id, backend id); an existing pin wins. Idempotent.

    One statement for the whole batch instead of the ORM's bulk_create: the gateway calls this for every
    session it mints, and a model instance per pin cost its process about 6 % of its CPU (bench/gateway). On
    PostgreSQL the pins travel as four arrays (unnest), since psycopg's executemany sends a statement per row."""
    if not pins:
        return
    meta = SessionAffinity._meta
    connection = connections[router.db_for_write(SessionAffinity)]
    quote = connection.ops.quote_name
    now = meta.get_field("created_at").get_db_prep_value(timezone.now(), connection)
    column_of = {field.name: str(field.column) for field in meta.concrete_fields}
    columns = ", ".join(
        quote(column_of[name])
        for name in ("tenant", "served_model", "session_id", "backend", "last_used_at", "created_at")
    )
    insert = f"INSERT INTO {quote(meta.db_table)} ({columns}) "
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            tenants, models, sessions, backends = (list(column) for column in zip(*pins, strict=True))
            cursor.execute(
                insert + "SELECT tenant, model, session, backend, %s, %s FROM "
                "unnest(%s::bigint[], %s::text[], %s::text[], %s::bigint[]) AS pin(tenant, model, session, backend) "
                "ON CONFLICT DO NOTHING",
                [now, now, tenants, models, sessions, backends],
            )
        else:
            cursor.executemany(
                insert + "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [(tenant, model, session, backend, now, now) for tenant, model, session, backend in pins],
            )
