"""The compiled floor of a DQN step: the least a compiled proportional sampler can do per step.

One numba call per step, no validation and no Python around it: a stratified proportional
sample of ``k`` slots from a flat float64 sum tree, their importance weights, then the write of
``k`` new priorities with every parent recomputed.  The trees are the classic binary ones over
``P`` (next power of two) leaves, node ``i`` with children ``2i`` and ``2i + 1``: a sum tree for
the draw and a min tree for ``P_min``, which the weights normalised over the memory need
(Schaul et al. 2016, Sec. 3.4: ``w_i = (N · P(i))^-β / max_j w_j = (P_min / P(i))^β``).  Same
conventions as the peers of :mod:`benchmarks.peers`: leaves ``m_i = (p_i + ε)^α``, draw ``j`` of
``k`` at target ``(j + u_j) · Σ m / k``.

It is what ``make bench`` sets prisample's DQN step against ("prisample ≤ 1.5× the compiled
floor"): a sampler that checks its input, keeps a max tree, counts its slots or is called from
Python methods does more than this.  The uniforms come from numba's own generator, seeded in
compiled code, so a step costs no call into numpy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from benchmarks.peers import ALPHA, BETA, EPS, Peer

__all__ = ["CompiledFloor", "floor_step"]


@numba.njit(cache=True)
def _seed(seed: int) -> None:
    np.random.seed(seed)


@numba.njit(cache=True)
def floor_step(
    sums: np.ndarray,
    mins: np.ndarray,
    slots: np.ndarray,
    weights: np.ndarray,
    n: int,
    alpha: float,
    beta: float,
    eps: float,
    new: np.ndarray,
) -> None:
    """Draw ``slots.shape[0]`` slots (stratified) with their weights, then set those slots' raw
    priorities to ``new`` (leaves ``(new + ε)^α``) and recompute their ancestors in both trees.
    ``n`` slots are filled (leaves ``0 .. n - 1``)."""
    size = sums.shape[0] // 2
    k = slots.shape[0]
    total = sums[1]
    width = total / k
    # (P_min / P(i))^β = (m_min / m_i)^β: the total cancels.
    low = mins[1]
    for j in range(k):
        t = (j + np.random.random()) * width
        i = 1
        while i < size:
            left = sums[2 * i]
            if t < left:
                i = 2 * i
            else:
                t -= left
                i = 2 * i + 1
        slot = min(i - size, n - 1)  # rounding past the last filled leaf
        slots[j] = slot
        weights[j] = (low / sums[size + slot]) ** beta
    for j in range(k):
        i = size + slots[j]
        m = (new[j] + eps) ** alpha
        sums[i] = m
        mins[i] = m
        i >>= 1
        while i >= 1:
            sums[i] = sums[2 * i] + sums[2 * i + 1]
            mins[i] = min(mins[2 * i], mins[2 * i + 1])
            i >>= 1


class CompiledFloor(Peer):
    """:func:`floor_step` over ``capacity`` slots: only the DQN step (``dqn_call``) is timed."""

    name = "compiled floor"
    description = (
        "`benchmarks.compiled_floor.floor_step`: one numba call per step (binary float64 sum and "
        "min trees, stratified draw, weights, write of 32 leaves and their ancestors), no checks"
    )

    def __init__(self, capacity: int, *, seed: int = 0, batch: int = 32) -> None:
        self.capacity = int(capacity)
        size = 1 << max(0, (self.capacity - 1).bit_length())
        self.sums = np.zeros(2 * size, dtype=np.float64)
        self.mins = np.full(2 * size, np.inf, dtype=np.float64)
        self.slots = np.zeros(batch, dtype=np.int64)
        self.weights = np.zeros(batch, dtype=np.float32)
        _seed(seed)

    def fill(self, priorities: npt.NDArray[np.float64]) -> None:
        size = self.sums.shape[0] // 2
        leaves = (np.asarray(priorities, dtype=np.float64) + EPS) ** ALPHA
        self.sums[size : size + self.capacity] = leaves
        self.mins[size : size + self.capacity] = leaves
        level = size
        while level > 1:
            parents = slice(level // 2, level)
            self.sums[parents] = self.sums[level : 2 * level : 2] + self.sums[level + 1 : 2 * level : 2]
            self.mins[parents] = np.minimum(
                self.mins[level : 2 * level : 2], self.mins[level + 1 : 2 * level : 2]
            )
            level //= 2

    @property
    def dqn_call(self) -> Callable[[Any], object]:
        """``floor_step`` with everything but the new priorities bound (``functools.partial``, a
        C-level call): the step is the numba call alone."""
        return functools.partial(
            floor_step, self.sums, self.mins, self.slots, self.weights, self.capacity, ALPHA, BETA, EPS
        )

    def dqn_step(self, priorities: Any) -> None:
        self.dqn_call(priorities)
