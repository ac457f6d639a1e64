"""One regression test per bug known from other prioritized-replay implementations.

Each docstring names the bug it guards against.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from prisample import PrioritizedSampler
from tests.reference import BACKENDS, ReferenceSampler, assert_frequencies, draw_counts


class _TopOfRange:
    """Stand-in RNG whose uniforms sit at the very top of ``[0, 1)`` (or exactly 1)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self, size=None):
        return np.full(size, self.value)


# ------------------------------------------------------------------------------------------------
# (a) float drift
# ------------------------------------------------------------------------------------------------


def test_a_no_empty_or_zero_mass_slot_drawn_after_float_drift():
    """Bug: float32 sum trees with delta propagation (several libraries) drift after many updates
    of very different magnitude, so the stored total exceeds the true sum and a draw near the top
    lands on a slot of zero mass or one never added.  Drive many wild updates, empty some slots,
    then draw a lot: only non-empty slots may come back, and the probabilities stay exact."""
    rng = np.random.default_rng(0)
    capacity = 1000
    s = PrioritizedSampler(capacity, alpha=1.0, eps=1e-9, size=0, seed=0)
    model = ReferenceSampler(capacity, alpha=1.0, eps=1e-9, size=0)
    s.add(np.arange(900))  # slots 900..999 never added
    model.add(range(900))
    for _ in range(300):
        slots = rng.choice(900, size=50, replace=False)
        values = 10.0 ** rng.uniform(-9, 12, size=50)
        values[rng.random(50) < 0.2] = 0.0
        s.update_priorities(slots, values)
        model.update_priorities(slots.tolist(), values.tolist())
    removed = rng.choice(900, size=150, replace=False)
    s.remove(removed)
    model.remove(removed.tolist())
    valid = np.array(model.valid)
    # leave one giant and make the slots around the removed ones tiny: worst case for rounding
    s.update_priorities(valid[:1], [1e12])
    model.update_priorities(valid[:1].tolist(), [1e12])
    np.testing.assert_allclose(s.probabilities(valid), model.probabilities(valid), rtol=1e-9, atol=1e-300)
    allowed = np.zeros(capacity, dtype=bool)
    allowed[valid] = True
    for k in (1, 7, 64, 4096):
        for _ in range(200 if k < 4096 else 20):
            drawn = s.sample(k).indices
            assert allowed[drawn].all(), f"drew empty slots {sorted(set(drawn[~allowed[drawn]].tolist()))}"


def test_a_no_drift_after_huge_value_is_written_and_reset():
    """Bug: delta-propagated trees keep a residue of ``1e15`` after an update ``x → 1e15 → x``,
    swamping small priorities (their probability drifts or collapses).  Parents must be
    recomputed, so the distribution returns exactly to uniform."""
    s = PrioritizedSampler(10, alpha=1.0, eps=1e-9, seed=0)
    s.update_priorities(np.arange(10), np.full(10, 1e-3))
    for j in range(500):
        s.update_priorities([j % 10], [1e15 + j])
        s.update_priorities([j % 10], [1e-3])
    np.testing.assert_allclose(s.probabilities(np.arange(10)), 0.1, rtol=1e-9)
    assert_frequencies(draw_counts(s, 2_000, 10), np.full(10, 0.1))


# ------------------------------------------------------------------------------------------------
# (b) newest slot / padding
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("u", [np.nextafter(1.0, 0.0), 1.0])
@pytest.mark.parametrize("capacity", [5, 6, 1000])
def test_b_target_at_top_of_mass_returns_last_valid_slot(capacity, u):
    """Bug: targets at (or by rounding past) the total mass descend into padding leaves beyond
    the capacity or return an index past the newest slot (never-drawn newest item, or an index
    into garbage).  The draw of the top stratum must be the last slot holding mass."""
    s = PrioritizedSampler(capacity, alpha=1.0, eps=1e-9, size=0, seed=0)
    newest = capacity - 2 if capacity > 2 else 0
    s.add(np.arange(newest + 1))
    s.update_priorities(np.arange(newest + 1), 0.1 + np.arange(newest + 1) / 3.0)
    s._rng = _TopOfRange(u)
    for k in (1, 3, 10, 1001):
        drawn = s.sample(k).indices
        assert drawn[-1] == newest
        assert drawn.max() <= newest


@pytest.mark.parametrize("capacity", [3, 5, 6, 7])
def test_b_newest_slot_drawn_at_its_frequency_while_filling(capacity):
    """Bug: the newest (highest-index) slot of a memory being filled is never drawn, or drawn
    at the wrong rate, when it sits next to the tree's padding."""
    s = PrioritizedSampler(capacity, alpha=0.6, size=0, seed=capacity)
    for n in range(1, capacity + 1):
        s.add([n - 1])  # enters at max priority, like every other slot here: P = 1/n
        np.testing.assert_allclose(s.probabilities([n - 1]), 1.0 / n, rtol=1e-12)
        counts = draw_counts(s, 6_000, 1)
        expected = np.zeros(capacity)
        expected[:n] = 1.0 / n
        assert_frequencies(counts, expected)


