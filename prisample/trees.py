"""Flat segment trees with compiled batch kernels.

Two trees serve every backend:

* :class:`SumTree` — float64 partial sums for proportional sampling (Schaul et al. 2016, App. B.2.1),
  with an embedded arg-min index over the *positive* leaves (memory-wide weight normalisation).
* :class:`ArgMaxTree` — an arg-max index over an external float64 array (the running maximum
  priority for new items, and greedy prioritization, Sec. 3.2).

Array layout, shown for ``capacity = 5`` (padded to ``P = 8`` leaves)::

    node:      1                                  root: total mass / extreme index
             /   \\
            2     3
           / \\   / \\
          4   5 6   7
         /\\  /\\ /\\  /\\
    leaf: 8 9 10 11 12 13 14 15          leaf node P + i holds slot i
    slot: 0 1 2  3  4  -  -  -           slots >= capacity are padding: value 0, never drawn

Node ``i`` has children ``2i`` and ``2i + 1`` and parent ``i // 2``; node 0 is unused.  Padding to a
power of two keeps slot order equal to leaf order for any capacity (the ``2N`` layout without padding
scrambles prefix sums when ``N`` is not a power of two).  Every parent is recomputed from its
children after a write, never delta-propagated, so sums do not drift.  Index trees store int32 slot
numbers in their ``P`` internal nodes only; their leaves are the values themselves.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

_NO_SLOT = -1


def padded_size(capacity: int) -> int:
    """Smallest power of two ``P >= capacity`` (the number of leaves)."""
    return 1 << max(0, int(capacity - 1).bit_length())


# ----------------------------------------------------------------------------------------------
# compiled kernels
# ----------------------------------------------------------------------------------------------


@numba.njit(cache=True, inline="always")
def _min_child_slot(leaves: np.ndarray, argmin: np.ndarray, node: int, size: int) -> int:
    """Slot of the smallest positive leaf under ``node`` (``-1`` if none)."""
    if node >= size:
        slot = node - size
        if slot < leaves.shape[0] and leaves[slot] > 0.0:
            return slot
        return _NO_SLOT
    return argmin[node]


@numba.njit(cache=True)
def _sum_set(
    nodes: np.ndarray, argmin: np.ndarray, size: int, slots: np.ndarray, values: np.ndarray
) -> int:
    leaves = nodes[size:]
    positive_change = 0
    for j in range(slots.shape[0]):
        leaf = size + slots[j]
        positive_change += (values[j] > 0.0) - (nodes[leaf] > 0.0)
        nodes[leaf] = values[j]
    for j in range(slots.shape[0]):
        node = (size + slots[j]) >> 1
        while node >= 1:
            left = node << 1
            nodes[node] = nodes[left] + nodes[left + 1]
            a = _min_child_slot(leaves, argmin, left, size)
            b = _min_child_slot(leaves, argmin, left + 1, size)
            if a == _NO_SLOT or (b != _NO_SLOT and leaves[b] < leaves[a]):
                a = b
            argmin[node] = a
            node >>= 1
    return positive_change


@numba.njit(cache=True)
def _sum_rebuild(nodes: np.ndarray, argmin: np.ndarray, size: int) -> None:
    leaves = nodes[size:]
    for node in range(size - 1, 0, -1):
        left = node << 1
        nodes[node] = nodes[left] + nodes[left + 1]
        a = _min_child_slot(leaves, argmin, left, size)
        b = _min_child_slot(leaves, argmin, left + 1, size)
        if a == _NO_SLOT or (b != _NO_SLOT and leaves[b] < leaves[a]):
            a = b
        argmin[node] = a


@numba.njit(cache=True)
def _sum_find(nodes: np.ndarray, size: int, targets: np.ndarray, out: np.ndarray) -> None:
    """Prefix-sum search for a batch of targets, descending the whole batch one level at a time.

    Going right requires positive mass on the right, going left positive mass on the left, so
    the leaf reached always holds positive mass: rounding in ``target`` can never return a zero
    leaf, a padding leaf or a slot past the newest one.
    """
    k = targets.shape[0]
    t = targets.copy()
    for j in range(k):
        out[j] = 1
    while out[0] < size:
        for j in range(k):
            left = out[j] << 1
            mass_left = nodes[left]
            if mass_left > 0.0 and (t[j] < mass_left or nodes[left + 1] <= 0.0):
                out[j] = left
            else:
                if mass_left > 0.0:
                    t[j] -= mass_left
                out[j] = left + 1
    for j in range(k):
        out[j] -= size


@numba.njit(cache=True, inline="always")
def _max_child_slot(values: np.ndarray, argmax: np.ndarray, node: int, size: int) -> int:
    if node >= size:
        slot = node - size
        return slot if slot < values.shape[0] else _NO_SLOT
    return argmax[node]


@numba.njit(cache=True, inline="always")
def _better_max(values: np.ndarray, a: int, b: int) -> int:
    """The larger of two slots; ties go to the lower slot (``a`` is always the left one)."""
    if a == _NO_SLOT:
        return b
    if b == _NO_SLOT:
        return a
    return b if values[b] > values[a] else a


@numba.njit(cache=True)
def _max_set(values: np.ndarray, argmax: np.ndarray, size: int, slots: np.ndarray) -> None:
    for j in range(slots.shape[0]):
        node = (size + slots[j]) >> 1
        while node >= 1:
            left = node << 1
            argmax[node] = _better_max(
                values,
                _max_child_slot(values, argmax, left, size),
                _max_child_slot(values, argmax, left + 1, size),
            )
            node >>= 1


@numba.njit(cache=True)
def _max_write(
    values: np.ndarray, argmax: np.ndarray, size: int, slots: np.ndarray, new_values: np.ndarray
) -> None:
    for j in range(slots.shape[0]):
        values[slots[j]] = new_values[j]
    _max_set(values, argmax, size, slots)


@numba.njit(cache=True)
def _max_rebuild(values: np.ndarray, argmax: np.ndarray, size: int) -> None:
    for node in range(size - 1, 0, -1):
        left = node << 1
        argmax[node] = _better_max(
            values,
            _max_child_slot(values, argmax, left, size),
            _max_child_slot(values, argmax, left + 1, size),
        )


# ----------------------------------------------------------------------------------------------
# Python wrappers
# ----------------------------------------------------------------------------------------------


class SumTree:
    """Sum tree over ``capacity`` non-negative float64 leaves, with the arg-min positive leaf.

    ``total() = Σ_i leaf_i``; :meth:`find` maps targets ``t ∈ [0, total)`` to the slot ``i`` with
    ``Σ_{j<i} leaf_j <= t < Σ_{j<=i} leaf_j`` (prefix-sum search); :meth:`min_leaf` is
    ``min {leaf_i : leaf_i > 0}``.  A leaf of zero is never returned by :meth:`find`.

    >>> tree = SumTree(3)
    >>> tree.set(np.array([0, 2]), np.array([1.0, 3.0]))
    >>> tree.total(), tree.find(np.array([0.5, 1.5])).tolist(), tree.min_leaf()
    (4.0, [0, 2], 1.0)
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity should be a positive integer, but got capacity={capacity}")
        self.capacity = int(capacity)
        self.size = padded_size(self.capacity)
        self.nodes = np.zeros(2 * self.size, dtype=np.float64)
        self.argmin = np.full(self.size, _NO_SLOT, dtype=np.int32)

    @property
    def leaves(self) -> npt.NDArray[np.float64]:
        """View of the ``capacity`` leaf values (do not write through it)."""
        return self.nodes[self.size : self.size + self.capacity]

    def set(self, slots: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> int:
        """``leaf[slots] = values`` (last write wins), then recompute every ancestor.

        Returns the change in the number of positive leaves.
        """
        return int(_sum_set(self.nodes, self.argmin, self.size, slots, values))

    def assign_all(self, values: npt.NDArray[np.float64]) -> None:
        """Replace every leaf and rebuild the whole tree bottom-up in ``O(P)``."""
        self.nodes[self.size : self.size + self.capacity] = values
        _sum_rebuild(self.nodes, self.argmin, self.size)

    def total(self) -> float:
        return float(self.nodes[1])

    def find(self, targets: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """Slots whose prefix-sum interval contains each target (see class docstring)."""
        out = np.empty(targets.shape[0], dtype=np.int64)
        if out.shape[0]:
            _sum_find(self.nodes, self.size, targets, out)
        return out

    def min_slot(self) -> int:
        """Slot of the smallest positive leaf, ``-1`` when no leaf is positive."""
        if self.size == 1:
            return 0 if self.nodes[1] > 0.0 else _NO_SLOT
        return int(self.argmin[1])

    def min_leaf(self) -> float:
        """``min {leaf_i : leaf_i > 0}``, ``inf`` when no leaf is positive."""
        slot = self.min_slot()
        return float(self.nodes[self.size + slot]) if slot >= 0 else float("inf")


class ArgMaxTree:
    """Arg-max index over an external float64 array ``values`` of length ``capacity``.

    Only the ``P`` internal nodes are stored (int32 slot numbers); the caller writes ``values``
    and then calls :meth:`refresh` with the slots it wrote.  Ties resolve to the lowest slot.

    >>> values = np.array([0.5, 2.0, 2.0])
    >>> tree = ArgMaxTree(values)
    >>> tree.argmax()
    1
    """

    def __init__(self, values: npt.NDArray[np.float64]) -> None:
        self.values = values
        self.capacity = int(values.shape[0])
        self.size = padded_size(self.capacity)
        self.index = np.full(self.size, _NO_SLOT, dtype=np.int32)
        self.rebuild()

    def write(self, slots: npt.NDArray[np.int64], new_values: npt.NDArray[np.float64]) -> None:
        """``values[slots] = new_values`` in order (last write wins), then refresh."""
        _max_write(self.values, self.index, self.size, slots, new_values)

    def refresh(self, slots: npt.NDArray[np.int64]) -> None:
        """Recompute the ancestors of ``slots`` after their values changed."""
        _max_set(self.values, self.index, self.size, slots)

    def rebuild(self) -> None:
        _max_rebuild(self.values, self.index, self.size)

    def argmax(self) -> int:
        return 0 if self.size == 1 else int(self.index[1])

    def max(self) -> float:
        return float(self.values[self.argmax()])


@numba.njit(cache=True)
def _max_top_k(values: np.ndarray, argmax: np.ndarray, size: int, k: int, out: np.ndarray) -> int:
    """Write the ``k`` largest slots (descending, ties to the lowest slot) into ``out``.

    Slots are taken out one at a time (value set to ``-inf``), then restored.  Returns how many
    slots were found (fewer than ``k`` when the tree has fewer slots above ``-inf``).
    """
    saved = np.empty(k, dtype=np.float64)
    found = 0
    one = np.empty(1, dtype=np.int64)
    for j in range(k):
        slot = 0 if size == 1 else argmax[1]
        if slot < 0 or values[slot] == -np.inf:
            break
        out[j] = slot
        saved[j] = values[slot]
        values[slot] = -np.inf
        one[0] = slot
        _max_set(values, argmax, size, one)
        found += 1
    for j in range(found - 1, -1, -1):
        values[out[j]] = saved[j]
        one[0] = out[j]
        _max_set(values, argmax, size, one)
    return found


def top_k(tree: ArgMaxTree, k: int) -> npt.NDArray[np.int64]:
    """The ``k`` slots of largest value above ``-inf``, largest first, ties to the lowest slot."""
    out = np.empty(k, dtype=np.int64)
    found = _max_top_k(tree.values, tree.index, tree.size, k, out)
    return out[:found]
