"""Writes of eval suites, cases and runs. Each runs in a transaction and audits governance acts; a run is
queued on the `eval` queue on commit and executed by apps.loop.eval_runs."""

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, ValidationFailed
from apps.core.tasking import task_enqueue
from apps.evaluation.models import (
    CaseCategory,
    EvalCase,
    EvalCaseResult,
    EvalRun,
    EvalSuite,
    RunStatus,
    Scorer,
    SuiteKind,
)
from apps.tenants.models import Tenant
from workers.evaluation.scorers import scorer_config_problems

SYSTEM = Actor.system("eval-runner")


@transaction.atomic
def eval_suite_create(
    *,
    tenant: Tenant,
    actor: Actor,
    name: str,
    kind: str = SuiteKind.REGRESSION,
    agent_name: str = "",
    description: str = "",
) -> EvalSuite:
    if kind not in SuiteKind.values:
        raise ValidationFailed(
            f"kind must be one of {', '.join(SuiteKind.values)}", fields={"kind": ["invalid"]}
        )
    try:
        with transaction.atomic():
            suite = EvalSuite.objects.create(
                tenant=tenant,
                name=name,
                kind=kind,
                agent_name=agent_name,
                description=description,
                created_by=actor.label,
            )
    except IntegrityError:
        raise Conflict(f"this tenant already has a suite named {name!r}", code="eval_suite_exists") from None
    audit_record(
        tenant=tenant, actor=actor, verb="eval_suite.create", target=suite, data={"name": name, "kind": kind}
    )
    return suite


def _messages_problems(messages) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "a non-empty list of chat messages"
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in {
            "system",
            "user",
            "assistant",
            "tool",
        }:
            return "each message is an object with a role of system, user, assistant or tool"
    return None


@transaction.atomic
def eval_case_create(
    *,
    tenant: Tenant,
    actor: Actor,
    suite_id,
    key: str,
    scorer: str,
    input_messages: list,
    scorer_config: dict | None = None,
    category: str = CaseCategory.REGRESSION,
    tools: list | None = None,
    environment: dict | None = None,
    params: dict | None = None,
) -> EvalCase:
    """Adds a case to one of the tenant's suites (404 for another tenant's). Validates the messages and the
    scorer's configuration; a key is unique within its suite (409)."""
    from apps.evaluation.selectors import eval_suite_get

    suite = eval_suite_get(tenant=tenant, suite_id=suite_id)
    fields = {}
    problem = _messages_problems(input_messages)
    if problem:
        fields["input_messages"] = [problem]
    if scorer == Scorer.BFCL:
        fields["scorer"] = [
            "BFCL cases come with their suite: POST /api/v1/eval/suites/bfcl/ or manage.py bfclsuite"
        ]
    else:
        fields.update(
            {name: [text] for name, text in scorer_config_problems(scorer, scorer_config or {}).items()}
        )
    if category not in CaseCategory.values:
        fields["category"] = [f"one of {', '.join(CaseCategory.values)}"]
    if fields:
        raise ValidationFailed("the case is invalid", fields=fields)
    try:
        with transaction.atomic():
            case = EvalCase.objects.create(
                tenant=tenant,
                suite=suite,
                key=key,
                category=category,
                input_messages=input_messages,
                tools=tools or [],
                environment=environment or {},
                params=params or {},
                scorer=scorer,
                scorer_config=scorer_config or {},
            )
    except IntegrityError:
        raise Conflict(f"the suite already has a case {key!r}", code="eval_case_exists") from None
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="eval_case.create",
        target=case,
        data={"suite": suite.name, "key": key, "scorer": scorer, "category": category},
    )
    return case


@transaction.atomic
def eval_run_start(*, tenant: Tenant, actor: Actor, suite_id, version_id) -> EvalRun:
    """Queues a run of the suite against a model version of this tenant; the `eval` worker executes it
    through the gateway (enqueued on commit)."""
    from apps.evaluation.selectors import eval_suite_get
    from apps.training.selectors import model_version_get

    suite = eval_suite_get(tenant=tenant, suite_id=suite_id)
    version = model_version_get(tenant=tenant, version_id=version_id)
    if not suite.cases.exists():
        raise ValidationFailed(f"the suite {suite.name} has no cases", code="eval_suite_empty")
    run = EvalRun.objects.create(tenant=tenant, suite=suite, model_version=version, requested_by=actor.label)
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="eval_run.start",
        target=run,
        data={"suite": suite.name, "model": version.name, "version": version.number},
    )
    transaction.on_commit(lambda: eval_run_enqueue(run_id=run.pk))
    return run


