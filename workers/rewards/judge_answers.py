"""Where a judge's free-text answer says its score and verdict: its last JSON object naming either (fenced or
inside prose), else its last `SCORE: n` / `VERDICT: label` lines, else an answer that is only a number or only
a label; its <think> blocks set aside first. workers.rewards.judge.parse_verdict checks what is found against
the judge's configuration. Every pattern here is linear on any input (tests/core/test_regex_hostile_input.py).
Never imports Django."""

import json
import re
from dataclasses import dataclass

MAX_JSON_STARTS = 256  # '{' positions tried when looking for a JSON object in the answer

_NUMBER = r"([-+]?\d+(?:\.\d+)?)"
# A score as written: a number, or a number out of another ("7/10", "7 out of 10").
SCORE_TEXT = re.compile(rf"{_NUMBER}(?:[ \t]*(?:/|out[ \t]+of)[ \t]*{_NUMBER})?", re.I)
# Single character classes between the required parts, no newline in them: linear on any input.
_SCORE_LINE = re.compile(
    rf"^[ \t>*#_`-]*(?:final[ \t]+|overall[ \t]+)?(?:score|rating|grade)[ \t*_`]*[:=][ \t*_`]*"
    rf"{_NUMBER}(?:[ \t]*(?:/|out[ \t]+of)[ \t]*{_NUMBER})?",
    re.I | re.M,
)
_VERDICT_LINE = re.compile(
    r"^[ \t>*#_`-]*(?:final[ \t]+)?(?:verdict|decision)[ \t*_`]*[:=]([^\n]*)$", re.I | re.M
)
_THINK_TAG = re.compile(r"<(/?)think>", re.I)
_SCORE_FIELDS = ("score", "rating", "grade")
_VERDICT_FIELDS = ("verdict", "decision", "label", "category")
_REASON_FIELDS = ("reason", "reasoning", "explanation", "rationale")
_TRIM = " \t\r\n*_`\"'.,;:!()[]"


@dataclass(frozen=True)
class Found:
    """What an answer gives, as written: not yet checked against the configuration."""

    score: str | float | None = None
    verdict: str | None = None
    reason: str = ""


def without_thinking(text: str) -> str:
    """The answer without its <think>...</think> blocks (each from an opening tag to the next closing one), and
    without what comes before a closing tag left over (thinking whose opening tag the server left out). One
    pass over the tags: linear, where the pattern ``<think>.*?</think>`` read to the end again from every
    opening tag that no closing one follows."""
    parts, copied, opened = [], 0, None
    for tag in _THINK_TAG.finditer(text):
        if not tag.group(1):
            if opened is None:
                opened = tag.start()
        elif opened is not None:
            parts.append(text[copied:opened])
            copied, opened = tag.end(), None
        else:  # a closing tag with no opening one: what precedes it was thinking
            parts, copied = [], tag.end()
    parts.append(text[copied:])
    return "".join(parts)


def found_in(text: str, *, scored: bool, verdicts: dict[str, float]) -> Found:
    """The score and verdict the answer gives: from its last JSON object naming either, the rest from its last
    `SCORE: n` / `VERDICT: label` lines, or an answer that is only a number (when a score is asked for,
    `scored`) or only one of the `verdicts` labels."""
    in_json, in_lines = _from_json(text), _from_lines(text)
    score = in_json.score if in_json.score is not None else in_lines.score
    verdict = in_json.verdict if in_json.verdict is not None else in_lines.verdict
    bare = text.strip(_TRIM)
    if score is None and verdict is None and bare:
        if scored and SCORE_TEXT.fullmatch(bare):
            score = bare
        elif verdict_label(bare, verdicts):
            verdict = bare
    return Found(score=score, verdict=verdict, reason=in_json.reason)


def verdict_label(said: str, verdicts: dict[str, float]) -> str | None:
    """The configured label the judge named (letter case, quotes and trailing words aside)."""
    said = said.strip(_TRIM).lower()
    for label in sorted(verdicts, key=len, reverse=True):
        folded = label.lower()
        if said == folded or (said.startswith(folded) and not said[len(folded)].isalnum()):
            return label
    return None


def _json_objects(text: str) -> list[dict]:
    decoder = json.JSONDecoder()
    found: list[dict] = []
    start, tries = text.find("{"), 0
    while start != -1 and tries < MAX_JSON_STARTS:
        tries += 1
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        start = text.find("{", end)
    return found


def _field(document: dict, names: tuple[str, ...]):
    folded = {str(key).strip().lower(): value for key, value in document.items()}
    return next((folded[name] for name in names if name in folded), None)


def _from_json(text: str) -> Found:
    for document in reversed(_json_objects(text)):
        score, verdict = _field(document, _SCORE_FIELDS), _field(document, _VERDICT_FIELDS)
        if score is None and verdict is None:
            continue
        reason = _field(document, _REASON_FIELDS)
        return Found(
            score=score,
            verdict=verdict if verdict is None else str(verdict),
            reason=reason if isinstance(reason, str) else "",
        )
    return Found()


def _from_lines(text: str) -> Found:
    scores = list(_SCORE_LINE.finditer(text))
    verdicts = list(_VERDICT_LINE.finditer(text))
    score = None
    if scores:
        number, denominator = scores[-1].group(1), scores[-1].group(2)
        score = f"{number}/{denominator}" if denominator else number
    return Found(score=score, verdict=verdicts[-1].group(1) if verdicts else None)
