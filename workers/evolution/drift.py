"""Traffic drift: a profile of what the agent is asked (tool mix, prompt length, the words of the first user
message, task families) and how far the current window's profile is from a reference one.

Divergence is Jensen-Shannon (base 2, so it lies in [0, 1]: 0 for the same distribution, 1 for disjoint ones)
because it is symmetric, bounded and defined when one side has categories the other never saw (where
Kullback-Leibler is infinite). PSI (population stability index) is reported beside it, as risk teams read it.

Why 0.1: moving a fifth of a feature's mass to values the reference never had gives JS ≈ 0.11 (a tenth gives
0.05, a quarter 0.14), while two samples of the same traffic differ by about 0.02 at 100 trajectories over
eight categories and 0.006 at 300. So 0.1 means "about a fifth of the traffic is new", well above sampling
noise for windows of a hundred trajectories or more."""

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

DRIFT_THRESHOLD = 0.1  # fires when the largest feature JS is >= this
JS_SMOOTHING = 0.0  # pseudo-count added to every category; JS needs none (the mixture is never 0 where p is)
PSI_EPSILON = 1e-4  # proportions are floored at this before PSI's log ratio (an empty bucket is not infinite)
TOP_WORDS = 200
OTHER = "<other>"
NONE = "<none>"
FEATURES = ("tools", "prompt_length", "words", "task_prefix")

