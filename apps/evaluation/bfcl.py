"""BFCL suites: the Berkeley Function Calling Leaderboard's held-out split as an offline eval suite.

`bfcl_suite_create` makes a suite of one tenant whose cases name held-out BFCL cases (`workers.envs.bfcl`: the
data, the split and the checker come from the installed `bfcl-eval` package; the rows keep only the case's id,
category and first user turn, for the pages). `bfcl_case_execute` is what the eval runner does with such a
case: the case is run through the gateway by workers.envs.bfcl's own agent loop (one session; a multi-turn
case turn by turn, its calls executed locally against BFCL's simulated APIs and the results sent back) and
scored by BFCL's checker (`workers.envs.bfcl.score_run`, never a re-implementation here). A wrong or malformed
answer is a failed case with the checker's reason; only a run the checker could not judge (the gateway
refused or could not be reached) is an error.

Only the non-live categories are offered; the `live_*` ones are reserved for an independent check.
"""

from django.db import transaction

from apps.audit.services import Actor, audit_record
from apps.core.errors import ValidationFailed
from apps.evaluation.models import EvalCase, EvalSuite, Scorer
from apps.tenants.models import Tenant

DEFAULT_NAME = "bfcl-heldout"
DEFAULT_MAX_TOKENS = 256
MAX_MAX_TOKENS = 4096
MAX_STEPS_PER_TURN_LIMIT = 10
PACKAGE = "bfcl-eval"
TOOL_CALLS_KEPT = 50  # calls stored per result (a multi-turn case may make many)


def bfcl_categories() -> tuple[str, ...]:
    from workers.envs.bfcl import CATEGORIES

    return CATEGORIES


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return ""


def _problems(*, categories, per_category, max_tokens, max_steps_per_turn) -> dict[str, list[str]]:
    offered = bfcl_categories()
    problems: dict[str, list[str]] = {}
    unknown = [name for name in categories if name not in offered]
    if not categories or unknown:
        live = any(str(name).startswith("live") for name in unknown)
        problems["categories"] = [
            f"one or more of {', '.join(offered)}"
            + (" (the live_* categories are reserved for an independent check)" if live else "")
        ]
    if per_category is not None and (not isinstance(per_category, int) or per_category < 1):
        problems["per_category"] = ["a positive number of cases, or none for the whole held-out split"]
    if not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_MAX_TOKENS:
        problems["max_tokens"] = [f"between 1 and {MAX_MAX_TOKENS}"]
    if not isinstance(max_steps_per_turn, int) or not 1 <= max_steps_per_turn <= MAX_STEPS_PER_TURN_LIMIT:
        problems["max_steps_per_turn"] = [f"between 1 and {MAX_STEPS_PER_TURN_LIMIT}"]
    return problems


@transaction.atomic
def bfcl_suite_create(
    *,
    tenant: Tenant,
    actor: Actor,
    name: str = DEFAULT_NAME,
    categories: list[str] | tuple[str, ...] | None = None,
    per_category: int | None = None,
    case_ids: list[str] | tuple[str, ...] | None = None,
    agent_name: str = "",
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_steps_per_turn: int = 5,
) -> EvalSuite:
    """A new suite of this tenant holding BFCL's held-out cases of `categories` (all six non-live ones by
    default), the first `per_category` of each in the package's order (all of them when None), or only the
    held-out cases named by `case_ids`. Field errors (400) for an unknown or live category, a case id that is
    not a held-out case of those categories, and out-of-range settings; 409 `eval_suite_exists` for a name the
    tenant already uses. Audited `eval_suite.create` and `eval_suite.bfcl_cases` (per-category counts, the
    package's version). Greedy decoding (temperature 0) so runs of one version are comparable."""
    from apps.evaluation.services import eval_suite_create
    from workers.envs.bfcl import load_cases, turn_messages

    chosen = list(dict.fromkeys(categories)) if categories else list(bfcl_categories())
    problems = _problems(
        categories=chosen,
        per_category=per_category,
        max_tokens=max_tokens,
        max_steps_per_turn=max_steps_per_turn,
    )
    selected: dict[str, list] = {}
    if "categories" not in problems:
        for category in chosen:
            cases = load_cases(category, split="heldout")
            if case_ids:
                cases = [case for case in cases if case.case_id in set(case_ids)]
            selected[category] = cases[:per_category] if per_category is not None else cases
        if case_ids:
            found = {case.case_id for cases in selected.values() for case in cases}
            missing = [case_id for case_id in case_ids if case_id not in found]
            if missing:
                problems["case_ids"] = [
                    f"not held-out cases of {', '.join(chosen)}: {', '.join(missing[:10])}"[:300]
                ]
    if problems:
        raise ValidationFailed("the BFCL suite is invalid", fields=problems)
    version = _package_version()
    suite = eval_suite_create(
        tenant=tenant,
        actor=actor,
        name=name,
        agent_name=agent_name,
        description=f"BFCL v4 held-out split ({PACKAGE} {version}): {', '.join(chosen)}"[:300],
    )
    params = {"max_tokens": max_tokens, "temperature": 0, "max_steps_per_turn": max_steps_per_turn}
    rows: list[EvalCase] = []
    counts: dict[str, int] = {}
    for category, cases in selected.items():
        counts[category] = len(cases)
        rows.extend(
            EvalCase(
                tenant=tenant,
                suite=suite,
                key=case.case_id,
                category=category,
                input_messages=turn_messages(case, 0),
                environment={
                    "bfcl": {
                        "case_id": case.case_id,
                        "category": category,
                        "split": "heldout",
                        "turns": len(case.turns),
                    }
                },
                params=params,
                scorer=Scorer.BFCL,
            )
            for case in cases
        )
    EvalCase.objects.bulk_create(rows)
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="eval_suite.bfcl_cases",
        target=suite,
        data={"package": f"{PACKAGE}=={version}", "split": "heldout", "cases": counts, "params": params},
    )
    return suite


