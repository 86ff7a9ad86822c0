"""Console pages of the model registry: versions (register a directory of the tenant's inbox, publish a
version directly), a model's lineage, its aliases and its chat templates."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.console.access import console_page
from apps.console.pages import PAGE_SIZE, console_action, query_without_page
from apps.core.errors import DomainError
from apps.tenants.permissions import Action, role_can
from apps.tenants.selectors import two_person_rule_on
from apps.training import imports, registration, selectors, services
from apps.training.forms import AliasMoveForm, ChatTemplateForm, ModelRegisterForm
from apps.training.models import VersionStatus
from apps.training.views import form_refusal_show


@console_page(Action.MODEL_VERSION_VIEW)
def model_versions(request):
    return _versions_page(request)


# Versions the page offers to publish directly: those the service accepts (apps.releases.serving's
# DIRECTLY_SERVABLE) except the one already in production. A retired version published again is the way back
# to it outside a release.
PUBLISHABLE = (VersionStatus.CANDIDATE, VersionStatus.RETIRED)


def _version_rows(tenant, versions) -> list[dict]:
    """Each version of a page with where it serves (the aliases naming it) and its newest finished
    evaluation of each suite ("bfcl-heldout 33 % of 40 cases")."""
    from apps.evaluation.models import RunStatus
    from apps.evaluation.selectors import eval_run_list

    ids = [version.pk for version in versions]
    aliases: dict[int, list[str]] = {}
    for alias in selectors.alias_list(tenant=tenant).filter(version_id__in=ids):
        aliases.setdefault(alias.version_id, []).append(alias.alias)
    evaluations: dict[int, dict[str, str]] = {}
    runs = eval_run_list(tenant=tenant).filter(model_version_id__in=ids, status=RunStatus.SUCCEEDED)
    for run in runs:  # newest first: the first run of a suite is its newest
        summary = run.summary or {}
        if summary.get("pass_rate") is None:
            continue
        evaluations.setdefault(run.model_version_id, {}).setdefault(
            run.suite.name, f"{summary['pass_rate'] * 100:.0f} % of {summary.get('cases', 0)} cases"
        )
    return [
        {
            "version": version,
            "aliases": sorted(aliases.get(version.pk, [])),
            "evaluations": sorted(evaluations.get(version.pk, {}).items()),
        }
        for version in versions
    ]


def _versions_page(request, *, register_form=None):
    can_register = role_can(request.membership.role, Action.MODEL_REGISTER)
    two_person = two_person_rule_on(tenant=request.tenant)
    if can_register and register_form is None:
        register_form = ModelRegisterForm()
    name = request.GET.get("name") or None
    status = request.GET.get("status") or None
    if status not in VersionStatus.values:
        status = None
    page = Paginator(
        selectors.model_version_list(tenant=request.tenant, name=name, status=status), PAGE_SIZE
    ).get_page(request.GET.get("page"))
    return render(
        request,
        "console/version_list.html",
        {
            "page": page,
            "rows": _version_rows(request.tenant, list(page)),
            "query": query_without_page(request),
            "names": selectors.model_names(tenant=request.tenant),
            "statuses": VersionStatus.values,
            "name": name or "",
            "status": status or "",
            "register_form": register_form if can_register else None,
            # Under the two-person rule direct publication is refused (apps.releases.serving): no button.
            "can_publish": role_can(request.membership.role, Action.MODEL_VERSION_PUBLISH) and not two_person,
            "two_person_rule": two_person,
            "publishable": PUBLISHABLE,
        },
        status=400 if register_form is not None and register_form.errors else 200,
    )


@require_POST
@console_page(Action.MODEL_REGISTER)
def model_register(request):
    """A directory of the tenant's model inbox registered as a new candidate version (apps/training/registration)."""
    form = ModelRegisterForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            version = registration.model_directory_register(
                tenant=request.tenant,
                actor=request.actor,
                name=data["name"],
                source_dir=registration.model_inbox_resolve(
                    tenant=request.tenant, directory=data["directory"]
                ),
                description=data["description"],
            )
        except DomainError as error:
            form_refusal_show(form, error)
        else:
            messages.success(
                request,
                f"Registered {version.label}, a candidate. Register a backend serving version {version.number}, "
                "then make it production on the Serving page (its first version) or release it.",
            )
            return redirect("console:model-versions")
    return _versions_page(request, register_form=form)


@require_POST
@console_page(Action.MODEL_VERSION_PUBLISH)
def model_version_publish(request, version_id):
    """Direct publication, as `POST /api/v1/model-versions/<id>/publish/` does it
    (`apps.releases.serving.version_publish_directly`): the outcome, or the refusal, as messages."""
    from apps.releases.serving import version_publish_directly

    version = selectors.model_version_get(tenant=request.tenant, version_id=version_id)  # another's: 404
    outcomes = console_action(
        request,
        lambda: version_publish_directly(tenant=request.tenant, actor=request.actor, version=version),
    )
    if outcomes is not None:
        _publication_messages(request, version, outcomes)
    return redirect("console:model-versions")


def _publication_messages(request, version, outcomes) -> None:
    loaded = [outcome.backend for outcome in outcomes if outcome.ok]
    failures = "; ".join(f"{outcome.backend}: {outcome.error}" for outcome in outcomes if not outcome.ok)
    if not outcomes:
        messages.warning(
            request,
            f"No backend of this tenant serves {version.name}: nothing was loaded and {version.label} stays "
            f"{version.status}. Register a backend serving the model first (Backends).",
        )
    elif not loaded:
        messages.error(
            request, f"{version.label} was loaded on no backend ({failures}); it stays {version.status}."
        )
    else:
        version.refresh_from_db()
        serving = (
            "it now serves as production"
            if version.status == VersionStatus.PRODUCTION
            else "a release of the model began meanwhile and decides what serves"
        )
        messages.success(request, f"Published {version.label}: loaded on {', '.join(loaded)}; {serving}.")
        if failures:
            messages.warning(request, f"Not loaded on {failures}; those backends keep their weights.")


