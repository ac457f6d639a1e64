"""Rank-based prioritization: ``P(i) ∝ rank(i)^-α`` (Schaul et al. 2016, Sec. 3.3 and App. B.2.1).

Two pieces:

* **The order.**  The paper keeps an array-based binary heap as an approximately sorted array,
  re-sorted every 10^6 steps.  Measured here, a heap's misplacements move the sampling
  distribution by more than 0.02 in total variation within ``0.002·N`` writes, so ranks come
  from :class:`~prisample.order.SortedOrder` instead: exact, ``O(log N)`` per write.  Equal
  priorities are ranked by the recency of their write, newest first, so a new slot, which enters
  at the maximum priority, goes on top even when it ties (Algorithm 1, line 6).
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
from typing import Any, ClassVar

import numba
import numpy as np
import numpy.typing as npt

from prisample._validation import check_slots, raise_slot_problem
from prisample.order import SortedOrder, _select, stamp_limit
from prisample.weights import _MODES, _weights

__all__ = ["RankBackend", "legacy_stamps", "power_law_partition", "power_sum"]


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

    Returns ``starts`` (``len = S + 1``; segment ``s`` holds 0-based ranks
    ``starts[s] <= h < starts[s+1]``, i.e. ranks ``starts[s]+1 .. starts[s+1]``) and ``mass``
    (``len = S``; the exact probability of each segment under ``P(r) = r^-α / H(n)``).
    Boundaries come from inverting the midpoint approximation ``∫_{1/2}^{x+1/2} t^-α dt`` of
    ``H``; any partition would do, since the masses are computed exactly (``H`` as in
    :func:`power_sum`).  Compiled: a replay memory that is still filling changes ``n`` at every
    draw, and the partition is then recomputed each time.

    >>> starts, mass = power_law_partition(10, 1.0, 3)
    >>> starts.tolist(), round(float(mass.sum()), 12)
    ([0, 1, 3, 10], 1.0)
    """
    if n < 1:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.float64)
    head = _power_head(float(alpha))
    starts, cumulative = _partition_kernel(int(n), float(alpha), int(min(segments, n)), head)
    return starts, np.diff(cumulative) / cumulative[-1]


_HEADS: dict[float, npt.NDArray[np.float64]] = {}


def _power_head(alpha: float) -> npt.NDArray[np.float64]:
    """``H(m)`` for ``m = 0 .. 256``, the exactly summed part of :func:`power_sum`."""
    head = _HEADS.get(alpha)
    if head is None:
        head = power_sum(np.arange(_EXACT_TERMS + 1), alpha)
        if len(_HEADS) > 64:
            _HEADS.clear()
        _HEADS[alpha] = head
    return head


@numba.njit(cache=True)
def _power_sum_at(m: int, alpha: float, head: np.ndarray) -> float:
    """:func:`power_sum` for one ``m`` (the same terms, in the same order)."""
    if m <= _EXACT_TERMS:
        return float(head[m])
    a = float(_EXACT_TERMS + 1)
    b = float(m)
    one_minus = 1.0 - alpha
    log_ratio = math.log(b / a)
    if abs(one_minus) < 1e-12:
        integral = log_ratio
    else:
        integral = a**one_minus * math.expm1(one_minus * log_ratio) / one_minus
    d1 = -alpha * (b ** (-alpha - 1.0) - a ** (-alpha - 1.0))
    d3 = -alpha * (alpha + 1.0) * (alpha + 2.0) * (b ** (-alpha - 3.0) - a ** (-alpha - 3.0))
    tail = integral + 0.5 * (a**-alpha + b**-alpha) + d1 / 12.0 - d3 / 720.0
    return float(head[_EXACT_TERMS] + tail)


