"""Segment trees against naive numpy: any capacity, empty (NaN) and zero-mass slots never found."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prisample.trees import ArgMaxTree, PriorityTree, padded_size, top_k

CAPACITIES = st.sampled_from([1, 2, 3, 5, 7, 8, 9, 15, 63, 64, 65, 100, 513])
# Small integers: every sum is exact in float64, so prefix-sum boundaries can be tested exactly.
VALUES = st.sampled_from([math.nan, 0.0, 1.0, 2.0, 3.0, 7.0])


def naive_find(masses: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Slot ``i`` with ``Σ_{j<i} m_j <= t < Σ_{j<=i} m_j``; the last slot with mass for ``t >= total``."""
    cumulative = np.cumsum(masses)
    last = int(np.flatnonzero(masses > 0)[-1])
    found = np.searchsorted(cumulative, targets, side="right")
    return np.where(targets >= cumulative[-1], last, np.minimum(found, last))


def writes(capacity: int):
    slot = st.integers(0, capacity - 1)
    batch = st.lists(st.tuples(slot, VALUES), min_size=1, max_size=12)
    return st.lists(batch, min_size=1, max_size=8)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), capacity=CAPACITIES)
def test_priority_tree_matches_naive(data, capacity):
    """Sums, min/max raw priority and prefix-sum search agree with numpy after random writes
    (NaN empties a slot, duplicates: last write wins), including targets exactly on interval
    boundaries and at or past the total."""
    raw = np.full(capacity, np.nan)
    tree = PriorityTree(raw, alpha=1.0, eps=1.0)  # mass = p + 1; empty slots have mass 0
    expected = np.full(capacity, np.nan)
    for batch in data.draw(writes(capacity)):
        slots = np.array([s for s, _ in batch], dtype=np.int64)
        values = np.array([v for _, v in batch])
        before = np.count_nonzero(~np.isnan(expected))
        for s, v in batch:
            expected[s] = v
        code, change = tree.write(slots, values)
        assert code == 0
        assert change == np.count_nonzero(~np.isnan(expected)) - before
        np.testing.assert_array_equal(raw, expected)
        masses = np.nan_to_num(expected + 1.0, nan=0.0)
        assert tree.total() == masses.sum()
        held = expected[~np.isnan(expected)]
        if held.size:
            assert tree.min_raw() == held.min() and tree.max_raw() == held.max()
        if masses.sum() > 0:
            total = masses.sum()
            targets = np.concatenate((np.arange(0.0, total, 0.5), [total, np.nextafter(total, np.inf)]))
            slots_found, found_masses = tree.find(targets)
            np.testing.assert_array_equal(slots_found, naive_find(masses, targets))
            np.testing.assert_array_equal(found_masses, masses[slots_found])
            assert np.all(masses[slots_found] > 0), "a zero-mass or empty slot was found"


@pytest.mark.parametrize("capacity", [3, 6, 100, 1000])
def test_priority_tree_rebuild_and_alpha(capacity):
    rng = np.random.default_rng(capacity)
    raw = rng.random(capacity) * 4
    raw[rng.random(capacity) < 0.3] = np.nan
    tree = PriorityTree(raw, alpha=0.5, eps=1e-3)
    masses = np.where(np.isnan(raw), 0.0, (raw + 1e-3) ** 0.5)
    assert tree.total() == pytest.approx(math.fsum(masses), rel=1e-12)
    tree.rebuild(alpha=2.0)
    masses = np.where(np.isnan(raw), 0.0, (raw + 1e-3) ** 2.0)
    assert tree.total() == pytest.approx(math.fsum(masses), rel=1e-12)
    u = rng.random(64)
    slots, probabilities = tree.sample(u.copy())
    assert np.all(np.diff(slots) >= 0), "stratified draws come in slot order"
    np.testing.assert_allclose(probabilities, masses[slots] / math.fsum(masses), rtol=1e-12)
    cumulative = np.cumsum(masses) / masses.sum()
    j = np.arange(64)
    assert np.all(cumulative[slots] >= j / 64 - 1e-12)
    assert np.all(cumulative[slots] - masses[slots] / masses.sum() <= (j + 1) / 64 + 1e-12)


