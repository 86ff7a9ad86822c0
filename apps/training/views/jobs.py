"""Console pages of training: jobs (list, new, detail with live charts, cancel) and online runs (start,
stop)."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.console.access import console_page
from apps.console.pages import console_action
from apps.core.errors import DomainError
from apps.tenants.permissions import Action, role_can
from apps.tenants.selectors import two_person_rule_on
from apps.training import jobs, online, selectors
from apps.training.forms import OnlineRunForm, TrainingJobForm
from apps.training.job_words import online_run_title, training_job_title
from apps.training.views import form_refusal_show

CHARTS = [  # (chart id, title, metric keys)
    ("loss", "Loss", ["loss"]),
    ("reward", "Reward mean / std", ["reward_mean", "reward_std"]),
    ("advantage", "Advantage mean / std", ["advantage_mean", "advantage_std"]),
    (
        "policy",
        "KL to behaviour, clip and masked fractions",
        ["kl", "clip_fraction", "masked_token_fraction"],
    ),
    ("throughput", "Tokens per second", ["tokens_per_second"]),
]


def job_figures(rows: list[dict]) -> dict:
    """Plotly figures (as JSON-able dicts) of the job's metric rows, one per chart, steps on x."""
    steps = [row["step"] for row in rows]
    figures = {}
    for chart, title, keys in CHARTS:
        figures[chart] = {
            "data": [
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": key,
                    "x": steps,
                    "y": [row.get(key) for row in rows],
                }
                for key in keys
            ],
            "layout": {
                "title": {"text": title},
                "height": 260,
                "margin": {"l": 50, "r": 10, "t": 40, "b": 30},
                "xaxis": {"title": {"text": "step"}},
                "legend": {"orientation": "h"},
            },
        }
    histogram = rows[-1].get("staleness_histogram", []) if rows else []
    figures["staleness"] = {
        "data": [{"type": "bar", "x": [lag for lag, _ in histogram], "y": [count for _, count in histogram]}],
        "layout": {
            "title": {"text": "Staleness of the last batch (current − token version)"},
            "height": 260,
            "margin": {"l": 50, "r": 10, "t": 40, "b": 30},
        },
    }
    return figures


@console_page(Action.TRAINING_VIEW)
def training_jobs(request):
    from apps.training.online import online_run_list

    return render(
        request,
        "console/training_jobs.html",
        {
            "jobs": selectors.training_job_list(tenant=request.tenant, status=request.GET.get("status"))[
                :200
            ],
            "online_runs": online_run_list(tenant=request.tenant)[:50],
            "can_manage": role_can(request.membership.role, Action.TRAINING_MANAGE),
        },
    )


@console_page(Action.TRAINING_MANAGE)
def online_run_new(request):
    """Starts an online run (apps/training/online.py) from a version the operator picks."""
    versions = selectors.model_version_list(tenant=request.tenant).exclude(status="training")
    # Under the two-person rule a run may not serve its own versions (online_run_start refuses it).
    serve_own = not two_person_rule_on(tenant=request.tenant)
    form = OnlineRunForm(request.POST or None, versions=versions, initial={"publish_to_backends": serve_own})
    if request.method == "POST" and form.is_valid():
        try:
            run = online.online_run_start(
                tenant=request.tenant,
                actor=request.actor,
                base_version=selectors.model_version_get(
                    tenant=request.tenant, version_id=form.cleaned_data["base_version"]
                ),
                **form.service_arguments(),
            )
        except DomainError as error:
            form_refusal_show(form, error)
        else:
            messages.success(request, f"{online_run_title(run)} started.")
            return redirect(f"{reverse('console:training-jobs')}#online-{run.pk}")
    return render(
        request,
        "console/online_run_new.html",
        {"form": form, "running": online.online_run_active(tenant=request.tenant)},
        status=400 if form.errors else 200,
    )


@require_POST
@console_page(Action.TRAINING_MANAGE)
def online_run_stop(request, run_id):
    run = online.online_run_get(tenant=request.tenant, run_id=run_id)  # another tenant's: 404
    if console_action(
        request, lambda: online.online_run_stop(tenant=request.tenant, actor=request.actor, run_id=run.pk)
    ):
        messages.success(request, f"Stop requested: {online_run_title(run)} stops after its current step.")
    return redirect(f"{reverse('console:training-jobs')}#online-{run.pk}")


@console_page(Action.TRAINING_MANAGE)
def training_job_new(request):
    versions = selectors.model_version_list(tenant=request.tenant)
    form = TrainingJobForm(request.POST or None, versions=versions)
    if request.method == "POST" and form.is_valid():
        try:
            job = jobs.training_job_create(
                tenant=request.tenant, actor=request.actor, **form.service_arguments()
            )
        except DomainError as error:
            form.add_error(None, error.message)
            for field, problems in (error.fields or {}).items():
                if field in form.fields:
                    for problem in problems:
                        form.add_error(field, problem)
        else:
            messages.success(request, f"{training_job_title(job)} queued.")
            return redirect("console:training-job", job_id=job.pk)
    queue = selectors.training_queue_snapshot(tenant=request.tenant)
    return render(
        request,
        "console/training_job_new.html",
        {"form": form, "queued_trajectories": len(queue["trajectory_ids"])},
        status=400 if form.errors else 200,
    )


@console_page(Action.TRAINING_VIEW)
def training_job_detail(request, job_id):
    job = selectors.training_job_get(tenant=request.tenant, job_id=job_id)
    rows = selectors.training_job_metrics(tenant=request.tenant, job_id=job.pk)
    return render(
        request,
        "console/job_detail.html",
        {
            "job": job,
            "figures": job_figures(rows),
            "charts": [chart for chart, _, _ in CHARTS] + ["staleness"],
            "chart_keys": {chart: keys for chart, _, keys in CHARTS},
            "logs": selectors.training_job_logs(tenant=request.tenant, job_id=job.pk),
            "stream": jobs.training_job_stream(job.pk),
            "can_manage": role_can(request.membership.role, Action.TRAINING_MANAGE),
        },
    )


@require_POST
@console_page(Action.TRAINING_MANAGE)
def training_job_cancel(request, job_id):
    try:
        jobs.training_job_cancel(tenant=request.tenant, actor=request.actor, job_id=job_id)
        messages.success(request, "Cancel requested; the job stops before its next step.")
    except DomainError as error:
        if error.code in ("training_job_not_found",):
            raise
        messages.error(request, error.message)
    return redirect("console:training-job", job_id=job_id)
