"""Replay: a recorded trajectory's observations sent again, step by step, to another model (or model
version), and recorded as a new trajectory with purpose `replay`, which is never trained on.

Each llm_call step's observation (the messages, tools and sampling parameters the model saw, as stored
after sanitization) is forwarded as it was; the replay's answers are recorded through the gateway's own
StepDraft, so they carry token ids, logprobs, versions, cost and PII handling exactly as live traffic
does. A replayed step's `state.replay_of` names the step it repeats.
"""

import time
import uuid
from typing import TYPE_CHECKING

from django.db import transaction

from apps.audit.services import audit_record
from apps.core.errors import Conflict, NotFound
from apps.core.tasking import task_enqueue_on_commit
from apps.trajectories.choices import EndReason, Purpose, StepKind, TrajectoryStatus

if TYPE_CHECKING:
    from apps.trajectories.models import Step, Trajectory

ENDPOINT_PATHS = {
    "chat": "/v1/chat/completions",
    "messages": "/v1/chat/completions",
    "completions": "/v1/completions",
}
REPLAY_NAMESPACE = uuid.UUID("0f3c5d1e-2b8a-4d6f-9e7c-5a1b3c2d4e6f")


def _replayable_steps(trajectory):
    from apps.trajectories.selectors import step_list

    return [
        step
        for step in step_list(tenant=trajectory.tenant_id, trajectory=trajectory).filter(
            kind=StepKind.LLM_CALL
        )
        if step.observation.get("messages") or step.observation.get("prompt")
    ]


def replay_step_id(*, source_step_id, session_id: str) -> str:
    """Deterministic, so a retried replay task never records a step twice."""
    return str(uuid.uuid5(REPLAY_NAMESPACE, f"{session_id}:{source_step_id}"))


@transaction.atomic
def trajectory_replay_start(
    *, tenant, trajectory_id, model: str, model_version: str = "", actor
) -> "Trajectory":
    """Opens the replay trajectory and enqueues the replay on the `eval` queue (on commit).

    Tenancy: the source must be this tenant's (404 otherwise), and so must the backend serving `model`.
    Refused with 409 when the source stored no content to replay (consent `metadata_only` or `none`)."""
    from apps.inference.selectors import backend_list
    from apps.trajectories.selectors import trajectory_get
    from apps.trajectories.services import trajectory_open

    source = trajectory_get(tenant=tenant, trajectory_id=trajectory_id)
    steps = _replayable_steps(source)
    if not steps:
        raise Conflict(
            "this trajectory has no recorded observations to replay (its consent mode stored metadata "
            "only, or it has no model calls)",
            code="nothing_to_replay",
        )
    backends = backend_list(tenant=tenant, served_model=model)
    if model_version:
        backends = backends.filter(model_version=model_version)
    if not backends.exists():
        raise NotFound(
            f"no backend of this tenant serves {model!r}"
            + (f" at version {model_version}" if model_version else ""),
            code="model_not_found",
        )
    session_id = f"replay-{uuid.uuid4().hex}"
    replay = trajectory_open(
        tenant=tenant,
        session_id=session_id,
        task_id=source.task_id,
        api_key_prefix=source.api_key_prefix,
        purpose=Purpose.REPLAY,
        consent=source.consent,
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="trajectory.replay",
        target=replay,
        data={"source": str(source.id), "model": model, "model_version": model_version, "steps": len(steps)},
    )
    task_enqueue_on_commit(
        "trajectories.replay",
        tenant_id=tenant.pk,
        source_id=str(source.id),
        session_id=session_id,
        model=model,
        model_version=model_version,
    )
    return replay


def _request_body(step: "Step", model: str) -> dict:
    observation = step.observation
    body = dict(observation.get("params") or {})
    body.pop("stream", None)
    body["model"] = model
    if step.endpoint == "completions":
        body["prompt"] = observation.get("prompt")
    else:
        body["messages"] = observation.get("messages")
        if observation.get("tools"):
            body["tools"] = observation["tools"]
    return body


