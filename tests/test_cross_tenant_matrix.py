"""The cross-tenant matrix, generated from the URL configuration.

Every URL pattern under the REST API (`/api/v1/...`) and every console page that takes a path parameter
is requested, with each HTTP method its view allows, by a member (or admin key) of tenant A naming an
object of tenant B. Each answer must be exactly a missing object's (404: never 403, 200 or 500), and
nothing of tenant B may change. The same request on A's own object must not be a 404, so a pass is never
an accident of a wrong URL or body.

Coverage: `OBJECTS` maps each such URL name to the path parameters of a tenant's object. A new endpoint
with a path parameter that is not in `OBJECTS` (or not in `NOT_TENANT_OBJECTS` with a reason) fails
`test_every_object_endpoint_is_in_the_matrix`, telling the developer to add it.

The two tenants' objects are built once for the module (inside a transaction rolled back at its end);
each request runs in its own savepoint, rolled back after it.
"""

import uuid
from dataclasses import dataclass

import pytest
from django.apps import apps as django_apps
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from apps.annotation.models import AnnotationItem
from apps.annotation.services import annotation_queue_create
from apps.audit.services import Actor
from apps.evaluation.services import eval_case_create, eval_run_start, eval_suite_create
from apps.qualification.services import qualification_evaluate
from apps.releases.services import release_create
from apps.rewards.services import reward_create
from apps.tenants.models import Tenant
from apps.tenants.permissions import Role
from apps.tenants.services import api_key_create
from apps.trajectories.models import Step
from tests.evolution.factories import DecisionFactory, EvolutionPolicyFactory, HarnessVersionFactory
from tests.inference.factories import BackendFactory
from tests.releases.helpers import register_versions
from tests.rewards.factories import EvaluatorFactory, make_spec
from tests.tenants.factories import MembershipFactory, TenantFactory
from tests.training.factories import OnlineRunFactory, TrainingJobFactory
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db

SYSTEM = Actor.system("matrix")
API_PREFIX = "api/v1/"
CONSOLE_NAMESPACE = "console"


# ------------------------------------------------------------------------------------------------ registry

