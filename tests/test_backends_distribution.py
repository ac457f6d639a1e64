"""Sampling frequencies and reported probabilities against the exact distributions.

Bin-count tests draw many batches with a fixed seed and compare the counts per slot with the
exact ``P(i)`` of the reference formulas by Pearson's χ² at a one-sided level of about 2e-8
(``tests.reference.chi_square_threshold``), so a correct sampler fails with negligible
probability while a wrong exponent, a scrambled slot or a lost stratum is far outside the bound.
"""

from __future__ import annotations

import numpy as np
import pytest

from prisample import PrioritizedSampler
from tests.reference import (
    ReferenceSampler,
    assert_frequencies,
    chi_square,
    chi_square_threshold,
    draw_counts,
    power_law,
    total_variation,
)


def fill(sampler: PrioritizedSampler, model: ReferenceSampler, priorities: np.ndarray) -> None:
    slots = np.flatnonzero(~np.isnan(priorities))
    sampler.update_priorities(slots, priorities[slots])
    model.update_priorities(slots.tolist(), priorities[slots].tolist())


def exact_rank_probabilities(priorities: np.ndarray, alpha: float) -> np.ndarray:
    """Exact ``rank(i)^-α / Σ r^-α`` per slot, rank by priority descending, ties to the newer
    write: after one ``update_priorities(arange(n), priorities)``, the higher slot."""
    n = priorities.shape[0]
    order = np.lexsort((-np.arange(n), -priorities))
    out = np.empty(n)
    out[order] = power_law(n, alpha)
    return out


# ------------------------------------------------------------------------------------------------
# proportional
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "filled", "k", "calls"),
    [
        (5, 5, 1, 40_000),
        (6, 6, 4, 10_000),
        (16, 11, 32, 2_000),
        (1000, 1000, 32, 4_000),
        (1000, 700, 7, 15_000),
    ],
)
def test_proportional_frequencies_match_exact_probabilities(capacity, filled, k, calls):
    """Counts per slot follow ``(p_i + ε)^α / Σ_k (p_k + ε)^α`` for single and stratified draws."""
    rng = np.random.default_rng(capacity + filled + k)
    s = PrioritizedSampler(capacity, alpha=0.6, eps=1e-3, size=0, seed=1)
    model = ReferenceSampler(capacity, alpha=0.6, eps=1e-3, size=0)
    slots = np.sort(rng.choice(capacity, size=filled, replace=False))
    s.add(slots)
    model.add(slots.tolist())
    priorities = np.full(capacity, np.nan)
    priorities[slots] = rng.uniform(0.0, 2.0, size=filled) ** 2
    priorities[slots[0]] = 0.0  # a zero error still has mass ε^α
    fill(s, model, priorities)
    expected = np.zeros(capacity)
    expected[slots] = model.probabilities(slots.tolist())
    np.testing.assert_allclose(s.probabilities(slots), expected[slots], rtol=1e-12)
    counts = draw_counts(s, calls, k)
    assert counts.sum() == calls * k
    assert counts[np.isnan(priorities)].sum() == 0, "an empty slot was drawn"
    assert_frequencies(counts, expected)


def test_proportional_frequencies_follow_updates():
    """After priorities change, the new distribution is sampled, not the old one."""
    s = PrioritizedSampler(10, alpha=1.0, eps=1e-6, seed=3)
    model = ReferenceSampler(10, alpha=1.0, eps=1e-6)
    fill(s, model, np.arange(10, dtype=np.float64))
    first = draw_counts(s, 2_000, 16)
    assert_frequencies(first, model.probabilities(range(10)))
    fill(s, model, np.arange(10, dtype=np.float64)[::-1].copy())
    second = draw_counts(s, 2_000, 16)
    assert_frequencies(second, model.probabilities(range(10)))
    assert second[0] > 5 * first[0]


@pytest.mark.parametrize("k", [1, 3, 64])
def test_proportional_draws_are_stratified(k):
    """Draw ``j`` of ``k`` lies in the ``j``-th of ``k`` equal-mass ranges (App. B.2.1)."""
    rng = np.random.default_rng(k)
    s = PrioritizedSampler(1000, alpha=0.7, seed=k)
    priorities = rng.exponential(size=1000)
    s.update_priorities(np.arange(1000), priorities)
    p = s.probabilities(np.arange(1000))
    upper = np.cumsum(p)
    lower = upper - p
    for _ in range(50):
        drawn = s.sample(k).indices
        assert np.all(np.diff(drawn) >= 0)
        j = np.arange(k)
        assert np.all(lower[drawn] <= (j + 1) / k + 1e-12)
        assert np.all(upper[drawn] >= j / k - 1e-12)