MAX_TEXT_CHARS = 65_536  # what the patterns see of a first user message
MAX_TASK_ID_CHARS = 256  # ... and of a task id

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Digits and separators that end the text, holding a digit. Tried only where such a run starts (no digit or
# separator before it) and possessive, so each run is read once: linear, where `[\W_]*\d[\d\W_]*$` read
# every run to its end again from each of its characters.
_TRAILING_NUMBER = re.compile(r"(?<![\d\W_])(?=[\W_]*+\d)[\d\W_]*+$", re.UNICODE)


@dataclass(frozen=True)
class TrafficSample:
    """One trajectory as drift sees it: the tools it called, its first prompt's length in characters, the
    text of its first user message and its task id."""

    tools: list[str]
    prompt_chars: int
    first_user_text: str
    task_id: str


@dataclass(frozen=True)
class TrafficProfile:
    """Counts per feature: `tools` (every call, "<none>" for a trajectory without any), `prompt_length`
    (bucket "2^k" with k = floor(log2(chars)), "0" for an empty prompt), `words` (lowercased word unigrams of
    the first user message, every word; folded to the top 200 + "<other>" when compared), `task_prefix` (the
    task id without its trailing number, "<none>" when blank)."""

    size: int
    counts: dict[str, dict[str, int]]


@dataclass(frozen=True)
class DriftResult:
    """`js_max`: the largest JS over the features (None when either side has no traffic); `by_feature`:
    {feature: {"js", "psi"}}; `feature_max`: the feature with that JS."""

    js_max: float | None
    by_feature: dict[str, dict[str, float]] = field(default_factory=dict)
    feature_max: str | None = None
    reference_size: int = 0
    current_size: int = 0
    threshold: float = DRIFT_THRESHOLD

    @property
    def fired(self) -> bool:
        return self.js_max is not None and self.js_max >= self.threshold


def prompt_bucket(chars: int) -> str:
    return "0" if chars <= 0 else f"2^{int(math.log2(chars))}"


def task_prefix(task_id: str) -> str:
    """The task family: the id without its trailing number and separators ("weather-17" → "weather")."""
    task_id = (task_id or "")[:MAX_TASK_ID_CHARS].strip()
    if not task_id:
        return NONE
    prefix = _TRAILING_NUMBER.sub("", task_id)
    return prefix or "<numeric>"


def words(text: str) -> list[str]:
    return [word.lower() for word in _WORD.findall((text or "")[:MAX_TEXT_CHARS])]


def profile(samples: Sequence[TrafficSample]) -> TrafficProfile:
    counts: dict[str, Counter] = {feature: Counter() for feature in FEATURES}
    for sample in samples:
        counts["tools"].update(sample.tools or [NONE])
        counts["prompt_length"][prompt_bucket(sample.prompt_chars)] += 1
        counts["words"].update(words(sample.first_user_text))
        counts["task_prefix"][task_prefix(sample.task_id)] += 1
    return TrafficProfile(size=len(samples), counts={name: dict(counter) for name, counter in counts.items()})


def fold(counts: Mapping[str, float], vocabulary: set[str]) -> dict[str, float]:
    """Counts of the words in `vocabulary`, everything else summed under "<other>"."""
    folded: dict[str, float] = {}
    for key, count in counts.items():
        name = key if key in vocabulary else OTHER
        folded[name] = folded.get(name, 0.0) + count
    return folded


def _normalised(p: Mapping[str, float], keys: list[str], smoothing: float) -> list[float]:
    values = [float(p.get(key, 0.0)) + smoothing for key in keys]
    total = sum(values)
    if total <= 0:
        raise ValueError("a distribution needs a positive total")
    return [value / total for value in values]


def js_divergence(p: Mapping[str, float], q: Mapping[str, float], smoothing: float = JS_SMOOTHING) -> float:
    """Jensen-Shannon divergence of two count (or probability) maps, base 2: ½KL(P‖M) + ½KL(Q‖M) with M the
    average; in [0, 1]. `smoothing` is added to every category of either side before normalising (0 by
    default: disjoint distributions give exactly 1). ValueError when a side is empty."""
    keys = sorted(set(p) | set(q))
    ps, qs = _normalised(p, keys, smoothing), _normalised(q, keys, smoothing)
    total = 0.0
    for pi, qi in zip(ps, qs, strict=True):
        mi = (pi + qi) / 2
        if pi > 0:
            total += 0.5 * pi * math.log2(pi / mi)
        if qi > 0:
            total += 0.5 * qi * math.log2(qi / mi)
    return min(1.0, max(0.0, total))


def psi(p: Mapping[str, float], q: Mapping[str, float], epsilon: float = PSI_EPSILON) -> float:
    """Population stability index of `q` (current) against `p` (reference): Σ (qᵢ − pᵢ) ln(qᵢ / pᵢ), each
    proportion floored at `epsilon` first. 0 for the same distribution; > 0.25 is usually read as a shift."""
    keys = sorted(set(p) | set(q))
    ps, qs = _normalised(p, keys, 0.0), _normalised(q, keys, 0.0)
    total = 0.0
    for pi, qi in zip(ps, qs, strict=True):
        pi, qi = max(pi, epsilon), max(qi, epsilon)
        total += (qi - pi) * math.log(qi / pi)
    return total


def _as_profile(value) -> TrafficProfile:
    return value if isinstance(value, TrafficProfile) else profile(list(value))


def drift(reference, current, *, threshold: float = DRIFT_THRESHOLD) -> DriftResult:
    """Compares two profiles (or sample lists) feature by feature. Words are folded to the 200 most frequent
    of both sides together, the rest as "<other>", so that rare words do not dominate."""
    reference, current = _as_profile(reference), _as_profile(current)
    if not reference.size or not current.size:
        return DriftResult(
            js_max=None, reference_size=reference.size, current_size=current.size, threshold=threshold
        )
    by_feature: dict[str, dict[str, float]] = {}
    for feature in FEATURES:
        p, q = reference.counts.get(feature, {}), current.counts.get(feature, {})
        if feature == "words":
            pooled = Counter(p) + Counter(q)
            vocabulary = {word for word, _ in pooled.most_common(TOP_WORDS)}
            p, q = fold(p, vocabulary), fold(q, vocabulary)
        if not p or not q:
            continue
        by_feature[feature] = {"js": round(js_divergence(p, q), 6), "psi": round(psi(p, q), 6)}
    if not by_feature:
        return DriftResult(js_max=None, reference_size=reference.size, current_size=current.size)
    feature_max = max(by_feature, key=lambda name: by_feature[name]["js"])
    return DriftResult(
        js_max=by_feature[feature_max]["js"],
        by_feature=by_feature,
        feature_max=feature_max,
        reference_size=reference.size,
        current_size=current.size,
        threshold=threshold,
    )
