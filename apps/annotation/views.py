"""Console pages: the queues, a queue's items, agreement (and why a figure is blank) and disagreements, the
keyboard-first workspace (the item beside the rating, the spec's options with their meaning, repeated
conversation folded) and Previous (change your last label, take a skip back)."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.annotation import revisions, selectors, services
from apps.annotation.forms import QueueCreateForm
from apps.console.access import console_page
from apps.console.pages import PAGE_SIZE, console_action, query_without_page
from apps.core.errors import DomainError, NotFound
from apps.rewards.selectors import spec_data
from apps.tenants.permissions import Action, role_can
from apps.trajectories.selectors import step_list
from apps.trajectories.serialize import step_to_atdp
from workers.rewards.specs import rating_options


def _queue_or_404(request, queue_id):
    try:
        return selectors.annotation_queue_get(tenant=request.tenant, queue_id=queue_id)
    except NotFound as error:
        raise Http404(error.message) from None


def _forbidden(request, action):
    return render(request, "console/forbidden.html", {"action": action}, status=403)


@console_page(Action.ANNOTATION_VIEW)
def queue_list(request):
    return _queue_list_page(request)


def _queue_list_page(request, *, form=None):
    manage = role_can(request.membership.role, Action.ANNOTATION_MANAGE)
    queues = selectors.annotation_queue_list(
        tenant=request.tenant, assigned_to=None if manage else request.user
    )
    rows = [
        {
            "queue": queue,
            "progress": selectors.annotation_progress(queue=queue, user=request.user),
            "assigned": selectors.is_assigned(queue=queue, user=request.user),
        }
        for queue in queues
    ]
    return render(
        request,
        "console/annotation_queues.html",
        {"rows": rows, "queue_form": form if form is not None else _queue_form(request) if manage else None},
        status=400 if form is not None and form.errors else 200,
    )


def _queue_form(request, data=None) -> QueueCreateForm:
    from apps.rewards.selectors import reward_spec_list
    from apps.tenants.selectors import membership_list

    return QueueCreateForm(
        data,
        specs=[spec for spec in reward_spec_list(tenant=request.tenant) if spec.kind != "critique"],
        members=[
            membership
            for membership in membership_list(tenant=request.tenant)
            if role_can(membership.role, Action.ANNOTATION_LABEL)
        ],
    )


@require_POST
@console_page(Action.ANNOTATION_MANAGE)
def queue_create(request):
    """A new queue, filled at once with the trajectories that match (apps.annotation.services)."""
    form = _queue_form(request, request.POST)
    if form.is_valid():
        try:
            queue = services.annotation_queue_create(
                tenant=request.tenant, actor=request.actor, **form.service_arguments()
            )
        except DomainError as error:
            for field, problems in (error.fields or {}).items():
                name = {"spec_id": "spec", "assignee_ids": "assignees"}.get(field, field)
                for problem in problems:
                    form.add_error(name if name in form.fields else None, problem)
            form.add_error(None, error.message)
        else:
            messages.success(request, f"Queue {queue.name} created.")
            return redirect("console:annotation-queue", queue_id=queue.pk)
    return _queue_list_page(request, form=form)


def agreement_blanks(agreement: dict, *, kind: str) -> dict:
    """Why an agreement figure is blank, in words (None where it has a value)."""
    alpha = None
    if agreement["krippendorff_alpha"] is None:
        alpha = (
            "needs two labels on the same item"
            if agreement["shared_units"] == 0
            else "the labels on shared items do not vary, so agreement is undefined"
        )
    kappa = None
    if agreement["cohen_kappa"] is None:
        if kind == "numeric":
            kappa = "κ is for yes/no and category labels; α covers numbers"
        elif agreement["annotators"] != 2:
            kappa = f"needs exactly two annotators (this queue has {agreement['annotators']})"
        else:
            kappa = "needs both annotators to label the same item"
    return {"kappa": kappa, "alpha": alpha}


@console_page(Action.ANNOTATION_VIEW)
def queue_detail(request, queue_id):
    queue = _queue_or_404(request, queue_id)
    agreement = selectors.annotation_agreement(queue=queue)
    items = Paginator(selectors.annotation_item_list(queue=queue), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    return render(
        request,
        "console/annotation_queue.html",
        {
            "queue": queue,
            "page": items,
            "query": query_without_page(request),
            "can_label": selectors.is_assigned(queue=queue, user=request.user),
            "progress": selectors.annotation_progress(queue=queue),
            "agreement": agreement,
            "agreement_blanks": agreement_blanks(agreement, kind=queue.spec.kind),
            "annotators": selectors.annotation_annotator_stats(queue=queue),
            "disagreements": selectors.annotation_disagreements(queue=queue),
            "options": rating_options(spec_data(queue.spec)),
            "can_resolve": role_can(request.membership.role, Action.TRAJECTORY_REVIEW),
        },
    )


@console_page(Action.ANNOTATION_LABEL)
def workspace(request, queue_id):
    queue = _queue_or_404(request, queue_id)
    if not selectors.is_assigned(queue=queue, user=request.user):
        return _forbidden(request, "annotation.label (not assigned to this queue)")
    item = selectors.annotation_next_item(queue=queue, user=request.user)
    steps = (
        folded_steps(
            [step_to_atdp(step) for step in step_list(tenant=request.tenant, trajectory=item.trajectory)]
        )
        if item
        else []
    )
    return render(
        request,
        "console/annotation_workspace.html",
        {
            "queue": queue,
            "item": item,
            "steps": steps,
            "answer": steps[-1] if steps else None,
            "options": option_meanings(queue.spec),
            "progress": selectors.annotation_progress(queue=queue, user=request.user),
            "previous": selectors.annotation_previous(queue=queue, user=request.user),
        },
    )


def _message_key(message: dict) -> tuple:
    return (message.get("role"), message.get("content"), str(message.get("tool_calls") or ""))


def folded_steps(steps: list[dict]) -> list[dict]:
    """Each step with `new_messages` (what it added to the conversation) and `folded` (how many leading
    messages repeat the previous step's conversation and answer: the page folds them away)."""
    seen: list[tuple] = []
    for step in steps:
        messages = list((step.get("observation") or {}).get("messages") or [])
        keys = [_message_key(message) for message in messages]
        repeated = 0
        while repeated < min(len(keys), len(seen)) and keys[repeated] == seen[repeated]:
            repeated += 1
        step["folded"] = repeated
        step["folded_messages"] = messages[:repeated]
        step["new_messages"] = messages[repeated:]
        answer = (step.get("action") or {}).get("message")
        seen = keys + ([_message_key(answer)] if isinstance(answer, dict) else [])
    return steps


def option_meanings(spec) -> list[dict]:
    """The rating options of the queue's spec (number keys 1..n), each with what it means: the value it
    records and, for a numeric scale, which end is which."""
    options = rating_options(spec_data(spec))
    rows = []
    for index, (name, value) in enumerate(options, start=1):
        if spec.kind == "boolean":
            meaning = "it meets the spec" if value else "it does not meet the spec"
        elif spec.kind == "numeric":
            meaning = (
                "the lowest score"
                if index == 1
                else "the highest score"
                if index == len(options)
                else f"{index - 1} steps up the scale"
            )
        else:
            meaning = f"the category {name}"
        rows.append({"key": index, "name": name, "value": value, "meaning": meaning})
    return rows


@console_page(Action.ANNOTATION_LABEL)
def previous(request, queue_id):
    """Your last act in this queue: change the label you gave, or take a skip back (POST)."""
    queue = _queue_or_404(request, queue_id)
    if not selectors.is_assigned(queue=queue, user=request.user):
        return _forbidden(request, "annotation.label (not assigned to this queue)")
    last = selectors.annotation_previous(queue=queue, user=request.user)
    if request.method == "POST" and last is not None:
        kind, row = last
        if kind == "skip":
            console_action(
                request,
                lambda: revisions.annotation_skip_undo(
                    tenant=request.tenant, actor=request.actor, user=request.user, skip_id=row.pk
                ),
                success="Skip taken back: the item is yours to label.",
            )
            return redirect("console:annotation-workspace", queue_id=queue.pk)
        value, label = _option(queue, request.POST.get("option", ""))
        if value is None:
            messages.error(request, "Choose a rating.")
        else:
            console_action(
                request,
                lambda: revisions.annotation_label_revise(
                    tenant=request.tenant,
                    actor=request.actor,
                    user=request.user,
                    label_id=row.pk,
                    value=value,
                    label=label,
                ),
                success="Label changed.",
            )
            return redirect("console:annotation-workspace", queue_id=queue.pk)
    steps = []
    if last is not None:
        item = last[1].item
        steps = folded_steps(
            [step_to_atdp(step) for step in step_list(tenant=request.tenant, trajectory=item.trajectory)]
        )
    return render(
        request,
        "console/annotation_previous.html",
        {"queue": queue, "last": last, "steps": steps, "options": option_meanings(queue.spec)},
    )


def _option(queue, raw: str) -> tuple[float | None, str]:
    options = rating_options(spec_data(queue.spec))
    try:
        name, value = options[int(raw) - 1]
    except (ValueError, IndexError):
        return None, ""
    return value, name if queue.spec.kind == "categorical" else ""


@require_POST
@console_page(Action.ANNOTATION_LABEL)
def label_submit(request, item_id):
    try:
        item = selectors.annotation_item_get(tenant=request.tenant, item_id=item_id)
    except NotFound as error:
        raise Http404(error.message) from None
    if not selectors.is_assigned(queue=item.queue, user=request.user):
        return _forbidden(request, "annotation.label (not assigned to this queue)")
    value, label = _option(item.queue, request.POST.get("option", ""))
    if value is None:
        messages.error(request, "Choose a rating (number keys) before submitting.")
        return redirect("console:annotation-workspace", queue_id=item.queue_id)
    console_action(
        request,
        lambda: services.annotation_label_submit(
            tenant=request.tenant,
            actor=request.actor,
            user=request.user,
            item_id=item.pk,
            value=value,
            label=label,
            step_id=request.POST.get("step_id") or None,
            comment=request.POST.get("comment", ""),
            correction=request.POST.get("correction", ""),
        ),
        success="Label saved.",
    )
    return redirect("console:annotation-workspace", queue_id=item.queue_id)


@require_POST
@console_page(Action.ANNOTATION_LABEL)
def item_skip(request, item_id):
    try:
        item = selectors.annotation_item_get(tenant=request.tenant, item_id=item_id)
        services.annotation_skip(tenant=request.tenant, user=request.user, item_id=item.pk)
        messages.success(request, "Skipped.")
    except NotFound as error:
        raise Http404(error.message) from None
    except DomainError as error:
        if error.status == 403:
            return _forbidden(request, "annotation.label (not assigned to this queue)")
        messages.error(request, error.message)
    return redirect("console:annotation-workspace", queue_id=item.queue_id)


@require_POST
@console_page(Action.TRAJECTORY_REVIEW)
def item_resolve(request, item_id):
    try:
        item = selectors.annotation_item_get(tenant=request.tenant, item_id=item_id)
    except NotFound as error:
        raise Http404(error.message) from None
    value, label = _option(item.queue, request.POST.get("option", ""))
    console_action(
        request,
        lambda: services.annotation_resolve(
            tenant=request.tenant,
            actor=request.actor,
            item_id=item.pk,
            value=value,
            label=label,
            reason=request.POST.get("reason", ""),
        ),
        success="Disagreement resolved.",
    )
    return redirect("console:annotation-queue", queue_id=item.queue_id)
