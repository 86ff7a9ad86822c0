"""BFCL's cases and ground truth, read from the installed `bfcl-eval` package (nothing is copied here).

A category's questions are `data/BFCL_v4_<category>.json` (JSON lines), its ground truth
`data/possible_answer/BFCL_v4_<category>.json`; a multi-turn case names the API classes it involves, and
their function documents are `data/multi_turn_func_doc/<file>.json`, as BFCL's own loader assembles them.
Only the non-live categories below are offered: the `live_*` ones stay untouched (reserved for an
independent check of generalisation).

The split is a fixed hash of the case id: a case is held out when sha256("<SPLIT_SEED>:<case id>") is 0
modulo HELD_OUT_ONE_IN, so an id's side never depends on the other cases or on the order of the file.
"""

import functools
import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

SINGLE_TURN_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
MULTI_TURN_CATEGORIES = ("multi_turn_base",)
CATEGORIES = SINGLE_TURN_CATEGORIES + MULTI_TURN_CATEGORIES
SPLITS = ("train", "heldout")
SPLIT_SEED = "bfcl-v4-split-1"
HELD_OUT_ONE_IN = 4  # about a quarter of each category is held out
DATA_PREFIX = "BFCL_v4"  # the file prefix of the pinned bfcl-eval (2026.3.23)


@dataclass(frozen=True)
class Case:
    """One BFCL test entry. `turns` are the user's messages of each turn (single-turn cases have one);
    `functions` are BFCL's function documents as the package has them (its types: `dict`, `float`, ...);
    `ground_truth` is BFCL's possible answer (single-turn: a list of {function: {parameter: [allowed
    values]}}; multi-turn: each turn's call strings) and None for `irrelevance`, which has none: it is won by
    calling nothing. Loaded cases are shared: treat their contents as read-only."""

    case_id: str
    category: str
    turns: tuple[tuple[dict, ...], ...]
    functions: tuple[dict, ...]
    ground_truth: Any
    initial_config: dict | None = None
    involved_classes: tuple[str, ...] = ()

    @property
    def multi_turn(self) -> bool:
        return self.category in MULTI_TURN_CATEGORIES

    @property
    def split(self) -> str:
        return split_of(self.case_id)


def split_of(case_id: str, *, seed: str = SPLIT_SEED) -> str:
    digest = hashlib.sha256(f"{seed}:{case_id}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") % HELD_OUT_ONE_IN == 0 else "train"


def load_cases(category: str, *, split: str | None = None) -> list[Case]:
    """The category's cases in the package's order, all of them or one split's (`train`, `heldout`)."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"split is one of {SPLITS}, not {split!r}")
    cases = _load(_checked_category(category))
    return [case for case in cases if split is None or case.split == split]


def _checked_category(category: str) -> str:
    if category not in CATEGORIES:
        reserved = (
            " (the live_* categories are reserved for an independent check)"
            if category.startswith("live")
            else ""
        )
        raise ValueError(f"unknown BFCL category {category!r}{reserved}; offered: {', '.join(CATEGORIES)}")
    return category


def _data_file(*parts: str):
    return resources.files("bfcl_eval").joinpath("data", *parts)


def _json_lines(*parts: str) -> list[dict]:
    text = _data_file(*parts).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@functools.cache
def _function_documents(class_name: str) -> tuple[dict, ...]:
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    return tuple(_json_lines("multi_turn_func_doc", MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]))


@functools.cache
def _load(category: str) -> tuple[Case, ...]:
    entries = _json_lines(f"{DATA_PREFIX}_{category}.json")
    answers: dict[str, Any] = {}
    if category != "irrelevance":
        answers = {
            row["id"]: row["ground_truth"]
            for row in _json_lines("possible_answer", f"{DATA_PREFIX}_{category}.json")
        }
    cases = []
    for entry in entries:
        involved = tuple(entry.get("involved_classes", ()))
        if category in MULTI_TURN_CATEGORIES:
            # As BFCL's loader does: a multi-turn entry carries no function documents; they are those of
            # the API classes it involves, in that order.
            functions = tuple(document for name in involved for document in _function_documents(name))
        else:
            functions = tuple(entry["function"])
        cases.append(
            Case(
                case_id=entry["id"],
                category=category,
                turns=tuple(tuple(turn) for turn in entry["question"]),
                functions=functions,
                ground_truth=answers.get(entry["id"]),
                initial_config=entry.get("initial_config"),
                involved_classes=involved,
            )
        )
    return tuple(cases)