def test_proportional_stratified_marginal_per_position():
    """With ``k`` equal to the number of slots of equal mass, draw ``j`` is always slot ``j``."""
    s = PrioritizedSampler(6, alpha=0.6, seed=0)
    for _ in range(20):
        np.testing.assert_array_equal(s.sample(6).indices, np.arange(6))
    np.testing.assert_allclose(s.sample(6).probabilities, 1 / 6)


# ------------------------------------------------------------------------------------------------
# rank
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 100, 1000, 1024])
@pytest.mark.parametrize("alpha", [0.5, 0.7, 1.0])
def test_rank_probabilities_exact_up_to_1024(n, alpha):
    """With ``N <= 1024`` ranks, ``P(i) = rank(i)^-α / Σ_{r<=N} r^-α`` exactly."""
    rng = np.random.default_rng(n)
    s = PrioritizedSampler(n, alpha=alpha, backend="rank", seed=0)
    priorities = rng.integers(0, max(2, n // 2), size=n).astype(np.float64)  # with ties
    s.update_priorities(np.arange(n), priorities)
    np.testing.assert_allclose(
        s.probabilities(np.arange(n)), exact_rank_probabilities(priorities, alpha), rtol=1e-9
    )


@pytest.mark.parametrize("n", [5000, 100_000])
@pytest.mark.parametrize("alpha", [0.5, 0.7, 1.0])
def test_rank_probabilities_close_to_exact_for_large_n(n, alpha):
    """Above 1024 ranks the piecewise-uniform CDF is within 0.02 total variation of the power law,
    non-increasing in rank, and sums to one."""
    rng = np.random.default_rng(1)
    s = PrioritizedSampler(n, alpha=alpha, backend="rank", seed=0)
    priorities = rng.random(n)
    s.update_priorities(np.arange(n), priorities)
    p = s.probabilities(np.arange(n))
    exact = exact_rank_probabilities(priorities, alpha)
    assert p.sum() == pytest.approx(1.0, rel=1e-9)
    assert total_variation(p, exact) <= 0.02
    order = np.lexsort((np.arange(n), -priorities))
    assert np.all(np.diff(p[order]) <= 1e-18)
    assert s.weights(np.arange(n)).max() == pytest.approx(1.0)


def test_rank_ties_go_to_the_newer_write():
    """Equal priorities rank by the recency of their write (in one call: later entries newer)."""
    s = PrioritizedSampler(5, alpha=1.0, backend="rank", seed=0)
    s.update_priorities([0, 1, 2, 3, 4], [2.0, 5.0, 2.0, 5.0, 2.0])
    law = power_law(5, 1.0)
    np.testing.assert_allclose(s.probabilities([3, 1, 4, 2, 0]), law, rtol=1e-9)
    s.update_priorities([0], [2.0])
    np.testing.assert_allclose(s.probabilities([3, 1, 0, 4, 2]), law, rtol=1e-9)


@pytest.mark.parametrize(("capacity", "k", "calls"), [(7, 1, 40_000), (7, 5, 8_000), (1000, 32, 4_000)])
def test_rank_frequencies_match_exact_power_law(capacity, k, calls):
    """Counts per slot follow the exact rank distribution (N <= 1024)."""
    rng = np.random.default_rng(capacity)
    s = PrioritizedSampler(capacity, alpha=0.7, backend="rank", seed=2)
    priorities = rng.permutation(capacity).astype(np.float64)
    s.update_priorities(np.arange(capacity), priorities)
    counts = draw_counts(s, calls, k)
    assert_frequencies(counts, exact_rank_probabilities(priorities, 0.7))


@pytest.mark.parametrize(("capacity", "k", "calls"), [(7, 1, 40_000), (7, 5, 8_000), (1000, 32, 4_000)])
def test_rank_frequencies_match_reported_probabilities(capacity, k, calls):
    """``probabilities`` reports what is actually sampled (after updates)."""
    rng = np.random.default_rng(capacity)
    s = PrioritizedSampler(capacity, alpha=0.7, backend="rank", seed=4)
    s.update_priorities(np.arange(capacity), rng.random(capacity))
    for _ in range(3):
        slots = rng.choice(capacity, size=max(1, capacity // 3), replace=False)
        s.update_priorities(slots, rng.random(slots.shape[0]) * 2)
    reported = s.probabilities(np.arange(capacity))
    assert reported.sum() == pytest.approx(1.0, rel=1e-9)
    draw = s.sample(k)
    np.testing.assert_array_equal(draw.probabilities, reported[draw.indices])
    counts = draw_counts(s, calls, k)
    assert_frequencies(counts, reported)


def test_rank_frequencies_large_n_grouped():
    """N = 5000: counts aggregated over 50 groups of consecutive ranks follow the reported P."""
    n, k, calls = 5000, 64, 1500
    rng = np.random.default_rng(5)
    s = PrioritizedSampler(n, alpha=0.7, backend="rank", seed=5)
    priorities = rng.random(n)
    s.update_priorities(np.arange(n), priorities)
    order = np.lexsort((np.arange(n), -priorities))
    counts = draw_counts(s, calls, k)[order].reshape(50, -1).sum(axis=1)
    reported = s.probabilities(order).reshape(50, -1).sum(axis=1)
    exact = power_law(n, 0.7).reshape(50, -1).sum(axis=1)
    assert total_variation(reported, exact) <= 0.02
    assert_frequencies(counts, reported)


def test_rank_alpha_zero_is_uniform():
    s = PrioritizedSampler(9, alpha=0.0, backend="rank", seed=0)
    s.update_priorities(np.arange(9), np.arange(9.0))
    np.testing.assert_allclose(s.probabilities(np.arange(9)), 1 / 9, rtol=1e-12)
    assert_frequencies(draw_counts(s, 3_000, 9), np.full(9, 1 / 9))


def test_rank_new_slot_enters_on_top():
    """New items get the maximal priority, so in rank-based sampling rank 1, also when they tie
    (ties: the newer write first; Algorithm 1, line 6)."""
    s = PrioritizedSampler(8, alpha=0.7, backend="rank", size=0, seed=0)
    s.add([5])
    s.update_priorities([5], [0.5])
    s.add([2, 7])  # enter at max priority 0.5, on top of slot 5: 7 (the last written), then 2
    np.testing.assert_allclose(s.probabilities([7, 2, 5]), power_law(3, 0.7), rtol=1e-9)


# ------------------------------------------------------------------------------------------------
# uniform and greedy
# ------------------------------------------------------------------------------------------------


def test_uniform_frequencies():
    s = PrioritizedSampler(13, backend="uniform", seed=6)
    s.update_priorities(np.arange(13), np.linspace(0, 100, 13))
    s.remove([0, 4])
    expected = np.full(13, 1 / 11)
    expected[[0, 4]] = 0.0
    np.testing.assert_allclose(s.probabilities([1, 12]), 1 / 11)
    assert_frequencies(draw_counts(s, 5_000, 8), expected)


def test_greedy_returns_the_k_largest():
    s = PrioritizedSampler(7, backend="greedy", seed=0)
    s.update_priorities(np.arange(7), [0.1, 3.0, 0.5, 3.0, 2.0, 0.0, 1.0])
    d = s.sample(4)
    np.testing.assert_array_equal(d.indices, [1, 3, 4, 6])
    np.testing.assert_array_equal(d.weights, np.ones(4, dtype=np.float32))
    np.testing.assert_allclose(s.probabilities(np.arange(7)), [0, 0.5, 0, 0.5, 0, 0, 0])
    np.testing.assert_array_equal(s.sample(1).indices, [1])  # deterministic: no randomness
    s.update_priorities([5], [10.0])
    np.testing.assert_array_equal(s.sample(2).indices, [5, 1])
    np.testing.assert_allclose(s.probabilities([5]), [1.0])


def test_chi_square_helper_rejects_a_wrong_distribution():
    """The bound is loose enough for a fixed seed but still catches a modest distortion."""
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.3, 0.2])
    counts = np.bincount(rng.choice(3, size=50_000, p=p), minlength=3)
    statistic, df = chi_square(counts, p)
    assert statistic < chi_square_threshold(df)
    statistic, df = chi_square(counts, np.array([0.48, 0.32, 0.2]))
    assert statistic > chi_square_threshold(df)
