"""``SortedOrder`` directly: rank, select and layout against ``np.lexsort`` and a naive sorted list.

The order is priority descending, ties by tie code ``stamp · capacity + slot`` descending (the
newest write first), so the expected ranking of the filled slots is
``np.lexsort((-codes, -keys))``.  Capacities sit around the block size (``ROOM = 64`` pairs:
63 never splits, 64 and 65 split once full, 127 and 129 twice) and at 4097 (blocks over several
groups of positions); every step is followed by :meth:`SortedOrder.check_invariants`.  The
operation sequences include the hot spots that made whole re-layouts: every write at the top
(rising priorities, or equal priorities that rank by recency) or at the bottom (falling
priorities), and a memory drained then refilled in one narrow range of priorities.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from prisample.order import GROUP, ROOM, SortedOrder, stamp_limit

CAPACITIES = (63, 64, 65, 127, 129, 4097)


def expected_ranking(keys: np.ndarray, stamps: np.ndarray) -> np.ndarray:
    """Filled slots in sorted order: key descending, then tie code descending."""
    filled = np.flatnonzero(~np.isnan(keys))
    codes = stamps[filled] * keys.shape[0] + filled
    return filled[np.lexsort((-codes, -keys[filled]))]


def assert_consistent(order: SortedOrder) -> None:
    """Invariants, then select / rank / count against the lexsort of the keys and stamps."""
    order.check_invariants()
    want = expected_ranking(order.keys, order.stamps)
    assert order.count == want.shape[0]
    np.testing.assert_array_equal(order.select(np.arange(want.shape[0], dtype=np.int64)), want)
    np.testing.assert_array_equal(order.rank(want), np.arange(want.shape[0]))


def empty_order(capacity: int) -> SortedOrder:
    return SortedOrder(np.full(capacity, np.nan), np.full(capacity, -1, dtype=np.int64))


class Writer:
    """Writes through ``order.write`` with the next stamps of a counter, as the rank backend does."""

    def __init__(self, order: SortedOrder) -> None:
        self.order = order
        self.stamp = int(order.stamps.max(initial=-1)) + 1

    def __call__(self, slots: np.ndarray, values: np.ndarray) -> None:
        slots = np.asarray(slots, dtype=np.int64)
        stamps = np.arange(self.stamp, self.stamp + slots.shape[0], dtype=np.int64)
        self.stamp += slots.shape[0]
        self.order.write(slots, np.asarray(values, dtype=np.float64), stamps)


# ------------------------------------------------------------------------------------------------
# random operation sequences against np.lexsort
# ------------------------------------------------------------------------------------------------


def _random(rng: np.random.Generator, capacity: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Random slots (duplicates too), priorities with many ties, one in five a removal."""
    k = int(rng.integers(1, 2 * ROOM))
    slots = rng.integers(0, capacity, size=k)
    values = rng.integers(0, 6, size=k) / 2.0 if step % 2 else rng.random(k)
    values[rng.random(k) < 0.2] = np.nan
    return slots, values


