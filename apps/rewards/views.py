"""Console pages: the tenant's evaluators (list, register one: rule, program or LLM judge), one evaluator
(edit it, its latest judge runs with their failures and raw answers) and the reward specs (list, define one;
the REST API has no edit, so neither has the page)."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect, render

from apps.console.access import console_page
from apps.console.pages import PAGE_SIZE, query_without_page
from apps.core.errors import DomainError
from apps.rewards import selectors, services
from apps.rewards.forms import EvaluatorForm, RewardSpecForm
from apps.tenants.permissions import Action, role_can


def _spec_names(tenant) -> list[str]:
    return sorted({spec.name for spec in selectors.reward_spec_list(tenant=tenant)})


# A refusal without field names that is still about one field: shown beside it.
SPEC_CONFLICT_FIELDS = {"reward_spec_exists": "name", "training_reward_exists": "is_training_reward"}


def _add_service_errors(form: EvaluatorForm | RewardSpecForm, error: DomainError) -> None:
    if error.fields:
        form.add_service_fields(error.fields)
    elif isinstance(form, RewardSpecForm) and error.code in SPEC_CONFLICT_FIELDS:
        form.add_error(SPEC_CONFLICT_FIELDS[error.code], error.message)
    else:
        form.add_error(None, error.message)


@console_page(Action.REWARD_VIEW)
def evaluators(request):
    can_manage = role_can(request.membership.role, Action.EVALUATOR_MANAGE)
    form = EvaluatorForm(request.POST or None, spec_names=_spec_names(request.tenant))
    if request.method == "POST":
        if not can_manage:
            return render(request, "console/forbidden.html", {"action": Action.EVALUATOR_MANAGE}, status=403)
        if form.is_valid():
            try:
                evaluator = services.evaluator_create(
                    tenant=request.tenant,
                    actor=request.actor,
                    name=form.cleaned_data["name"],
                    version=form.cleaned_data["version"],
                    **form.service_arguments(),
                )
            except DomainError as error:
                _add_service_errors(form, error)
            else:
                messages.success(request, f"Registered {evaluator}.")
                return redirect("console:evaluator", evaluator_id=evaluator.pk)
    return render(
        request,
        "console/evaluators.html",
        {
            "evaluators": selectors.evaluator_list(tenant=request.tenant),
            "form": form,
            "can_manage": can_manage,
        },
        status=400 if form.errors else 200,
    )


@console_page(Action.REWARD_VIEW)
def evaluator_detail(request, evaluator_id):
    evaluator = selectors.evaluator_get(tenant=request.tenant, evaluator_id=evaluator_id)  # another's: 404
    can_manage = role_can(request.membership.role, Action.EVALUATOR_MANAGE)
    form = EvaluatorForm(
        request.POST or None,
        initial=EvaluatorForm.initial_for(evaluator),
        spec_names=_spec_names(request.tenant),
        editing=True,
    )
    if request.method == "POST":
        if not can_manage:
            return render(request, "console/forbidden.html", {"action": Action.EVALUATOR_MANAGE}, status=403)
        if form.is_valid():
            try:
                services.evaluator_update(
                    tenant=request.tenant,
                    actor=request.actor,
                    evaluator_id=evaluator.pk,
                    changes=form.service_arguments(),
                )
            except DomainError as error:
                _add_service_errors(form, error)
            else:
                messages.success(request, f"Saved {evaluator}.")
                return redirect("console:evaluator", evaluator_id=evaluator.pk)
    return render(
        request,
        "console/evaluator.html",
        {
            "evaluator": evaluator,
            "form": form,
            "can_manage": can_manage,
            "runs": selectors.evaluator_run_list(tenant=request.tenant, evaluator_id=evaluator.pk)[:50],
        },
        status=400 if form.errors else 200,
    )


@console_page(Action.REWARD_VIEW)
def reward_specs(request):
    """The tenant's reward specs, a page at a time; operators and admins (the REST API's
    `reward_spec.manage`) define one, the service's refusals beside the fields they name."""
    can_manage = role_can(request.membership.role, Action.REWARD_SPEC_MANAGE)
    form = RewardSpecForm(request.POST or None)
    if request.method == "POST":
        if not can_manage:
            return render(
                request, "console/forbidden.html", {"action": Action.REWARD_SPEC_MANAGE}, status=403
            )
        if form.is_valid():
            try:
                spec = services.reward_spec_create(
                    tenant=request.tenant, actor=request.actor, **form.service_arguments()
                )
            except DomainError as error:
                _add_service_errors(form, error)
            else:
                messages.success(request, f"Defined the reward spec {spec}.")
                return redirect("console:reward-specs")
    page = Paginator(selectors.reward_spec_list(tenant=request.tenant), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    return render(
        request,
        "console/reward_specs.html",
        {
            "page": page,
            "query": query_without_page(request),
            "form": form if can_manage else None,
        },
        status=400 if form.errors else 200,
    )