# URL name (console pages prefixed `console:`) → the path parameters naming an object of `world`.
OBJECTS = {
    # tenants
    "member-detail": lambda world: {"membership_id": world.membership.pk},
    "api-key-detail": lambda world: {"key_id": world.key.pk},
    "api-key-revoke": lambda world: {"key_id": world.key.pk},
    "api-key-rotate": lambda world: {"key_id": world.key.pk},
    # trajectories
    "trajectory-detail": lambda world: {"trajectory_id": world.trajectory.pk},
    "trajectory-replay": lambda world: {"trajectory_id": world.trajectory.pk},
    "trajectory-end": lambda world: {"trajectory_id": world.trajectory.pk},
    "trajectory-lifecycle": lambda world: {"trajectory_id": world.trajectory.pk},
    # inference
    "backend-detail": lambda world: {"backend_id": world.backend.pk},
    "backend-check": lambda world: {"backend_id": world.backend.pk},
    # rewards
    "evaluator-run": lambda world: {"evaluator_id": world.evaluator.pk},
    "evaluator-detail": lambda world: {"evaluator_id": world.evaluator.pk},
    "evaluator-run-list": lambda world: {"evaluator_id": world.evaluator.pk},
    "reward-spec-detail": lambda world: {"spec_id": world.spec.pk},
    "reward-trajectory-summary": lambda world: {"trajectory_id": world.trajectory.pk},
    "reward-detail": lambda world: {"reward_id": world.reward.pk},
    # qualification
    "qualification-detail": lambda world: {"trajectory_id": world.trajectory.pk},
    "qualification-run": lambda world: {"trajectory_id": world.trajectory.pk},
    "qualification-override": lambda world: {"trajectory_id": world.trajectory.pk},
    # annotation
    "annotation-queue-detail": lambda world: {"queue_id": world.queue.pk},
    "annotation-fill": lambda world: {"queue_id": world.queue.pk},
    "annotation-next": lambda world: {"queue_id": world.queue.pk},
    "annotation-export": lambda world: {"queue_id": world.queue.pk},
    "annotation-label": lambda world: {"item_id": world.item.pk},
    "annotation-skip": lambda world: {"item_id": world.item.pk},
    "annotation-resolve": lambda world: {"item_id": world.item.pk},
    # evaluation
    "eval-case-list": lambda world: {"suite_id": world.suite.pk},
    "eval-run-detail": lambda world: {"run_id": world.run.pk},
    # releases
    "release-detail": lambda world: {"release_id": world.release.pk},
    "release-start": lambda world: {"release_id": world.release.pk},
    "release-approve": lambda world: {"release_id": world.release.pk},
    "release-rollback": lambda world: {"release_id": world.release.pk},
    "release-abort": lambda world: {"release_id": world.release.pk},
    "release-resume": lambda world: {"release_id": world.release.pk},
    "release-analyze": lambda world: {"release_id": world.release.pk},
    "release-events": lambda world: {"release_id": world.release.pk},
    "release-analyses": lambda world: {"release_id": world.release.pk},
    # training
    "training-job-detail": lambda world: {"job_id": world.job.pk},
    "training-job-cancel": lambda world: {"job_id": world.job.pk},
    "model-version-detail": lambda world: {"version_id": world.candidate.pk},
    "model-version-lineage": lambda world: {"version_id": world.candidate.pk},
    "model-version-publish": lambda world: {"version_id": world.candidate.pk},
    "model-version-chat-template": lambda world: {"version_id": world.candidate.pk},
    "online-run-detail": lambda world: {"run_id": world.online_run.pk},
    "online-run-stop": lambda world: {"run_id": world.online_run.pk},
    # evolution
    "evolution-policy-detail": lambda world: {"policy_id": world.policy.pk},
    "evolution-policy-signals": lambda world: {"policy_id": world.policy.pk},
    "evolution-decision-detail": lambda world: {"decision_id": world.decision.pk},
    "evolution-decision-approve": lambda world: {"decision_id": world.decision.pk},
    "evolution-decision-reject": lambda world: {"decision_id": world.decision.pk},
    "evolution-harness-detail": lambda world: {"harness_id": world.harness.pk},
    # console pages
    "console:member-role": lambda world: {"membership_id": world.membership.pk},
    "console:member-remove": lambda world: {"membership_id": world.membership.pk},
    "console:member-invite-link": lambda world: {"membership_id": world.membership.pk},
    "console:key-revoke": lambda world: {"key_id": world.key.pk},
    "console:key-rotate": lambda world: {"key_id": world.key.pk},
    "console:trajectory-detail": lambda world: {"trajectory_id": world.trajectory.pk},
    "console:trajectory-replay": lambda world: {"trajectory_id": world.trajectory.pk},
    "console:trajectory-end": lambda world: {"trajectory_id": world.trajectory.pk},
    "console:backend-check": lambda world: {"backend_id": world.backend.pk},
    "console:backend-drain": lambda world: {"backend_id": world.backend.pk},
    "console:backend-provider": lambda world: {"backend_id": world.backend.pk},
    "console:trajectory-review": lambda world: {"trajectory_id": world.trajectory.pk},
    "console:trajectory-review-submit": lambda world: {"trajectory_id": world.trajectory.pk},
    "console:trajectory-override": lambda world: {"trajectory_id": world.trajectory.pk},
    "console:trajectory-run-gates": lambda world: {"trajectory_id": world.trajectory.pk},
    "console:annotation-queue": lambda world: {"queue_id": world.queue.pk},
    "console:annotation-workspace": lambda world: {"queue_id": world.queue.pk},
    "console:annotation-previous": lambda world: {"queue_id": world.queue.pk},
    "console:annotation-label": lambda world: {"item_id": world.item.pk},
    "console:annotation-skip": lambda world: {"item_id": world.item.pk},
    "console:annotation-resolve": lambda world: {"item_id": world.item.pk},
    "console:eval-suite": lambda world: {"suite_id": world.suite.pk},
    "console:eval-run-start": lambda world: {"suite_id": world.suite.pk},
    "console:eval-case-create": lambda world: {"suite_id": world.suite.pk},
    "console:eval-run": lambda world: {"run_id": world.run.pk},
    "console:release": lambda world: {"release_id": world.release.pk},
    "console:release-approve": lambda world: {"release_id": world.release.pk},
    "console:release-rollback": lambda world: {"release_id": world.release.pk},
    "console:release-start": lambda world: {"release_id": world.release.pk},
    "console:release-resume": lambda world: {"release_id": world.release.pk},
    "console:release-analyze": lambda world: {"release_id": world.release.pk},
    "console:release-abort": lambda world: {"release_id": world.release.pk},
    "console:training-job": lambda world: {"job_id": world.job.pk},
    "console:training-job-cancel": lambda world: {"job_id": world.job.pk},
    "console:online-run-stop": lambda world: {"run_id": world.online_run.pk},
    "console:model-lineage": lambda world: {"name": world.candidate.name},
    "console:model-chat-template": lambda world: {"name": world.candidate.name},
    "console:model-alias-move": lambda world: {"name": world.candidate.name},
    "console:model-version-publish": lambda world: {"version_id": world.candidate.pk},
    "console:evolution-policy": lambda world: {"policy_id": world.policy.pk},
    "console:evolution-policy-edit": lambda world: {"policy_id": world.policy.pk},
    "console:evolution-policy-delete": lambda world: {"policy_id": world.policy.pk},
    "console:evolution-decision-approve": lambda world: {"decision_id": world.decision.pk},
    "console:evolution-decision-reject": lambda world: {"decision_id": world.decision.pk},
    "console:evaluator": lambda world: {"evaluator_id": world.evaluator.pk},
}

