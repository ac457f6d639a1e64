"""``DevicePriorityTree`` (CPU tensors) against a naive numpy reference: every node recomputed from
scratch after random write sequences (duplicates, NaN removals), the prefix-sum search at exact
boundaries, zero-mass slots never found, and incremental writes bit-identical to a rebuild."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from prisample.device_tree import BRANCH, DevicePriorityTree
from prisample.trees import PriorityTree

CAPACITIES = st.sampled_from([1, 2, 7, 8, 9, 15, 63, 64, 65, 100, 513])
# Small integers: every sum is exact in float64, so prefix-sum boundaries can be tested exactly.
VALUES = st.sampled_from([math.nan, 0.0, 1.0, 2.0, 3.0, 7.0])


def writes(capacity: int) -> st.SearchStrategy[list[list[tuple[int, float]]]]:
    slot = st.integers(0, capacity - 1)
    batch = st.lists(st.tuples(slot, VALUES), min_size=1, max_size=12)
    return st.lists(batch, min_size=1, max_size=8)


def apply(tree: DevicePriorityTree, batches: list[list[tuple[int, float]]], raw: np.ndarray) -> None:
    """The same batches on the tree and, one entry at a time in order, on the numpy ``raw``."""
    for batch in batches:
        slots = np.array([s for s, _ in batch], dtype=np.int64)
        values = np.array([v for _, v in batch], dtype=np.float64)
        tree.write(torch.from_numpy(slots), torch.from_numpy(values))
        for s, v in batch:
            raw[s] = v


def naive_levels(raw: np.ndarray, alpha: float, eps: float, uniform: bool) -> list[np.ndarray]:
    """Every level of every reduction, from scratch: [sums..., maxs..., mins...] per level."""
    capacity = raw.shape[0]
    padded = np.full(-(-capacity // BRANCH) * BRANCH, np.nan)
    padded[:capacity] = raw
    with np.errstate(invalid="ignore"):
        masses = np.where(np.isnan(padded), 0.0, 1.0 if uniform else (padded + eps) ** alpha)
    sums, maxs, mins = (
        [masses],
        [np.where(np.isnan(padded), -np.inf, padded)],
        [np.where(masses > 0, masses, np.inf)],
    )
    while sums[-1].shape[0] > BRANCH:
        n = -(-(sums[-1].shape[0] // BRANCH) // BRANCH) * BRANCH
        for levels, reduce, fill in ((sums, np.sum, 0.0), (maxs, np.max, -np.inf), (mins, np.min, np.inf)):
            level = np.full(n, fill)
            children = levels[-1].reshape(-1, BRANCH)
            level[: children.shape[0]] = reduce(children, axis=1)
            levels.append(level)
    return [sums, maxs, mins]  # type: ignore[list-item]


def tree_levels(tree: DevicePriorityTree) -> list[list[np.ndarray]]:
    leaves_max = np.where(np.isnan(tree.raw.numpy()), -np.inf, tree.raw.numpy())
    leaves_min = np.where(tree.masses.numpy() > 0, tree.masses.numpy(), np.inf)
    return [
        [s.numpy() for s in tree.sums],
        [leaves_max] + [m.numpy() for m in tree.maxs[1:]],
        [leaves_min] + [m.numpy() for m in tree.mins[1:]],
    ]


def naive_find(masses: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Slot ``i`` with ``Σ_{j<i} m_j <= t < Σ_{j<=i} m_j``; the last slot with mass for ``t >= total``."""
    cumulative = np.cumsum(masses)
    last = int(np.flatnonzero(masses > 0)[-1])
    found = np.searchsorted(cumulative, targets, side="right")
    return np.where(targets >= cumulative[-1], last, np.minimum(found, last))


@settings(max_examples=60)
@given(data=st.data(), capacity=CAPACITIES, uniform=st.booleans())
def test_every_node_equals_a_recompute_from_scratch(
    data: st.DataObject, capacity: int, uniform: bool
) -> None:
    """Exact integer masses (α = 1, ε = 0): every node of the three reductions, the roots and the
    count equal a from-scratch numpy recompute of the sequentially applied writes."""
    tree = DevicePriorityTree(capacity, alpha=1.0, eps=0.0, uniform=uniform)
    raw = np.full(capacity, np.nan)
    apply(tree, data.draw(writes(capacity)), raw)
    np.testing.assert_array_equal(tree.raw[:capacity].numpy(), raw)
    for got, want in zip(tree_levels(tree), naive_levels(raw, 1.0, 0.0, uniform), strict=True):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    masses = np.where(np.isnan(raw), 0.0, 1.0 if uniform else raw)
    assert float(tree.total) == masses.sum()
    assert int(tree.count) == int(np.count_nonzero(~np.isnan(raw)))
    filled = raw[~np.isnan(raw)]
    assert float(tree.max_raw) == (filled.max() if filled.shape[0] else -math.inf)
    positive = masses[masses > 0]
    assert float(tree.min_mass) == (positive.min() if positive.shape[0] else math.inf)


