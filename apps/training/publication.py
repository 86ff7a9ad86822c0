"""Weight publication: put a registered version's weights on the backends that serve its model.

- embedded (workers/inference/server.py): `POST /admin/load {path, version}`. The server loads the new
  weights beside the serving ones and swaps at a decode step boundary, recomputing in-flight sequences'
  KV caches, so no request fails and tokens after the swap carry the new version. When other healthy
  replicas of the model exist the backend is also drained (no new sessions) during the load.
- vLLM: `VllmAdmin.publish_full_weights` (pause "wait" → reload → set weight version → resume; in-flight
  requests finish on the old weights, new ones wait) or, for a LoRA job's adapter, `publish_lora_adapter`.
- Afterwards the backend row's `model_version` is the version number (the gateway stamps it), its state up.
- Each swap is recorded where every gateway sees it (apps/inference/served.py): a pending swap once the
  backend paused, then the pause and resume moments, so a gateway gives tokens of a server that reports no
  per-token versions (vLLM) the version they were sampled by, the old one before the resume and the new one
  after (workers/inference/swaps.py). A failed load takes the pending record back. vLLM's pause mode is
  `AREAL_VLLM_PAUSE_MODE`: `wait` (in-flight requests finish on the old weights before the swap) or `keep`
  (they freeze, and continue on the new weights after it: a stream then spans two versions).

Every call goes to an address checked first (apps/inference/egress.py), follows no redirect, and carries the
admin token of that server alone (apps/inference/admin_tokens.py) only to addresses an operator listed: a tenant's
backend reached through the `public` entry never sees one. A server that also serves another tenant takes no
weights (refused and audited, before any call).

A backend that fails keeps its old weights and version; the result says which and why.
"""

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import httpx
from django.conf import settings
from django.db import transaction

from apps.audit.services import Actor, audit_record
from apps.core.errors import NotFound
from apps.inference.admin_tokens import inference_admin_token
from apps.inference.choices import BackendKind, BackendState
from apps.inference.egress import (
    BackendAddressRefused,
    BackendTransport,
    backend_http_client,
    backend_url_check,
)
from apps.inference.grants import backend_server_shared
from apps.inference.selectors import backend_list
from apps.inference.services import backend_record_health, backend_update
from apps.training.models import ModelVersion
from apps.training.selectors import model_version_by_number

if TYPE_CHECKING:
    from workers.inference.vllm import PauseMode

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PublishOutcome:
    backend_id: int
    backend: str
    ok: bool
    seconds: float = 0.0
    error: str = ""


def model_version_publish(
    *,
    tenant,
    actor: Actor,
    version: ModelVersion,
    backend_ids: list[int] | None = None,
    admin_token: str | None = None,
    timeout: float = 120.0,
) -> list[PublishOutcome]:
    """Publishes `version` to this tenant's backends serving `version.name` (or the listed ones). Tenancy:
    only the tenant's backends. Not one transaction: each backend is swapped in turn and its row updated
    after its swap succeeded. Audited per call. `admin_token` (None: each server gets its own token,
    apps/inference/admin_tokens.py) overrides the token sent to every operator-listed backend."""
    backends = [
        b
        for b in backend_list(tenant=tenant, served_model=version.name)
        if backend_ids is None or b.pk in backend_ids
    ]
    outcomes = []
    for backend in backends:
        template_change = _chat_template_change(tenant=tenant, backend=backend, version=version)
        if template_change:
            outcomes.append(PublishOutcome(backend.pk, backend.name, False, 0.0, template_change))
            continue
        others_up = any(other.pk != backend.pk and other.state == BackendState.UP for other in backends)
        outcomes.append(
            _publish_one(
                tenant=tenant,
                actor=actor,
                backend=backend,
                version=version,
                drain=others_up,
                admin_token=admin_token,
                timeout=timeout,
            )
        )
    with transaction.atomic():
        audit_record(
            tenant=tenant,
            actor=actor,
            verb="model_version.publish",
            target=version,
            data={"backends": [{"name": o.backend, "ok": o.ok, "error": o.error[:200]} for o in outcomes]},
        )
    return outcomes


def _chat_template_change(*, tenant, backend, version: ModelVersion) -> str:
    """Why `version` cannot be loaded into the running `backend`, or "": servers read the chat template when
    they start and a weight swap keeps it, so a version whose template differs from the one of the version
    the backend serves (a template version, apps/training/imports.py) needs a server started on its
    directory. Serving it by a swap would record its number over prompts rendered with the old template."""
    from workers.models import read_chat_template

    serving = backend.model_version
    if not serving.isdigit() or int(serving) == version.number:
        return ""
    try:
        current = model_version_by_number(tenant=tenant, name=version.name, number=int(serving))
    except NotFound:
        return ""
    if read_chat_template(current.checkpoint_path) == read_chat_template(version.checkpoint_path):
        return ""
    return (
        f"{version.label}'s chat template differs from that of {current.label}, which {backend.name} serves; a "
        f"server reads its template when it starts: start one on {version.checkpoint_path} and register it "
        f"as a backend serving version {version.number}"
    )