# Patterns with a path parameter that name no tenant object, each with the reason.
NOT_TENANT_OBJECTS: dict[str, str] = {
    "console:invitation": "an invited person's set-a-password link: its uid and token name an account, not a "
    "tenant's object; a wrong or used one answers 404 (tests/console/test_onboarding.py)",
}

# REST endpoints that only a signed-in person may call (labels come from people): requested with the admin's
# session; every other REST endpoint with the tenant's admin key.
PERSON_ONLY = {"annotation-next", "annotation-label", "annotation-skip"}


def _body(world) -> dict:
    """One request body that every endpoint in the matrix accepts as valid: the only thing wrong with a
    cross-tenant request is the object it names. References inside the body are the caller's own."""
    return {
        "role": Role.VIEWER,
        "model": world.backend.served_model,
        "model_version": "",
        "target": f"{world.backend.served_model}@",
        "trajectory_id": str(world.trajectory.pk),
        "status": "qualified",
        "note": "matrix",
        "reason": "matrix check",
        "value": 1.0,
        "label": "",
        "key": f"matrix-{uuid.uuid4().hex[:8]}",
        "scorer": "exact_match",
        "scorer_config": {"expected": "x"},
        "input_messages": [{"role": "user", "content": "say x"}],
        "weight": 2,
        "version_id": world.candidate.pk,
        "option": "1",
    }


# ------------------------------------------------------------------------------------------- url walking


@dataclass(frozen=True)
class Endpoint:
    name: str  # as reverse() takes it
    route: str
    converters: tuple[tuple[str, str], ...]  # (parameter, converter class name)
    methods: tuple[str, ...]
    console: bool


def _walk(patterns, prefix="", namespace=None):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(
                pattern.url_patterns, prefix + str(pattern.pattern), pattern.namespace or namespace
            )
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), namespace, pattern


def _object_endpoints() -> list[Endpoint]:
    endpoints = []
    for route, namespace, pattern in _walk(get_resolver().url_patterns):
        converters = getattr(pattern.pattern, "converters", {})
        console = namespace == CONSOLE_NAMESPACE
        if not converters or not (route.startswith(API_PREFIX) or console):
            continue
        view_class = getattr(pattern.callback, "view_class", None)
        methods = tuple(getattr(view_class, "actions", {})) if view_class else ("GET", "POST")
        name = f"{namespace}:{pattern.name}" if console else pattern.name
        endpoints.append(
            Endpoint(
                name,
                route,
                tuple((key, type(value).__name__) for key, value in converters.items()),
                methods,
                console,
            )
        )
    return endpoints


