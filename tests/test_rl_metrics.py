"""The registered comparisons' statistics beyond the difference test: the equivalence test (TOST in
its interval form) against a bootstrap written out here, Holm–Bonferroni against the definition
worked by hand and against the step-down procedure, and one ``iqm_interval`` for every study."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from recipes.common import rl_metrics
from recipes.common.aggregates import FloatArray, stratified_bootstrap_ci

ROOT = Path(__file__).resolve().parents[1]


def naive_iqm(values: np.ndarray) -> float:
    ordered = np.sort(values)
    cut = len(ordered) // 4
    return float(ordered[cut : len(ordered) - cut].mean())


def naive_difference_interval(a: np.ndarray, b: np.ndarray, confidence: float) -> tuple[float, float]:
    """5,000 resamples, each redrawing the arm's seeds then the baseline's from one generator of seed
    0, the percentile interval of the IQM difference."""
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(5000):
        draws.append(
            naive_iqm(a[rng.integers(0, len(a), len(a))]) - naive_iqm(b[rng.integers(0, len(b), len(b))])
        )
    tail = 50.0 * (1.0 - confidence)
    low, high = np.percentile(draws, [tail, 100.0 - tail])
    return float(low), float(high)


@pytest.mark.parametrize(("shift", "sizes"), [(0.0, (10, 10)), (3.0, (20, 10)), (-1.0, (5, 7))])
def test_equivalence_is_the_90_percent_interval_of_the_difference_tests_bootstrap(
    shift: float, sizes: tuple[int, int]
) -> None:
    """The interval is the direct bootstrap's 90 % interval; the verdict is "equivalent" exactly when
    it lies inside the open (−m, +m): a margin just outside the interval passes, one at its edge
    does not."""
    rng = np.random.default_rng(7)
    a, b = rng.normal(100.0 + shift, 4.0, sizes[0]), rng.normal(100.0, 4.0, sizes[1])
    low, high = naive_difference_interval(a, b, 0.90)
    edge = max(abs(low), abs(high))
    wide = rl_metrics.equivalence(a, b, margin=edge * 1.001)
    assert wide["interval"] == pytest.approx([naive_iqm(a) - naive_iqm(b), low, high], rel=1e-12)
    assert wide["verdict"] == rl_metrics.EQUIVALENT == "equivalent within ±m"
    assert wide["margin"] == pytest.approx(edge * 1.001)
    at_edge = rl_metrics.equivalence(a, b, margin=edge)
    assert at_edge["verdict"] == rl_metrics.NOT_SHOWN_EQUIVALENT == "not shown equivalent"
    # the difference test on the same draws: its 95 % interval, and the 90 % one inside it
    full = rl_metrics.compare(a, b, margin=edge * 1.001)
    assert full["equivalence"] == wide
    assert full["difference"][1:] == pytest.approx(list(naive_difference_interval(a, b, 0.95)), rel=1e-12)
    assert full["difference"][1] <= low and high <= full["difference"][2]
    assert "equivalence" not in rl_metrics.compare(a, b)


def test_equivalence_needs_a_narrow_interval_not_only_a_small_difference() -> None:
    """Two arms from one distribution with few, noisy seeds: no difference detected, yet not shown
    equivalent within a margin the interval does not fit; many quiet seeds: equivalent."""
    rng = np.random.default_rng(3)
    noisy = rl_metrics.compare(rng.normal(100, 40, 5), rng.normal(100, 40, 5), margin=10.0)
    assert noisy["verdict"] == "no difference detected"
    assert noisy["equivalence"]["verdict"] == "not shown equivalent"
    quiet = rl_metrics.compare(rng.normal(100, 2, 20), rng.normal(100, 2, 20), margin=10.0)
    assert quiet["equivalence"]["verdict"] == "equivalent within ±m"


@pytest.mark.parametrize("margin", [0.0, -1.0, float("nan"), float("inf"), "1"])
def test_equivalence_refuses_a_margin_that_is_not_positive_and_finite(margin: object) -> None:
    with pytest.raises(ValueError, match="margin"):
        rl_metrics.equivalence([1.0, 2.0], [1.0, 2.0], margin=margin)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="margin"):
        rl_metrics.compare([1.0, 2.0], [1.0, 2.0], margin=margin)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 2 seeds"):
        rl_metrics.equivalence([1.0], [1.0, 2.0], margin=1.0)


def test_relative_margin_is_a_fraction_of_the_baselines_iqm() -> None:
    assert rl_metrics.relative_margin([10.0, 20.0, 30.0, 40.0, 1000.0], 0.1) == pytest.approx(3.0)
    assert rl_metrics.relative_margin([-20.0, -20.0], 0.5) == pytest.approx(10.0)
    for bad in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="fraction"):
            rl_metrics.relative_margin([1.0, 2.0], bad)
    with pytest.raises(ValueError, match="baseline"):
        rl_metrics.relative_margin([], 0.1)


def test_holm_matches_a_family_worked_by_hand() -> None:
    """k = 4, sorted 0.005, 0.01, 0.03, 0.04: 4·0.005 = 0.02; max(0.02, 3·0.01) = 0.03;
    max(0.03, 2·0.03) = 0.06; max(0.06, 1·0.04) = 0.06 (the running maximum keeps the order)."""
    result = rl_metrics.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    assert list(result["adjusted_p"]) == ["a", "b", "c", "d"]  # the given order
    assert result["adjusted_p"] == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06, "d": 0.02})
    assert result["survives"] == {"a": True, "b": False, "c": False, "d": True}
    assert result["tests"] == 4 and result["alpha"] == 0.05
    capped = rl_metrics.holm({"x": 0.6, "y": 0.7})
    assert capped["adjusted_p"] == {"x": 1.0, "y": 1.0}
    assert rl_metrics.holm({"only": 0.03})["adjusted_p"] == {"only": 0.03}
    assert rl_metrics.holm({}) == {"alpha": 0.05, "tests": 0, "adjusted_p": {}, "survives": {}}


def test_holm_survivors_are_the_step_down_procedures() -> None:
    """Holm's procedure as he states it: reject H_(1), H_(2), … while p_(i) ≤ α/(k − i + 1), stop at
    the first that fails; the adjusted p-values must pick the same tests."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        k = int(rng.integers(1, 12))
        p = rng.uniform(0.0, 0.08, k) ** rng.uniform(0.5, 2.0)
        names = [f"t{i}" for i in range(k)]
        rejected = set()
        for i, j in enumerate(np.argsort(p, kind="stable")):
            if p[j] > 0.05 / (k - i):
                break
            rejected.add(names[j])
        result = rl_metrics.holm(dict(zip(names, p.tolist(), strict=True)))
        assert {n for n, s in result["survives"].items() if s} == rejected
        assert all(result["adjusted_p"][n] >= p[i] for i, n in enumerate(names))


