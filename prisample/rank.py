"""Rank-based prioritization: ``P(i) ∝ rank(i)^-α`` (Schaul et al. 2016, Sec. 3.3 and App. B.2.1).

Two pieces, as in the paper:

* **An approximately sorted order.**  Slots live in an array-based binary max-heap keyed by raw
  priority (ties: lower slot first); heap position ``h`` is used directly as rank ``h + 1``.  A
  write sifts one slot in ``O(log N)``; the whole array is re-sorted every ``resort_every``
  writes so the heap cannot drift far from the true order.  A new slot enters at the maximum
  priority and so sifts to the top.
* **A piecewise-linear CDF.**  The power law over ``N`` ranks is cut into up to ``resolution``
  segments of (approximately) equal probability; each segment's exact mass
  ``Σ_{r∈seg} r^-α / Σ_{r≤N} r^-α`` is kept and positions inside a segment are drawn uniformly.
  A batch of ``k`` is stratified: the ``j``-th draw falls in probability stratum
  ``[j/k, (j+1)/k)`` — the paper's ``k`` segments of equal probability, one draw each.  The paper
  cuts the CDF into those ``k`` pieces only; the finer cut keeps the total-variation distance to
  the exact power law far smaller (measured in ``docs/concepts.md``).  The probabilities
  reported are those of this piecewise-uniform distribution, the one actually sampled, so
  importance weights stay exact.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

_EXACT_TERMS = 256


def power_sum(m: npt.ArrayLike, alpha: float) -> npt.NDArray[np.float64]:
    """``H(m) = Σ_{r=1}^{m} r^-α`` for integer ``m >= 0``, elementwise.

    Exact summation up to ``r = 256``; beyond it the Euler–Maclaurin formula with terms up to
    the third derivative, whose remainder is below ``1e-15`` there.
    """
    m = np.asarray(m, dtype=np.int64)
    head = np.concatenate(([0.0], np.cumsum(np.arange(1, _EXACT_TERMS + 1, dtype=np.float64) ** -alpha)))
    out = head[np.minimum(m, _EXACT_TERMS)].astype(np.float64)
    tail = m > _EXACT_TERMS
    if np.any(tail):
        a = float(_EXACT_TERMS + 1)
        b = m[tail].astype(np.float64)
        one_minus = 1.0 - alpha
        log_ratio = np.log(b / a)
        if abs(one_minus) < 1e-12:
            integral = log_ratio
        else:
            integral = a**one_minus * np.expm1(one_minus * log_ratio) / one_minus
        d1 = -alpha * (b ** (-alpha - 1.0) - a ** (-alpha - 1.0))
        d3 = -alpha * (alpha + 1.0) * (alpha + 2.0) * (b ** (-alpha - 3.0) - a ** (-alpha - 3.0))
        out[tail] += integral + 0.5 * (a**-alpha + b**-alpha) + d1 / 12.0 - d3 / 720.0
    return np.asarray(out, dtype=np.float64)


def power_law_partition(
    n: int, alpha: float, segments: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Cut ranks ``1..n`` into at most ``segments`` contiguous segments of near-equal mass.

    Returns ``starts`` (``len = S + 1``; segment ``s`` holds heap positions
    ``starts[s] <= h < starts[s+1]``, i.e. ranks ``starts[s]+1 .. starts[s+1]``) and ``mass``
    (``len = S``; the exact probability of each segment under ``P(r) = r^-α / H(n)``).
    Boundaries come from inverting the midpoint approximation ``∫_{1/2}^{x+1/2} t^-α dt`` of
    ``H``; any partition would do, since the masses are computed exactly.
    """
    fractions = np.arange(1, segments, dtype=np.float64) / segments
    one_minus = 1.0 - alpha
    if abs(one_minus) < 1e-12:
        c_n = math.log((n + 0.5) / 0.5)
        x = 0.5 * np.exp(fractions * c_n) - 0.5
    else:
        base = 0.5**one_minus
        c_n = ((n + 0.5) ** one_minus - base) / one_minus
        x = (fractions * c_n * one_minus + base) ** (1.0 / one_minus) - 0.5
    inner = np.unique(np.clip(np.rint(x), 1, n - 1).astype(np.int64)) if n > 1 else np.empty(0, np.int64)
    starts = np.concatenate(([0], inner, [n])).astype(np.int64)
    cumulative = power_sum(starts, alpha)
    mass = np.diff(cumulative) / cumulative[-1]
    return starts, mass


@numba.njit(cache=True, inline="always")
def _before(keys: np.ndarray, a: int, b: int) -> bool:
    """Heap order: larger key first, ties to the lower slot."""
    return keys[a] > keys[b] or (keys[a] == keys[b] and a < b)


@numba.njit(cache=True)
def _sift(keys: np.ndarray, heap: np.ndarray, pos: np.ndarray, n: int, h: int) -> None:
    slot = heap[h]
    while h > 0:
        parent = (h - 1) >> 1
        if not _before(keys, slot, heap[parent]):
            break
        heap[h] = heap[parent]
        pos[heap[h]] = h
        h = parent
    while True:
        child = 2 * h + 1
        if child >= n:
            break
        if child + 1 < n and _before(keys, heap[child + 1], heap[child]):
            child += 1
        if not _before(keys, heap[child], slot):
            break
        heap[h] = heap[child]
        pos[heap[h]] = h
        h = child
    heap[h] = slot
    pos[slot] = h


