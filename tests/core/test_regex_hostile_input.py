"""Every regular expression of the product runs in linear time on hostile input.

The product's patterns see user, model and tool text (a tool result can be megabytes). A pattern that
backtracks (or retries from every position) is quadratic or worse on the right input: one tool result then
stalls a worker. This test finds every pattern: each module-level compiled pattern of apps/ and workers/
(also inside module-level tuples, lists, dicts and dataclasses), and each pattern literal handed to a `re`
function anywhere in their source. It runs each on long runs of its own literal characters, of pairs of
them and of its literal words, and asserts that exhausting `finditer` stays well under a bound that a linear
pattern meets with a wide margin even on a loaded machine (a linear pattern takes a few milliseconds here;
the quadratic ones this test was written against took seconds to minutes).
"""

import ast
import dataclasses
import importlib
import itertools
import pkgutil
import re
import re._compiler as sre_compiler  # type: ignore[import-not-found]
import re._constants as sre_constants  # type: ignore[import-not-found]
import re._parser as sre_parser  # type: ignore[import-not-found]
import signal
import time
from pathlib import Path

import pytest

import apps
import workers

LENGTH = 100_000  # characters of each hostile input
BOUND_SECONDS = 0.5  # for one exhaustive finditer over one input
PACKAGES = (apps, workers)
RE_FUNCTIONS = {  # re function: index of its flags argument
    "compile": 1,
    "search": 2,
    "match": 2,
    "fullmatch": 2,
    "findall": 2,
    "finditer": 2,
    "split": 3,
    "sub": 4,
    "subn": 4,
}
CATEGORY_CHARACTERS = {
    sre_constants.CATEGORY_DIGIT: "0",
    sre_constants.CATEGORY_NOT_DIGIT: "a-",
    sre_constants.CATEGORY_SPACE: " \n",
    sre_constants.CATEGORY_NOT_SPACE: "a0",
    sre_constants.CATEGORY_WORD: "a_0",
    sre_constants.CATEGORY_NOT_WORD: "- ",
    sre_constants.CATEGORY_LINEBREAK: "\n",
    sre_constants.CATEGORY_NOT_LINEBREAK: "a",
}
FILLERS = "a A0 \n.-_\"'\\<>{}:/@"


def _modules():
    for package in PACKAGES:
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            try:
                yield importlib.import_module(info.name)
            except ModuleNotFoundError as error:  # an optional dependency (vLLM, CUDA tools) not installed
                if (error.name or "").split(".")[0] in {package.__name__ for package in PACKAGES}:
                    raise


def _patterns_in(value, depth=0):
    if isinstance(value, re.Pattern):
        yield value
    elif depth >= 3 or isinstance(value, str | bytes | type):
        return
    elif isinstance(value, dict):
        for item in value.values():
            yield from _patterns_in(item, depth + 1)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _patterns_in(item, depth + 1)
    elif dataclasses.is_dataclass(value):
        for item in dataclasses.fields(value):
            yield from _patterns_in(getattr(value, item.name, None), depth + 1)


def _flags(node) -> int:
    """The value of a flags argument written as re.X | re.Y (0 for anything else)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "re":
        value = getattr(re, node.attr, 0)
        return int(value) if isinstance(value, re.RegexFlag) else 0
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _flags(node.left) | _flags(node.right)
    return 0


def _literal_patterns(path: Path):
    """(line, pattern) of each re.<function>("literal", ...) call in a source file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.func.attr in RE_FUNCTIONS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            continue
        flags = 0
        index = RE_FUNCTIONS[node.func.attr]
        if len(node.args) > index:
            flags = _flags(node.args[index])
        for keyword in node.keywords:
            if keyword.arg == "flags":
                flags = _flags(keyword.value)
        yield node.lineno, re.compile(node.args[0].value, flags)


def product_patterns() -> dict[tuple[str, int], tuple[re.Pattern, str]]:
    """Every pattern of the product, once, by (source, flags), with where it was found."""
    found: dict[tuple[str, int], tuple[re.Pattern, str]] = {}
    for module in _modules():
        for name, value in vars(module).items():
            for pattern in _patterns_in(value):
                found.setdefault((pattern.pattern, pattern.flags), (pattern, f"{module.__name__}.{name}"))
    for package in PACKAGES:
        root = Path(package.__path__[0])
        for path in sorted(root.rglob("*.py")):
            for line, pattern in _literal_patterns(path):
                where = f"{path.relative_to(root.parent)}:{line}"
                found.setdefault((pattern.pattern, pattern.flags), (pattern, where))
    return found


# hostile input ---------------------------------------------------------------------------------------------


