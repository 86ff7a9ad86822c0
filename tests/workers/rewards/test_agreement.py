"""Agreement statistics against hand-computed textbook examples."""

import pytest

from workers.rewards.agreement import cohen_kappa, krippendorff_alpha


def test_cohen_kappa_textbook_yes_no():
    # Two readers, 50 proposals: 20 both yes, 15 both no, 5 A-yes/B-no, 10 A-no/B-yes.
    # p_o = 35/50 = 0.7; p_e = 0.5·0.6 + 0.5·0.4 = 0.5; κ = (0.7 − 0.5) / 0.5 = 0.4.
    pairs = [("yes", "yes")] * 20 + [("no", "no")] * 15 + [("yes", "no")] * 5 + [("no", "yes")] * 10
    assert cohen_kappa(pairs) == pytest.approx(0.4)


def test_cohen_kappa_edges():
    assert cohen_kappa([(1, 1), (0, 0)]) == pytest.approx(1.0)
    assert cohen_kappa([(1, 0), (0, 1)]) == pytest.approx(-1.0)
    assert cohen_kappa([]) is None
    assert cohen_kappa([("a", "a"), ("a", "a")]) is None


# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": 4 observers, 12 units, missing values.
KRIPPENDORFF_2011 = [
    [1, 1, 1],
    [2, 2, 3, 2],
    [3, 3, 3, 3],
    [3, 3, 3, 3],
    [2, 2, 2, 2],
    [1, 2, 3, 4],
    [4, 4, 4, 4],
    [1, 1, 2, 1],
    [2, 2, 2, 2],
    [5, 5, 5],
    [1, 1],
    [3],
]


def test_krippendorff_alpha_nominal_textbook():
    assert krippendorff_alpha(KRIPPENDORFF_2011, "nominal") == pytest.approx(0.743, abs=5e-4)


def test_krippendorff_alpha_interval_textbook():
    assert krippendorff_alpha(KRIPPENDORFF_2011, "interval") == pytest.approx(0.849, abs=5e-4)


def test_krippendorff_alpha_edges():
    assert krippendorff_alpha([[1, 1], [0, 0]]) == pytest.approx(1.0)
    assert krippendorff_alpha([[1], [0]]) is None
    assert krippendorff_alpha([[1, 1], [1, 1]]) is None
    with pytest.raises(ValueError, match="unknown level 'ratio'"):
        krippendorff_alpha([[1, 2]], "ratio")