def test_b_highest_slot_frequency_in_large_nonpower_of_two_memory():
    """Bug: the highest slot of a non-power-of-two memory is drawn too rarely (its interval is
    cut short by padding or rounding).  Here it carries 1/3 of the mass."""
    capacity = 1000
    s = PrioritizedSampler(capacity, alpha=1.0, eps=1e-12, seed=3)
    priorities = np.ones(capacity)
    priorities[-1] = (capacity - 1) / 2  # P(last) = 499.5 / 1498.5 = 1/3
    s.update_priorities(np.arange(capacity), priorities)
    assert s.probabilities([capacity - 1])[0] == pytest.approx(1 / 3, rel=1e-9)
    draws = 30_000
    counts = draw_counts(s, draws, 1)
    z = (counts[-1] - draws / 3) / math.sqrt(draws * (1 / 3) * (2 / 3))
    assert abs(z) < 5.5


# ------------------------------------------------------------------------------------------------
# (c) non-power-of-two index scramble
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("capacity", [3, 6, 1000])
@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_c_slot_probability_belongs_to_the_slot(capacity, backend):
    """Bug: the unpadded ``2N`` array layout for a capacity that is not a power of two scrambles
    the leaf order, so slot ``i``'s probability (and draws) belong to another slot.  With
    ``p_i = i + 1`` every slot's probability is distinct and must be its own."""
    s = PrioritizedSampler(capacity, alpha=0.7, backend=backend, seed=capacity)
    model = ReferenceSampler(capacity, alpha=0.7, backend=backend)
    priorities = np.arange(1, capacity + 1, dtype=np.float64)
    s.update_priorities(np.arange(capacity), priorities)
    model.update_priorities(range(capacity), priorities.tolist())
    p = s.probabilities(np.arange(capacity))
    if backend == "proportional":
        np.testing.assert_allclose(p, model.probabilities(range(capacity)), rtol=1e-12)
    assert np.all(np.diff(p) >= 0), "a larger priority must not get a smaller probability"
    assert p[-1] > p[0]
    d = s.sample(64)
    np.testing.assert_array_equal(d.probabilities, p[d.indices])
    calls = 200_000 // (64 if capacity > 10 else 8)
    counts = draw_counts(s, calls, 64 if capacity > 10 else 8)
    assert_frequencies(counts, p)


# ------------------------------------------------------------------------------------------------
# (d) double α on new items
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.5, 0.6, 2.0])
def test_d_new_item_gets_raw_max_priority_raised_to_alpha_once(alpha):
    """Bug (TorchRL): the stored max priority was already ``p^α`` and was raised to ``α`` again
    for new items.  A new item's probability must be ``(max_raw + ε)^α / total`` and its stored
    priority the raw maximum."""
    eps = 1e-6
    s = PrioritizedSampler(4, alpha=alpha, eps=eps, size=0, seed=0)
    s.add([0, 1, 2])
    s.update_priorities([0, 1, 2], [4.0, 1.0, 1.0])
    assert s.max_priority == 4.0
    s.add([3])
    assert s.priorities[3] == 4.0
    new = (4.0 + eps) ** alpha
    total = 2 * new + 2 * (1.0 + eps) ** alpha
    assert s.probabilities([3])[0] == pytest.approx(new / total, rel=1e-12)
    s.alpha = 1.0  # α change is exact: no residue of the old exponent
    assert s.probabilities([3])[0] == pytest.approx((4.0 + eps) / (10.0 + 4 * eps), rel=1e-12)


# ------------------------------------------------------------------------------------------------
# (e) stale max priority
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_e_new_items_enter_at_current_memory_max(backend):
    """Bug (pytorch/rl#2210, "Inadequate Default Priority Design"): a historical running max
    keeps an outlier's priority long after it was updated down, so every new item enters far
    too high.  The max must be over the current memory."""
    s = PrioritizedSampler(6, backend=backend, size=0, seed=0)
    s.add([0, 1, 2])
    s.update_priorities([0, 1, 2], [100.0, 0.5, 0.25])
    assert s.max_priority == 100.0
    s.update_priorities([0], [1.0])
    assert s.max_priority == 1.0
    s.add([3])
    assert s.priorities[3] == 1.0
    s.update_priorities([3], [50.0])
    s.remove([3])  # removing the top slot lowers the max too
    assert s.max_priority == 1.0
    s.update_priorities([0], [0.75])
    s.add([4])
    assert s.priorities[4] == 0.75
    s.remove([0, 1, 2, 4])
    assert s.max_priority == 1.0  # empty memory: 1, as at the start
    s.add([5])
    assert s.priorities[5] == 1.0


# ------------------------------------------------------------------------------------------------
# (f) infinite weights from empty slots
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("beta", [0.4, 1.0])
def test_f_memory_weights_finite_with_empty_slots(backend, beta):
    """Bug: normalising by the minimum probability over the whole array, empty slots included
    (probability 0), gives ``max w = inf`` and all weights 0 or NaN.  With ``size < capacity``
    weights are finite and the largest weight over the memory is exactly 1."""
    s = PrioritizedSampler(100, backend=backend, beta=beta, weight_norm="memory", size=0, seed=0)
    s.add(np.arange(7))
    s.update_priorities(np.arange(7), [0.0, 0.1, 1.0, 2.0, 3.0, 0.5, 0.01])
    w = s.weights(np.arange(7))
    assert np.all(np.isfinite(w)) and np.all(w > 0)
    assert w.max() == pytest.approx(1.0, rel=1e-6)
    for _ in range(20):
        d = s.sample(16)
        assert np.all(np.isfinite(d.weights)) and np.all(d.weights > 0) and np.all(d.weights <= 1.0)
    s.remove([0])
    w = s.weights(np.arange(1, 7))
    assert np.all(np.isfinite(w)) and w.max() == pytest.approx(1.0, rel=1e-6)