def test_the_committed_report_holds_holm_over_its_own_comparisons() -> None:
    """docs/results/per_vs_uniform.json: its Holm family is every comparison it reports, each
    adjusted p as rl_metrics.holm gives it, and the SB3 rank arm, "better" by its own test, does
    not survive the family (what docs/recipes/per_vs_uniform.md and docs/sb3.md say)."""
    results = json.loads((ROOT / "docs/results/per_vs_uniform.json").read_text())
    p = {
        f"{env}: {arm}": c["welch_p"]
        for env, tests in results["comparisons"].items()
        for arm, c in tests.items()
    }
    expected = rl_metrics.holm(p)
    assert results["holm"]["tests"] == len(p) >= 5
    for env, tests in results["comparisons"].items():
        for arm in tests:
            assert results["holm"]["adjusted_p"][env][arm] == pytest.approx(
                expected["adjusted_p"][f"{env}: {arm}"]
            )
            assert results["holm"]["survives"][env][arm] == expected["survives"][f"{env}: {arm}"]
    rank = "SB3 CartPole-v1: rank"
    assert results["comparisons"]["SB3 CartPole-v1"]["rank"]["verdict"] == "better"
    assert p[rank] < 0.05 and not expected["survives"][rank]


@pytest.mark.parametrize(
    ("p_values", "alpha", "match"),
    [({"a": 1.5}, 0.05, "p_values"), ({"a": float("nan")}, 0.05, "p_values"), ({"a": 0.1}, 0.0, "alpha")],
)
def test_holm_refuses_what_is_not_a_p_value(p_values: dict[str, float], alpha: float, match: str) -> None:
    given = dict(p_values)
    with pytest.raises(ValueError, match=match):
        rl_metrics.holm(p_values, alpha=alpha)
    assert p_values == given or np.isnan(p_values["a"])


def test_one_iqm_interval_with_the_protocols_5000_resamples() -> None:
    values = [3.0, 9.0, 1.0, 7.0, 4.0, 8.0, 2.0]
    assert rl_metrics.BOOTSTRAP_REPS == 5000
    expected = stratified_bootstrap_ci({"arm": np.asarray(values)}, _iqm, reps=5000, seed=0)
    assert rl_metrics.iqm_interval(values) == list(expected)


def _iqm(scores: Mapping[str, FloatArray]) -> float:
    return naive_iqm(np.concatenate(list(scores.values())))


def test_holm_by_group_is_one_family_across_groups() -> None:
    """Tests named alike in two groups stay two tests of one family: k = 3, sorted 0.01, 0.02, 0.04
    → 0.03, max(0.03, 0.04) = 0.04, max(0.04, 0.04) = 0.04."""
    result = rl_metrics.holm_by_group(
        {"CartPole": {"rank": 0.01, "proportional": 0.04}, "SB3": {"rank": 0.02}}
    )
    assert result["tests"] == 3
    assert result["adjusted_p"] == {
        "CartPole": {"rank": pytest.approx(0.03), "proportional": pytest.approx(0.04)},
        "SB3": {"rank": pytest.approx(0.04)},
    }
    assert result["survives"] == {"CartPole": {"rank": True, "proportional": True}, "SB3": {"rank": True}}
