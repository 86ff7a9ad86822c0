"""A policy's offline gate and its outcomes in sentences, as the console shows them (the decision timeline,
the policy page, the live payload): "v2: 33 % held-out, best production 20 %; gate passed". Pure functions of
the gate's settings and the scores a decision's evidence keeps (apps.loop.actions.gating writes them)."""

from collections.abc import Mapping


def percent(value: float) -> str:
    """A share as the console writes it: 0.333 → "33 %"."""
    return f"{value * 100:.0f} %"


def gate_score_words(gate: Mapping | None, *, suite_names: Mapping | None = None) -> str:
    """What the gate's score measures, after the score: "held-out" (an environment's held-out cases), "on
    the suite weather-smoke" (a suite gate; "on its evaluation suite" when the name is not at hand)."""
    gate = gate or {}
    if gate.get("suite_id") is not None:
        name = (suite_names or {}).get(gate["suite_id"])
        return f"on the suite {name}" if name else "on its evaluation suite"
    return "held-out"


def gate_words(gate: Mapping | None, *, suite_names: Mapping) -> str:
    """A policy's gate in a sentence: "20 held-out cases of weather (seed 7); the candidate must beat the
    best production version by at least 0.05; and do no worse on suite safety"."""
    if not gate:
        return "No gate: a new version goes to a release without an offline check."
    if "environment" in gate:
        seed = f" (seed {gate['seed']})" if gate.get("seed") is not None else ""
        words = f"{gate.get('cases', '?')} held-out cases of {gate['environment']}{seed}"
    else:
        words = f"the evaluation suite {suite_names.get(gate.get('suite_id'), gate.get('suite_id'))}"
    gain = gate.get("min_gain")
    words += (
        f"; the candidate must beat the best production version by at least {gain:g}"
        if isinstance(gain, (int, float))
        else "; the candidate must do at least as well as the best production version"
    )
    if gate.get("safety_suite_id") is not None:
        safety = suite_names.get(gate["safety_suite_id"], gate["safety_suite_id"])
        words += f", and no worse on the safety suite {safety}"
    known = {"environment", "cases", "seed", "suite_id", "min_gain", "safety_suite_id"}
    others = [f"{key.replace('_', ' ')} {gate[key]}" for key in sorted(set(gate) - known)]
    if others:
        words += f" (also {', '.join(others)})"
    return words[0].upper() + words[1:] + "."


def gate_outcome(
    *,
    version: str,
    score: float | None,
    best_production: float | None,
    min_gain: float = 0.0,
    passed: bool | None = None,
    measure: str = "held-out",
) -> str:
    """One gate outcome in a sentence: "v2: 33 % held-out, best production 20 %; gate passed". A minimum gain
    is said after the score to beat ("best production 20 % + 5 points"); with no production score the
    candidate passes by itself ("no production score to beat"). `passed` defaults to the gate's own rule
    (score ≥ best production + min_gain)."""
    if score is None:
        return f"{version}: not measured by the gate yet"
    words = f"{version}: {percent(score)} {measure}"
    if best_production is None:
        words += ", no production score to beat"
    else:
        words += f", best production {percent(best_production)}"
        if min_gain:
            words += f" + {min_gain * 100:.3g} points"
    if passed is None:
        passed = best_production is None or score >= best_production + min_gain
    return words + ("; gate passed" if passed else "; gate failed")


def _number(value) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def evidence_gate_words(
    evidence: Mapping | None, *, version: int | None = None, suite_names: Mapping | None = None
) -> str:
    """What a decision's evidence says of the gate, in a sentence: its outcome once measured (`gate_score`
    with `best_production_score`, `min_gain`, `passed`, the version from `candidate` or `version`), else the
    gate it runs (`gate`), else ""."""
    evidence = evidence if isinstance(evidence, Mapping) else {}
    gate = evidence.get("gate") if isinstance(evidence.get("gate"), Mapping) else None
    score = _number(evidence.get("gate_score"))
    if score is not None:
        number = evidence.get("candidate")
        number = version if number is None else number
        passed = evidence.get("passed")
        return gate_outcome(
            version=f"v{number}" if number is not None else "the candidate",
            score=score,
            best_production=_number(evidence.get("best_production_score")),
            min_gain=_number(evidence.get("min_gain")) or 0.0,
            passed=passed if isinstance(passed, bool) else None,
            measure=gate_score_words(gate, suite_names=suite_names),
        )
    if gate:
        return gate_words(gate, suite_names=suite_names or {})
    return ""


def version_gate_scores(metrics: Mapping | None) -> list[str]:
    """What the evolution gates measured of one version, from its metrics (`gate` by gate key, as
    apps.loop.actions.gating stores them), one sentence each: "weather held-out: 33 % of 20 cases (seed 7)"."""
    rows = (metrics or {}).get("gate") if isinstance(metrics, Mapping) else None
    if not isinstance(rows, Mapping):
        return []
    words = []
    for key, entry in sorted(rows.items()):
        score = _number(entry.get("score")) if isinstance(entry, Mapping) else None
        if score is None or str(key).startswith("suite:"):
            continue  # a suite gate's score is its eval run's, listed with the runs
        environment, _, rest = str(key).partition(":")
        _, _, seed = rest.partition(":")
        cases = entry.get("cases")
        of = f" of {cases} cases" if isinstance(cases, int) else ""
        seeded = f" (seed {seed})" if seed not in {"", "0", "None"} else ""
        words.append(f"{environment} held-out: {percent(score)}{of}{seeded}")
    return words
