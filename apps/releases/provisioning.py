"""A release's candidate on a serving slot before its release starts: canary sessions (and the release's eval
runs, which go through the gateway) need a backend that holds the candidate's weights, or they get 503.

A serving slot is one of the tenant's backends of the model that can take new weights (embedded or vLLM: an
`openai_compatible` server has no weight-update endpoint). `release_start` calls `candidate_provision`
outside its transaction, since loading weights is a call to a server: the candidate is loaded on a free slot
(one not holding the baseline's weights) through apps.training.publication, or the start is refused with the
reason. The evolution control plane's release decisions use the same slot choice (`serving_slot_free`).
"""

from pathlib import Path

from apps.audit.services import Actor
from apps.core.errors import Conflict
from apps.releases.models import Release
from apps.releases.serving import backends_serving
from apps.tenants.models import Tenant

LOADABLE_KINDS = ("embedded", "vllm")


def serving_slot_free(*, tenant: Tenant, model: str, baseline):
    """The backend of `model` that can take a candidate: one not holding `baseline`'s weights, else (all hold
    them) the last of two or more, leaving the baseline the others. None when the baseline would lose its only
    backend, or when no backend of the model can take weights."""
    from apps.inference.selectors import backend_list

    weights = baseline.weights_of or baseline
    backends = list(
        backend_list(tenant=tenant, served_model=model).filter(kind__in=LOADABLE_KINDS).order_by("name")
    )
    serving = [backend for backend in backends if backend.model_version == str(weights.number)]
    free = [backend for backend in backends if backend not in serving]
    if free:
        return free[0]
    return serving[-1] if len(serving) >= 2 else None


def weights_problem(version) -> str:
    """Why `version` has no weights a server could load ("" when it has): its checkpoint directory is missing or
    holds no safetensors weights, and it names no LoRA adapter."""
    adapter = version.metrics.get("lora_adapter_path") if isinstance(version.metrics, dict) else None
    if adapter and Path(adapter).is_dir():
        return ""
    directory = Path(version.checkpoint_path)
    if not directory.is_dir():
        return f"{version} has no weights: its checkpoint directory does not exist"
    if not any(directory.glob("*.safetensors")):
        return f"{version} has no weights: its checkpoint directory holds no safetensors file"
    return ""


def candidate_provision(*, tenant: Tenant, actor: Actor, release: Release) -> str:
    """Makes sure a backend of the release's model holds the candidate's weights (a harness-only candidate's
    are those of its `weights_of` version): nothing to do when one does, else they are loaded on a free serving
    slot. Returns what was done, for the release's start reason ("" when nothing was). Refused (409, nothing
    changed but a failed load's backend, which keeps its old weights), with the reason: `version_has_no_weights`,
    `no_free_slot`, `provision_failed` (the server's answer)."""
    from apps.training.publication import model_version_publish

    candidate = release.candidate
    if backends_serving(tenant=tenant, version=candidate):
        return ""
    weights = candidate.weights_of or candidate
    problem = weights_problem(weights)
    if problem:
        raise Conflict(f"{problem}; nothing can serve its canary", code="version_has_no_weights")
    slot = serving_slot_free(tenant=tenant, model=release.model, baseline=release.baseline)
    if slot is None:
        raise Conflict(
            f"no serving slot is free for {weights}: the baseline {release.baseline} needs every backend of "
            f"{release.model} that can take new weights (embedded or vLLM); register another backend for "
            f"{release.model}, a server the candidate can be loaded on",
            code="no_free_slot",
        )
    (outcome,) = model_version_publish(tenant=tenant, actor=actor, version=weights, backend_ids=[slot.pk])
    if not outcome.ok:
        raise Conflict(
            f"loading {weights} onto {slot.name} failed: {outcome.error}; the release did not start",
            code="provision_failed",
        )
    return f"{weights} loaded on {slot.name}"
