"""The compiled floor of a DQN step: the least a compiled proportional sampler can do per step.

One numba call per step, no validation and no Python around it: a stratified proportional
sample of ``k`` slots with their importance weights, then the write of ``k`` new priorities with
every ancestor recomputed.  The tree is prisample's own (:mod:`prisample.trees`): 8-ary, every
level starting on a 64-byte line, the 8 children of a node one cache line, float64 leaf masses
``m_i = (p_i + ε)^α`` below ``D = ⌈log8 N⌉`` levels of internal nodes (``offsets`` as
``PriorityTree``'s, padding slots past ``N`` of mass 0), so a descent touches the same ``D``
lines per array as prisample's and the floor differs from prisample's step only in what it
leaves out.  It keeps per node the sum of the masses below (the draw) and their minimum (the
memory's ``P_min``, which the weights normalised over the memory need), and nothing else:

* draw: target ``j`` of ``k`` is ``(j + u_j) · Σ m / k`` (App. B.2.1) with ``u_j`` from numba's
  own generator, seeded in compiled code, so a step costs no call into numpy; the ``k`` walks go
  down together one level at a time, each asking for the next line it reads (and the min line
  the write will read) before the others move, as ``prisample.trees._tree_find`` does;
* weights: ``w_i = (N · P(i))^-β / max_j w_j = (P_min / P(i))^β = (m_min / m_i)^β`` (Schaul et
  al. 2016, Sec. 3.4 and Algorithm 1, line 10; the total cancels);
* write: leaf ``i`` of each drawn slot becomes ``(|δ_i| + ε)^α`` (in draw order, so the last of
  a duplicate wins), then every ancestor's sum and min is recomputed from its 8 children (never
  delta-propagated), each distinct node once: stratified slots come out sorted, so equal
  ancestors are adjacent; the lines it reads are the ones the draw just fetched;
* the largest priority seen, what a new item enters with, is a running maximum (O(1) per write;
  no max tree).

What it leaves out, and prisample's step does: the checks of slots and priorities, the raw
priority array and its emptiness marks (NaN), the count of filled slots, the max tree, the β
schedule, the draw's probabilities returned to Python, two calls into compiled code and the
Python methods around them.  Same conventions as the peers of :mod:`benchmarks.peers` (``α``,
``β``, ``ε``).  It is what ``make bench`` sets prisample's DQN step against ("prisample ≤ 1.5×
the compiled floor").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from benchmarks.peers import ALPHA, BETA, EPS, Peer
from prisample._cache_hints import prefetch
from prisample.trees import BRANCH, _aligned, _pick_child

__all__ = ["CompiledFloor", "floor_step", "tree_offsets"]

_SHIFT = 3  # log2(BRANCH): the ancestor ``d`` levels up of slot ``s`` is ``s >> 3d``


def tree_offsets(capacity: int) -> npt.NDArray[np.int64]:
    """Where each level of internal nodes starts in the sum and min arrays, as in
    ``prisample.trees.PriorityTree``: ``D`` levels (the least ``D >= 1`` with ``8^D >= N``),
    level ``d`` holding ``8^d`` nodes (the root padded to 8 entries), ``offsets[D]`` the length."""
    depth = 1
    while BRANCH**depth < capacity:
        depth += 1
    sizes = [max(BRANCH**d, BRANCH) for d in range(depth)]
    return np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


@numba.njit(cache=True)
def _seed(seed: int) -> None:
    np.random.seed(seed)


@numba.njit(cache=True, inline="always")
def _refresh(
    children: np.ndarray, sums: np.ndarray, mins: np.ndarray, lows: np.ndarray, at: int, base: int, end: int
) -> None:
    """Node stored at ``at`` from its children ``base .. end - 1``: masses (``children`` and
    ``lows`` the same array) or the sums and mins of the level below."""
    total = 0.0
    low = math.inf
    for c in range(base, end):
        total += children[c]
        low = min(low, lows[c])
    sums[at] = total
    mins[at] = low


@numba.njit(cache=True)
def _build(
    priorities: np.ndarray,
    masses: np.ndarray,
    sums: np.ndarray,
    mins: np.ndarray,
    offsets: np.ndarray,
    high: np.ndarray,
    alpha: float,
    eps: float,
) -> None:
    """Leaves ``(p_i + ε)^α`` for the ``N`` given priorities and every node bottom-up."""
    n = priorities.shape[0]
    top = -math.inf
    for i in range(n):
        masses[i] = (priorities[i] + eps) ** alpha
        top = max(top, priorities[i])
    high[0] = top
    depth = offsets.shape[0] - 1
    for j in range(BRANCH ** (depth - 1)):
        _refresh(masses, sums, mins, masses, offsets[depth - 1] + j, j * BRANCH, min(j * BRANCH + BRANCH, n))
    for d in range(depth - 2, -1, -1):
        for j in range(BRANCH**d):
            base = offsets[d + 1] + j * BRANCH
            _refresh(sums, sums, mins, mins, offsets[d] + j, base, base + BRANCH)


@numba.njit(cache=True)
def floor_step(
    masses: np.ndarray,
    sums: np.ndarray,
    mins: np.ndarray,
    offsets: np.ndarray,
    n: int,
    high: np.ndarray,
    slots: np.ndarray,
    weights: np.ndarray,
    alpha: float,
    beta: float,
    eps: float,
    new: np.ndarray,
) -> None:
    """Draw ``slots.shape[0]`` slots (stratified) with their weights ``(m_min / m_i)^β``, then
    set those slots' priorities to ``new`` (leaves ``(new + ε)^α``), recompute their ancestors'
    sums and mins and raise the running maximum ``high[0]``.  ``n`` slots are filled (leaves
    ``0 .. n - 1``; the rest is padding of mass 0)."""
    k = slots.shape[0]
    depth = offsets.shape[0] - 1
    width = sums[0] / k
    low = mins[0]
    t = np.empty(k, dtype=np.float64)
    for j in range(k):
        t[j] = (j + np.random.random()) * width
        slots[j] = 0
    for d in range(1, depth):
        for j in range(k):
            c, t[j] = _pick_child(sums, offsets[d] + slots[j] * BRANCH, t[j])
            slots[j] = slots[j] * BRANCH + c
            prefetch(mins, offsets[d] + slots[j] - c)  # the write's refresh reads this line's mins
            if d + 1 < depth:  # the line this walk reads next; fetched while the others move
                prefetch(sums, offsets[d + 1] + slots[j] * BRANCH)
            else:
                prefetch(masses, slots[j] * BRANCH)
    for j in range(k):
        c, t[j] = _pick_child(masses, slots[j] * BRANCH, t[j])
        slots[j] = slots[j] * BRANCH + c
        weights[j] = (low / masses[slots[j]]) ** beta
    top = high[0]
    for j in range(k):
        masses[slots[j]] = (new[j] + eps) ** alpha
        top = max(top, new[j])
    high[0] = top
    at = offsets[depth - 1]
    for j in range(k):
        node = slots[j] >> _SHIFT
        if j == 0 or node != slots[j - 1] >> _SHIFT:
            base = node * BRANCH
            _refresh(masses, sums, mins, masses, at + node, base, min(base + BRANCH, n))
    for d in range(depth - 2, -1, -1):
        shift = _SHIFT * (depth - d)
        for j in range(k):
            node = slots[j] >> shift
            if j == 0 or node != slots[j - 1] >> shift:
                base = offsets[d + 1] + node * BRANCH
                _refresh(sums, sums, mins, mins, offsets[d] + node, base, base + BRANCH)


class CompiledFloor(Peer):
    """:func:`floor_step` over ``capacity`` slots: only the DQN step (``dqn_call``) is timed.

    ``masses`` (leaves), ``sums`` and ``mins`` (internal nodes, levels at ``offsets``) are laid
    out as ``prisample.trees.PriorityTree``'s ``masses`` and ``sums``, each 64-byte aligned;
    ``mins`` holds the least leaf mass below each node (``PriorityTree`` keeps the least raw
    priority instead); ``high[0]`` is the largest priority seen.
    """

    name = "compiled floor"
    description = (
        "`benchmarks.compiled_floor.floor_step`: one numba call per step over prisample's 8-ary "
        "cache-line tree layout (float64 sums and mins, stratified draw, weights, write of 32 "
        "leaves and their ancestors), no checks, no max tree"
    )

    def __init__(self, capacity: int, *, seed: int = 0, batch: int = 32) -> None:
        self.capacity = int(capacity)
        self.offsets = tree_offsets(self.capacity)
        self.masses = _aligned(-(-self.capacity // BRANCH) * BRANCH)
        self.sums = _aligned(int(self.offsets[-1]))
        self.mins = _aligned(int(self.offsets[-1]))
        self.mins[:] = np.inf
        self.high = np.full(1, -np.inf)
        self.slots = np.zeros(batch, dtype=np.int64)
        self.weights = np.zeros(batch, dtype=np.float32)
        _seed(seed)

    def fill(self, priorities: npt.NDArray[np.float64]) -> None:
        p = np.ascontiguousarray(priorities, dtype=np.float64)
        _build(p[: self.capacity], self.masses, self.sums, self.mins, self.offsets, self.high, ALPHA, EPS)

    @property
    def dqn_call(self) -> Callable[[Any], object]:
        """``floor_step`` with everything but the new priorities bound (``functools.partial``, a
        C-level call): the step is the numba call alone."""
        return functools.partial(
            floor_step,
            self.masses,
            self.sums,
            self.mins,
            self.offsets,
            self.capacity,
            self.high,
            self.slots,
            self.weights,
            ALPHA,
            BETA,
            EPS,
        )

    def dqn_step(self, priorities: Any) -> None:
        self.dqn_call(priorities)
