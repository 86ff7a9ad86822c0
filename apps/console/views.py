from django.contrib import messages
from django.contrib.auth import login, logout
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from apps.audit.selectors import audit_event_list
from apps.console import forms
from apps.console.access import console_page
from apps.console.pages import PAGE_SIZE, console_action, query_without_page
from apps.core.api import TENANT_SESSION_KEY
from apps.core.login_throttle import ThrottledAuthenticationForm, login_throttled
from apps.inference import selectors as inference_selectors
from apps.metrics.dashboard import overview_context
from apps.tenants import selectors
from apps.tenants.permissions import Action, role_can
from apps.trajectories import selectors as trajectory_selectors
from apps.trajectories.serialize import step_to_atdp


def login_view(request):
    """Sign-in; every attempt is counted by the throttling backend (apps/core/login_throttle.py)."""
    form = ThrottledAuthenticationForm(request, data=request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            login(request, form.get_user())
            target = request.POST.get("next") or request.GET.get("next") or ""
            if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
                target = "console:home"
            return redirect(target)
        if login_throttled(request):
            status = 429
    return render(
        request, "console/login.html", {"form": form, "next": request.GET.get("next", "")}, status=status
    )


@require_POST
def logout_view(request):
    logout(request)
    return redirect("console:login")


@require_POST
@console_page(Action.TENANT_VIEW)
def tenant_switch(request):
    slug = request.POST.get("tenant", "")
    if request.user.memberships.filter(tenant__slug=slug).exists():
        request.session[TENANT_SESSION_KEY] = slug
    else:
        messages.error(request, "You are not a member of that tenant.")
    return redirect("console:home")


@console_page(Action.TENANT_VIEW)
def home(request):
    context = {"member_count": selectors.membership_list(tenant=request.tenant).count()}
    if role_can(request.membership.role, Action.API_KEY_VIEW):
        context["active_key_count"] = selectors.api_key_list(
            tenant=request.tenant, include_inactive=False
        ).count()
    if role_can(request.membership.role, Action.AUDIT_VIEW):
        context["recent_events"] = audit_event_list(tenant=request.tenant)[:8]
    context.update(overview_context(tenant=request.tenant))  # live charts: apps/metrics/dashboard.py
    return render(request, "console/home.html", context)


@console_page(Action.TRAJECTORY_VIEW)
def trajectories(request):
    from django.db.models import Avg

    form = forms.TrajectoryFilterForm(request.GET or None)
    filters = (
        {key: value for key, value in form.cleaned_data.items() if value not in (None, "")}
        if form.is_valid()
        else {}
    )
    rows = trajectory_selectors.trajectory_list(tenant=request.tenant, **filters).annotate(
        reward_mean=Avg("rewards__value")
    )
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "console/trajectories.html",
        {"form": form, "page": page, "query": query_without_page(request)},
    )


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


@console_page(Action.TRAJECTORY_VIEW)
def trajectory_detail(request, trajectory_id):
    trajectory = trajectory_selectors.trajectory_get(tenant=request.tenant, trajectory_id=trajectory_id)
    steps = []
    for step in trajectory.steps.all():
        record = step_to_atdp(step)
        record["token_view"] = _token_view(record["tokens"], step.served_model)
        record["retry_of"] = str(step.retry_of) if step.retry_of else None
        record["error"] = step.error
        steps.append(record)
    replay_targets = []
    if role_can(request.membership.role, Action.TRAJECTORY_REPLAY):
        replay_targets = sorted(
            set(
                inference_selectors.backend_list(tenant=request.tenant).values_list(
                    "served_model", "model_version"
                )
            )
        )
    return render(
        request,
        "console/trajectory_detail.html",
        {
            "trajectory": trajectory,
            "steps": steps,
            "rewards": trajectory.rewards.all(),
            "replay_targets": replay_targets,
        },
    )


@require_POST
@console_page(Action.TRAJECTORY_REPLAY)
def trajectory_replay(request, trajectory_id):
    from apps.gateway.replay import trajectory_replay_start

    trajectory_selectors.trajectory_get(
        tenant=request.tenant, trajectory_id=trajectory_id
    )  # another tenant's: 404
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
