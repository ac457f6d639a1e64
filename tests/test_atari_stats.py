"""Atari 100k statistics (recipes/dqn/stats.py): normalisation, IQM, stratified bootstrap, reference CSV."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recipes.dqn.stats import (
    REFERENCE_CSV,
    aggregate,
    human_normalized,
    iqm,
    load_reference,
    mean,
    median,
    per_game,
    plot,
    published_agents,
    stratified_bootstrap_ci,
    table_markdown,
)

ATARI_100K_ROMS = {
    "alien",
    "amidar",
    "assault",
    "asterix",
    "bank_heist",
    "battle_zone",
    "boxing",
    "breakout",
    "chopper_command",
    "crazy_climber",
    "demon_attack",
    "freeway",
    "frostbite",
    "gopher",
    "hero",
    "jamesbond",
    "kangaroo",
    "krull",
    "kung_fu_master",
    "ms_pacman",
    "pong",
    "private_eye",
    "qbert",
    "road_runner",
    "seaquest",
    "up_n_down",
}


def naive_iqm(values: np.ndarray) -> float:
    """Sort, drop floor(n/4) from each end, average: the definition, written out."""
    ordered = sorted(float(v) for v in np.ravel(values))
    k = len(ordered) // 4
    kept = ordered[k : len(ordered) - k]
    return sum(kept) / len(kept)


def small_sweep() -> dict[str, Any]:
    return {
        "device": "test",
        "protocol": {"agent_steps": 100_000},
        "games": {
            "pong": {"uniform": {"scores": [-20.7, -20.7, 14.6]}, "rank": {"scores": [14.6, 14.6, 14.6]}},
            "boxing": {"uniform": {"scores": [0.1, 12.1, None]}, "rank": {"scores": [12.1, 12.1, 0.1]}},
        },
    }


# ---------------------------------------------------------------------------------------------------
# normalisation


def test_human_normalized_maps_random_to_zero_and_human_to_one() -> None:
    assert human_normalized(-20.7, -20.7, 14.6) == 0.0
    assert human_normalized(14.6, -20.7, 14.6) == pytest.approx(1.0)
    assert human_normalized(-3.05, -20.7, 14.6) == pytest.approx(0.5)
    np.testing.assert_allclose(human_normalized([0.1, 12.1, 6.1], 0.1, 12.1), [0.0, 1.0, 0.5])


def test_human_normalized_rejects_equal_bounds() -> None:
    with pytest.raises(ValueError, match="differ"):
        human_normalized(1.0, 3.0, 3.0)


# ---------------------------------------------------------------------------------------------------
# IQM, mean, median


@pytest.mark.parametrize("shape", [(1,), (2,), (3,), (4,), (5,), (7,), (3, 3), (5, 26), (100, 26), (10, 1)])
def test_iqm_matches_naive_sort_and_slice(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(sum(shape)).standard_cauchy(size=shape)  # heavy tails: trimming matters
    assert iqm(x) == pytest.approx(naive_iqm(x), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("n", [1, 3, 4, 9, 10, 11, 78, 2600])
def test_iqm_matches_scipy_trim_mean(n: int) -> None:
    stats = pytest.importorskip("scipy.stats")
    x = np.random.default_rng(n).lognormal(sigma=2.0, size=n)
    assert iqm(x) == pytest.approx(float(stats.trim_mean(x, 0.25, axis=None)), rel=1e-12)
    matrix = x[: (n // 3) * 3].reshape(-1, 3) if n >= 3 else x.reshape(1, -1)
    assert iqm(matrix) == pytest.approx(float(stats.trim_mean(matrix, 0.25, axis=None)), rel=1e-12)


def test_iqm_pools_runs_of_all_games_and_ignores_outliers() -> None:
    # 8 runs pooled: drop 2 from each end -> mean of [1, 2, 3, 4]
    assert iqm({"a": [1.0, 2.0, -1e9, 3.0], "b": [4.0, 1e9, 1e9, -1e9]}) == 2.5


def test_mean_and_median_are_over_per_game_means() -> None:
    scores = {"a": [0.0, 2.0], "b": [10.0, 10.0, 10.0], "c": [3.0]}  # per-game means 1, 10, 3
    assert mean(scores) == pytest.approx(14.0 / 3.0)
    assert median(scores) == 3.0
    matrix = np.array([[0.0, 10.0, 3.0], [2.0, 10.0, 3.0]])  # (runs, games)
    assert mean(matrix) == pytest.approx(14.0 / 3.0)
    assert median(matrix) == 3.0


def test_per_game_rejects_empty_and_non_finite() -> None:
    with pytest.raises(ValueError, match="no runs"):
        per_game({"a": []})
    with pytest.raises(ValueError, match="non-finite"):
        per_game({"a": [1.0, math.nan]})


# ---------------------------------------------------------------------------------------------------
# stratified bootstrap


def test_bootstrap_ci_contains_point_and_shrinks_with_more_seeds() -> None:
    rng = np.random.default_rng(0)
    widths = []
    for seeds in (3, 30):
        scores = {g: rng.normal(loc, 0.3, size=seeds) for g, loc in (("a", 0.2), ("b", 0.5), ("c", 1.0))}
        for statistic in (iqm, mean, median):
            ci = stratified_bootstrap_ci(scores, statistic, reps=400, seed=1)
            assert ci.low <= ci.point <= ci.high
            assert ci.point == statistic(scores)
        ci = stratified_bootstrap_ci(scores, mean, reps=400, seed=1)
        widths.append(ci.high - ci.low)
    assert widths[1] < 0.6 * widths[0]  # ~sqrt(10) narrower in expectation


def test_bootstrap_resamples_within_each_game() -> None:
    # Game "const" has one repeated score; a resample across games would mix in the other values.
    scores = {"const": [5.0, 5.0, 5.0], "spread": [-100.0, 0.0, 100.0]}
    seen: list[dict[str, np.ndarray]] = []

    def spy(sample: Mapping[str, np.ndarray]) -> float:
        seen.append({g: np.array(v) for g, v in sample.items()})
        return float(np.mean(sample["const"]))

    ci = stratified_bootstrap_ci(scores, spy, reps=200, seed=3)
    assert (ci.point, ci.low, ci.high) == (5.0, 5.0, 5.0)
    assert len(seen) == 201  # 200 resamples, then the point estimate
    resamples = seen[:200]
    for sample in resamples:
        assert set(sample) == {"const", "spread"}
        np.testing.assert_array_equal(sample["const"], [5.0, 5.0, 5.0])
        assert sample["spread"].shape == (3,)
        assert set(sample["spread"].tolist()) <= {-100.0, 0.0, 100.0}
    # the other game really is resampled: some draws repeat a run
    assert any(len(set(s["spread"].tolist())) < 3 for s in resamples)


def test_bootstrap_with_one_run_per_game_collapses_to_the_point() -> None:
    ci = stratified_bootstrap_ci([0.1, 0.7, 0.4], median, reps=50)
    assert ci.low == ci.point == ci.high == 0.4


def test_bootstrap_is_reproducible_and_percentile_level_matters() -> None:
    scores = np.random.default_rng(5).normal(size=(5, 4))
    a = stratified_bootstrap_ci(scores, iqm, reps=300, seed=7)
    assert a == stratified_bootstrap_ci(scores, iqm, reps=300, seed=7)
    narrow = stratified_bootstrap_ci(scores, iqm, reps=300, confidence=0.5, seed=7)
    assert a.low < narrow.low <= narrow.high < a.high
    with pytest.raises(ValueError):
        stratified_bootstrap_ci(scores, iqm, reps=0)
    with pytest.raises(ValueError):
        stratified_bootstrap_ci(scores, iqm, confidence=1.0)


# ---------------------------------------------------------------------------------------------------
# reference CSV


def test_reference_csv_covers_the_26_games_with_random_below_human() -> None:
    pytest.importorskip("gymnasium")  # load_reference reads the CSV through recipes.dqn.envs
    reference = load_reference(REFERENCE_CSV)
    assert set(reference) == ATARI_100K_ROMS
    assert published_agents(reference) == ["drq_eps"]
    for rom, row in reference.items():
        assert float(row["random"]) < float(row["human"]), rom
        assert math.isfinite(float(row["drq_eps"])), rom
    assert (reference["pong"]["random"], reference["pong"]["human"]) == (-20.7, 14.6)
    header = [line for line in REFERENCE_CSV.read_text().splitlines() if line.startswith("#")]
    assert any("DrQ_eps.gin" in line for line in header)  # the uniform-replay claim is cited


def test_reference_drq_eps_aggregates_match_the_published_ones() -> None:
    pytest.importorskip("gymnasium")  # load_reference reads the CSV through recipes.dqn.envs
    # Agarwal et al. (2021) runs: median 0.313, mean 0.465 over the 26 games (of per-game means).
    reference = load_reference()
    normalized = {
        g: human_normalized(float(r["drq_eps"]), float(r["random"]), float(r["human"]))
        for g, r in reference.items()
    }
    assert median(normalized) == pytest.approx(0.313, abs=5e-4)
    assert mean(normalized) == pytest.approx(0.465, abs=5e-4)


# ---------------------------------------------------------------------------------------------------
# aggregate, table, plot


def test_aggregate_on_a_hand_made_sweep() -> None:
    pytest.importorskip("gymnasium")  # load_reference reads the CSV through recipes.dqn.envs
    reference = load_reference()
    result = aggregate(small_sweep(), reference, reps=200, seed=0)
    assert result["games"] == ["pong", "boxing"]
    uniform, rank = result["arms"]["uniform"], result["arms"]["rank"]
    assert uniform["seeds"] == {"pong": 3, "boxing": 2}  # the null seed is dropped
    assert uniform["score"]["pong"] == pytest.approx((-20.7 - 20.7 + 14.6) / 3)
    assert uniform["normalized"] == pytest.approx({"pong": 1 / 3, "boxing": 0.5})
    assert rank["normalized"] == pytest.approx({"pong": 1.0, "boxing": 2 / 3})
    assert rank["median"]["point"] == pytest.approx((1.0 + 2 / 3) / 2)
    assert rank["mean"]["point"] == pytest.approx((1.0 + 2 / 3) / 2)
    # rank pooled: [1, 1, 1, 1, 1, 0] -> drop one from each end -> mean of [1, 1, 1, 1]
    assert rank["iqm"]["point"] == pytest.approx(1.0)
    for arm in (uniform, rank):
        for name in ("median", "iqm", "mean"):
            assert arm[name]["low"] <= arm[name]["point"] <= arm[name]["high"]
    published = result["published"]["drq_eps"]
    assert published["score"] == {"pong": -9.06, "boxing": 9.04}
    expected = [(-9.06 + 20.7) / 35.3, (9.04 - 0.1) / 12.0]
    assert published["normalized"]["pong"] == pytest.approx(expected[0])
    assert published["median"] == pytest.approx(sum(expected) / 2)
    table = table_markdown(result, reference)
    assert table.count("\n") == 2 + 3
    assert "| drq_eps (published) |" in table and "Pong" in table and "Boxing" in table


def test_aggregate_rejects_a_game_missing_from_the_reference() -> None:
    pytest.importorskip("gymnasium")  # load_reference reads the CSV through recipes.dqn.envs
    sweep = {"games": {"tetris": {"uniform": {"scores": [1.0]}}}}
    with pytest.raises(KeyError, match="tetris"):
        aggregate(sweep, load_reference(), reps=10)


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("gymnasium")  # load_reference reads the CSV through recipes.dqn.envs
    pytest.importorskip("matplotlib")
    reference = load_reference()
    sweep = small_sweep()
    result = aggregate(sweep, reference, reps=50)
    out = plot(sweep, reference, tmp_path / "atari_sweep.png", result)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000