def lineage_tree(rows: list[dict]) -> list[dict]:
    """Depth-first order with depths, children under their parent (numbers ascending)."""
    children: dict = {}
    for row in rows:
        children.setdefault(row["parent"], []).append(row)
    ordered = []

    def visit(parent, depth):
        for row in sorted(children.get(parent, []), key=lambda r: r["number"]):
            ordered.append({**row, "depth": depth})
            visit(row["number"], depth + 1)

    visit(None, 0)
    return ordered


def lineage_figure(tree: list[dict]) -> dict:
    position = {row["number"]: (row["depth"], index) for index, row in enumerate(tree)}
    edge_x, edge_y = [], []
    for row in tree:
        if row["parent"] in position:
            (x0, y0), (x1, y1) = position[row["parent"]], position[row["number"]]
            edge_x += [x0, x1, None]
            edge_y += [y0, y1, None]
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines",
                "x": edge_x,
                "y": edge_y,
                "hoverinfo": "skip",
                "line": {"color": "#999"},
                "showlegend": False,
            },
            {
                "type": "scatter",
                "mode": "markers+text",
                "x": [position[r["number"]][0] for r in tree],
                "y": [position[r["number"]][1] for r in tree],
                "text": [f"v{r['number']} {r['status']}" for r in tree],
                "textposition": "middle right",
                "marker": {"size": 14},
                "showlegend": False,
            },
        ],
        "layout": {
            "height": max(200, 40 * len(tree) + 80),
            "xaxis": {"title": {"text": "generation"}, "dtick": 1},
            "yaxis": {"autorange": "reversed", "visible": False},
            "margin": {"l": 20, "r": 20, "t": 20, "b": 40},
        },
    }


@console_page(Action.MODEL_VERSION_VIEW)
def model_lineage(request, name):
    return _lineage_page(request, name)


def _lineage_page(request, name, *, form=None, alias_form=None):
    tree = lineage_tree(selectors.model_lineage(tenant=request.tenant, name=name))
    if not tree:
        from django.http import Http404

        raise Http404("no such model")
    context = {
        "name": name,
        "tree": tree,
        "figure": lineage_figure(tree),
        "aliases": selectors.alias_list(tenant=request.tenant, name=name),
    }
    if role_can(request.membership.role, Action.MODEL_ALIAS_MANAGE):
        context["alias_form"] = alias_form or AliasMoveForm(
            versions=selectors.model_version_list(tenant=request.tenant, name=name)
        )
    if role_can(request.membership.role, Action.TRAINING_MANAGE):
        versions = list(selectors.model_version_list(tenant=request.tenant, name=name))
        if form is None:
            current = (
                selectors.alias_resolve(tenant=request.tenant, name=name, alias="production") or versions[0]
            )
            form = ChatTemplateForm(
                initial={
                    "version": current.pk,
                    "chat_template": imports.model_version_chat_template(
                        tenant=request.tenant, version=current
                    )
                    or "",
                },
                versions=versions,
            )
        context["template_form"] = form
    failed = (form is not None and form.errors) or (alias_form is not None and alias_form.errors)
    return render(request, "console/lineage.html", context, status=400 if failed else 200)


@require_POST
@console_page(Action.MODEL_ALIAS_MANAGE)
def model_alias_move(request, name):
    """Points a named alias of the model at one of its versions (production moves with what serves)."""
    versions = selectors.model_version_list(tenant=request.tenant, name=name)
    if not versions.exists():
        from django.http import Http404

        raise Http404("no such model")
    form = AliasMoveForm(request.POST, versions=versions)
    if form.is_valid():
        data = form.cleaned_data
        try:
            services.alias_check_movable(alias=data["alias"])
            moved = services.alias_move(
                tenant=request.tenant,
                actor=request.actor,
                name=name,
                alias=data["alias"],
                version=selectors.model_version_get(tenant=request.tenant, version_id=data["version"]),
                reason=data["reason"],
            )
        except DomainError as error:
            form_refusal_show(form, error)
        else:
            messages.success(request, f"{name}:{moved.alias} → v{moved.version.number}.")
            return redirect("console:model-lineage", name=name)
    return _lineage_page(request, name, alias_form=form)


@require_POST
@console_page(Action.TRAINING_MANAGE)
def model_chat_template(request, name):
    """A new candidate version serving another chat template over a version's weights (apps/training/imports)."""
    versions = list(selectors.model_version_list(tenant=request.tenant, name=name))
    if not versions:
        from django.http import Http404

        raise Http404("no such model")
    form = ChatTemplateForm(request.POST, versions=versions)
    if form.is_valid():
        try:
            created = imports.model_version_set_chat_template(
                tenant=request.tenant,
                actor=request.actor,
                version=selectors.model_version_get(
                    tenant=request.tenant, version_id=form.cleaned_data["version"]
                ),
                chat_template=form.cleaned_data["chat_template"],
            )
        except DomainError as error:
            form.add_error(
                "chat_template" if "chat_template" in (error.fields or {}) else None, error.message
            )
        else:
            messages.success(
                request,
                f"Registered {created.label}, a candidate: {created.parent.label}'s weights with this chat "
                "template. A server serves it once started on its directory.",
            )
            return redirect("console:model-lineage", name=name)
    return _lineage_page(request, name, form=form)
