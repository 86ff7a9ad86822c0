"""Console pages: the trajectory browser (filters, reward mean per row), a trajectory's detail (steps, messages,
tool calls, tokens shaded by logprob, how its session ended and its continuations), its replay against another
model version and ending its session."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.console.access import console_page
from apps.console.pages import PAGE_SIZE, console_action, query_without_page
from apps.inference import selectors as inference_selectors
from apps.tenants.permissions import Action, role_can
from apps.trajectories import forms, selectors
from apps.trajectories.lifecycle import trajectory_end_by_request
from apps.trajectories.search import trajectory_search
from apps.trajectories.serialize import step_to_atdp


@console_page(Action.TRAJECTORY_VIEW)
def trajectories(request):
    form = forms.TrajectoryFilterForm(request.GET or None)
    filters = (
        {key: value for key, value in form.cleaned_data.items() if value not in (None, "")}
        if form.is_valid()
        else {}
    )
    rows = trajectory_search(tenant=request.tenant, **filters)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "console/trajectories.html",
        {
            "form": form,
            "page": page,
            "query": query_without_page(request),
            "saved_filters": SAVED_FILTERS,
        },
    )


# The browser's saved filters: links to its own query strings.
SAVED_FILTERS = [
    ("Succeeded", "outcome=succeeded"),
    ("Failed", "outcome=failed"),
    ("A call failed", "outcome=errored"),
    ("Not scored yet", "outcome=unscored"),
    ("Open sessions", "status=open"),
    ("Production traffic", "purpose=production"),
    ("Evaluation traffic", "purpose=eval"),
]


def _token_view(tokens: dict | None, tokenizer_name: str) -> list[dict]:
    """Completion tokens with their logprob and a shade (0 = certain, 1 = very unlikely)."""
    if not tokens:
        return []
    rows = []
    for token_id, logprob, version in zip(
        tokens["completion_ids"], tokens["completion_logprobs"], tokens["completion_versions"], strict=False
    ):
        rows.append(
            {
                "id": token_id,
                "logprob": logprob,
                "version": version,
                "shade": round(min(1.0, -logprob / 8.0), 2),
            }
        )
    return rows


def _token_version_warning(state) -> bool:
    """The gateway warned about this step's per-token policy versions (state.token_versions, apps/gateway/
    versions.py): some are unknown, or a weight swap fell inside a whole answer."""
    note = state.get("token_versions") if isinstance(state, dict) else None
    return isinstance(note, dict) and bool(note.get("warning"))


@console_page(Action.TRAJECTORY_VIEW)
def trajectory_detail(request, trajectory_id):
    trajectory = selectors.trajectory_get(tenant=request.tenant, trajectory_id=trajectory_id)
    steps = []
    for step in trajectory.steps.all():
        record = step_to_atdp(step)
        record["token_view"] = _token_view(record["tokens"], step.served_model)
        record["retry_of"] = str(step.retry_of) if step.retry_of else None
        record["error"] = step.error
        steps.append(record)
    replay_targets = []
    if role_can(request.membership.role, Action.TRAJECTORY_REPLAY):
        replay_targets = inference_selectors.backend_model_versions(tenant=request.tenant)
    return render(
        request,
        "console/trajectory_detail.html",
        {
            "trajectory": trajectory,
            "lifecycle": selectors.trajectory_lifecycle_get(
                tenant=request.tenant, trajectory_id=trajectory_id
            ),
            "steps": steps,
            "rewards": trajectory.rewards.all(),
            "replay_targets": replay_targets,
            "can_end": role_can(request.membership.role, Action.TRAJECTORY_END),
            "version_warnings": sum(1 for step in steps if _token_version_warning(step["state"])),
        },
    )


@require_POST
@console_page(Action.TRAJECTORY_REPLAY)
def trajectory_replay(request, trajectory_id):
    from apps.loop.replay import trajectory_replay_start

    selectors.trajectory_get(tenant=request.tenant, trajectory_id=trajectory_id)  # another tenant's: 404
    model, _, model_version = request.POST.get("target", "").partition("@")
    replay = console_action(
        request,
        lambda: trajectory_replay_start(
            tenant=request.tenant,
            trajectory_id=trajectory_id,
            model=model,
            model_version=model_version,
            actor=request.actor,
        ),
    )
    if replay:
        messages.success(
            request, f"Replay against {model} {model_version} queued; its steps appear here as they land."
        )
        return redirect("console:trajectory-detail", trajectory_id=replay.pk)
    return redirect("console:trajectory-detail", trajectory_id=trajectory_id)


@require_POST
@console_page(Action.TRAJECTORY_END)
def trajectory_end(request, trajectory_id):
    selectors.trajectory_lifecycle_get(tenant=request.tenant, trajectory_id=trajectory_id)  # another's: 404
    console_action(
        request,
        lambda: trajectory_end_by_request(
            tenant=request.tenant, trajectory_id=trajectory_id, actor=request.actor
        ),
        success="Session ended (reason: api); its qualification runs next.",
    )
    return redirect("console:trajectory-detail", trajectory_id=trajectory_id)