def bfcl_case_of(eval_case):
    """The package's case an eval case names, or None (a row that names no known held-out case)."""
    from workers.envs.bfcl import CATEGORIES, load_cases

    named = (eval_case.environment or {}).get("bfcl") or {}
    category, case_id = named.get("category"), named.get("case_id")
    if category not in CATEGORIES:
        return None
    return next((case for case in load_cases(category) if case.case_id == case_id), None)


def _transport_error(error: str) -> bool:
    return error.startswith(("APIConnectionError", "APITimeoutError"))


class _Beating:
    """An openai client whose every chat completion first calls `beat`: a multi-turn case makes many calls,
    and the run's heartbeat must not go stale while one case runs (runner: AREAL_EVAL_STALE_SECONDS)."""

    def __init__(self, client, beat):
        self._client, self._beat = client, beat
        self.chat = self
        self.completions = self

    def create(self, **request):
        self._beat()
        return self._client.chat.completions.create(**request)


def bfcl_case_execute(*, caller, run, case, session_id: str, heartbeat=None) -> dict:
    """One BFCL case of an eval run: the result's fields (runner.eval_run_execute stores them). `caller` is
    the runner's GatewayCaller (a session key per case, the session pinned to the version under test);
    `heartbeat`, when given, is called before each of the case's calls."""
    import time

    from workers.envs.bfcl import run_case, score_run

    bfcl_case = bfcl_case_of(case)
    fields: dict = {"session_id": session_id}
    if bfcl_case is None:
        return fields | {
            "score": None,
            "passed": False,
            "error": "scorer: the case names no BFCL case of the installed package",
        }
    started = time.perf_counter()
    with caller.openai_session(
        version=run.model_version, session_id=session_id, task_id=bfcl_case.case_id
    ) as session:
        if session.problem:
            return fields | {"score": None, "passed": False, "error": session.problem}
        ran = run_case(
            _Beating(session.client, heartbeat) if heartbeat else session.client,
            model=run.model_version.name,
            case=bfcl_case,
            session_id=session_id,
            max_tokens=int(case.params.get("max_tokens", DEFAULT_MAX_TOKENS)),
            temperature=float(case.params.get("temperature", 0)),
            max_steps_per_turn=int(case.params.get("max_steps_per_turn", 5)),
        )
    fields["latency_ms"] = int((time.perf_counter() - started) * 1000)
    fields |= {
        "output_text": next((step.content for step in reversed(ran.steps) if step.content), "")[:20000],
        "tool_calls": [
            {"turn": step.turn, "name": call.name, "arguments": call.arguments[:2000]}
            for step in ran.steps
            for call in step.calls
        ][:TOOL_CALLS_KEPT],
    }
    verdict = score_run(ran)
    details = {
        "bfcl_case": bfcl_case.case_id,
        "bfcl_category": bfcl_case.category,
        "error_type": verdict.error_type,
        "reason": verdict.reason,
        "turns": list(verdict.turns),
        "steps": len(ran.steps),
        "finished_turns": ran.finished_turns,
    }
    if ran.error is not None:  # the checker did not judge it: the gateway refused or was not reached
        prefix = "gateway unreachable: " if _transport_error(ran.error) else "gateway: "
        return fields | {
            "score": None,
            "passed": False,
            "error": (prefix + ran.error)[:500],
            "details": details,
        }
    return fields | {
        "score": verdict.value,
        "passed": verdict.valid,
        "label": verdict.reason[:300],
        "details": details,
    }


# ---- the evolution policy's environment gate `{"environment": "bfcl", ...}` ------------------------------

GATE_MAX_TOKENS = 160  # a single-turn answer's calls fit; a reply that rambles is cut (and fails) sooner


def bfcl_gate_heldout(checkpoint_path: str, gate: dict):
    """The held-out BFCL accuracy of a checkpoint for an environment gate: the first `cases` held-out cases
    of each of the gate's `categories` (single-turn ones; all when `cases` is missing), answered greedily by
    an in-process engine over the checkpoint (not through the gateway: a candidate is measured before any
    backend serves it, as the weather gate does) and scored by BFCL's checker. Returns an object with
    `success`, `cases`, `reasons` (as the weather gate's) and `per_category` ({category: accuracy, cases,
    right}). The live_* categories are refused as everywhere."""
    from types import SimpleNamespace

    from workers.envs.bfcl import SINGLE_TURN_CATEGORIES
    from workers.envs.bfcl.local import heldout_cases, measure

    categories = tuple(gate.get("categories") or SINGLE_TURN_CATEGORIES)
    refused = [name for name in categories if name not in SINGLE_TURN_CATEGORIES]
    if refused:
        raise ValueError(f"the BFCL gate measures single-turn categories only, not {', '.join(refused)}")
    per_category = gate.get("cases")
    cases = heldout_cases(categories, per_category=int(per_category) if per_category else None)
    measured = measure(checkpoint_path, cases, max_tokens=int(gate.get("max_tokens", GATE_MAX_TOKENS)))
    return SimpleNamespace(
        success=measured.accuracy,
        cases=measured.cases,
        reasons=measured.reasons,
        per_category=measured.per_category,
    )