def test_priority_tree_rejects_overflowing_mass_and_changes_nothing():
    raw = np.array([1.0, 2.0, np.nan])
    tree = PriorityTree(raw, alpha=2.0, eps=1e-6)
    total = tree.total()
    code, _ = tree.write(np.array([0, 1]), np.array([3.0, 1e200]))
    assert code != 0
    np.testing.assert_array_equal(raw, [1.0, 2.0, np.nan])
    assert tree.total() == total


def test_priority_tree_no_zero_mass_found_after_drift():
    """Float drift regression at tree level: after thousands of writes spanning 24 orders of
    magnitude, the total is the exact sum of the current masses (recomputed, not
    delta-propagated) and no target, boundary or top of range, finds an empty or zero slot."""
    rng = np.random.default_rng(0)
    capacity = 1000
    raw = np.full(capacity, np.nan)
    tree = PriorityTree(raw, alpha=1.0, eps=1e-30)
    for _ in range(2000):
        slots = rng.integers(0, capacity, size=16)
        values = 10.0 ** rng.uniform(-12, 12, size=16)
        values[rng.random(16) < 0.15] = 0.0
        values[rng.random(16) < 0.15] = np.nan
        assert tree.write(slots, values)[0] == 0
    masses = np.nan_to_num(raw + 1e-30, nan=0.0)
    assert tree.total() == pytest.approx(math.fsum(masses), rel=1e-12)
    total = tree.total()
    cumulative = np.cumsum(masses)
    targets = np.concatenate(
        (
            rng.random(20_000) * total,
            cumulative,
            np.nextafter(cumulative, 0.0),
            np.nextafter(cumulative, np.inf),
            [0.0, total, np.nextafter(total, 0.0), np.nextafter(total, np.inf)],
        )
    )
    targets = np.clip(targets, 0.0, None)
    slots, found = tree.find(targets)
    assert np.all(masses[slots] > 0), "found a slot with zero mass or an empty slot"
    assert np.all(found > 0)
    # The top of the range belongs to the last slot holding (non-negligible) mass, even with
    # empty slots and padding after it.
    tree.write(np.arange(994, 1000), np.array([1e10, np.nan, 0.0, np.nan, np.nan, np.nan]))
    tree.write(np.array([996]), np.array([np.nan]))
    total = tree.total()
    top = np.array([total, np.nextafter(total, 0.0), np.nextafter(total, np.inf), total * (1 - 1e-12)])
    np.testing.assert_array_equal(tree.find(top)[0], 994)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), capacity=CAPACITIES)
def test_argmax_tree_and_top_k_match_naive(data, capacity):
    """Arg-max with ties to the lowest slot, NaN ignored; ``top_k`` in descending order."""
    values = np.full(capacity, np.nan)
    tree = ArgMaxTree(values)
    expected = np.full(capacity, np.nan)
    assert tree.argmax() == -1
    for batch in data.draw(writes(capacity)):
        slots = np.array([s for s, _ in batch], dtype=np.int64)
        new = np.array([v for _, v in batch])
        before = np.count_nonzero(~np.isnan(expected))
        for s, v in batch:
            expected[s] = v
        assert tree.write(slots, new) == np.count_nonzero(~np.isnan(expected)) - before
        np.testing.assert_array_equal(values, expected)
        held = np.flatnonzero(~np.isnan(expected))
        order = held[np.lexsort((held, -expected[held]))].tolist()
        assert tree.argmax() == (order[0] if order else -1)
        k = data.draw(st.integers(1, capacity + 2))
        assert top_k(tree, k).tolist() == order[:k]
        np.testing.assert_array_equal(values, expected)  # top_k restores what it took out
        assert tree.argmax() == (order[0] if order else -1)


@pytest.mark.parametrize("capacity", [2, 3, 5, 8, 9, 1000, 1024, 1025])
def test_padded_size_is_the_next_power_of_two(capacity):
    size = padded_size(capacity)
    assert size >= capacity and size & (size - 1) == 0 and size < 2 * capacity