@numba.njit(cache=True)
def _partition_kernel(n: int, alpha: float, segments: int, head: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Segment starts and ``H`` at each of them; boundaries rise with the fraction, so duplicates
    (several fractions rounding to one rank) are adjacent and dropped in one pass."""
    starts = np.empty(segments + 1, dtype=np.int64)
    starts[0] = 0
    count = 1
    if segments >= n:  # one rank per segment: the exact power law
        for r in range(1, n + 1):
            starts[count] = r
            count += 1
    else:
        one_minus = 1.0 - alpha
        if abs(one_minus) < 1e-12:
            c_n = math.log((n + 0.5) / 0.5)
        else:
            base = 0.5**one_minus
            c_n = ((n + 0.5) ** one_minus - base) / one_minus
        for j in range(1, segments):
            f = j / segments
            if abs(one_minus) < 1e-12:
                x = 0.5 * math.exp(f * c_n) - 0.5
            else:
                x = (f * c_n * one_minus + base) ** (1.0 / one_minus) - 0.5
            r = min(max(int(np.rint(x)), 1), n - 1)
            if r > starts[count - 1]:
                starts[count] = r
                count += 1
        starts[count] = n
        count += 1
    cumulative = np.empty(count, dtype=np.float64)
    for s in range(count):
        cumulative[s] = _power_sum_at(int(starts[s]), alpha, head)
    return starts[:count].copy(), cumulative


@numba.njit(cache=True)
def _draw_ranks(
    cumulative: np.ndarray,
    starts: np.ndarray,
    density: np.ndarray,
    u: np.ndarray,
    v: np.ndarray,
    ranks: np.ndarray,
    probabilities: np.ndarray,
) -> None:
    """Stratified: draw ``j`` of ``k`` falls in probability stratum ``[j/k, (j+1)/k)``, then
    uniformly inside the CDF segment it lands in."""
    k = u.shape[0]
    last = cumulative.shape[0] - 1
    for j in range(k):
        x = (j + u[j]) / k * cumulative[last]
        s = min(np.searchsorted(cumulative, x, side="right"), last)
        width = starts[s + 1] - starts[s]
        ranks[j] = starts[s] + min(int(v[j] * width), width - 1)
        probabilities[j] = density[s]


@numba.njit(cache=True)
def _draw_weighted(
    cumulative: np.ndarray,
    starts: np.ndarray,
    density: np.ndarray,
    uv: np.ndarray,
    row_code: np.ndarray,
    node_blk: np.ndarray,
    node_cnt: np.ndarray,
    root_node: np.ndarray,
    root_fen: np.ndarray,
    roots: int,
    capacity: int,
    n: int,
    beta: float,
    mode: int,
    min_probability: float,
    slots: np.ndarray,
    probabilities: np.ndarray,
    weights: np.ndarray,
) -> None:
    """:func:`_draw_ranks` (ranks written to ``slots``), the slots at those ranks (``_select``,
    in place) and their weights (``_weights``): a draw and its weights in one call, the same
    arithmetic as the three calls."""
    _draw_ranks(cumulative, starts, density, uv[0], uv[1], slots, probabilities)
    _select(row_code, node_blk, node_cnt, root_node, root_fen, roots, capacity, slots, slots)
    _weights(probabilities, n, beta, mode, min_probability, weights)


class RankBackend:
    """Rank-based distribution ``P(i) = rank(i)^-α / Σ_{r=1}^{N} r^-α`` (Sec. 3.3, variant 2).

    Ranks are exact at every draw (a :class:`~prisample.order.SortedOrder` over the sampler's
    raw priorities).  Equal priorities rank by the recency of their write, newest first: every
    written slot gets the next *stamp* of a counter, so a slot added at the maximum priority
    goes on top also when it ties (Algorithm 1, line 6), and the order stays a function of the
    state (priorities and stamps).  The power law is cut into ``min(N, resolution)`` segments
    of near-equal probability, uniform inside each, recomputed whenever ``N`` or ``α`` changed
    since the last draw.
    """

    name: ClassVar[str] = "rank"
    importance_sampling: ClassVar[bool] = True
    fused_step: ClassVar[bool] = True
    """Has ``sample_weighted`` and ``checked_write`` (see :func:`prisample.backends.has_fused_step`)."""
    priority_masses: ClassVar[bool] = False  # P(i) depends on the rank, not on p_i itself

    def __init__(
        self,
        raw: npt.NDArray[np.float64],
        alpha: float,
        eps: float = 0.0,
        *,
        resolution: int = 1024,
        stamps: npt.NDArray[np.int64] | None = None,
        next_stamp: int | None = None,
    ) -> None:
        """``stamps`` (``-1`` on empty slots) and ``next_stamp`` restore a saved order; by
        default the filled slots of ``raw`` are stamped so that ties go to the lower slot.
        ``eps`` plays no part: adding it to every priority changes no rank."""
        self.capacity = int(raw.shape[0])
        self.alpha = float(alpha)
        self.resolution = int(resolution)
        self.raw = raw
        if stamps is None:
            stamps = legacy_stamps(raw)
        self.stamps = stamps
        self.next_stamp = int(stamps.max(initial=-1)) + 1 if next_stamp is None else int(next_stamp)
        self.order = SortedOrder(raw, stamps)
        self._partition_key: tuple[int, float] | None = None
        self._built: tuple[int, float] | None = None  # (anchor, α) of the cut below
        self._anchor_starts = np.zeros(1, dtype=np.int64)
        self._anchor_h = np.zeros(1, dtype=np.float64)  # H at each boundary of that cut
        self._starts = np.zeros(1, dtype=np.int64)
        self._cumulative = np.zeros(0, dtype=np.float64)
        self._density = np.zeros(0, dtype=np.float64)
        self._min_density = 0.0

    @classmethod
    def from_state(
        cls, raw: npt.NDArray[np.float64], alpha: float, eps: float, state: Any, *, legacy: bool = False
    ) -> RankBackend:
        """A backend over ``raw`` (not modified) restored from :meth:`state_dict` output.

        Raises ``ValueError``/``TypeError`` naming the key unless ``state`` is
        ``{"stamps": int64[capacity], "next_stamp": int}`` with ``stamps = -1`` exactly on the
        empty slots of ``raw`` and distinct ``0 <= stamps < next_stamp <= stamp_limit(capacity)``
        elsewhere.
        ``legacy``: states of version <= 2 kept no stamps (``{}``; ties went to the lower slot).
        """
        if not isinstance(state, dict):
            raise TypeError(f"backend_state should be a dict, but got backend_state={state!r}")
        if legacy and not state:
            return cls(raw, alpha)
        if set(state) != {"stamps", "next_stamp"}:
            raise ValueError(
                f"backend_state of a rank sampler should have the keys ['next_stamp', 'stamps'], "
                f"but got keys {sorted(map(repr, state))}"
            )
        stamps, next_stamp = state["stamps"], state["next_stamp"]
        capacity = raw.shape[0]
        if not isinstance(stamps, np.ndarray) or stamps.dtype != np.int64 or stamps.shape != raw.shape:
            raise TypeError(
                f"backend_state['stamps'] should be an int64 array of shape {raw.shape}, but got "
                f"{type(stamps).__name__} {getattr(stamps, 'dtype', '')} {getattr(stamps, 'shape', '')}"
            )
        if isinstance(next_stamp, bool) or not isinstance(next_stamp, (int, np.integer)):
            raise TypeError(f"backend_state['next_stamp'] should be an integer, but got {next_stamp!r}")
        empty = np.isnan(raw)
        if not np.array_equal(stamps < 0, empty) or np.any(stamps[empty] != -1):
            raise ValueError(
                "backend_state['stamps'] should be -1 exactly on the empty slots and >= 0 on the filled ones"
            )
        filled_stamps = stamps[~empty]
        if np.unique(filled_stamps).shape[0] != filled_stamps.shape[0]:
            raise ValueError("backend_state['stamps'] should be distinct on the filled slots (one per write)")
        top = int(stamps.max(initial=-1))
        if not top < int(next_stamp) <= stamp_limit(capacity):
            raise ValueError(
                f"backend_state['next_stamp'] should exceed every stamp ({top}) and be at most "
                f"{stamp_limit(capacity)}, but got next_stamp={next_stamp!r}"
            )
        return cls(raw, alpha, stamps=stamps.copy(), next_stamp=int(next_stamp))

    @property
    def count(self) -> int:
        return self.order.count

    def write(self, slots: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> None:
        k = slots.shape[0]
        if self.next_stamp + k > stamp_limit(self.capacity):
            self._renumber()
        stamps = np.arange(self.next_stamp, self.next_stamp + k, dtype=np.int64)
        self.next_stamp += k
        if k > max(4096, self.order.count // 4):  # bulk: sorting anew is cheaper
            _assign(self.raw, self.stamps, slots, values, stamps)
            self.order.rebuild()
        else:
            self.order.write(slots, values, stamps)

    def checked_write(self, slots: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> None:
        """``check_slots(raw, slots, values)`` (every slot filled, every value finite and
        ``>= 0``) then :meth:`write`, with its error and nothing written on one; in one compiled
        call for a batch that :meth:`write` would not re-sort in bulk (the sampler's
        ``update_priorities``)."""
        k = slots.shape[0]
        if k > max(4096, self.order.count // 4) or self.next_stamp + k > stamp_limit(self.capacity):
            check_slots(self.raw, slots, values)
            self.write(slots, values)
            return
        code, j = self.order.checked_write(slots, values, self.next_stamp)
        if code:
            raise_slot_problem(code, j, self.raw, slots, values)
        self.next_stamp += k

    def _renumber(self) -> None:
        """Stamps ``0 .. N-1`` in the same relative order: the counter nears the int64 limit
        (after about ``2^63 / capacity`` writes), and only the order of stamps matters."""
        filled = np.flatnonzero(self.stamps >= 0)
        self.stamps[filled[np.argsort(self.stamps[filled], kind="stable")]] = np.arange(filled.shape[0])
        self.next_stamp = int(filled.shape[0])
        self.order.rebuild()

    def set_alpha(self, alpha: float) -> None:
        self.alpha = float(alpha)

    def total_mass(self) -> float:
        """``H(N) = Σ_{r=1}^{N} r^-α``, the normaliser of ``P(rank r) = r^-α / H(N)`` (Sec. 3.3).

        Each stratum of the partition holds the exact mass ``H`` of its ranks, spread evenly over
        them, so ``P(i) · H(N)`` is the mean of ``r^-α`` over ``i``'s stratum."""
        return float(power_sum(self.count, self.alpha)) if self.count else 0.0

    def max_priority(self) -> float:
        return float(self.raw[self.order.select(np.zeros(1, dtype=np.int64))[0]]) if self.count else math.nan

    def _partition(self) -> None:
        """Bring the CDF segments up to date with ``N`` and ``α``.

        A memory that is filling grows ``N`` by a few slots between draws.  Rather than cutting
        the power law anew each time, ``N`` is cut at an anchor ``A <= N`` (``N`` rounded down to a
        multiple of ``g``, the power of two with ``256 g <= N < 512 g``), and the last segment
        absorbs ranks ``A+1..N``.  Segment masses stay exact (``H`` at every boundary is kept; only
        ``H(N)`` changes), the last segment takes at most ``g <= N/256`` more ranks where the power
        law is flattest, and the partition stays a function of ``(N, α)`` alone, so a restored
        sampler draws what the uninterrupted one would.
        """
        n = self.count
        key = (n, self.alpha)
        if key == self._partition_key:
            return
        anchor = n
        if n > 256:
            g = 1 << (n.bit_length() - 9)
            anchor = n - n % g
        if anchor <= self.resolution:
            anchor = n
        if self._built != (anchor, self.alpha):
            segments = min(anchor, self.resolution)
            head = _power_head(self.alpha)
            self._anchor_starts, self._anchor_h = _partition_kernel(anchor, self.alpha, segments, head)
            self._built = (anchor, self.alpha)
        starts = self._anchor_starts.copy()
        h_starts = self._anchor_h.copy()
        if n != anchor:
            starts[-1] = n
            h_starts[-1] = _power_sum_at(n, self.alpha, _power_head(self.alpha))
        h_segments = np.diff(h_starts)
        total = h_starts[-1]
        self._starts = starts
        self._cumulative = np.cumsum(h_segments) / total
        self._density = h_segments / total / np.diff(starts)
        self._min_density = float(self._density.min())
        self._partition_key = key

    def sample(
        self, k: int, rng: np.random.Generator
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        self._partition()
        ranks = np.empty(k, dtype=np.int64)
        probabilities = np.empty(k, dtype=np.float64)
        uv = rng.random((2, k))
        _draw_ranks(self._cumulative, self._starts, self._density, uv[0], uv[1], ranks, probabilities)
        return self.order.select(ranks), probabilities

    def sample_weighted(
        self, k: int, rng: np.random.Generator, beta: float, weight_norm: str
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float32]]:
        """:meth:`sample` and the draws' importance weights ``w_i = (N · P(i))^-β`` normalised
        by ``weight_norm`` (Sec. 3.4, as :func:`~prisample.weights.importance_weights` with
        ``P_min`` = :meth:`min_probability`) in one compiled call: the same batch and weights."""
        self._partition()
        slots = np.empty(k, dtype=np.int64)
        probabilities = np.empty(k, dtype=np.float64)
        weights = np.empty(k, dtype=np.float32)
        order = self.order
        _draw_weighted(
            self._cumulative,
            self._starts,
            self._density,
            rng.random((2, k)),
            order.row_code,
            order.node_blk,
            order.node_cnt,
            order.root_node,
            order.root_fen,
            int(order.meta[3]),
            self.capacity,
            int(order.meta[1]),
            beta,
            _MODES[weight_norm],
            self._min_density if weight_norm == "memory" else 1.0,
            slots,
            probabilities,
            weights,
        )
        return slots, probabilities, weights

    def probabilities(self, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        self._partition()
        segment = np.searchsorted(self._starts, self.order.rank(slots), side="right") - 1
        return self._density[segment]

    def min_probability(self) -> float:
        self._partition()
        return self._min_density

    def segments(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The piecewise-uniform distribution drawn from: ``(starts, density)``, copies.

        Segment ``s`` holds the 0-based ranks ``starts[s] <= h < starts[s+1]`` (``len(starts) =
        S + 1``, ``starts[S] = N``), each drawn with probability ``density[s]`` (``len = S``), so
        ``Σ_s (starts[s+1] - starts[s]) · density[s] = 1`` and ``density`` does not grow with
        ``s`` (but for rounding).  The slots of those ranks are ``order.select(ranks)``.
        """
        if self.count == 0:
            return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.float64)
        self._partition()
        return self._starts.copy(), self._density.copy()

    def state_dict(self) -> dict[str, Any]:
        """The write stamps that order equal priorities (the rest follows from the priorities)."""
        return {"stamps": self.stamps.copy(), "next_stamp": self.next_stamp}


def legacy_stamps(raw: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Stamps under which equal priorities rank by slot, lowest first (the order before stamps
    existed): ``capacity - 1 - slot`` on filled slots, ``-1`` on empty ones."""
    capacity = raw.shape[0]
    return np.where(np.isnan(raw), -1, capacity - 1 - np.arange(capacity, dtype=np.int64)).astype(np.int64)


@numba.njit(cache=True)
def _assign(
    raw: np.ndarray, stamps: np.ndarray, slots: np.ndarray, values: np.ndarray, new: np.ndarray
) -> None:
    for j in range(slots.shape[0]):
        raw[slots[j]] = values[j]
        stamps[slots[j]] = -1 if math.isnan(values[j]) else new[j]
