"""A release's candidate on a serving slot before its release starts: canary sessions (and the release's eval
runs, which go through the gateway) need a backend that holds the candidate's weights, or they get 503.

A serving slot is one of the tenant's backends of the model that can take new weights (embedded or vLLM: an
`openai_compatible` server has no weight-update endpoint). `release_start` calls `candidate_provision`
outside its transaction, since loading weights is a call to a server: the candidate is loaded on a free slot
(one not holding the baseline's weights) through apps.training.publication, or the start is refused with the
reason. An eval run of a version nothing serves, and the evolution control plane's release decisions, use the
same `version_provision`.
"""

from pathlib import Path

from apps.audit.services import Actor
from apps.core.errors import Conflict
from apps.releases.models import SERVING_STATUSES, Release
from apps.releases.serving import backends_serving
from apps.tenants.models import Tenant

LOADABLE_KINDS = ("embedded", "vllm")


def serving_slot_free(*, tenant: Tenant, model: str, baseline, keep=()):
    """The backend of `model` that can take a candidate: one not holding `baseline`'s weights (nor those of a
    version in `keep`: a running release's candidate), else (all hold the baseline's) the last of two or more,
    leaving the baseline the others. None when the baseline would lose its only backend, or when no backend of the
    model can take weights. Without a baseline (a model nothing serves yet) any such backend is free."""
    from apps.inference.selectors import backend_list

    held = {str((version.weights_of or version).number) for version in keep}
    backends = [
        backend
        for backend in backend_list(tenant=tenant, served_model=model)
        .filter(kind__in=LOADABLE_KINDS)
        .order_by("name")
        if backend.model_version not in held
    ]
    if baseline is None:
        return backends[0] if backends else None
    weights = baseline.weights_of or baseline
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
    """Makes sure a backend of the release's model holds the candidate's weights (`version_provision`, the
    baseline keeping its backends). Returns what was done, for the release's start reason."""
    return version_provision(
        tenant=tenant, actor=actor, version=release.candidate, baseline=release.baseline, purpose="its canary"
    )


def version_provision(*, tenant: Tenant, actor: Actor, version, baseline, purpose: str) -> str:
    """Makes sure a backend of the version's model holds its weights (a harness-only version's are those of its
    `weights_of` version): nothing to do when one does, else they are loaded on a free serving slot
    (`serving_slot_free`: never production's last backend, never a running release's candidate's). Used by a
    release's start and by an eval run of a version nothing serves. Returns what was done ("" when nothing was).
    Refused (409, nothing changed but a failed load's backend, which keeps its old weights), with the reason:
    `version_has_no_weights`, `no_free_slot`, `provision_failed` (the server's answer)."""
    from apps.training.publication import model_version_publish

    if backends_serving(tenant=tenant, version=version):
        return ""
    weights = version.weights_of or version
    problem = weights_problem(weights)
    if problem:
        raise Conflict(f"{problem}; nothing can serve {purpose}", code="version_has_no_weights")
    keep = [
        release.candidate
        for release in Release.objects.for_tenant(tenant)
        .filter(model=version.name, status__in=SERVING_STATUSES)
        .select_related("candidate__weights_of")
        if release.candidate_id != version.pk
    ]
    slot = serving_slot_free(tenant=tenant, model=version.name, baseline=baseline, keep=keep)
    if slot is None:
        needs = f"the baseline {baseline}" if baseline is not None else "nothing"
        raise Conflict(
            f"no serving slot is free for {weights}: {needs} needs every backend of {version.name} that can take "
            f"new weights (embedded or vLLM){' besides a running canary' if keep else ''}; register another "
            f"backend for {version.name}, a server {weights} can be loaded on",
            code="no_free_slot",
        )
    (outcome,) = model_version_publish(tenant=tenant, actor=actor, version=weights, backend_ids=[slot.pk])
    if not outcome.ok:
        raise Conflict(
            f"loading {weights} onto {slot.name} failed: {outcome.error}; {purpose} did not start",
            code="provision_failed",
        )
    return f"{weights} loaded on {slot.name}"