ENDPOINTS = _object_endpoints()
CASES = [
    (endpoint, method) for endpoint in ENDPOINTS if endpoint.name in OBJECTS for method in endpoint.methods
]


def _missing(endpoint: Endpoint) -> dict:
    values = {
        "IntConverter": 2_000_000_000,
        "UUIDConverter": uuid.uuid4(),
        "StringConverter": "no-such-object",
    }
    return {key: values[converter] for key, converter in endpoint.converters}


# ------------------------------------------------------------------------------------------------- world


@dataclass
class World:
    tenant: Tenant
    admin: object
    raw_key: str
    membership: object
    key: object
    backend: object
    spec: object
    trajectory: object
    reward: object
    evaluator: object
    queue: object
    item: object
    suite: object
    run: object
    baseline: object
    candidate: object
    release: object
    job: object
    labels: object
    step: object
    spare_baseline: object
    spare_candidate: object
    policy: object
    decision: object
    harness: object
    online_run: object


def _build_world(slug: str, port: int) -> World:
    tenant = TenantFactory(slug=slug, name=slug.title())
    admin = MembershipFactory(tenant=tenant, role=Role.ADMIN).user
    _, raw_key = api_key_create(
        tenant=tenant,
        actor=SYSTEM,
        name="matrix-client",
        scopes=["admin", "trajectories:read", "trajectories:write", "rewards:write"],
    )
    membership = MembershipFactory(tenant=tenant, role=Role.OPERATOR)
    key, _ = api_key_create(tenant=tenant, actor=SYSTEM, name="matrix-object", scopes=["inference"])
    backend = BackendFactory(
        tenant=tenant,
        name=f"{slug}-replica",
        base_url=f"http://127.0.0.1:{port}",
        served_model=f"{slug}-model",
        model_version="1",
    )
    spec = make_spec(tenant, name="quality")
    labels = make_spec(tenant, name="helpful", kind="boolean", is_training_reward=False)
    trajectory = TrajectoryFactory(tenant=tenant, task_id="support", agent_name="helper")
    TrajectoryFactory(tenant=tenant, task_id="support", agent_name="helper", text="second")
    reward, _ = reward_create(
        tenant=tenant,
        actor=SYSTEM,
        trajectory_id=trajectory.pk,
        value=0.5,
        source="user",
        created_by="matrix",
    )
    qualification_evaluate(trajectory_id=trajectory.pk)
    evaluator = EvaluatorFactory(tenant=tenant, name="exact", kind="exact_match", config={"expected": "x"})
    queue = annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="matrix",
        spec_id=labels.pk,
        filters={"task_id": "support"},
        annotators_per_item=1,
        assignee_ids=[admin.pk],
    )
    item = AnnotationItem.objects.filter(queue=queue).order_by("pk").first()
    baseline, candidate = register_versions(tenant, name=f"{slug}-model")
    suite = eval_suite_create(tenant=tenant, actor=SYSTEM, name="matrix")
    eval_case_create(
        tenant=tenant,
        actor=SYSTEM,
        suite_id=suite.pk,
        key="x",
        scorer="exact_match",
        input_messages=[{"role": "user", "content": "say x"}],
        scorer_config={"expected": "x"},
    )
    run = eval_run_start(tenant=tenant, actor=SYSTEM, suite_id=suite.pk, version_id=candidate.pk)
    release = release_create(tenant=tenant, actor=SYSTEM, candidate_id=candidate.pk)
    job = TrainingJobFactory(tenant=tenant, base_version=baseline)
    step = Step.objects.filter(trajectory=item.trajectory).order_by("index").first()
    # A model of the same name in both tenants, with no release: another tenant's version of it would be
    # an acceptable baseline or candidate if tenancy were ignored.
    spare_baseline, spare_candidate = register_versions(tenant, name="shared-spare")
    policy = EvolutionPolicyFactory(tenant=tenant, model=f"{slug}-model")
    return World(
        tenant=tenant,
        admin=admin,
        raw_key=raw_key,
        membership=membership,
        key=key,
        backend=backend,
        spec=spec,
        trajectory=trajectory,
        reward=reward,
        evaluator=evaluator,
        queue=queue,
        item=item,
        suite=suite,
        run=run,
        baseline=baseline,
        candidate=candidate,
        release=release,
        job=job,
        labels=labels,
        step=step,
        spare_baseline=spare_baseline,
        spare_candidate=spare_candidate,
        policy=policy,
        decision=DecisionFactory(policy=policy),
        harness=HarnessVersionFactory(tenant=tenant, model=f"{slug}-model"),
        online_run=OnlineRunFactory(tenant=tenant, base_version=baseline),
    )