def _rising(rng: np.random.Generator, capacity: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Every priority above all earlier ones: every insertion at the top."""
    k = int(rng.integers(1, ROOM))
    return rng.integers(0, capacity, size=k), step + np.sort(rng.random(k))


def _falling(rng: np.random.Generator, capacity: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Every priority below all earlier ones: every insertion at the bottom."""
    k = int(rng.integers(1, ROOM))
    return rng.integers(0, capacity, size=k), -step - np.sort(rng.random(k))


def _tied(rng: np.random.Generator, capacity: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """One priority for all: the newest write ranks first, so every insertion is at the top."""
    k = int(rng.integers(1, ROOM))
    return rng.integers(0, capacity, size=k), np.ones(k)


def _drain_refill(rng: np.random.Generator, capacity: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Fill, remove nine in ten (blocks left nearly empty), refill one narrow priority range."""
    phase = step % 30
    if phase == 0:
        return np.arange(capacity), rng.random(capacity)
    if phase == 1:
        slots = rng.permutation(capacity)[: capacity * 9 // 10]
        return slots, np.full(slots.shape[0], np.nan)
    k = int(rng.integers(1, 2 * ROOM))
    return rng.integers(0, capacity, size=k), 0.5 + 1e-3 * rng.random(k)


PATTERNS: dict[str, Callable[[np.random.Generator, int, int], tuple[np.ndarray, np.ndarray]]] = {
    "random": _random,
    "rising": _rising,
    "falling": _falling,
    "tied": _tied,
    "drain_refill": _drain_refill,
}


@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize("capacity", CAPACITIES)
def test_random_sequences_match_lexsort(capacity: int, pattern: str) -> None:
    """After every write of a random sequence, select and rank agree with ``np.lexsort``."""
    rng = np.random.default_rng(capacity * 31 + len(pattern))
    order = empty_order(capacity)
    write = Writer(order)
    assert_consistent(order)
    steps = 90 if capacity > 1000 else 150
    for step in range(steps):
        write(*PATTERNS[pattern](rng, capacity, step))
        assert_consistent(order)


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_rebuild_after_assignment_matches_lexsort(capacity: int) -> None:
    """``rebuild`` sorts whatever ``keys`` and ``stamps`` hold; writes continue from there."""
    rng = np.random.default_rng(capacity)
    order = empty_order(capacity)
    for fill in (0.0, 0.3, 1.0):
        filled = rng.random(capacity) < fill
        order.keys[:] = np.where(filled, rng.integers(0, 4, capacity) / 4.0, np.nan)
        order.stamps[:] = np.where(filled, rng.permutation(capacity), -1)
        order.rebuild()
        assert_consistent(order)
        write = Writer(order)
        for step in range(20):
            write(*_random(rng, capacity, step))
            assert_consistent(order)


def test_capacity_one_and_empty() -> None:
    order = empty_order(1)
    assert_consistent(order)
    Writer(order)(np.array([0, 0]), np.array([2.0, np.nan]))
    assert order.count == 0
    assert_consistent(order)
    Writer(order)(np.array([0]), np.array([3.0]))
    assert_consistent(order)


def test_large_tie_codes_keep_their_order() -> None:
    """Stamps near :func:`stamp_limit` (codes near ``2^63``) still order ties newest first."""
    capacity = 129
    order = empty_order(capacity)
    top = stamp_limit(capacity) - 1
    slots = np.arange(capacity, dtype=np.int64)
    order.write(slots, np.zeros(capacity), top - capacity + 1 + slots)
    assert_consistent(order)
    np.testing.assert_array_equal(order.select(np.arange(3)), [128, 127, 126])


# ------------------------------------------------------------------------------------------------
# the invariant checker catches what it claims to
# ------------------------------------------------------------------------------------------------


def _filled(capacity: int = 4097) -> SortedOrder:
    rng = np.random.default_rng(7)
    order = empty_order(capacity)
    write = Writer(order)
    for _ in range(10):
        write(rng.permutation(capacity)[:500], rng.random(500))
    order.check_invariants()
    return order


def _placed(order: SortedOrder) -> np.ndarray:
    return np.flatnonzero(order.block_at >= 0)


def _swap_pairs(order: SortedOrder) -> None:
    b = order.block_at[_placed(order)[1]]
    order.row_key[b, [0, 1]] = order.row_key[b, [1, 0]]
    order.row_code[b, [0, 1]] = order.row_code[b, [1, 0]]


def _drop_pair(order: SortedOrder) -> None:
    p = _placed(order)[2]
    order.size[order.block_at[p]] -= 1
    order.counts[p] -= 1


def _overfill(order: SortedOrder) -> None:
    order.size[order.block_at[_placed(order)[0]]] = ROOM


def _double_free(order: SortedOrder) -> None:
    order.free[0] = order.block_at[_placed(order)[0]]


def _move_bound(order: SortedOrder) -> None:
    p = _placed(order)[0]
    order.bound_key[p] = order.row_key[order.block_at[_placed(order)[1]], 1]


def _stale_gap(order: SortedOrder) -> None:
    gap = int(np.flatnonzero(order.block_at < 0)[0])
    order.bound_code[gap] += 1


def _stale_group(order: SortedOrder) -> None:
    order.bound_key[order.block_at.shape[0]] += 1.0


def _stale_fenwick(order: SortedOrder) -> None:
    order.counts[order.block_at.shape[0] + 1] += 1


def _stale_key(order: SortedOrder) -> None:
    slot = int(order.select(np.zeros(1, dtype=np.int64))[0])
    order.keys[slot] += 1.0


CORRUPTIONS = {
    "rows": _swap_pairs,
    "slots": _drop_pair,
    "blocks": _overfill,
    "blocks ": _double_free,
    "bounds": _move_bound,
    "bounds ": _stale_gap,
    "bounds  ": _stale_group,
    "counts": _stale_fenwick,
    "slots ": _stale_key,
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_check_invariants_names_the_broken_one(name: str) -> None:
    """A checker that passes everything proves nothing: each corruption is caught and named."""
    order = _filled()
    CORRUPTIONS[name](order)
    with pytest.raises(ValueError, match=f"SortedOrder {name.strip()}:"):
        order.check_invariants()


# ------------------------------------------------------------------------------------------------
# hypothesis: random operations against a naive sorted list
# ------------------------------------------------------------------------------------------------

PRIORITIES = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 2.0]), st.floats(0.0, 10.0))


class SortedListModel:
    """The filled slots as a Python list kept sorted by ``(-key, -code)`` with ``bisect``."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: list[tuple[float, int]] = []  # (-key, -code)
        self.of: dict[int, tuple[float, int]] = {}  # slot -> its entry

    def write(self, slot: int, value: float, stamp: int) -> None:
        old = self.of.pop(slot, None)
        if old is not None:
            del self.entries[bisect.bisect_left(self.entries, old)]
        if not np.isnan(value):
            entry = (-value, -(stamp * self.capacity + slot))
            bisect.insort(self.entries, entry)
            self.of[slot] = entry

    def ranking(self) -> list[int]:
        return [(-code) % self.capacity for _, code in self.entries]


class OrderMachine(RuleBasedStateMachine):
    """Writes (single, batches with duplicates and removals, monotone runs that split blocks),
    direct assignment plus ``rebuild``; after each, the order equals the model's."""

    @initialize(capacity=st.sampled_from(CAPACITIES))
    def start(self, capacity: int) -> None:
        self.capacity = capacity
        self.order = empty_order(capacity)
        self.model = SortedListModel(capacity)
        self.stamp = 0

    def _write(self, slots: list[int], values: list[float]) -> None:
        stamps = np.arange(self.stamp, self.stamp + len(slots), dtype=np.int64)
        self.stamp += len(slots)
        self.order.write(np.array(slots, dtype=np.int64), np.array(values, dtype=np.float64), stamps)
        for slot, value, stamp in zip(slots, values, stamps.tolist(), strict=True):
            self.model.write(slot, value, stamp)

    @rule(data=st.data(), k=st.integers(1, 12))
    def write_batch(self, data: st.DataObject, k: int) -> None:
        slots = data.draw(st.lists(st.integers(0, self.capacity - 1), min_size=k, max_size=k))
        values = data.draw(st.lists(st.one_of(PRIORITIES, st.just(np.nan)), min_size=k, max_size=k))
        self._write(slots, values)

    @rule(start=st.integers(0, 10**6), length=st.integers(1, 300), base=PRIORITIES,
          step=st.sampled_from([-1.0, 0.0, 1e-3, 1.0]))  # fmt: skip
    def write_run(self, start: int, length: int, base: float, step: float) -> None:
        """Consecutive slots with priorities in a monotone run (or one tied value): inserts that
        pile up in one block until it splits, again and again."""
        slots = [(start + j) % self.capacity for j in range(length)]
        self._write(slots, [base + step * j for j in range(length)])

    @rule(fraction=st.sampled_from([0.5, 0.9, 1.0]), seed=st.integers(0, 2**16))
    def remove_many(self, fraction: float, seed: int) -> None:
        slots = list(self.model.of)
        rng = np.random.default_rng(seed)
        chosen = [slots[i] for i in rng.permutation(len(slots))[: int(len(slots) * fraction)]]
        self._write(chosen, [np.nan] * len(chosen))

    @rule(data=st.data())
    def assign_and_rebuild(self, data: st.DataObject) -> None:
        slots = data.draw(st.lists(st.integers(0, self.capacity - 1), max_size=8, unique=True))
        for slot in slots:
            value = data.draw(st.one_of(PRIORITIES, st.just(np.nan)))
            self.order.keys[slot] = value
            self.order.stamps[slot] = -1 if np.isnan(value) else self.stamp
            self.model.write(slot, value, self.stamp)
            self.stamp += 1
        self.order.rebuild()

    @invariant()
    def same_order(self) -> None:
        self.order.check_invariants()
        ranking = self.model.ranking()
        assert self.order.count == len(ranking)
        np.testing.assert_array_equal(self.order.select(np.arange(len(ranking), dtype=np.int64)), ranking)
        np.testing.assert_array_equal(
            self.order.rank(np.array(ranking, dtype=np.int64)), np.arange(len(ranking))
        )


OrderMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25)
test_order_machine = OrderMachine.TestCase


def test_groups_span_several_positions_at_4097() -> None:
    """The largest capacity above has several groups of positions, so the group-level search and
    Fenwick tree are exercised, not only the one-group case."""
    assert empty_order(4097).block_at.shape[0] > 2 * GROUP
