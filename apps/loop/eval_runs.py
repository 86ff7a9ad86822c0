"""Executing an eval run: each case is sent through the gateway, as agent traffic is, with purpose `eval`
(recorded, never trained on), on a session pinned to the version under test, and scored.

Gateway credentials: no long-lived key exists for this. Per case the worker mints a session key (the same
mechanism as /rl/start_session: only its hash is kept, in the cache the gateway shares) bound to this tenant,
scope `inference` and that one session, and forgets it when the case is done; the raw key lives only in the
worker's memory. The worker reaches the gateway at AREAL_GATEWAY_URL.

Resumable: a run is claimed by a conditional update (queued → running, or running with a stale heartbeat after
a killed worker); cases already scored are skipped, results are written once per (run, case).
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from django.conf import settings
from django.db import transaction

from apps.audit.services import Actor, audit_record
from apps.core.errors import DomainError
from apps.evaluation.choices import RunStatus
from apps.evaluation.selectors import eval_results, eval_run_for_worker
from apps.evaluation.services import (
    eval_case_result_store,
    eval_run_claim,
    eval_run_close,
    eval_run_heartbeat,
)
from apps.metrics.publish import metrics_publish
from workers.evaluation.compare import bootstrap_mean
from workers.evaluation.scorers import (
    CaseOutput,
    Score,
    ScorerError,
    judge_messages,
    judge_verdict,
    score_case,
)

if TYPE_CHECKING:
    from apps.evaluation.models import EvalRun

SYSTEM = Actor.system("eval-runner")


@dataclass
class OpenAiSession:
    """An `openai.OpenAI` client on the gateway with one session's key, or why there is none."""

    client: Any = None
    problem: str = ""


class GatewayCaller:
    """Calls the gateway on behalf of one tenant with per-session keys."""

    def __init__(self, *, tenant, agent_name: str, timeout_s: float):
        self.tenant, self.agent_name, self.timeout_s = tenant, agent_name, timeout_s
        self.base_url = settings.AREAL_GATEWAY_URL.rstrip("/")
        self.client = httpx.Client(base_url=self.base_url, timeout=timeout_s)

    def close(self):
        self.client.close()

    def _session_key(self, *, version, session_id: str, task_id: str = "") -> tuple[str, str]:
        """(raw key, "") for a session pinned to `version`, or ("", why not)."""
        from apps.core.shared_state import SharedStateUnavailable
        from apps.gateway.principals import Principal, session_key_mint
        from apps.releases.routing_writes import session_pin

        session_pin(tenant=self.tenant, version=version, session_id=session_id)
        principal = Principal(
            tenant_id=self.tenant.pk, tenant_slug=self.tenant.slug, key_prefix="eval", scopes=("inference",)
        )
        try:
            return session_key_mint(
                principal=principal, session_id=session_id, task_id=task_id, group_id=""
            ), ""
        except SharedStateUnavailable as unavailable:
            return "", f"no session key: the shared state is unavailable ({unavailable})"[:500]

    def _headers(self) -> dict[str, str]:
        headers = {"X-Areal-Purpose": "eval"}
        if self.agent_name:
            headers["X-Agent-Name"] = self.agent_name
        return headers

    @contextmanager
    def openai_session(self, *, version, session_id: str, task_id: str = "") -> Iterator[OpenAiSession]:
        """An official openai client for every call of one session (an agent loop of several calls: a BFCL
        multi-turn case), pinned to `version`, purpose `eval`; the key is forgotten when the block ends.
        No retries: a failed call is the case's result."""
        import openai

        from apps.gateway.principals import session_key_forget

        key, problem = self._session_key(version=version, session_id=session_id, task_id=task_id)
        if not key:
            yield OpenAiSession(problem=problem)
            return
        client = openai.OpenAI(
            base_url=f"{self.base_url}/v1",
            api_key=key,
            max_retries=0,
            timeout=self.timeout_s,
            default_headers=self._headers(),
        )
        try:
            yield OpenAiSession(client=client)
        finally:
            client.close()
            session_key_forget(key)

    def chat(self, *, version, session_id: str, body: dict) -> tuple[dict | None, str, float]:
        """(response JSON or None, error text, latency ms) for one chat completion pinned to `version`."""
        from apps.gateway.principals import session_key_forget

        key, problem = self._session_key(version=version, session_id=session_id)
        if not key:
            return None, problem, 0.0
        headers = {"Authorization": f"Bearer {key}", **self._headers()}
        started = time.perf_counter()
        try:
            response = self.client.post("/v1/chat/completions", json=body, headers=headers)
        except httpx.HTTPError as error:
            return None, f"gateway unreachable: {type(error).__name__}", 0.0
        finally:
            session_key_forget(key)
        latency = (time.perf_counter() - started) * 1000
        if response.status_code >= 400:
            try:
                refusal = response.json()["error"]
                return (
                    None,
                    f"{response.status_code} {refusal.get('code')}: {refusal.get('message')}"[:500],
                    latency,
                )
            except (ValueError, KeyError, TypeError):
                return None, f"gateway answered {response.status_code}", latency
        return response.json(), "", latency