@pytest.fixture(scope="module")
def worlds(django_db_setup, django_db_blocker):
    """(tenant A's objects, tenant B's), built once in a transaction that is rolled back after the module."""
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            # Closed loopback ports: a health probe that wrongly ran would be refused on this machine.
            yield _build_world("matrix-a", 9), _build_world("matrix-b", 9)
        finally:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


def _tenant_state(tenant) -> dict:
    """Every row of every tenant-owned table of `tenant`, comparable before and after a request."""
    state = {"tenant": list(Tenant.objects.filter(pk=tenant.pk).values())}
    for model in django_apps.get_models():
        field = next(
            (field for field in model._meta.fields if field.name == "tenant" and field.is_relation), None
        )
        if field is None:
            continue
        rows = model._base_manager.filter(tenant=tenant).order_by("pk").values()
        state[model._meta.label] = [
            {key: bytes(value) if isinstance(value, memoryview) else value for key, value in row.items()}
            for row in rows
        ]
    return state


def _client(endpoint: Endpoint, world: World):
    if endpoint.console:
        client = Client()
        client.force_login(world.admin)
        return client
    client = APIClient()
    if endpoint.name in PERSON_ONLY:
        client.force_login(world.admin)
    else:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.raw_key}")
    return client


def _send(client, endpoint: Endpoint, method: str, kwargs: dict, body: dict):
    path = reverse(endpoint.name, kwargs=kwargs)
    if endpoint.console:
        return client.generic(method, path) if method == "GET" else client.post(path, body)
    if method == "GET":
        return client.get(path)
    return getattr(client, method.lower())(path, body, format="json")


def _code(response):
    try:
        return response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


# ------------------------------------------------------------------------------------------------- tests


def test_every_object_endpoint_is_in_the_matrix():
    names = {endpoint.name for endpoint in ENDPOINTS}
    uncovered = sorted(names - set(OBJECTS) - set(NOT_TENANT_OBJECTS))
    assert not uncovered, (
        f"these URL patterns take a path parameter but are not in the cross-tenant matrix: {uncovered}. "
        "Add each to OBJECTS in tests/test_cross_tenant_matrix.py (how to name a tenant's object: extend "
        "World and _build_world if it is a new kind), or to NOT_TENANT_OBJECTS with the reason it names "
        "no tenant's object."
    )
    stale = sorted((set(OBJECTS) | set(NOT_TENANT_OBJECTS) | PERSON_ONLY) - names)
    assert not stale, f"OBJECTS names URL patterns that no longer exist: {stale}; remove them"
    assert len(CASES) >= len(OBJECTS)