def trajectory_replay_run(
    *,
    tenant_id: int,
    source_id: str,
    session_id: str,
    model: str,
    model_version: str = "",
    timeout_s: float = 120.0,
) -> int:
    """Forwards each replayable step to a backend serving `model` (session-affine routing, like live
    traffic) and records the answers; a failed call is recorded as a failed step and the replay goes
    on. Idempotent: steps already recorded for this replay are skipped. Returns the steps recorded."""
    import httpx

    from apps.gateway.policy import policy_load
    from apps.gateway.principals import Principal
    from apps.gateway.providers import add_token_parameters, credential_refused, profile_of
    from apps.gateway.recording import StepDraft
    from apps.gateway.sessions import SessionState
    from apps.gateway.step_journal import session_advance
    from apps.gateway.versions import derive_token_versions_now
    from apps.inference.egress import BackendAddressRefused, backend_http_client
    from apps.inference.services import NoBackendAvailable, backend_for_session
    from apps.tenants.models import Tenant
    from apps.trajectories.selectors import step_list, trajectory_of_session_get, trajectory_row_get
    from apps.trajectories.services import steps_ingest, trajectory_end

    tenant = Tenant.objects.get(pk=tenant_id)
    source = trajectory_row_get(tenant=tenant, trajectory_id=source_id)
    replay = trajectory_of_session_get(tenant=tenant, session_id=session_id)
    policy = policy_load(tenant_id)
    principal = Principal(
        tenant_id=tenant_id,
        tenant_slug=tenant.slug,
        key_prefix=replay.api_key_prefix or "replay",
        scopes=("inference",),
        session_id=session_id,
        task_id=source.task_id,
    )
    session = SessionState(session_id=session_id, task_id=source.task_id)
    done = set(step_list(tenant=tenant, trajectory=replay).values_list("id", flat=True))
    recorded = 0
    with backend_http_client(timeout=timeout_s) as client:  # checked addresses, no redirects (egress.py)
        for step in _replayable_steps(source):
            step_id = replay_step_id(source_step_id=step.id, session_id=session_id)
            if uuid.UUID(step_id) in done:  # recorded by an earlier attempt of this task
                session.last_parent_id, session.last_step_id = session.last_step_id, step_id
                continue
            endpoint = "completions" if step.endpoint == "completions" else "chat"
            request = _request_body(step, model)
            draft = StepDraft(
                principal=principal,
                policy=policy,
                endpoint=endpoint,
                request=request,
                purpose=Purpose.REPLAY,
                agent_name=source.agent_name,
                agent_version=source.agent_version,
                task_id=source.task_id,
                state_header={"replay_of": str(step.id)},
                step_id=step_id,
            )
            try:
                backend = backend_for_session(
                    tenant=tenant,
                    served_model=model,
                    session_id=session_id,
                    model_version=model_version or None,
                )
            except NoBackendAvailable as error:
                backend = None
                draft.fail(str(error))
            draft.attach(session=session, prompt_hash=None, backend=backend)
            profile = profile_of(backend) if backend is not None else None
            draft.backend_profile = profile
            if profile is not None and (profile.credential_error or profile.anthropic):
                draft.fail(
                    profile.credential_error or "replay cannot send chat messages to an anthropic backend"
                )
            elif backend is not None and profile is not None:  # a backend always has a profile
                started = time.perf_counter()
                forward = dict(request)
                add_token_parameters(forward, endpoint=endpoint, profile=profile)  # only what it accepts
                try:
                    draft.forwarded_at = time.time()
                    response = client.post(
                        backend.base_url + ENDPOINT_PATHS[endpoint], json=forward, headers=profile.headers
                    )
                    if refusal := credential_refused(response.status_code):
                        draft.fail(refusal)
                    elif response.status_code >= 400:
                        draft.fail(f"the backend answered {response.status_code}: {response.text[:200]}")
                    else:
                        draft.complete_unary(
                            response.json(), latency_ms=(time.perf_counter() - started) * 1000
                        )
                        derive_token_versions_now(draft)  # a vLLM answer names no versions (versions.py)
                except httpx.HTTPError as error:
                    draft.fail(f"the inference backend failed: {type(error).__name__}")
                except BackendAddressRefused as error:
                    draft.fail(error.message)
            record = draft.to_record()
            if record is not None:
                recorded += steps_ingest(records=[record])
            session_advance(draft, record)
    trajectory_end(
        tenant=tenant, trajectory_id=replay.pk, status=TrajectoryStatus.COMPLETE, reason=EndReason.REPLAY
    )
    return recorded