@pytest.mark.parametrize("capacity", [1, 9, 100, 4097])
@pytest.mark.parametrize(("alpha", "eps"), [(0.6, 1e-6), (0.5, 0.0)])
def test_float_masses_match_the_host_tree_and_a_rebuild(capacity: int, alpha: float, eps: float) -> None:
    """Random float priorities, duplicates and removals: raw priorities exact, every node bit-equal
    to a rebuild from the same raw priorities, the total equal to the host tree's and to an exact
    sum to rounding, and max/min roots equal to the naive ones."""
    rng = np.random.default_rng(capacity)
    tree = DevicePriorityTree(capacity, alpha=alpha, eps=eps)
    raw = np.full(capacity, np.nan)
    for _ in range(40):
        k = int(rng.integers(1, 40))
        slots = rng.integers(0, capacity, k)
        values = rng.random(k) * 10.0
        values[rng.random(k) < 0.2] = np.nan
        values[rng.random(k) < 0.1] = 0.0
        tree.write(torch.from_numpy(slots), torch.from_numpy(values))
        for s, v in zip(slots, values, strict=True):
            raw[s] = v
    np.testing.assert_array_equal(tree.raw[:capacity].numpy(), raw)
    rebuilt = DevicePriorityTree(capacity, alpha=alpha, eps=eps)
    rebuilt.load(torch.from_numpy(raw))
    for name in ("sums", "maxs", "mins"):
        for got, want in zip(getattr(tree, name), getattr(rebuilt, name), strict=True):
            assert torch.equal(got, want) or torch.allclose(got, want, rtol=0, atol=0, equal_nan=True), name
    assert torch.equal(tree.total, rebuilt.total) and torch.equal(tree.count, rebuilt.count)
    with np.errstate(invalid="ignore"):
        masses = np.where(np.isnan(raw), 0.0, (raw + eps) ** alpha)
    assert float(tree.total) == pytest.approx(math.fsum(masses), rel=1e-12)
    assert float(tree.total) == pytest.approx(PriorityTree(raw.copy(), alpha, eps).total(), rel=1e-12)
    filled = raw[~np.isnan(raw)]
    assert float(tree.max_raw) == (filled.max() if filled.shape[0] else -math.inf)
    positive = masses[masses > 0]
    assert float(tree.min_mass) == pytest.approx(positive.min() if positive.shape[0] else math.inf, rel=1e-12)


@settings(max_examples=60)
@given(data=st.data(), capacity=CAPACITIES)
def test_find_matches_naive_prefix_search_at_exact_boundaries(data: st.DataObject, capacity: int) -> None:
    """Targets at every prefix sum, between them and at the total: the naive slot, never an empty
    or zero-mass one (``ε = 0``)."""
    tree = DevicePriorityTree(capacity, alpha=1.0, eps=0.0)
    raw = np.full(capacity, np.nan)
    apply(tree, data.draw(writes(capacity)), raw)
    masses = np.where(np.isnan(raw), 0.0, raw)
    if not masses.sum() > 0:
        return
    cumulative = np.cumsum(masses)
    targets = np.unique(np.concatenate(([0.0], cumulative, cumulative - 0.5, [cumulative[-1]])))
    targets = targets[targets >= 0]
    found = tree.find(torch.from_numpy(targets)).numpy()
    np.testing.assert_array_equal(found, naive_find(masses, targets))
    assert np.all(masses[found] > 0)


def test_zero_mass_slots_are_never_found_past_rounding() -> None:
    """``ε = 0``: slots of priority 0 between positive ones, targets at and just below the total and
    at every float64 neighbour of the prefix sums: every slot found has positive mass."""
    capacity = 4096
    rng = np.random.default_rng(3)
    raw = rng.random(capacity) * 1e-3
    raw[rng.random(capacity) < 0.7] = 0.0
    raw[-100:] = 0.0  # the tail of the tree holds zeros only
    raw[rng.random(capacity) < 0.1] = np.nan
    tree = DevicePriorityTree(capacity, alpha=0.5, eps=0.0)
    tree.load(torch.from_numpy(raw))
    total = float(tree.total)
    cumulative = np.cumsum(np.where(np.isnan(raw), 0.0, np.sqrt(np.nan_to_num(raw))))
    targets = np.concatenate(
        (
            [0.0, total, np.nextafter(total, 0.0), total * (1 - 1e-16)],
            cumulative,
            np.nextafter(cumulative, np.inf),
            np.nextafter(cumulative, 0.0),
            rng.random(10_000) * total,
        )
    )
    found = tree.find(torch.from_numpy(targets)).numpy()
    assert np.all(tree.masses.numpy()[found] > 0.0)
    slots, probabilities = tree.stratified(torch.from_numpy(np.nextafter(np.ones(64), 0.0)))
    assert np.all(raw[slots.numpy()] > 0.0) and np.all(probabilities.numpy() > 0.0)