@pytest.mark.parametrize(
    ("endpoint", "method"), CASES, ids=[f"{endpoint.name}-{method}" for endpoint, method in CASES]
)
def test_another_tenants_object_is_not_found_and_untouched(worlds, endpoint, method):
    mine, theirs = worlds
    client = _client(endpoint, mine)
    kwargs = OBJECTS[endpoint.name]
    before = _tenant_state(theirs.tenant)

    foreign = _send(client, endpoint, method, kwargs(theirs), _body(mine))

    assert _tenant_state(theirs.tenant) == before, "a request naming another tenant's object changed its rows"
    missing = _send(client, endpoint, method, _missing(endpoint), _body(mine))
    own = _send(client, endpoint, method, kwargs(mine), _body(mine))
    if endpoint.console and own.status_code == 405:  # a console view that does not take this method
        assert foreign.status_code == missing.status_code == 405
        return
    assert foreign.status_code == 404, (
        f"{method} {endpoint.route} with another tenant's object answered {foreign.status_code}, not 404: "
        f"{foreign.content[:300]!r}"
    )
    assert missing.status_code == 404
    assert _code(foreign) == _code(missing), "another tenant's object must answer exactly like a missing one"
    # The messages are built only when an assertion fails: a streamed answer has no .content to show.
    assert own.status_code not in (404, 405), (
        f"the control request on the caller's own object answered {own.status_code}: {own.content[:300]!r}; "
        "fix the matrix's World or body so the endpoint is really exercised"
    )
    assert own.status_code < 500, (
        f"the control request on the caller's own object answered {own.status_code}: {own.content[:300]!r}; "
        "fix the matrix's World or body so the endpoint is really exercised"
    )


# ------------------------------------------------------------------------------------ ids inside the body


@dataclass(frozen=True)
class BodyReference:
    """A write whose body names an object: `path(mine)`, `body(mine, ref)` where `ref(world)` gives the
    referenced object's id in `world`, or a missing id when `world` is None."""

    url_name: str
    path: object
    body: object
    person: bool = False


def _ref(pick, missing):
    def ref(world):
        return missing if world is None else pick(world)

    return ref


MISSING_INT = 2_000_000_000
TRAJECTORY = _ref(lambda world: str(world.trajectory.pk), str(uuid.uuid4()))
STEP = _ref(lambda world: str(world.step.pk), str(uuid.uuid4()))
SUITE = _ref(lambda world: world.suite.pk, MISSING_INT)
SPARE_CANDIDATE = _ref(lambda world: world.spare_candidate.pk, MISSING_INT)
SPARE_BASELINE = _ref(lambda world: world.spare_baseline.pk, MISSING_INT)
BASELINE = _ref(lambda world: world.baseline.pk, MISSING_INT)
LABELS_SPEC = _ref(lambda world: world.labels.pk, MISSING_INT)
MEMBER_USER = _ref(lambda world: world.membership.user_id, MISSING_INT)
RUN = _ref(lambda world: world.run.pk, MISSING_INT)


def _name() -> str:
    return f"matrix-{uuid.uuid4().hex[:8]}"


