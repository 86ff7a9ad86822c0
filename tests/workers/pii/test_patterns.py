"""Tenant patterns: the one validation (names, syntax, size, the empty string, the JSON a policy stores) that
the policy service, the console form and the gateway all use."""

import subprocess
import sys
from pathlib import Path

import pytest

from workers.pii import CustomPattern, InvalidPattern, Sanitizer, compile_patterns, patterns_from_policy


def test_bad_custom_regex_raises_invalid_pattern_naming_it():
    with pytest.raises(InvalidPattern) as raised:
        Sanitizer([CustomPattern("good", r"a+"), CustomPattern("broken", r"(unclosed")])

    assert raised.value.name == "broken"
    assert "missing )" in raised.value.reason
    assert "broken" in str(raised.value)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (CustomPattern("maybe", r"x?"), "empty string"),
        (CustomPattern("bad name!", r"x"), "name"),
        (CustomPattern("huge", "x" * 1001), "longer than"),
    ],
)
def test_unusable_custom_patterns_are_refused(pattern, reason):
    with pytest.raises(InvalidPattern) as raised:
        compile_patterns([pattern])

    assert raised.value.name == pattern.name
    assert reason in raised.value.reason


def test_duplicate_custom_names_are_refused():
    with pytest.raises(InvalidPattern, match="duplicate"):
        compile_patterns([CustomPattern("ticket", r"T[0-9]+"), CustomPattern("ticket", r"X[0-9]+")])


@pytest.mark.parametrize(
    ("items", "reason"),
    [
        ([{"name": "maybe", "regex": "x?"}], "empty string"),
        ([{"name": "broken", "regex": "(unclosed"}], "missing )"),
        ([{"name": "bad name!", "regex": "x"}], "name"),
        ([{"name": "huge", "regex": "x" * 1001}], "longer than"),
        ([{"name": "t", "regex": "T[0-9]+"}, {"name": "t", "regex": "X[0-9]+"}], "duplicate"),
        ([{"name": "extra", "regex": "x", "flags": "i"}], "name"),
        ([{"name": "number", "regex": 5}], "regex"),
        (["not an object"], "name"),
        ({"name": "x", "regex": "y"}, "list"),
    ],
)
def test_policy_patterns_are_validated_by_the_sanitizer_itself(items, reason):
    with pytest.raises(InvalidPattern) as raised:
        patterns_from_policy(items)

    assert reason in raised.value.reason


def test_policy_patterns_become_compiled_custom_patterns():
    patterns = patterns_from_policy([{"name": "order", "regex": r"ORD-\d{5}"}])

    assert patterns == (CustomPattern("order", r"ORD-\d{5}"),)
    assert compile_patterns(patterns)[0][0] == "custom:order"


def test_an_invalid_stored_pattern_raises_invalid_pattern():
    with pytest.raises(InvalidPattern):
        Sanitizer([CustomPattern("maybe", "x?")])


@pytest.mark.parametrize("regex", [r"(?:a{1000}){1000}", r"(?:(?:ab){100}c){101}", r"x{10001}"])
def test_a_pattern_whose_repetitions_expand_too_far_is_refused_before_it_is_compiled(regex):
    with pytest.raises(InvalidPattern) as raised:
        compile_patterns([CustomPattern("wide", regex)])

    assert "repetitions are too large" in raised.value.reason


def test_repetitions_within_the_size_limit_are_accepted():
    ((entity, pattern),) = compile_patterns([CustomPattern("order", r"ORD-[0-9]{9}(?:-[A-Z]{2}){3}")])

    assert entity == "custom:order"
    assert pattern.search("see ORD-123456789-AB-CD-EF")


def test_the_pii_package_does_not_import_django():
    code = "import sys, workers.pii; print(any(m.split('.')[0] == 'django' for m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
    )

    assert result.stdout.strip() == "False"
