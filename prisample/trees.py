"""Flat segment trees over raw priorities, with compiled batch kernels.

* :class:`PriorityTree` — proportional prioritization (Schaul et al. 2016, App. B.2.1): the
  sum tree over leaf masses ``m_i = (p_i + ε)^α``, with the min and max raw priority of every
  subtree alongside (memory-wide weight normalisation, and the maximum priority new items get).
* :class:`ArgMaxTree` — an arg-max index over an external float64 array: the largest priority
  for the greedy and uniform backends, and the top-``k`` of greedy prioritization (Sec. 3.2).

Raw priorities live in an external float64 array shared with the sampler; ``NaN`` marks a slot
that holds nothing (never added, or removed).  Such slots have mass 0 and take part in no
reduction.

``PriorityTree`` is 8-ary: the 8 children of a node are 8 consecutive float64 — one 64-byte cache
line — so a descent or an update touches ``log8 N`` lines per array instead of the ``log2 N`` of
a binary tree (7 instead of 20 at ``N = 2^20``); at that size the deep levels miss every cache, so
this is what sets the speed.  Layout for ``capacity = 20`` (``D = 2`` levels of internal nodes)::

    sums:    [ root | pad x7 | n0 n1 n2 n3 n4 n5 n6 n7 ]     level d starts at a multiple of 8
                                |  |  |
    masses:  [ m0 .. m7 | m8 .. m15 | m16 .. m19 0 0 0 0 ]   node j's children: masses[8j : 8j+8]
    raw:     [ p0 .. p19 ]                                   (shared; NaN = empty slot)

Internal node ``j`` of level ``d`` lives at ``offset[d] + j``; its children are nodes
``8j .. 8j+7`` of level ``d + 1``, or leaf masses ``8j .. 8j+7`` below the last level.  Slots past
``capacity`` are padding with mass 0, never drawn, so any capacity keeps slot order equal to leaf
order (the unpadded binary ``2N`` layout scrambles prefix sums when ``N`` is not a power of two).
Every parent is recomputed from its children after a write, never delta-propagated, so sums do
not drift; all sums are float64.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt

from prisample._cache_hints import prefetch

__all__ = ["BRANCH", "ArgMaxTree", "PriorityTree", "mass_limit", "padded_size", "top_k"]


_NO_SLOT = -1
BRANCH = 8

# Error codes returned by kernels that validate before writing anything.
OK, BAD_MASS = 0, 4


def mass_limit(capacity: int) -> float:
    """Largest leaf mass allowed: ``capacity`` masses of this size sum (with float64 rounding) to
    a finite total, so that no ``P(i) = m_i / Σ_k m_k`` collapses to 0 through an infinite sum."""
    return float(np.finfo(np.float64).max) / (2.0 * max(int(capacity), 1))


def padded_size(capacity: int) -> int:
    """Number of leaves of a binary tree: the smallest power of two ``>= max(capacity, 2)``."""
    return 1 << max(1, int(capacity - 1).bit_length())


def _aligned(n: int) -> npt.NDArray[np.float64]:
    """Zeroed float64 array of length ``n`` whose data starts on a 64-byte boundary."""
    buffer = np.zeros(n + BRANCH, dtype=np.float64)
    shift = (-buffer.ctypes.data % 64) // 8
    return buffer[shift : shift + n]


def _round8(n: int) -> int:
    return -(-n // BRANCH) * BRANCH


# ----------------------------------------------------------------------------------------------
# PriorityTree kernels
# ----------------------------------------------------------------------------------------------


@numba.njit(cache=True, inline="always")
def _refresh_bottom(
    raw: np.ndarray, masses: np.ndarray, sums: np.ndarray, mins: np.ndarray, maxs: np.ndarray, at: int, j: int
) -> None:
    """Node ``j`` of the last internal level (stored at ``at + j``) from its 8 leaves."""
    total = 0.0
    low = math.inf
    high = -math.inf
    base = j * BRANCH
    for i in range(base, min(base + BRANCH, raw.shape[0])):
        total += masses[i]
        p = raw[i]
        if not math.isnan(p):
            low = min(low, p)
            high = max(high, p)
    sums[at + j] = total
    mins[at + j] = low
    maxs[at + j] = high


@numba.njit(cache=True, inline="always")
def _refresh_inner(sums: np.ndarray, mins: np.ndarray, maxs: np.ndarray, at: int, below: int, j: int) -> None:
    """Node ``j`` of a level stored at ``at`` from its 8 children on the level stored at ``below``."""
    total = 0.0
    low = math.inf
    high = -math.inf
    base = below + j * BRANCH
    for c in range(base, base + BRANCH):
        total += sums[c]
        low = min(low, mins[c])
        high = max(high, maxs[c])
    sums[at + j] = total
    mins[at + j] = low
    maxs[at + j] = high


@numba.njit(cache=True)
def _tree_write(
    raw: np.ndarray,
    masses: np.ndarray,
    sums: np.ndarray,
    mins: np.ndarray,
    maxs: np.ndarray,
    offsets: np.ndarray,
    eps: float,
    alpha: float,
    limit: float,
    slots: np.ndarray,
    values: np.ndarray,
) -> tuple[int, int]:
    """``raw[slots] = values`` in order, then refresh ancestors.  Returns ``(code, Δcount)``.

    A value is a priority ``>= 0`` or NaN (empty the slot).  If any priority's mass is not a
    positive float ``<= limit``, nothing is written and ``BAD_MASS`` is returned; the one
    exception is ``p + ε = 0`` (``ε = 0``), whose mass 0 is exact: such a slot is never drawn.
    """
    k = slots.shape[0]
    new_masses = np.empty(k, dtype=np.float64)
    for j in range(k):
        v = values[j]
        new_masses[j] = 0.0 if math.isnan(v) else (v + eps) ** alpha
        if not math.isnan(v) and not ((new_masses[j] > 0.0 or v + eps == 0.0) and new_masses[j] <= limit):
            return BAD_MASS, 0
    depth = offsets.shape[0] - 1
    for j in range(k):  # every line the walks will touch is known now: ask for all of them
        node = slots[j]
        prefetch(raw, node)
        prefetch(masses, node)
        for d in range(depth - 1, -1, -1):
            node //= BRANCH
            prefetch(sums, offsets[d] + node)
            prefetch(mins, offsets[d] + node)
            prefetch(maxs, offsets[d] + node)
    change = 0
    for j in range(k):
        s = slots[j]
        change += int(not math.isnan(values[j])) - int(not math.isnan(raw[s]))
        raw[s] = values[j]
        masses[s] = new_masses[j]
    # Refresh level by level, each distinct node once (ancestors are shared near the root).
    nodes = np.sort(slots // BRANCH)
    for j in range(k):
        if j == 0 or nodes[j] != nodes[j - 1]:
            _refresh_bottom(raw, masses, sums, mins, maxs, offsets[depth - 1], nodes[j])
    for d in range(depth - 2, -1, -1):
        for j in range(k):
            nodes[j] //= BRANCH
        for j in range(k):
            if j == 0 or nodes[j] != nodes[j - 1]:
                _refresh_inner(sums, mins, maxs, offsets[d], offsets[d + 1], nodes[j])
    return OK, change


@numba.njit(cache=True)
def _tree_rebuild(
    raw: np.ndarray,
    masses: np.ndarray,
    sums: np.ndarray,
    mins: np.ndarray,
    maxs: np.ndarray,
    offsets: np.ndarray,
    eps: float,
    alpha: float,
) -> None:
    for i in range(raw.shape[0]):
        masses[i] = 0.0 if math.isnan(raw[i]) else (raw[i] + eps) ** alpha
    depth = offsets.shape[0] - 1
    for d in range(depth - 1, -1, -1):
        for node in range(BRANCH**d):  # level d has 8^d nodes; level 0 pads the root to 8 entries
            if d == depth - 1:
                if node * BRANCH < raw.shape[0]:
                    _refresh_bottom(raw, masses, sums, mins, maxs, offsets[d], node)
                else:
                    sums[offsets[d] + node] = 0.0
                    mins[offsets[d] + node] = math.inf
                    maxs[offsets[d] + node] = -math.inf
            else:
                _refresh_inner(sums, mins, maxs, offsets[d], offsets[d + 1], node)


@numba.njit(cache=True, inline="always")
def _pick_child(values: np.ndarray, base: int, target: float) -> tuple[int, float]:
    """Child ``c`` of 8 at ``values[base:]`` with ``Σ_{<c} <= target < Σ_{<=c}``, positive only.

    Rounding can leave ``target`` at or past the node's sum; the last child with positive mass
    is taken then, so the walk never enters an empty subtree.
    """
    last = -1
    last_mass = 0.0
    for c in range(BRANCH):
        mass = values[base + c]
        if mass > 0.0:
            if target < mass:
                return c, target
            target -= mass
            last = c
            last_mass = mass
    return last, target + last_mass


@numba.njit(cache=True)
def _tree_find(
    masses: np.ndarray,
    sums: np.ndarray,
    offsets: np.ndarray,
    t: np.ndarray,
    slots: np.ndarray,
    out_masses: np.ndarray,
) -> None:
    """Prefix-sum search for a batch of targets ``t`` (overwritten), the whole batch descending
    one level at a time so that the batch's independent memory reads overlap."""
    k = t.shape[0]
    depth = offsets.shape[0] - 1
    for j in range(k):
        slots[j] = 0
    for d in range(1, depth):
        for j in range(k):
            c, t[j] = _pick_child(sums, offsets[d] + slots[j] * BRANCH, t[j])
            slots[j] = slots[j] * BRANCH + c
            if d + 1 < depth:  # the line this walk reads next; fetched while the others move
                prefetch(sums, offsets[d + 1] + slots[j] * BRANCH)
            else:
                prefetch(masses, slots[j] * BRANCH)
    for j in range(k):
        c, t[j] = _pick_child(masses, slots[j] * BRANCH, t[j])
        slots[j] = slots[j] * BRANCH + c
        out_masses[j] = masses[slots[j]]