# (operation id in the OpenAPI schema, body field) → how to send a request naming another tenant's object.
BODY_REFERENCES = {
    ("annotation_label", "step_id"): BodyReference(
        "annotation-label",
        lambda mine: {"item_id": mine.item.pk},
        lambda mine, ref: {"value": 1.0, "step_id": ref},
        person=True,
    ),
    ("annotation_queue_create", "spec_id"): BodyReference(
        "annotation-queue-list",
        lambda mine: {},
        lambda mine, ref: {"name": _name(), "spec_id": ref, "filters": {"task_id": "support"}},
    ),
    ("annotation_queue_create", "assignee_ids"): BodyReference(
        "annotation-queue-list",
        lambda mine: {},
        lambda mine, ref: {
            "name": _name(),
            "spec_id": mine.labels.pk,
            "filters": {"task_id": "support"},
            "assignee_ids": [ref],
        },
    ),
    ("v1_eval_runs_create", "suite_id"): BodyReference(
        "eval-run-list", lambda mine: {}, lambda mine, ref: {"suite_id": ref, "version_id": mine.candidate.pk}
    ),
    ("v1_eval_runs_create", "version_id"): BodyReference(
        "eval-run-list", lambda mine: {}, lambda mine, ref: {"suite_id": mine.suite.pk, "version_id": ref}
    ),
    ("evaluator_run", "trajectory_id"): BodyReference(
        "evaluator-run",
        lambda mine: {"evaluator_id": mine.evaluator.pk},
        lambda mine, ref: {"trajectory_id": ref},
    ),
    ("v1_model_aliases_create", "version_id"): BodyReference(
        "model-alias-list", lambda mine: {}, lambda mine, ref: {"alias": "matrix", "version_id": ref}
    ),
    ("v1_releases_create", "candidate_id"): BodyReference(
        "release-list", lambda mine: {}, lambda mine, ref: {"candidate_id": ref}
    ),
    ("v1_releases_create", "baseline_id"): BodyReference(
        "release-list",
        lambda mine: {},
        lambda mine, ref: {"candidate_id": mine.spare_candidate.pk, "baseline_id": ref},
    ),
    ("v1_releases_create", "eval_suite_ids"): BodyReference(
        "release-list",
        lambda mine: {},
        lambda mine, ref: {"candidate_id": mine.spare_candidate.pk, "eval_suite_ids": [ref]},
    ),
    ("review_create", "trajectory_id"): BodyReference(
        "review-list", lambda mine: {}, lambda mine, ref: {"trajectory_id": ref, "status": "approved"}
    ),
    ("reward_create", "trajectory_id"): BodyReference(
        "reward-list", lambda mine: {}, lambda mine, ref: {"trajectory_id": ref, "value": 0.5}
    ),
    ("reward_create", "step_id"): BodyReference(
        "reward-list",
        lambda mine: {},
        lambda mine, ref: {"trajectory_id": str(mine.item.trajectory_id), "step_id": ref, "value": 0.5},
    ),
    ("v1_training_jobs_create", "base_version_id"): BodyReference(
        "training-job-list", lambda mine: {}, lambda mine, ref: {"base_version_id": ref, "algorithm": "grpo"}
    ),
    ("v1_online_runs_create", "base_version_id"): BodyReference(
        "online-run-list", lambda mine: {}, lambda mine, ref: {"base_version_id": ref}
    ),
    ("v1_routing_create", "version_id"): BodyReference(
        "routing-list", lambda mine: {}, lambda mine, ref: {"version_id": ref}
    ),
}

# Which referenced object each entry names (the `ref` it is called with).
REFERENCED = {
    ("annotation_label", "step_id"): STEP,
    ("annotation_queue_create", "spec_id"): LABELS_SPEC,
    ("annotation_queue_create", "assignee_ids"): MEMBER_USER,
    ("v1_eval_runs_create", "suite_id"): SUITE,
    ("v1_eval_runs_create", "version_id"): SPARE_CANDIDATE,
    ("evaluator_run", "trajectory_id"): TRAJECTORY,
    ("v1_model_aliases_create", "version_id"): SPARE_CANDIDATE,
    ("v1_releases_create", "candidate_id"): SPARE_CANDIDATE,
    ("v1_releases_create", "baseline_id"): SPARE_BASELINE,
    ("v1_releases_create", "eval_suite_ids"): SUITE,
    ("review_create", "trajectory_id"): TRAJECTORY,
    ("reward_create", "trajectory_id"): TRAJECTORY,
    ("reward_create", "step_id"): STEP,
    ("v1_training_jobs_create", "base_version_id"): BASELINE,
    ("v1_online_runs_create", "base_version_id"): BASELINE,
    ("v1_routing_create", "version_id"): SPARE_CANDIDATE,
}

# Body fields named like ids that name no object, each with the reason.
NOT_OBJECT_FIELDS = {
    ("v1_training_jobs_create", "task_id"): "an agent's task name (free text), not a row",
    (
        "v1_eval_suites_bfcl_create",
        "case_ids",
    ): "BFCL's own case names (simple_python_13) in the installed package",
    **{
        (operation, flag): "a backend's capability flag (true or false), not a row"
        for operation in ("v1_backends_create", "v1_backends_partial_update")
        for flag in ("returns_token_ids", "accepts_return_token_ids")
    },
}