def _publish_one(*, tenant, actor, backend, version, drain: bool, admin_token, timeout) -> PublishOutcome:
    import time

    started = time.perf_counter()
    refusal = _shared_server_refusal(tenant=tenant, actor=actor, backend=backend, version=version)
    if refusal:
        return PublishOutcome(backend.pk, backend.name, False, 0.0, refusal)
    swap = _SwapRecord(backend=backend, to_version=str(version.number))
    if drain:
        backend_update(
            tenant=tenant, actor=actor, backend_id=backend.pk, changes={"state": BackendState.DRAINING}
        )
    try:
        target = backend_url_check(
            backend.base_url
        )  # before any connection; again on connect (the transport)
        # Only this server's own token, and only to an address an operator listed.
        token = (admin_token or inference_admin_token(backend.base_url)) if target.operator_listed else None
        if backend.kind == BackendKind.EMBEDDED:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            swap.paused(time.time())  # the server swaps at a step boundary during the call
            with backend_http_client(timeout=timeout) as client:
                response = client.post(
                    f"{backend.base_url.rstrip('/')}/admin/load",
                    headers=headers,
                    json={"path": version.checkpoint_path, "version": version.number},
                )
            if response.status_code != 200:
                raise RuntimeError(f"/admin/load answered {response.status_code}: {response.text[:300]}")
            swap.resumed(time.time())
        elif backend.kind == BackendKind.VLLM:
            from workers.inference.vllm import VllmAdmin

            with VllmAdmin(
                backend.base_url,
                api_key=token,
                timeout_s=timeout,
                transport=BackendTransport(trust_env=False),
            ) as admin:
                adapter = (
                    version.metrics.get("lora_adapter_path") if isinstance(version.metrics, dict) else None
                )
                mode = cast("PauseMode", settings.AREAL_VLLM_PAUSE_MODE)  # env_choice: wait or keep
                if adapter:
                    result = admin.publish_lora_adapter(
                        version.name,
                        adapter,
                        version=str(version.number),
                        pause_mode=mode,
                        on_paused=swap.paused,
                    )
                else:
                    result = admin.publish_full_weights(
                        version.checkpoint_path,
                        version=str(version.number),
                        pause_mode=mode,
                        on_paused=swap.paused,
                    )
            swap.resumed(result.resumed_at)
        else:
            raise RuntimeError(f"a {backend.kind} backend has no weight-update endpoint")
    except (httpx.HTTPError, RuntimeError, OSError, BackendAddressRefused) as error:
        swap.abandon()
        if drain:
            backend_update(
                tenant=tenant, actor=actor, backend_id=backend.pk, changes={"state": BackendState.UNKNOWN}
            )
        message = error.message if isinstance(error, BackendAddressRefused) else str(error)
        return PublishOutcome(backend.pk, backend.name, False, time.perf_counter() - started, message)
    changes = {"model_version": str(version.number)}
    if drain:
        changes["state"] = BackendState.UNKNOWN  # leave draining; the health record below makes it up
    backend_update(tenant=tenant, actor=actor, backend_id=backend.pk, changes=changes)
    backend_record_health(backend_id=backend.pk, healthy=True)
    return PublishOutcome(backend.pk, backend.name, True, time.perf_counter() - started)


def _shared_server_refusal(*, tenant, actor, backend, version) -> str:
    """Why `backend` takes no weights, or "": a server that also serves another tenant (a backend of theirs on the
    same server, apps/inference/grants.py) never does, or one tenant's publication would change what another's
    gateway stamps with its own version. The refusal is audited (`model_version.publish_refused`)."""
    if not backend_server_shared(tenant=tenant, base_url=backend.base_url):
        return ""
    reason = (
        f"{backend.name}'s server also serves another tenant; a shared server never takes a weight publication "
        "(an operator gives each tenant servers of its own: manage.py backendgrant)"
    )
    with transaction.atomic():
        audit_record(
            tenant=tenant,
            actor=actor,
            verb="model_version.publish_refused",
            target=version,
            data={"backend": backend.name, "reason": "shared_server"},
        )
    return reason


class _SwapRecord:
    """One backend's swap as the gateways learn it (apps/inference/served.py): pending from the pause, done at
    the resume, taken back when the load failed. A cache failure never fails the publication: the gateways
    then fall back on the row's version, stamped after the swap."""

    def __init__(self, *, backend, to_version: str):
        self.backend_id = backend.pk
        self.from_version = backend.model_version or backend.reported_version
        self.to_version = to_version
        self.paused_at: float | None = None

    def paused(self, moment: float) -> None:
        from apps.inference.served import served_swap_begin

        self.paused_at = moment
        self._record(served_swap_begin, paused_at=moment)

    def resumed(self, moment: float) -> None:
        from apps.inference.served import served_swap_end

        self._record(served_swap_end, paused_at=self.paused_at or moment, resumed_at=moment)
        self.paused_at = None

    def abandon(self) -> None:
        from apps.inference.served import served_swap_abandon

        if self.paused_at is not None:
            self._write(served_swap_abandon, backend_id=self.backend_id, paused_at=self.paused_at)

    def _record(self, write, **moments) -> None:
        self._write(
            write,
            backend_id=self.backend_id,
            from_version=self.from_version,
            to_version=self.to_version,
            **moments,
        )

    @staticmethod
    def _write(write, **arguments) -> None:
        try:
            write(**arguments)
        except Exception:
            logger.exception("could not record a weight swap in the shared cache")
