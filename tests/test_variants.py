"""Off-policy priority helpers (prisample.methods: rejection, hybrid), per-slot correction factors
and ``ε = 0``.

Every expected value is computed by hand (or in float64 from the formula written out here).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from prisample import CorrectedSampler, LinearSchedule, PrioritizedSampler
from prisample.methods import hybrid_priorities, importance_ratios, rejection_priorities
from tests.reference import BACKENDS, assert_draws_equal, assert_frequencies, assert_same, draw_counts

torch.set_num_threads(1)


# ------------------------------------------------------------------------------------------------
# priority helpers
# ------------------------------------------------------------------------------------------------


def test_importance_ratios_by_hand():
    # π(a|s) = 0.925 (greedy action of a 0.1-greedy policy over 4 actions), 0.025 otherwise; μ uniform.
    rho = importance_ratios([0.925, 0.025, 0.0], [0.25, 0.25, 0.5])
    np.testing.assert_allclose(rho, [3.7, 0.1, 0.0], rtol=1e-15)
    assert importance_ratios(torch.tensor([0.5]), np.array([0.5])).tolist() == [1.0]


@pytest.mark.parametrize(
    ("pi", "mu", "name"),
    [
        ([0.5], [0.0], "mu_tm1"),
        ([1.5], [0.5], "pi_tm1"),
        ([-0.1], [0.5], "pi_tm1"),
        ([0.5], [np.nan], "mu_tm1"),
    ],
)
def test_importance_ratios_reject_bad_probabilities(pi, mu, name):
    with pytest.raises(ValueError, match=name):
        importance_ratios(pi, mu)
    with pytest.raises(ValueError, match="shape"):
        importance_ratios([0.5, 0.5], [0.5])
    with pytest.raises(TypeError, match="pi_tm1"):
        importance_ratios(["a"], [0.5])


def test_rejection_priorities_by_hand():
    assert rejection_priorities([0.0, 0.1, 1.0, 3.7]).tolist() == [0.0, 0.1, 1.0, 1.0]
    scaled = rejection_priorities([0.0, 0.1, 1.0, 3.7], bound=3.7)
    np.testing.assert_allclose(scaled, [0.0, 0.1 / 3.7, 1 / 3.7, 1.0])
    for bad, error in [(-1.0, ValueError), (np.inf, ValueError), (np.nan, ValueError)]:
        with pytest.raises(error, match="rho_tm1"):
            rejection_priorities([1.0, bad])
    for bound, error in [(0.0, ValueError), (-1.0, ValueError), (np.inf, ValueError), ("1", TypeError)]:
        with pytest.raises(error, match="bound"):
            rejection_priorities([1.0], bound=bound)


def test_hybrid_priorities_by_hand():
    assert hybrid_priorities([3.7, 0.1, 0.0], [-2.0, 5.0, 7.0]).tolist() == pytest.approx([7.4, 0.5, 0.0])
    assert hybrid_priorities(2.0, [1.0, -3.0]).tolist() == [2.0, 6.0]
    with pytest.raises(ValueError, match="td_error"):
        hybrid_priorities([1.0], [np.nan])
    with pytest.raises(ValueError, match="rho_tm1"):
        hybrid_priorities([-1.0], [1.0])
    with pytest.raises(ValueError, match="broadcast"):
        hybrid_priorities([1.0, 2.0], [1.0, 2.0, 3.0])


# ------------------------------------------------------------------------------------------------
# correction factors
# ------------------------------------------------------------------------------------------------


def test_weighted_is_mapping_gives_rho_over_max_rho():
    """``α = 0, β = 1`` with corrections ``ρ``: every weight is ``ρ_i / max_j ρ_j`` over the memory,
    in drawn batches as well, whatever slots the batch holds."""
    rho = np.array([3.7, 0.1, 0.1, 1.0, 0.0, 2.5])
    s = CorrectedSampler(8, alpha=0.0, beta=1.0, size=0, seed=3)
    s.add(np.arange(6), corrections=rho)
    np.testing.assert_allclose(s.weights(np.arange(6)), rho / 3.7, rtol=1e-6)
    for _ in range(20):
        d = s.sample(3)
        np.testing.assert_allclose(d.weights, rho[d.indices] / 3.7, rtol=1e-6)
        np.testing.assert_allclose(d.probabilities, 1 / 6)
    s.set_corrections([0], [0.5])  # the maximum moves to slot 5
    moved = np.where(np.arange(6) == 0, 0.5, rho) / 2.5
    np.testing.assert_allclose(s.weights(np.arange(6)), moved, rtol=1e-6)


@pytest.mark.parametrize("backend", ["proportional", "rank", "uniform"])
@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_corrected_memory_normalisation_by_hand(backend, beta):
    """``w_i = c_i (N·P(i))^-β / max_j c_j (N·P(j))^-β``: the maximum is taken jointly, not as
    ``max c · (N·P_min)^-β`` (here the slot of smallest ``P`` has the smallest ``c``)."""
    s = CorrectedSampler(5, alpha=1.0, beta=beta, eps=0.0, backend=backend, seed=0)
    s.update_priorities(np.arange(5), [4.0, 1.0, 2.0, 0.5, 3.0])
    c = np.array([2.0, 1.0, 0.25, 0.1, 3.0])
    s.set_corrections(np.arange(5), c)
    p = s.probabilities(np.arange(5))
    if backend == "proportional":
        np.testing.assert_allclose(p, np.array([4.0, 1.0, 2.0, 0.5, 3.0]) / 10.5)
    raw = c * (5 * p) ** -beta
    np.testing.assert_allclose(s.weights(np.arange(5)), raw / raw.max(), rtol=1e-6)
    np.testing.assert_allclose(s.weights([1, 3]), raw[[1, 3]] / raw.max(), rtol=1e-6)
    batch = CorrectedSampler(5, alpha=1.0, beta=beta, eps=0.0, backend=backend, weight_norm="batch", seed=0)
    none = CorrectedSampler(5, alpha=1.0, beta=beta, eps=0.0, backend=backend, weight_norm="none", seed=0)
    for other in (batch, none):
        other.update_priorities(np.arange(5), [4.0, 1.0, 2.0, 0.5, 3.0])
        other.set_corrections(np.arange(5), c)
    np.testing.assert_allclose(batch.weights([1, 3]), raw[[1, 3]] / raw[[1, 3]].max(), rtol=1e-6)
    np.testing.assert_allclose(none.weights(np.arange(5)), raw, rtol=1e-6)


def test_memory_maximum_follows_beta_and_writes():
    """The cached memory maximum is refreshed when β moves (schedule) and after every write."""
    s = CorrectedSampler(4, alpha=1.0, beta=LinearSchedule(0.0, 1.0, 4), eps=0.0, seed=0)
    s.update_priorities(np.arange(4), [1.0, 2.0, 3.0, 4.0])
    c = np.array([1.0, 3.0, 1.0, 1.0])
    s.set_corrections(np.arange(4), c)
    for _ in range(6):
        beta = s.beta
        p = np.arange(1, 5) / 10
        raw = c * (4 * p) ** -beta
        np.testing.assert_allclose(s.weights(np.arange(4)), raw / raw.max(), rtol=1e-6)
        d = s.sample(2)
        np.testing.assert_allclose(d.weights, raw[d.indices] / raw.max(), rtol=1e-6)
    s.update_priorities([1], [0.5])
    p = np.array([1.0, 0.5, 3.0, 4.0]) / 8.5
    raw = c * (4 * p) ** -1.0
    np.testing.assert_allclose(s.weights(np.arange(4)), raw / raw.max(), rtol=1e-6)


def test_greedy_weights_are_normalised_corrections():
    s = CorrectedSampler(3, backend="greedy", seed=0)
    s.update_priorities([0, 1, 2], [5.0, 1.0, 3.0])
    s.set_corrections([0, 1, 2], [0.5, 2.0, 1.0])
    d = s.sample(2)
    assert d.indices.tolist() == [0, 2]
    np.testing.assert_allclose(d.weights, [0.25, 0.5])


def test_corrections_follow_slot_lifecycle():
    """``add`` writes new factors (1 by default), ``remove`` drops them; ``corrections`` shows
    NaN for empty slots and 1 for slots never given a factor."""
    s = CorrectedSampler(4, alpha=0.0, beta=1.0, size=2, seed=0)
    np.testing.assert_array_equal(s.corrections, [1.0, 1.0, np.nan, np.nan])
    s.add([2], corrections=[4.0])
    np.testing.assert_array_equal(s.corrections, [1.0, 1.0, 4.0, np.nan])
    np.testing.assert_allclose(s.weights([0, 2]), [0.25, 1.0])
    s.add([2])  # rewritten: a new transition, factor back to 1
    np.testing.assert_array_equal(s.corrections, [1.0, 1.0, 1.0, np.nan])
    s.set_corrections([1], [2.0])
    s.remove([1])
    np.testing.assert_array_equal(s.corrections, [1.0, np.nan, 1.0, np.nan])
    np.testing.assert_allclose(s.weights([0, 2]), [1.0, 1.0])
    s.set_corrections([0, 2], [0.0, 0.0])
    np.testing.assert_array_equal(s.sample(3).weights, 0.0)  # every factor 0: weights 0, never NaN


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_corrections_change_nothing(backend):
    s = CorrectedSampler(5, backend=backend, size=3, seed=0)
    s.set_corrections([0], [2.0])
    before = s.state_dict()
    for call, error, name in [
        (lambda: s.set_corrections([0, 1], [1.0, -1.0]), ValueError, "corrections"),
        (lambda: s.set_corrections([0], [np.nan]), ValueError, "corrections"),
        (lambda: s.set_corrections([0], [np.inf]), ValueError, "corrections"),
        (lambda: s.set_corrections([0, 1], [1.0]), ValueError, "corrections"),
        (lambda: s.set_corrections([4], [1.0]), ValueError, "indices"),
        (lambda: s.set_corrections([0], ["x"]), TypeError, "corrections"),
        (lambda: s.add([3, 4], corrections=[1.0, -2.0]), ValueError, "corrections"),
        (lambda: s.add([3, 9], corrections=[1.0, 2.0]), ValueError, "indices"),
    ]:
        with pytest.raises(error, match=name):
            call()
        assert_same(s.state_dict(), before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_corrections_round_trip_exactly(backend):
    s = CorrectedSampler(9, alpha=0.7, beta=LinearSchedule(0.4, 1.0, 20), backend=backend, size=0, seed=5)
    s.add(np.arange(7), corrections=np.linspace(0.0, 3.0, 7))
    s.update_priorities(np.arange(7), np.arange(7) % 3 + 0.5)
    s.sample(4)
    state = copy.deepcopy(s.state_dict())
    assert state["version"] == 3
    other = CorrectedSampler(9, backend=backend, seed=99)
    other.load_state_dict(state)
    assert_same(other.state_dict(), s.state_dict())
    for _ in range(5):
        assert_draws_equal(s.sample(5), other.sample(5))
    bad = copy.deepcopy(state)
    bad["corrections"][0] = -1.0
    before = other.state_dict()
    with pytest.raises(ValueError, match="corrections"):
        other.load_state_dict(bad)
    bad["corrections"] = np.ones(9)  # factors on empty slots
    with pytest.raises(ValueError, match="corrections"):
        other.load_state_dict(bad)
    assert_same(other.state_dict(), before)


def test_version_1_states_still_load():
    """A checkpoint written before correction factors existed loads, without corrections."""
    s = CorrectedSampler(6, alpha=0.5, seed=0)
    s.update_priorities([0, 1], [3.0, 0.2])
    old = s.state_dict()
    old["version"] = 1
    del old["corrections"]
    other = CorrectedSampler(6, seed=1)
    other.set_corrections([0], [5.0])
    other.load_state_dict(old)
    np.testing.assert_array_equal(other.corrections, np.ones(6))
    assert_draws_equal(s.sample(4), other.sample(4))


# ------------------------------------------------------------------------------------------------
# ε = 0: zero priorities are never drawn (rejection sampling)
# ------------------------------------------------------------------------------------------------


def test_zero_priority_is_never_drawn_with_eps_zero():
    """``p = min(1, ρ)``, ``α = 1``, ``β = 0``, ``ε = 0``: draw frequencies are ``p / Σp`` and the
    slots with ``p = 0`` never come up."""
    p = np.array([0.0, 0.1, 1.0, 0.0, 0.4, 1.0, 0.0, 0.1])
    s = PrioritizedSampler(8, alpha=1.0, beta=0.0, eps=0.0, seed=1)
    s.update_priorities(np.arange(8), p)
    counts = draw_counts(s, calls=400, k=32)
    assert counts[p == 0.0].sum() == 0
    assert_frequencies(counts, p / p.sum())
    np.testing.assert_allclose(s.probabilities(np.arange(8)), p / p.sum())
    weights = s.weights(np.arange(8))
    assert np.all(np.isfinite(weights))
    np.testing.assert_array_equal(weights, np.where(p > 0, 1.0, 0.0))


@pytest.mark.parametrize("norm", ["memory", "batch", "none"])
def test_eps_zero_weights_stay_finite(norm):
    """With ``β > 0`` the memory normaliser is the smallest *positive* probability (0.1 / 1.6 here);
    zero-probability slots weigh 0, never ``inf`` or ``NaN``."""
    s = PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0, weight_norm=norm, seed=0)
    s.update_priorities(np.arange(4), [0.0, 0.1, 0.5, 1.0])
    w = s.weights(np.arange(4)).astype(np.float64)
    assert np.all(np.isfinite(w)) and w[0] == 0.0
    raw = np.array([0.0, 1 / (4 * 0.1 / 1.6), 1 / (4 * 0.5 / 1.6), 1 / (4 * 1.0 / 1.6)])
    expected = raw if norm == "none" else raw / raw[1]
    np.testing.assert_allclose(w, expected, rtol=1e-6)
    d = s.sample(16)
    assert 0 not in d.indices and np.all(np.isfinite(d.weights))


def test_all_zero_priorities_cannot_be_drawn():
    s = PrioritizedSampler(3, alpha=1.0, eps=0.0, seed=0)
    s.update_priorities([0, 1, 2], [0.0, 0.0, 0.0])
    before = s.state_dict()
    with pytest.raises(ValueError, match="probability 0"):
        s.sample(2)
    assert_same(s.state_dict(), before)
    np.testing.assert_array_equal(s.probabilities([0, 1, 2]), 0.0)
    np.testing.assert_array_equal(s.weights([0, 1, 2]), 0.0)
    s.alpha = 0.0  # 0^0 = 1: uniform again
    np.testing.assert_allclose(s.probabilities([0, 1, 2]), 1 / 3)
    assert s.sample(3).indices.tolist() == [0, 1, 2]


def test_eps_zero_alpha_change_rejects_underflow():
    s = PrioritizedSampler(2, alpha=1.0, eps=0.0, seed=0)
    s.update_priorities([0, 1], [1e-200, 0.0])
    with pytest.raises(ValueError, match="alpha"):
        s.alpha = 2.0  # (1e-200)^2 underflows: that slot would silently vanish
    assert s.alpha == 1.0
    squared = PrioritizedSampler(1, alpha=2.0, eps=0.0, seed=0)
    with pytest.raises(ValueError, match="priorities"):
        squared.update_priorities([0], [1e-200])
    assert squared.priorities.tolist() == [1.0]


@pytest.mark.parametrize("backend", ["proportional", "rank"])
@pytest.mark.parametrize("layout", ["random", "anti"])
def test_memory_maximum_matches_brute_force_on_large_memories(backend, layout):
    """Thousands of slots (rank: many slots per power-law segment, so the segment scan's early
    stop is exercised): the weights equal ``c_i (N·P(i))^-β / max_j c_j (N·P(j))^-β`` computed over
    every slot.  'anti' puts the largest factors on the most probable slots, the case where the
    scan must go far and the joint maximum differs most from ``max c · (N·P_min)^-β``."""
    n = 3000
    rng = np.random.default_rng(7)
    priorities = rng.exponential(size=n)
    order = np.argsort(np.argsort(priorities))
    c = rng.uniform(0.0, 4.0, size=n) if layout == "random" else 0.01 + order / n
    s = CorrectedSampler(n, alpha=0.7, beta=LinearSchedule(0.3, 1.0, 3), backend=backend, seed=0)
    s.update_priorities(np.arange(n), priorities)
    s.set_corrections(np.arange(n), c)
    for _ in range(4):
        p = s.probabilities(np.arange(n))
        raw = c * (n * p) ** -s.beta
        np.testing.assert_allclose(s.weights(np.arange(n)), raw / raw.max(), rtol=1e-5)
        d = s.sample(32)
        np.testing.assert_allclose(d.weights, raw[d.indices] / raw.max(), rtol=1e-5)
        s.update_priorities(d.indices, rng.exponential(size=32))
        priorities[d.indices] = s.priorities[d.indices]


@pytest.mark.parametrize("corrected", [False, True])
def test_subnormal_priority_with_eps_zero_counts_as_probability_zero(corrected):
    """A subnormal priority with ``ε = 0`` has mass > 0 but ``P(i) = m_i / Σ m`` underflows to 0:
    it weighs 0 and does not set the memory-wide scale (which would crush every other weight)."""
    s = (CorrectedSampler if corrected else PrioritizedSampler)(3, alpha=1.0, beta=0.4, eps=0.0, seed=0)
    s.update_priorities([0, 1, 2], [5e-324, 17.8, 2.0])
    if isinstance(s, CorrectedSampler):
        s.set_corrections([0, 1, 2], [3.0, 1.0, 1.0])
    p = s.probabilities([0, 1, 2])
    assert p[0] == 0.0
    raw = np.array([0.0, (3 * p[1]) ** -0.4, (3 * p[2]) ** -0.4])
    np.testing.assert_allclose(s.weights([0, 1, 2]), raw / raw.max(), rtol=1e-6)