def _schema_id_fields() -> set[tuple[str, str]]:
    """(operation id, field) of every write in the OpenAPI schema whose JSON body has a `*_id`/`*_ids` field."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    found = set()
    for operations in schema["paths"].values():
        for method, operation in operations.items():
            if method not in {"post", "put", "patch", "delete"}:
                continue
            for content_type, content in operation.get("requestBody", {}).get("content", {}).items():
                body = content["schema"]
                if "$ref" in body:
                    body = components[body["$ref"].rsplit("/", 1)[-1]]
                if "json" in content_type:
                    found |= {
                        (operation["operationId"], field)
                        for field in body.get("properties", {})
                        if field.endswith(("_id", "_ids"))
                    }
    return found


def test_every_id_in_a_request_body_is_in_the_matrix():
    fields = _schema_id_fields()
    uncovered = sorted(fields - set(BODY_REFERENCES) - set(NOT_OBJECT_FIELDS))
    assert not uncovered, (
        f"these request bodies name objects by id but are not in the cross-tenant matrix: {uncovered}. Add each "
        "to BODY_REFERENCES and REFERENCED in tests/test_cross_tenant_matrix.py, or to NOT_OBJECT_FIELDS with "
        "the reason the field names no tenant's object."
    )
    stale = sorted((set(BODY_REFERENCES) | set(NOT_OBJECT_FIELDS)) - fields)
    assert not stale, f"the schema no longer has these body fields: {stale}; remove them from the matrix"
    assert set(REFERENCED) == set(BODY_REFERENCES)


def _body_client(reference: BodyReference, world: World):
    client = APIClient()
    if reference.person:
        client.force_login(world.admin)
    else:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.raw_key}")
    return client


@pytest.mark.parametrize(
    "key", sorted(BODY_REFERENCES), ids=[f"{op}.{field}" for op, field in sorted(BODY_REFERENCES)]
)
def test_another_tenants_object_in_a_body_is_refused_like_a_missing_one(worlds, key):
    mine, theirs = worlds
    reference, ref = BODY_REFERENCES[key], REFERENCED[key]
    client = _body_client(reference, mine)
    path = reverse(reference.url_name, kwargs=reference.path(mine))
    before = _tenant_state(theirs.tenant)

    foreign = client.post(path, reference.body(mine, ref(theirs)), format="json")

    assert _tenant_state(theirs.tenant) == before, "a request naming another tenant's object changed its rows"
    missing = client.post(path, reference.body(mine, ref(None)), format="json")
    own = client.post(path, reference.body(mine, ref(mine)), format="json")
    assert foreign.status_code in (400, 404), (
        f"POST {path} naming another tenant's {key[1]} answered {foreign.status_code}: {foreign.content[:300]!r}"
    )
    assert (foreign.status_code, _code(foreign)) == (missing.status_code, _code(missing)), (
        "another tenant's object must be refused exactly like a missing one"
    )
    assert own.status_code < 500, (
        f"the control request naming the caller's own object answered like a missing one ({own.status_code}: "
        f"{own.content[:300]!r}); fix the matrix so the reference is really exercised"
    )
    assert (own.status_code, _code(own)) != (missing.status_code, _code(missing)), (
        f"the control request naming the caller's own object answered like a missing one ({own.status_code}: "
        f"{own.content[:300]!r}); fix the matrix so the reference is really exercised"
    )


def test_eval_comparison_of_another_tenants_run_is_not_found(worlds):
    """The one object reference in a query string (GET /eval/compare/?candidate=&baseline=)."""
    mine, theirs = worlds
    client = _body_client(BodyReference("", None, None), mine)
    path = reverse("eval-compare")
    foreign = client.get(path, {"candidate": RUN(theirs), "baseline": mine.run.pk})
    missing = client.get(path, {"candidate": RUN(None), "baseline": mine.run.pk})
    own = client.get(path, {"candidate": mine.run.pk, "baseline": mine.run.pk})
    assert foreign.status_code == missing.status_code == 404
    assert _code(foreign) == _code(missing)
    assert own.status_code == 200
