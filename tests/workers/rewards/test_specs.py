import math
from datetime import UTC

import pytest

from workers.rewards.combine import CombinationRule, RewardPoint, combine
from workers.rewards.specs import SpecData, check_reward, rating_options, spec_problems

NUMERIC = SpecData(name="quality", kind="numeric", minimum=0, maximum=1)
CATEGORIES = SpecData(name="verdict", kind="categorical", categories={"good": 1.0, "meh": 0.5, "bad": 0.0})


@pytest.mark.parametrize(("value", "ok"), [(0, True), (1, True), (0.5, True), (-0.01, False), (1.5, False)])
def test_numeric_range(value, ok):
    checked = check_reward(NUMERIC, kind="numeric", value=value)
    assert checked.ok is ok
    if not ok:
        assert "'quality'" in checked.problem
        assert "out of range [0, 1]" in checked.problem


def test_categorical_maps_labels_and_values():
    by_label = check_reward(CATEGORIES, kind="categorical", value=None, label="meh")
    assert (by_label.value, by_label.label, by_label.ok) == (0.5, "meh", True)
    by_value = check_reward(CATEGORIES, kind="categorical", value=0.0)
    assert (by_value.value, by_value.label) == (0.0, "bad")
    unknown = check_reward(CATEGORIES, kind="categorical", value=None, label="great")
    assert not unknown.ok
    assert "unknown category 'great'" in unknown.problem
    assert "'verdict'" in unknown.problem
    assert not check_reward(CATEGORIES, kind="categorical", value=0.7).ok
    assert not check_reward(CATEGORIES, kind="categorical", value=1.0, label="bad").ok


def test_boolean_and_critique():
    thumbs = SpecData(name="thumbs", kind="boolean")
    assert check_reward(thumbs, kind="boolean", value=1).ok
    assert not check_reward(thumbs, kind="boolean", value=0.5).ok
    correction = SpecData(name="fix", kind="critique")
    assert check_reward(correction, kind="critique", value=None, label="say 4").value == 0.0
    assert not check_reward(correction, kind="critique", value=None, label=" ").ok
    assert not check_reward(NUMERIC, kind="critique", value=None, label="text").ok


def test_spec_problems():
    assert spec_problems(NUMERIC) == {}
    assert "maximum" in spec_problems(SpecData(name="x", kind="numeric", minimum=2, maximum=1))
    assert "categories" in spec_problems(SpecData(name="x", kind="categorical"))
    assert "categories" in spec_problems(SpecData(name="x", kind="numeric", categories={"a": 1}))
    assert "minimum" in spec_problems(SpecData(name="x", kind="numeric", minimum=math.inf))


def test_rating_options():
    assert rating_options(SpecData(name="stars", kind="numeric", minimum=1, maximum=5)) == [
        ("1", 1.0),
        ("2", 2.0),
        ("3", 3.0),
        ("4", 4.0),
        ("5", 5.0),
    ]
    assert [value for _, value in rating_options(NUMERIC)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert rating_options(CATEGORIES)[0] == ("good", 1.0)
    assert rating_options(SpecData(name="b", kind="boolean")) == [("yes", 1.0), ("no", 0.0)]


def _point(value, source, second, override=False):
    from datetime import datetime

    return RewardPoint(
        value=value,
        source=source,
        created_at=datetime(2026, 1, 1, 0, 0, second, tzinfo=UTC),
        is_override=override,
    )


def test_priority_takes_the_first_source_present_by_its_mean():
    points = [_point(0.2, "evaluator", 1), _point(1.0, "user", 2), _point(0.0, "user", 3)]
    assert combine(points, CombinationRule()) == 0.5  # user beats evaluator; mean of the user's two
    assert combine(points + [_point(0.9, "annotator", 4)], CombinationRule()) == 0.9
    assert combine(points, CombinationRule(priority=("evaluator", "user"))) == 0.2
    assert combine([_point(1.0, "agent", 1)], CombinationRule(priority=("annotator",))) is None
    assert combine([], CombinationRule()) is None


def test_weighted_sum_and_override():
    points = [_point(1.0, "evaluator", 1), _point(0.0, "user", 2), _point(0.5, "agent", 3)]
    rule = CombinationRule(mode="weighted_sum", weights={"evaluator": 0.7, "user": 0.3})
    assert combine(points, rule) == pytest.approx(0.7)
    assert combine([_point(1.0, "agent", 1)], rule) is None
    overridden = points + [
        _point(0.1, "annotator", 4, override=True),
        _point(0.3, "annotator", 5, override=True),
    ]
    assert combine(overridden, rule) == 0.3
    assert combine(overridden, CombinationRule()) == 0.3
