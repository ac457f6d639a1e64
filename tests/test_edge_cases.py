"""Edge cases: capacity 1, non-power-of-two capacities, zero priorities, α = 0, β = 0 and 1."""

from __future__ import annotations

import numpy as np
import pytest

from prisample import PrioritizedSampler
from tests.reference import (
    BACKENDS,
    NORMS,
    ReferenceSampler,
    assert_frequencies,
    draw_counts,
    power_law,
    total_variation,
)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("weight_norm", NORMS)
def test_capacity_one(backend, weight_norm):
    s = PrioritizedSampler(1, backend=backend, weight_norm=weight_norm, beta=1.0, seed=0)
    d = s.sample(5)
    np.testing.assert_array_equal(d.indices, np.zeros(5, dtype=np.int64))
    np.testing.assert_allclose(d.probabilities, 1.0)
    np.testing.assert_allclose(d.weights, 1.0, rtol=1e-6)
    s.update_priorities([0], [0.0])
    np.testing.assert_array_equal(s.sample(3).indices, [0, 0, 0])
    assert s.max_priority == 0.0
    s.remove([0])
    assert s.size == 0 and s.max_priority == 1.0
    with pytest.raises(ValueError):
        s.sample(1)
    s.add([0])
    assert s.priorities[0] == 1.0
    np.testing.assert_array_equal(s.sample(2).indices, [0, 0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("capacity", [3, 5, 1000])
def test_non_power_of_two_capacities(backend, capacity):
    rng = np.random.default_rng(capacity)
    s = PrioritizedSampler(capacity, backend=backend, alpha=0.7, seed=0)
    model = ReferenceSampler(capacity, backend=backend, alpha=0.7)
    priorities = rng.exponential(size=capacity)
    s.update_priorities(np.arange(capacity), priorities)
    model.update_priorities(range(capacity), priorities.tolist())
    p = s.probabilities(np.arange(capacity))
    assert p.sum() == pytest.approx(1.0, rel=1e-9)
    exact = model.probabilities(range(capacity))
    if backend == "rank":
        order = model.rank_order()
        assert np.all(np.diff(p[order]) <= 1e-15)
        assert total_variation(p, exact) <= 0.02
    else:
        np.testing.assert_allclose(p, exact, rtol=1e-9)
    for k in (1, capacity, 3 * capacity + 1):
        d = s.sample(k)
        assert d.indices.min() >= 0 and d.indices.max() < capacity


def test_proportional_zero_priorities():
    """A zero error keeps mass ``ε^α`` (revisited, rarely); all zeros are uniform."""
    eps, alpha = 1e-2, 0.5
    s = PrioritizedSampler(4, alpha=alpha, eps=eps, seed=0)
    s.update_priorities(np.arange(4), np.zeros(4))
    np.testing.assert_allclose(s.probabilities(np.arange(4)), 0.25, rtol=1e-12)
    s.update_priorities([1, 2, 3], [1.0, 1.0, 1.0])
    total = eps**alpha + 3 * (1 + eps) ** alpha
    assert s.probabilities([0])[0] == pytest.approx(eps**alpha / total, rel=1e-12)
    counts = draw_counts(s, 20_000, 4)
    assert counts[0] > 0
    assert_frequencies(counts, s.probabilities(np.arange(4)))


def test_rank_zero_priority_is_last():
    s = PrioritizedSampler(4, alpha=1.0, backend="rank", seed=0)
    s.update_priorities(np.arange(4), [0.0, 3.0, 2.0, 1.0])
    np.testing.assert_allclose(s.probabilities([1, 2, 3, 0]), power_law(4, 1.0), rtol=1e-9)


def test_greedy_zero_priorities():
    s = PrioritizedSampler(5, backend="greedy", seed=0)
    s.update_priorities(np.arange(5), np.zeros(5))
    np.testing.assert_array_equal(s.sample(3).indices, [0, 1, 2])  # all tied: lowest slots first
    np.testing.assert_allclose(s.probabilities(np.arange(5)), 0.2)
    s.update_priorities([3], [1e-300])
    np.testing.assert_array_equal(s.sample(2).indices, [3, 0])


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_alpha_zero_is_uniform(backend):
    s = PrioritizedSampler(11, alpha=0.0, backend=backend, seed=0)
    s.update_priorities(np.arange(11), np.geomspace(1e-6, 1e6, 11))
    np.testing.assert_allclose(s.probabilities(np.arange(11)), 1 / 11, rtol=1e-12)
    np.testing.assert_allclose(s.weights(np.arange(11)), 1.0, rtol=1e-6)
    assert_frequencies(draw_counts(s, 3_000, 5), np.full(11, 1 / 11))
    s.alpha = 1.0  # and back to prioritized: slot 10 has the largest priority
    model = ReferenceSampler(11, alpha=1.0, backend=backend)
    model.update_priorities(range(11), np.geomspace(1e-6, 1e6, 11).tolist())
    assert s.probabilities([10])[0] == pytest.approx(model.probabilities([10])[0], rel=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("weight_norm", NORMS)
def test_beta_zero_gives_unit_weights(backend, weight_norm):
    s = PrioritizedSampler(9, backend=backend, beta=0.0, weight_norm=weight_norm, alpha=1.0, seed=0)
    s.update_priorities(np.arange(9), np.geomspace(1e-3, 1e3, 9))
    for _ in range(10):
        np.testing.assert_array_equal(s.sample(6).weights, np.ones(6, dtype=np.float32))
    np.testing.assert_array_equal(s.weights(np.arange(9)), np.ones(9, dtype=np.float32))


@pytest.mark.parametrize("backend", ["proportional", "rank", "uniform"])
def test_beta_one_gives_full_correction(backend):
    """β = 1, unnormalised: ``w_i P(i) = 1/N`` for every slot (the bias is fully undone)."""
    s = PrioritizedSampler(9, backend=backend, beta=1.0, weight_norm="none", alpha=1.0, seed=0)
    s.update_priorities(np.arange(9), np.linspace(0.0, 4.0, 9))
    p = s.probabilities(np.arange(9))
    np.testing.assert_allclose(s.weights(np.arange(9)) * p, 1 / 9, rtol=1e-6)
    d = s.sample(20)
    np.testing.assert_allclose(d.weights * d.probabilities, 1 / 9, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adding_a_valid_slot_rewrites_it_at_max_priority(backend):
    s = PrioritizedSampler(4, backend=backend, seed=0)
    s.update_priorities(np.arange(4), [0.1, 0.2, 5.0, 0.3])
    s.add([0])
    np.testing.assert_array_equal(s.priorities, [5.0, 0.2, 5.0, 0.3])
    assert s.size == 4


def test_stratified_draw_larger_than_memory():
    """k = 3N with equal masses: each slot exactly three times (one per equal-mass range)."""
    s = PrioritizedSampler(7, seed=0)
    d = s.sample(21)
    np.testing.assert_array_equal(np.bincount(d.indices, minlength=7), np.full(7, 3))


def test_large_batch():
    s = PrioritizedSampler(1000, seed=0, size=600)
    s.update_priorities(np.arange(600), np.random.default_rng(0).random(600))
    d = s.sample(100_000)
    assert d.indices.max() < 600
    expected = np.pad(s.probabilities(np.arange(600)), (0, 400))
    assert_frequencies(np.bincount(d.indices, minlength=1000), expected)
