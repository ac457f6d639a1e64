"""``SortedOrder`` directly: rank, select and layout against ``np.lexsort`` and a naive sorted list.

The order is priority descending, ties by tie code ``stamp · capacity + slot`` descending (the
newest write first), so the expected ranking of the filled slots is
``np.lexsort((-codes, -keys))``.  Capacities sit around the block size (``ROOM = 64`` pairs:
63 never splits, 64 and 65 split once full, 127 and 129 twice), at 4097 (blocks in two nodes)
and 16385 (several nodes, which split, merge and even out, moving root entries); every step is
followed by :meth:`SortedOrder.check_invariants`.  The operation sequences include the hot spots
that made whole re-layouts before: every write at the top (rising priorities, or equal
priorities that rank by recency) or at the bottom (falling priorities), a memory drained then
refilled in one narrow range of priorities, and one left sparse (blocks merging across nodes).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from prisample.order import FAN, ROOM, SortedOrder, stamp_limit

CAPACITIES = (63, 64, 65, 127, 129, 4097, 16385)


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


def _sparse(rng: np.random.Generator, capacity: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Fill, keep one in fifty, then random writes into the nearly empty memory."""
    phase = step % 40
    if phase == 0:
        return np.arange(capacity), rng.random(capacity)
    if phase == 1:
        slots = np.flatnonzero(rng.random(capacity) < 0.98)
        return slots, np.full(slots.shape[0], np.nan)
    k = int(rng.integers(1, ROOM))
    values = rng.random(k)
    values[rng.random(k) < 0.5] = np.nan
    return rng.integers(0, capacity, size=k), values


PATTERNS: dict[str, Callable[[np.random.Generator, int, int], tuple[np.ndarray, np.ndarray]]] = {
    "random": _random,
    "rising": _rising,
    "falling": _falling,
    "tied": _tied,
    "drain_refill": _drain_refill,
    "sparse": _sparse,
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


def test_a_write_rewrites_a_few_rows_not_all() -> None:
    """Guards against the ``O(N)`` re-layout of every block (``_rechunk``) that a split ran into
    whenever no free position was near the full block: at the last block, inside a run of
    occupied positions, or with the pool of blocks used up.  Right after construction (every
    slot tied at priority 1) each new priority lands above or below all the ties, in the first or
    last block, and at ``N = 2^24`` every 256-slot update took ~130 ms.  Now a written slot
    changes at most four rows: its old block and the neighbour that block merges or evens out
    with, its new block and the half that splits off."""
    capacity = 4097
    order = SortedOrder(np.ones(capacity), np.arange(capacity, dtype=np.int64))
    write = Writer(order)
    rng = np.random.default_rng(3)
    for step in range(2000):
        before_key, before_code = order.row_key.copy(), order.row_code.copy()
        write(rng.integers(0, capacity, size=1), 2.0 * rng.random(1))
        changed = (order.row_key != before_key).any(axis=1) | (order.row_code != before_code).any(axis=1)
        assert changed.sum() <= 4, f"write {step} changed {changed.sum()} rows"
    assert_consistent(order)


# ------------------------------------------------------------------------------------------------
# the invariant checker catches what it claims to
# ------------------------------------------------------------------------------------------------


def _filled(capacity: int = 16385) -> SortedOrder:
    """Several nodes in the root, some blocks free."""
    rng = np.random.default_rng(7)
    order = empty_order(capacity)
    write = Writer(order)
    for _ in range(10):
        write(rng.permutation(capacity)[:2000], rng.random(2000))
    order.check_invariants()
    assert order.meta[3] > 2 and order.meta[0] > 0
    return order


def _blocks(order: SortedOrder) -> list[tuple[int, int]]:
    """``(node, index)`` of every block, in order."""
    return [(int(j), i) for j in order.root_node[: order.meta[3]] for i in range(order.node_len[j])]


def _swap_pairs(order: SortedOrder) -> None:
    j, i = _blocks(order)[1]
    b = order.node_blk[j, i]
    order.row_key[b, [0, 1]] = order.row_key[b, [1, 0]]
    order.row_code[b, [0, 1]] = order.row_code[b, [1, 0]]


def _drop_pair(order: SortedOrder) -> None:
    """One pair fewer in the fullest block, every count kept consistent: only the slots differ."""
    j, i = max(_blocks(order), key=lambda at: order.node_cnt[at])
    order.node_cnt[j, i] -= 1
    r = int(np.flatnonzero(order.root_node[: order.meta[3]] == j)[0])
    order.root_cnt[r] -= 1
    roots, k = int(order.meta[3]), r + 1
    while k <= roots:
        order.root_fen[k] -= 1
        k += k & -k


def _overfill(order: SortedOrder) -> None:
    order.node_cnt[_blocks(order)[0]] = ROOM


def _double_free(order: SortedOrder) -> None:
    order.block_free[0] = order.node_blk[_blocks(order)[0]]


def _short_node(order: SortedOrder) -> None:
    order.node_len[order.root_node[0]] = FAN


def _move_bound(order: SortedOrder) -> None:
    (j, i), (k, h) = _blocks(order)[:2]
    order.node_key[j, i] = order.row_key[order.node_blk[k, h], 1]


def _stale_root_bound(order: SortedOrder) -> None:
    order.root_key[0] += 1.0


def _stale_fenwick(order: SortedOrder) -> None:
    order.root_fen[1] += 1


def _stale_key(order: SortedOrder) -> None:
    slot = int(order.select(np.zeros(1, dtype=np.int64))[0])
    order.keys[slot] += 1.0


CORRUPTIONS = {
    "rows": _swap_pairs,
    "slots": _drop_pair,
    "blocks": _overfill,
    "blocks ": _double_free,
    "nodes": _short_node,
    "bounds": _move_bound,
    "bounds ": _stale_root_bound,
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

    @rule(
        start=st.integers(0, 10**6),
        length=st.integers(1, 300),
        base=PRIORITIES,
        step=st.sampled_from([-1.0, 0.0, 1e-3, 1.0]),
    )
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