def _walk(items, characters: set[str], words: list[str], pieces: list):
    """Collects a parsed pattern's literal characters (and representatives of its classes), its words (runs of
    consecutive literal characters) and its single-character pieces."""
    word = ""
    for node in items:
        operator, argument = node
        if operator in _SINGLE_CHARACTER:
            pieces.append((items.state, node))
        if operator == sre_constants.LITERAL:
            word += chr(argument)
            characters.add(chr(argument))
            continue
        if len(word) >= 2:
            words.append(word)
        word = ""
        if operator == sre_constants.NOT_LITERAL:
            characters.add(chr(argument))
        elif operator == sre_constants.IN:
            for kind, value in argument:
                if kind == sre_constants.LITERAL:
                    characters.add(chr(value))
                elif kind == sre_constants.RANGE:
                    characters.update((chr(value[0]), chr(value[1])))
                elif kind == sre_constants.CATEGORY:
                    characters.update(CATEGORY_CHARACTERS.get(value, ""))
        elif operator == sre_constants.ANY:
            characters.update("a\n")
        for child in _children(argument):
            _walk(child, characters, words, pieces)
    if len(word) >= 2:
        words.append(word)


_SINGLE_CHARACTER = (sre_constants.LITERAL, sre_constants.NOT_LITERAL, sre_constants.IN, sre_constants.ANY)


def _children(argument):
    if isinstance(argument, sre_parser.SubPattern):
        yield argument
    elif isinstance(argument, list | tuple):
        for part in argument:
            yield from _children(part)


def _representatives(flags: int, characters: set[str], pieces: list) -> list[str]:
    """One character per class of characters the pattern cannot tell apart: characters that each of its
    single-character pieces treats alike behave alike in any input."""
    probes = [sre_compiler.compile(sre_parser.SubPattern(state, [node]), flags) for state, node in pieces]
    classes: dict[tuple[bool, ...], str] = {}
    for character in sorted(characters):
        classes.setdefault(tuple(bool(probe.fullmatch(character)) for probe in probes), character)
    return sorted(classes.values())


def hostile_inputs(pattern: re.Pattern):
    """(label, text) pairs: long runs of each literal character, of each pair of them, of each literal word,
    and of each word followed by a character, and a run of one character ended by another."""
    characters: set[str] = set(FILLERS)
    words: list[str] = []
    pieces: list = []
    _walk(sre_parser.parse(pattern.pattern, pattern.flags), characters, words, pieces)
    singles = _representatives(pattern.flags, characters, pieces)
    for character in singles:
        yield f"{character!r} * n", character * LENGTH
    for first, second in itertools.combinations(singles, 2):
        yield f"{first + second!r} * n", (first + second) * (LENGTH // 2)
        yield f"{first!r} * n + {second!r}", first * LENGTH + second
        yield f"{second!r} * n + {first!r}", second * LENGTH + first
    for word in dict.fromkeys(words):
        yield f"{word!r} * n", word * (LENGTH // len(word))
        for character in singles:
            unit = word + character
            yield f"{unit!r} * n", unit * (LENGTH // len(unit))


class _TooSlow(Exception):
    pass


def _alarm(signum, frame):
    raise _TooSlow


def _seconds(pattern: re.Pattern, text: str) -> float:
    """The time exhausting finditer takes, stopped just past the bound (the re engine checks signals)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, BOUND_SECONDS * 2)
    started = time.perf_counter()
    try:
        for _ in pattern.finditer(text):
            pass
    except _TooSlow:
        pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return time.perf_counter() - started


def slowest_input(pattern: re.Pattern) -> tuple[str, float] | None:
    """The first hostile input the pattern takes longer than the bound on, with its time; None: none."""
    for label, text in hostile_inputs(pattern):
        seconds = _seconds(pattern, text)
        if seconds > BOUND_SECONDS:
            return label, seconds
    return None


PATTERNS = product_patterns()


def test_the_walk_finds_the_products_patterns():
    where = {location for _, location in PATTERNS.values()}
    for name in (
        "workers.evolution.clusters._SPACE",
        "workers.evolution.drift._WORD",
        "workers.pii.addresses._EMAIL_DOMAIN",
        "workers.rewards.judge_answers._VERDICT_LINE",
    ):
        assert name in where
    assert len(PATTERNS) > 40


@pytest.mark.parametrize("key", sorted(PATTERNS), ids=[PATTERNS[key][1] for key in sorted(PATTERNS)])
def test_each_pattern_is_linear_on_hostile_input(key):
    pattern, where = PATTERNS[key]
    slow = slowest_input(pattern)
    assert slow is None, (
        f"{where} ({pattern.pattern!r}) took {slow[1]:.2f} s (bound {BOUND_SECONDS} s) on {slow[0]} with "
        f"n = {LENGTH}: make it linear (possessive or atomic repeats, an anchor that stops retries from every "
        "position) or cap the text it sees"
    )


def test_the_check_catches_a_quadratic_pattern():
    assert slowest_input(re.compile(r"\"(?:[^\"\\]|\\.)*\"")) is not None  # retried from every quote
    assert slowest_input(re.compile(r"[a-z]+@")) is not None  # a run retried from each of its letters
    assert slowest_input(re.compile(r"[a-z]++@")) is not None  # possessive, and still retried
    assert slowest_input(re.compile(r"(?<![a-z])[a-z]++@")) is None
