"""Console pages: the training queue, the trajectories behind a verdict or reason code, and a trajectory's
review page (review, override, run the gates)."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from apps.console.access import console_page
from apps.console.pages import PAGE_SIZE, console_action, query_without_page
from apps.core.errors import NotFound
from apps.qualification import selectors, services
from apps.qualification.models import ReviewStatus
from apps.rewards.selectors import feedback_summary, training_reward
from apps.tenants.permissions import Action, role_can
from workers.qualification.gates import GATE_CODES


def _trajectory_or_404(request, trajectory_id):
    """Another tenant's trajectory answers like a missing one: the console's 404 page."""
    try:
        return selectors.trajectory_for_qualification(tenant=request.tenant, trajectory_id=trajectory_id)
    except NotFound as error:
        raise Http404(error.message) from None


@console_page(Action.TRAJECTORY_VIEW)
def training_queue(request):
    """The queue by agent, task and group, a page at a time (largest first), filtered by agent."""
    listing = reverse("console:training-queue-trajectories")
    agent = request.GET.get("agent", "").strip()
    waiting = [
        {
            **row,
            "url": listing
            + "?"
            + urlencode(
                {
                    "status": "qualified",
                    "agent": row["agent"],
                    "task_id": row["task_id"],
                    "group_id": row["group_id"],
                }
            ),
        }
        for row in selectors.training_queue(tenant=request.tenant)
    ]
    waiting_total = sum(row["count"] for row in waiting)
    agents = sorted({row["agent"] for row in waiting if row["agent"]})
    if agent:
        waiting = [row for row in waiting if row["agent"] == agent]
    page = Paginator(waiting, PAGE_SIZE).get_page(request.GET.get("page"))
    disqualified = [
        {**row, "url": listing + "?" + urlencode({"status": "disqualified", "reason": row["code"]})}
        for row in selectors.disqualified_counts(tenant=request.tenant)
    ]
    return render(
        request,
        "console/training_queue.html",
        {
            "page": page,
            "waiting_total": waiting_total,
            "agents": agents,
            "agent": agent,
            "query": query_without_page(request),
            "disqualified": disqualified,
            "gate_codes": GATE_CODES,
        },
    )


@console_page(Action.TRAJECTORY_VIEW)
def training_queue_trajectories(request):
    filters = {
        name: request.GET.get(name)
        for name in ("status", "reason", "agent", "task_id", "group_id")
        if request.GET.get(name) is not None
    }
    rows = selectors.qualification_list(tenant=request.tenant, **filters)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "console/training_queue_trajectories.html",
        {"page": page, "filters": filters, "query": query_without_page(request)},
    )


@console_page(Action.TRAJECTORY_VIEW)
def trajectory_review(request, trajectory_id):
    trajectory = _trajectory_or_404(request, trajectory_id)
    verdict = selectors.qualification_get(tenant=request.tenant, trajectory_id=trajectory.pk)
    failing = set(verdict.gate_reasons) if verdict else set()
    role = request.membership.role
    return render(
        request,
        "console/review.html",
        {
            "trajectory": trajectory,
            "verdict": verdict,
            "gates": [{"code": code, "passed": code not in failing} for code in GATE_CODES],
            "reviews": selectors.review_list(tenant=request.tenant, trajectory_id=trajectory.pk)[:20],
            "training_reward": training_reward(tenant=request.tenant, trajectory=trajectory),
            "feedback": feedback_summary(tenant=request.tenant, trajectory_id=trajectory.pk),
            "review_statuses": [
                status for status in ReviewStatus.values if status != ReviewStatus.UNREVIEWED
            ],
            "can_review": role_can(role, Action.TRAJECTORY_REVIEW),
            "can_override": role_can(role, Action.QUALIFICATION_OVERRIDE),
            "can_run": role_can(role, Action.QUALIFICATION_RUN),
        },
    )


@require_POST
@console_page(Action.TRAJECTORY_REVIEW)
def trajectory_review_submit(request, trajectory_id):
    _trajectory_or_404(request, trajectory_id)
    console_action(
        request,
        lambda: services.review_set(
            tenant=request.tenant,
            actor=request.actor,
            reviewer=request.user,
            trajectory_id=trajectory_id,
            status=request.POST.get("status", ""),
            note=request.POST.get("note", ""),
        ),
        success="Review saved; gates re-run.",
    )
    return redirect("console:trajectory-review", trajectory_id=trajectory_id)


@require_POST
@console_page(Action.QUALIFICATION_OVERRIDE)
def trajectory_override(request, trajectory_id):
    _trajectory_or_404(request, trajectory_id)
    status = request.POST.get("status", "")
    console_action(
        request,
        lambda: services.qualification_override(
            tenant=request.tenant,
            actor=request.actor,
            trajectory_id=trajectory_id,
            status=status,
            reason=request.POST.get("reason", ""),
        ),
        success=f"Overridden: {status or 'override removed'}.",
    )
    return redirect("console:trajectory-review", trajectory_id=trajectory_id)


@require_POST
@console_page(Action.QUALIFICATION_RUN)
def trajectory_run_gates(request, trajectory_id):
    trajectory = _trajectory_or_404(request, trajectory_id)
    services.qualification_enqueue(trajectory_id=trajectory.pk)
    messages.success(request, "Gates queued; reload in a moment for the verdict.")
    return redirect("console:trajectory-review", trajectory_id=trajectory_id)