def eval_run_enqueue(*, run_id: int) -> None:
    """Sends the run to the eval queue (settings.AREAL_EVAL_QUEUE). Idempotent on the worker side: the
    claim refuses a run that is final or held by a live worker."""
    from django.conf import settings

    task_enqueue("evaluation.execute_run", run_id, queue=settings.AREAL_EVAL_QUEUE)


def eval_runs_requeue_stale(*, stale_after_seconds: int) -> list[int]:
    """Every tenant's runs whose worker stopped reporting (a running run without a heartbeat for
    `stale_after_seconds`: a killed worker), and queued runs waiting as long (a lost message), go back to
    the eval queue. A running one is first set back to queued by a conditional update, so exactly one
    requeue wins and the next worker's claim takes it; cases already scored are not run again. Returns the
    requeued ids."""
    cutoff = timezone.now() - timedelta(seconds=stale_after_seconds)
    requeued = []
    for run in EvalRun.objects.filter(
        Q(status=RunStatus.RUNNING, heartbeat_at__lte=cutoff)
        | Q(status=RunStatus.QUEUED, created_at__lte=cutoff)
    ).order_by("pk"):
        if run.status == RunStatus.RUNNING:
            with transaction.atomic():
                taken = EvalRun.objects.filter(
                    pk=run.pk, status=RunStatus.RUNNING, heartbeat_at__lte=cutoff
                ).update(status=RunStatus.QUEUED)
                if not taken:
                    continue
                audit_record(
                    tenant=run.tenant,
                    actor=SYSTEM,
                    verb="eval_run.requeue",
                    target=run,
                    data={"reason": "no heartbeat", "stale_after_seconds": stale_after_seconds},
                )
        eval_run_enqueue(run_id=run.pk)
        requeued.append(run.pk)
    return requeued


# ---- a run on its worker (apps.loop.eval_runs) --------------------------------------------------------


def eval_run_claim(*, run_id: int) -> bool:
    """Whether this worker now holds the run: a conditional update takes it when queued, or running without
    a heartbeat for AREAL_EVAL_STALE_SECONDS (a redelivered message of a killed worker's run), and sets it
    running; zero rows means another worker has it or it is final."""
    from django.conf import settings

    now = timezone.now()
    stale = now - timedelta(seconds=settings.AREAL_EVAL_STALE_SECONDS)
    return bool(
        EvalRun.objects.filter(pk=run_id)
        .filter(Q(status=RunStatus.QUEUED) | Q(status=RunStatus.RUNNING, heartbeat_at__lt=stale))
        .update(status=RunStatus.RUNNING, started_at=now, heartbeat_at=now)
    )


def eval_run_heartbeat(*, run_id: int) -> int:
    """Says the run's worker is alive (its heartbeat, now); returns the rows updated."""
    return EvalRun.objects.filter(pk=run_id).update(heartbeat_at=timezone.now())


def eval_case_result_store(*, run: EvalRun, case: EvalCase, fields: dict) -> bool:
    """Writes one case's result in the run's tenant, in a transaction (a savepoint inside one) of its own.
    Idempotent: one per (run, case); when a redelivered task scored it first, nothing is written and False
    comes back."""
    try:
        with transaction.atomic():
            EvalCaseResult.objects.create(tenant=run.tenant, run=run, case=case, **fields)
    except IntegrityError:
        return False
    return True


def eval_run_close(*, run_id: int, status: str, summary: dict, error: str = "") -> int:
    """Ends a running run with `status`, its summary and error (a conditional update: a run no longer running
    is left as it is); returns the rows updated. The caller audits the end in the same transaction."""
    return EvalRun.objects.filter(pk=run_id, status=RunStatus.RUNNING).update(
        status=status, summary=summary, finished_at=timezone.now(), error=error
    )