def test_duplicates_in_one_write_keep_the_last_whatever_the_order() -> None:
    tree = DevicePriorityTree(20, alpha=1.0, eps=0.0)
    tree.write(
        torch.tensor([3, 5, 3, 3, 5, 7]),
        torch.tensor([1.0, 2.0, 4.0, 6.0, math.nan, 0.5], dtype=torch.float64),
    )
    raw = tree.raw[:20].numpy()
    assert raw[3] == 6.0 and math.isnan(raw[5]) and raw[7] == 0.5
    assert int(tree.count) == 2 and float(tree.total) == 6.5
    tree.write(torch.tensor([7, 7, 3]), torch.tensor([math.nan, 2.0, math.nan], dtype=torch.float64))
    assert int(tree.count) == 1 and float(tree.total) == 2.0 and float(tree.max_raw) == 2.0


@pytest.mark.parametrize("reverse", [False, True])
def test_a_write_does_not_depend_on_the_order_duplicate_scatters_land(
    reverse: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CUDA scatter with duplicate indices lands in no set order; the CPU one in index order.
    Played in reverse here, a write must still keep each slot's last entry."""
    if reverse:
        original = torch.Tensor.index_put_

        def reversed_put(
            self: torch.Tensor, indices: tuple[torch.Tensor, ...], values: torch.Tensor
        ) -> torch.Tensor:
            flipped = tuple(i.flip(0) for i in indices)
            return original(self, flipped, values.flip(0) if values.dim() else values)

        monkeypatch.setattr(torch.Tensor, "index_put_", reversed_put)
    rng = np.random.default_rng(5)
    tree = DevicePriorityTree(100, alpha=1.0, eps=0.0)
    raw = np.full(100, np.nan)
    for _ in range(20):
        slots = rng.integers(0, 20, 30)  # many duplicates
        values = rng.integers(0, 5, 30).astype(np.float64)
        values[rng.random(30) < 0.3] = np.nan
        apply(tree, [list(zip(slots.tolist(), values.tolist(), strict=True))], raw)
    np.testing.assert_array_equal(tree.raw[:100].numpy(), raw)
    assert float(tree.total) == np.nansum(raw) and int(tree.count) == int(np.count_nonzero(~np.isnan(raw)))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), capacity=CAPACITIES)
def test_a_masked_write_is_the_write_of_its_kept_entries(data: st.DataObject, capacity: int) -> None:
    """Regression: a write's entries masked out by ``keep`` (a stale priority update) changed
    their slot: the last entry of a slot won even when masked, so a stale duplicate after a fresh
    one undid it.  Now the masked entries change nothing and a slot keeps its last kept entry."""
    tree = DevicePriorityTree(capacity, alpha=0.5, eps=0.01)
    raw = np.full(capacity, np.nan)
    apply(tree, data.draw(writes(capacity)), raw)
    for batch in data.draw(writes(capacity)):
        slots = np.array([s for s, _ in batch], dtype=np.int64)
        values = np.array([v for _, v in batch], dtype=np.float64)
        keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(batch), max_size=len(batch))))
        tree.write(torch.from_numpy(slots), torch.from_numpy(values), torch.from_numpy(keep))
        for s, v in zip(slots[keep], values[keep], strict=True):
            raw[s] = v
    np.testing.assert_array_equal(tree.raw[:capacity].numpy(), raw)
    assert int(tree.count) == int(np.count_nonzero(~np.isnan(raw)))
    rebuilt = DevicePriorityTree(capacity, alpha=0.5, eps=0.01)
    rebuilt.load(torch.from_numpy(raw))
    for a, b in zip(tree.state_tensors(), rebuilt.state_tensors(), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@settings(max_examples=60, deadline=None)
@given(data=st.data(), capacity=CAPACITIES)
def test_max_without_is_the_maximum_once_the_slots_are_emptied(data: st.DataObject, capacity: int) -> None:
    """What a full memory's add needs to evict and enter in one write: the largest raw priority
    outside some slots (duplicates allowed), read without writing them."""
    tree = DevicePriorityTree(capacity, alpha=1.0, eps=0.0)
    raw = np.full(capacity, np.nan)
    apply(tree, data.draw(writes(capacity)), raw)
    slots = np.array(data.draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=6)))
    before = [t.clone() for t in tree.state_tensors()]
    got = float(tree.max_without(torch.from_numpy(slots)))
    rest = raw.copy()
    rest[slots] = np.nan
    assert got == (np.nanmax(rest) if (~np.isnan(rest)).any() else -math.inf)
    for a, b in zip(tree.state_tensors(), before, strict=True):  # nothing written
        np.testing.assert_array_equal(a.numpy(), b.numpy())