@numba.njit(cache=True)
def _heap_write(
    keys: np.ndarray, heap: np.ndarray, pos: np.ndarray, n: int, slots: np.ndarray, values: np.ndarray
) -> int:
    """``keys[slots] = values`` in order, keeping the heap: insert, sift, or (NaN) remove."""
    for j in range(slots.shape[0]):
        slot = slots[j]
        keys[slot] = values[j]
        h = pos[slot]
        if math.isnan(values[j]):
            if h >= 0:
                n -= 1
                last = heap[n]
                pos[slot] = -1
                if h != n:
                    heap[h] = last
                    pos[last] = h
                    _sift(keys, heap, pos, n, h)
            continue
        if h < 0:
            h = n
            heap[h] = slot
            pos[slot] = h
            n += 1
        _sift(keys, heap, pos, n, h)
    return n


@numba.njit(cache=True)
def _draw(
    cumulative: np.ndarray,
    starts: np.ndarray,
    density: np.ndarray,
    heap: np.ndarray,
    u: np.ndarray,
    v: np.ndarray,
    slots: np.ndarray,
    probabilities: np.ndarray,
) -> None:
    k = u.shape[0]
    last = cumulative.shape[0] - 1
    for j in range(k):
        x = (j + u[j]) / k * cumulative[last]
        s = np.searchsorted(cumulative, x, side="right")
        if s > last:
            s = last
        width = starts[s + 1] - starts[s]
        h = starts[s] + int(v[j] * width)
        if h >= starts[s + 1]:
            h = starts[s + 1] - 1
        slots[j] = heap[h]
        probabilities[j] = density[s]


class RankBackend:
    """Rank-based distribution ``P(i) = rank(i)^-α / Σ_{r=1}^{N} r^-α`` (Sec. 3.3, variant 2).

    The heap is keyed by the sampler's raw-priority array (``NaN`` = empty slot); only the order
    of priorities matters.  ``resolution`` bounds the number of CDF segments; ``resort_every`` is
    the number of priority writes between full re-sorts of the heap.
    """

    def __init__(
        self,
        raw: npt.NDArray[np.float64],
        alpha: float,
        *,
        resolution: int = 1024,
        resort_every: int | None = None,
    ) -> None:
        self.capacity = int(raw.shape[0])
        self.alpha = float(alpha)
        self.resolution = int(resolution)
        self.resort_every = int(resort_every) if resort_every is not None else max(1024, self.capacity)
        self.keys = raw
        self.heap = np.zeros(self.capacity, dtype=np.int32)
        self.pos = np.full(self.capacity, -1, dtype=np.int32)
        self.count = 0
        self.writes_since_sort = 0
        self._partition_key: tuple[int, float] | None = None
        self._starts = np.zeros(1, dtype=np.int64)
        self._cumulative = np.zeros(0, dtype=np.float64)
        self._density = np.zeros(0, dtype=np.float64)
        self.rebuild()

    # -- writes ---------------------------------------------------------------------------------
    def write(self, slots: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> None:
        self.count = _heap_write(self.keys, self.heap, self.pos, self.count, slots, values)
        self.writes_since_sort += slots.shape[0]
        if self.writes_since_sort >= self.resort_every:
            self.resort()

    def rebuild(self) -> None:
        """Re-derive the heap from the raw priorities (exactly sorted)."""
        valid = np.flatnonzero(~np.isnan(self.keys))
        self.count = valid.shape[0]
        self.pos[:] = -1
        self.heap[: self.count] = valid
        self.resort()

    def resort(self) -> None:
        """Sort the heap array exactly (a sorted array is also a valid heap)."""
        valid = self.heap[: self.count].astype(np.int64)
        order = np.lexsort((valid, -self.keys[valid]))
        self.heap[: self.count] = valid[order]
        self.pos[self.heap[: self.count]] = np.arange(self.count, dtype=np.int32)
        self.writes_since_sort = 0

    def set_alpha(self, alpha: float) -> None:
        self.alpha = float(alpha)

    # -- queries --------------------------------------------------------------------------------
    def max_priority(self) -> float:
        return float(self.keys[self.heap[0]]) if self.count else math.nan

    def _partition(self) -> None:
        """Recompute the CDF segments when ``N`` or ``α`` changed since the last draw."""
        key = (self.count, self.alpha)
        if key != self._partition_key:
            starts, mass = power_law_partition(self.count, self.alpha, min(self.count, self.resolution))
            self._starts = starts
            self._cumulative = np.cumsum(mass)
            self._density = mass / np.diff(starts)
            self._partition_key = key

    def sample(
        self, k: int, rng: np.random.Generator
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        self._partition()
        slots = np.empty(k, dtype=np.int64)
        probabilities = np.empty(k, dtype=np.float64)
        uv = rng.random((2, k))
        _draw(self._cumulative, self._starts, self._density, self.heap, uv[0], uv[1], slots, probabilities)
        return slots, probabilities

    def probabilities(self, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        self._partition()
        segment = np.searchsorted(self._starts, self.pos[slots], side="right") - 1
        return self._density[segment]

    def min_probability(self) -> float:
        self._partition()
        return float(self._density.min())

    def ranks(self) -> npt.NDArray[np.int64]:
        """Heap position + 1 of every slot (0 for slots not held): the approximate ranks."""
        return np.where(self.pos >= 0, self.pos.astype(np.int64) + 1, 0)

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "heap": self.heap[: self.count].copy(),
            "writes_since_sort": self.writes_since_sort,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        heap = np.asarray(state["heap"], dtype=np.int32)
        self.count = heap.shape[0]
        self.heap[: self.count] = heap
        self.pos[:] = -1
        self.pos[heap] = np.arange(self.count, dtype=np.int32)
        self.writes_since_sort = int(state["writes_since_sort"])
        self._partition_key = None