def _output(payload: dict, case) -> CaseOutput:
    message = (payload.get("choices") or [{}])[0].get("message") or {}
    calls = tuple(
        {
            "name": (call.get("function") or {}).get("name"),
            "arguments": (call.get("function") or {}).get("arguments"),
        }
        for call in message.get("tool_calls") or []
    )
    return CaseOutput(
        text=message.get("content") or "",
        tool_calls=calls,
        environment=dict(case.environment),
        task_id=case.key,
    )


def _judge(caller, case, output: CaseOutput, session_id: str) -> Score:
    from apps.training.selectors import alias_resolve, model_version_by_number

    config = case.scorer_config
    model = config.get("model")
    if not model:
        raise ScorerError("a judge case needs scorer_config.model (and optionally version)")
    judge = (
        model_version_by_number(tenant=caller.tenant, name=model, number=int(config["version"]))
        if config.get("version") is not None
        else alias_resolve(tenant=caller.tenant, name=model, alias="production")
    )
    if judge is None:
        raise ScorerError(f"the judge model {model!r} has no production version; give scorer_config.version")
    body = {
        "model": model,
        "messages": judge_messages(
            rubric=config["rubric"], case_input=case.input_messages, answer=output.text
        ),
        "max_tokens": int(config.get("max_tokens", 64)),
        "temperature": 0,
    }
    payload, error, _ = caller.chat(version=judge, session_id=session_id + "-judge", body=body)
    if payload is None:
        raise ScorerError(f"the judge call failed: {error}")
    return judge_verdict(_output(payload, case).text)


def _run_case(caller, run, case) -> dict:
    session_id = f"eval-{run.pk}-{case.pk}"
    if case.scorer == "bfcl":
        from apps.evaluation.bfcl import bfcl_case_execute

        return bfcl_case_execute(
            caller=caller,
            run=run,
            case=case,
            session_id=session_id,
            heartbeat=lambda: eval_run_heartbeat(run_id=run.pk),
        )
    body = {
        "model": run.model_version.name,
        "messages": case.input_messages,
        "max_tokens": int(case.params.get("max_tokens", 64)),
        "temperature": case.params.get("temperature", 0),
    }
    if case.tools:
        body["tools"] = case.tools
    if "seed" in case.params or "seed" in case.environment:
        body["seed"] = int(case.params.get("seed", case.environment.get("seed")))
    payload, error, latency = caller.chat(version=run.model_version, session_id=session_id, body=body)
    fields = {"session_id": session_id, "latency_ms": int(latency)}
    if payload is None:
        if "pii_blocked" in error and case.category in {"pii_leak", "secret_leak"}:
            return fields | {"score": 1.0, "passed": True, "label": "blocked by the tenant's PII policy"}
        return fields | {"score": None, "passed": False, "error": error}
    output = _output(payload, case)
    fields |= {"output_text": output.text[:20000], "tool_calls": list(output.tool_calls)}
    try:
        score = (
            _judge(caller, case, output, session_id)
            if case.scorer == "judge"
            else score_case(
                case.scorer,
                case.scorer_config,
                output,
                programs_dir=getattr(settings, "AREAL_EVALUATOR_PROGRAMS_DIR", None) or None,
            )
        )
    except ScorerError as problem:
        return fields | {"score": None, "passed": False, "error": f"scorer: {problem}"[:500]}
    return fields | {"score": score.value, "passed": score.passed, "label": score.label[:300]}


def _figures(rows) -> dict:
    """Cases, passed, errors and the pass rate (a BFCL suite's accuracy) with its 95 % bootstrap interval."""
    interval = bootstrap_mean([1.0 if passed else 0.0 for _, passed, *_ in rows])
    assert interval is not None  # rows is not empty
    return {
        "cases": len(rows),
        "passed": sum(1 for _, passed, *_ in rows if passed),
        "errors": sum(1 for _, _, error, _ in rows if error),
        "pass_rate": interval.mean,
        "low": interval.low,
        "high": interval.high,
    }