@numba.njit(cache=True)
def _stratified_sample(
    masses: np.ndarray,
    sums: np.ndarray,
    offsets: np.ndarray,
    u: np.ndarray,
    slots: np.ndarray,
    out: np.ndarray,
) -> None:
    k = u.shape[0]
    total = sums[0]
    width = total / k
    for j in range(k):
        u[j] = (j + u[j]) * width
    _tree_find(masses, sums, offsets, u, slots, out)
    for j in range(k):
        out[j] /= total


class PriorityTree:
    """Sum / min / max tree over raw priorities ``p_i`` with leaf masses ``m_i = (p_i + ε)^α``.

    Every mass is at most :func:`mass_limit` (``capacity`` of them sum finitely), so
    ``total() = Σ_i m_i`` over non-empty slots is finite; :meth:`find` maps targets ``t ∈ [0, total)`` to
    the slot ``i`` with ``Σ_{j<i} m_j <= t < Σ_{j<=i} m_j`` (prefix-sum search, App. B.2.1);
    :meth:`min_raw` / :meth:`max_raw` reduce the raw priorities of non-empty slots.  A slot of
    zero mass is never returned.

    >>> raw = np.array([1.0, np.nan, 3.0])
    >>> tree = PriorityTree(raw, alpha=1.0, eps=0.0)
    >>> tree.total(), tree.find(np.array([0.5, 1.5]))[0].tolist(), tree.min_raw(), tree.max_raw()
    (4.0, [0, 2], 1.0, 3.0)
    """

    def __init__(self, raw: npt.NDArray[np.float64], alpha: float, eps: float) -> None:
        self.raw = raw
        self.capacity = int(raw.shape[0])
        self.alpha = float(alpha)
        self.eps = float(eps)
        self.limit = mass_limit(self.capacity)
        depth = 1
        while BRANCH**depth < self.capacity:
            depth += 1
        sizes = [_round8(BRANCH**d) for d in range(depth)]
        self.offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        self.masses = _aligned(_round8(self.capacity))
        self.sums = _aligned(int(self.offsets[-1]))
        self.mins = _aligned(int(self.offsets[-1]))
        self.maxs = _aligned(int(self.offsets[-1]))
        self.rebuild()

    def write(self, slots: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> tuple[int, int]:
        """``raw[slots] = values`` (NaN empties a slot; last write wins); ``(code, Δcount)``."""
        code, change = _tree_write(
            self.raw,
            self.masses,
            self.sums,
            self.mins,
            self.maxs,
            self.offsets,
            self.eps,
            self.alpha,
            self.limit,
            slots,
            values,
        )
        return int(code), int(change)

    def rebuild(self, alpha: float | None = None) -> None:
        """Recompute masses and every node bottom-up in ``O(N)`` (after ``raw`` or ``α`` changed)."""
        if alpha is not None:
            self.alpha = float(alpha)
        _tree_rebuild(
            self.raw, self.masses, self.sums, self.mins, self.maxs, self.offsets, self.eps, self.alpha
        )

    def total(self) -> float:
        return float(self.sums[0])

    def find(self, targets: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Slots whose prefix-sum interval holds each target, and those slots' masses."""
        slots = np.empty(targets.shape[0], dtype=np.int64)
        masses = np.empty(targets.shape[0], dtype=np.float64)
        if slots.shape[0]:
            _tree_find(self.masses, self.sums, self.offsets, targets.copy(), slots, masses)
        return slots, masses

    def sample(self, u: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Stratified draw: target ``j`` of ``k`` is ``(j + u_j) · total / k`` (App. B.2.1).

        Returns the slots and their probabilities ``m_i / total``; ``u`` is overwritten.
        """
        k = u.shape[0]
        slots = np.empty(k, dtype=np.int64)
        probabilities = np.empty(k, dtype=np.float64)
        _stratified_sample(self.masses, self.sums, self.offsets, u, slots, probabilities)
        return slots, probabilities

    def min_raw(self) -> float:
        return float(self.mins[0])

    def max_raw(self) -> float:
        return float(self.maxs[0])


# ----------------------------------------------------------------------------------------------
# ArgMaxTree kernels
# ----------------------------------------------------------------------------------------------


@numba.njit(cache=True, inline="always")
def _max_child_slot(values: np.ndarray, argmax: np.ndarray, node: int, size: int) -> int:
    if node >= size:
        slot = node - size
        return slot if slot < values.shape[0] else _NO_SLOT
    return int(argmax[node])


@numba.njit(cache=True, inline="always")
def _better_max(values: np.ndarray, a: int, b: int) -> int:
    """The larger of two slots, NaN counting as absent; ties go to ``a`` (the left, lower slot)."""
    if a == _NO_SLOT or math.isnan(values[a]):
        return b if b == _NO_SLOT or not math.isnan(values[b]) else a
    if b == _NO_SLOT or math.isnan(values[b]):
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
) -> int:
    change = 0
    for j in range(slots.shape[0]):
        change += int(not math.isnan(new_values[j])) - int(not math.isnan(values[slots[j]]))
        values[slots[j]] = new_values[j]
    _max_set(values, argmax, size, slots)
    return change


@numba.njit(cache=True)
def _max_rebuild(values: np.ndarray, argmax: np.ndarray, size: int) -> None:
    for node in range(size - 1, 0, -1):
        left = node << 1
        argmax[node] = _better_max(
            values,
            _max_child_slot(values, argmax, left, size),
            _max_child_slot(values, argmax, left + 1, size),
        )


@numba.njit(cache=True)
def _max_top_k(values: np.ndarray, argmax: np.ndarray, size: int, k: int, out: np.ndarray) -> int:
    """Write the ``k`` largest slots (descending, ties to the lowest slot) into ``out``.

    Slots are taken out one at a time (value set to NaN), then restored.  Returns how many were
    found (fewer than ``k`` when fewer slots hold a value).
    """
    saved = np.empty(k, dtype=np.float64)
    found = 0
    one = np.empty(1, dtype=np.int64)
    for j in range(k):
        slot = argmax[1]
        if slot < 0 or math.isnan(values[slot]):
            break
        out[j] = slot
        saved[j] = values[slot]
        values[slot] = np.nan
        one[0] = slot
        _max_set(values, argmax, size, one)
        found += 1
    for j in range(found - 1, -1, -1):
        values[out[j]] = saved[j]
        one[0] = out[j]
        _max_set(values, argmax, size, one)
    return found


class ArgMaxTree:
    """Arg-max index over an external float64 array ``values`` (NaN entries are ignored).

    Only the ``P`` internal nodes are stored (int32 slot numbers); ties resolve to the lowest
    slot.

    >>> tree = ArgMaxTree(np.array([0.5, 2.0, 2.0, np.nan]))
    >>> tree.argmax(), top_k(tree, 5).tolist()
    (1, [1, 2, 0])
    """

    def __init__(self, values: npt.NDArray[np.float64]) -> None:
        self.values = values
        self.capacity = int(values.shape[0])
        self.size = padded_size(self.capacity)
        self.index = np.full(self.size, _NO_SLOT, dtype=np.int32)
        self.rebuild()

    def write(self, slots: npt.NDArray[np.int64], new_values: npt.NDArray[np.float64]) -> int:
        """``values[slots] = new_values`` in order (last write wins), then refresh; ``Δcount``."""
        return int(_max_write(self.values, self.index, self.size, slots, new_values))

    def rebuild(self) -> None:
        _max_rebuild(self.values, self.index, self.size)

    def argmax(self) -> int:
        """Slot of the largest value, ``-1`` when every value is NaN."""
        slot = int(self.index[1])
        return slot if slot >= 0 and not math.isnan(self.values[slot]) else _NO_SLOT


def top_k(tree: ArgMaxTree, k: int) -> npt.NDArray[np.int64]:
    """The ``k`` slots of largest value, largest first, ties to the lowest slot."""
    out = np.empty(k, dtype=np.int64)
    found = _max_top_k(tree.values, tree.index, tree.size, k, out)
    return out[:found]