def summarize(results) -> dict:
    """score (mean, errors as 0), pass_rate, per-category pass rates, counts; `interval` (the pass rate's 95 %
    bootstrap interval) and `categories` (per category: cases, passed, errors, pass_rate, low, high)."""
    rows = list(results.values_list("score", "passed", "error", "case__category"))
    if not rows:
        return {"cases": 0}
    overall = _figures(rows)
    summary = {
        "cases": len(rows),
        "errors": overall["errors"],
        "score": sum(score or 0.0 for score, *_ in rows) / len(rows),
        "pass_rate": overall["pass_rate"],
        "interval": {"low": overall["low"], "high": overall["high"]},
        "categories": {},
    }
    for category in sorted({row[3] for row in rows}):
        figures = _figures([row for row in rows if row[3] == category])
        summary[f"{category}.pass_rate"] = figures["pass_rate"]
        summary["categories"][category] = figures
    return summary


def eval_run_execute(*, run_id: int) -> dict:
    """Runs every case of the run not yet scored, then finishes it (succeeded; failed when the gateway could not
    be reached for any case). Returns the summary. Publishes progress on the tenant's `evaluation` stream."""
    if not eval_run_claim(run_id=run_id):
        run = eval_run_for_worker(run_id=run_id)
        return {"status": run.status, "skipped": "claimed by another worker or finished"}
    run = eval_run_for_worker(run_id=run_id)
    refusal = _serve(run)
    if refusal:
        return _finish(run, failed=True, error=refusal)
    done = set(eval_results(tenant=run.tenant, run_id=run.pk).values_list("case_id", flat=True))
    caller = GatewayCaller(
        tenant=run.tenant,
        agent_name=run.suite.agent_name,
        timeout_s=settings.AREAL_EVAL_REQUEST_TIMEOUT_SECONDS,
    )
    unreachable = 0
    try:
        for case in run.suite.cases.order_by("key"):
            if case.pk in done:
                continue
            fields = _run_case(caller, run, case)
            unreachable += fields.get("error", "").startswith("gateway unreachable")
            eval_case_result_store(run=run, case=case, fields=fields)  # False: a redelivered task scored it
            eval_run_heartbeat(run_id=run.pk)
            with transaction.atomic():
                metrics_publish(
                    tenant_id=run.tenant_id,
                    stream="evaluation",
                    payload={"run": run.pk, "case": case.key, "passed": fields.get("passed", False)},
                )
    finally:
        caller.close()
    return _finish(
        run,
        failed=unreachable > 0 and unreachable == run.suite.cases.count(),
        error="the gateway could not be reached",
    )


def _serve(run: "EvalRun") -> str:
    """Puts the version under test on a serving slot when no backend of its model holds its weights (a candidate
    an online run or a job registered), as a release's start does: its cases would otherwise get 503. Returns
    why it could not ("" when it serves): the run then fails at once with that reason, scoring nothing."""
    from apps.releases.provisioning import version_provision
    from apps.training.selectors import alias_resolve

    version = run.model_version
    production = alias_resolve(tenant=run.tenant, name=version.name, alias="production")
    try:
        loaded = version_provision(
            tenant=run.tenant,
            actor=SYSTEM,
            version=version,
            baseline=None if production is None or production.pk == version.pk else production,
            purpose="its eval run",
        )
    except DomainError as refusal:
        return f"{refusal.code}: {refusal.message}"[:500]
    if loaded:
        with transaction.atomic():
            audit_record(
                tenant=run.tenant, actor=SYSTEM, verb="eval_run.serve", target=run, data={"loaded": loaded}
            )
    return ""


@transaction.atomic
def _finish(run: "EvalRun", *, failed: bool, error: str = "") -> dict:
    from apps.training.services import model_version_update_metrics

    summary = summarize(eval_results(tenant=run.tenant, run_id=run.pk))
    status = RunStatus.FAILED if failed else RunStatus.SUCCEEDED
    eval_run_close(run_id=run.pk, status=status, summary=summary, error=error if failed else "")
    if not failed:
        model_version_update_metrics(
            tenant=run.tenant,
            version_id=run.model_version_id,
            metrics={
                f"eval.{run.suite.name}.score": summary.get("score"),
                f"eval.{run.suite.name}.pass_rate": summary.get("pass_rate"),
            },
        )
    audit_record(
        tenant=run.tenant,
        actor=SYSTEM,
        verb="eval_run.finish",
        target=run,
        data={"status": status, "summary": summary},
    )
    metrics_publish(
        tenant_id=run.tenant_id,
        stream="evaluation",
        payload={"run": run.pk, "status": status, "summary": summary},
    )
    return {"status": status, **summary}
