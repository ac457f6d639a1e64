"""A naive O(N) reference model of :class:`prisample.PrioritizedSampler`, and test helpers.

The model stores raw priorities in a dict and recomputes every distribution from scratch with
the paper's formulas (Schaul et al. 2016): proportional ``P(i) = (p_i + ε)^α / Σ_k (p_k + ε)^α``
(Eq. 1), rank-based ``P(i) = rank(i)^-α / Σ_{r<=N} r^-α`` (rank by priority descending, ties to the
newest write, so that added slots go on top), greedy (the ``m`` slots tied at the maximum share
probability 1; a batch takes ties lowest slot first), uniform ``1/N``; new slots enter at the
maximum raw priority of the *current* memory (1 when empty); importance weights
``w_i = c_i (N · P(i))^-β`` — ``c_i`` the slot's correction factor, 1 unless set (e.g. an
off-policy ratio ρ, Sec. 6) — normalised over the memory, the batch or not at all (Sec. 3.4); a
slot of probability 0 (priority 0 with ``ε = 0``) is never drawn and weighs 0.  Nothing here shares code
with ``prisample``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from prisample import LinearSchedule, PrioritizedSampler

BACKENDS = ("proportional", "rank", "greedy", "uniform")
NORMS = ("memory", "batch", "none")


def power_law(n: int, alpha: float) -> np.ndarray:
    """Exact rank distribution ``r^-α / Σ_{r<=n} r^-α`` for ranks ``1..n``."""
    ranks = np.arange(1, n + 1, dtype=np.float64)
    mass = ranks**-alpha
    return mass / math.fsum(mass)


def weight_formula(
    probabilities: Sequence[float],
    n: int,
    beta: float,
    normalize: str,
    min_probability: float,
    corrections: Sequence[float] | None = None,
    log_memory_max: float | None = None,
) -> np.ndarray:
    """Hand-written ``c_i (N·P)^-β`` with the chosen normalisation, in float64 logarithms (so
    that subnormal probabilities neither overflow nor give ``inf / inf``).

    ``log_memory_max`` is ``log max_j c_j (N·P_j)^-β`` over the memory (needed with corrections
    under ``"memory"``; without corrections it is ``-β log(N·P_min)``).  ``P = 0`` weighs 0.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    c = np.ones_like(p) if corrections is None else np.asarray(corrections, dtype=np.float64)
    log_w = np.full(p.shape, -np.inf)
    drawable = (p > 0.0) & (c > 0.0)
    log_w[drawable] = np.log(c[drawable]) - beta * np.log(n * p[drawable])
    if normalize == "none":
        return np.minimum(np.exp(log_w), np.finfo(np.float32).max)  # clipped, never inf
    if normalize == "memory":
        top = -beta * math.log(n * min_probability) if log_memory_max is None else log_memory_max
    elif normalize == "batch":
        top = float(log_w.max()) if log_w.shape[0] else 0.0
    else:
        raise AssertionError(normalize)
    if top == -np.inf:
        return np.zeros_like(p)
    return np.exp(log_w - top)


class ReferenceSampler:
    """The semantics of ``PrioritizedSampler`` written the slow, obvious way."""

    def __init__(
        self,
        capacity: int,
        *,
        alpha: float = 0.6,
        beta: float | LinearSchedule = 0.4,
        eps: float = 1e-6,
        backend: str = "proportional",
        weight_norm: str = "memory",
        size: int | None = None,
    ) -> None:
        self.capacity = capacity
        self.alpha = alpha
        self.beta_schedule = beta
        self.eps = eps
        self.backend = backend
        self.weight_norm = weight_norm
        self.raw: dict[int, float] = {}
        self.corrections: dict[int, float] = {}
        self.written: dict[int, int] = {}  # when each slot was last written (rank ties: newest first)
        self.writes = 0
        self.step = 0
        self.add(range(capacity if size is None else size))

    # -- state ------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def valid(self) -> list[int]:
        return sorted(self.raw)

    @property
    def max_priority(self) -> float:
        return max(self.raw.values()) if self.raw else 1.0

    @property
    def priorities(self) -> np.ndarray:
        out = np.full(self.capacity, np.nan)
        for slot, value in self.raw.items():
            out[slot] = value
        return out

    @property
    def beta(self) -> float:
        if isinstance(self.beta_schedule, LinearSchedule):
            schedule = self.beta_schedule
            fraction = min(self.step / schedule.steps, 1.0)
            return schedule.start + (schedule.end - schedule.start) * fraction
        return float(self.beta_schedule)

    # -- writes -----------------------------------------------------------------------------------
    @property
    def correction_array(self) -> np.ndarray:
        out = np.full(self.capacity, np.nan)
        for slot in self.raw:
            out[slot] = self.corrections.get(slot, 1.0)
        return out

    def add(self, slots: Iterable[int], corrections: Iterable[float] | None = None) -> None:
        slots = [int(s) for s in slots]
        factors = [1.0] * len(slots) if corrections is None else [float(c) for c in corrections]
        if any(not (math.isfinite(c) and c >= 0.0) for c in factors):
            raise ValueError("corrections should be finite and >= 0")
        priority = self.max_priority
        for slot, factor in zip(slots, factors, strict=True):
            self.raw[slot] = priority
            self.corrections[slot] = factor
            self._stamp(slot)

    def _stamp(self, slot: int) -> None:
        self.written[slot] = self.writes
        self.writes += 1

    def set_corrections(self, slots: Iterable[int], values: Iterable[float]) -> None:
        pairs = [(int(s), float(v)) for s, v in zip(slots, values, strict=True)]
        if any(s not in self.raw for s, _ in pairs):
            raise ValueError("indices should be valid slots")
        if any(not (math.isfinite(v) and v >= 0.0) for _, v in pairs):
            raise ValueError("corrections should be finite and >= 0")
        for slot, value in pairs:
            self.corrections[slot] = value

    def mass_ok(self, value: float, alpha: float | None = None) -> bool:
        """Whether ``(p + ε)^α`` is a float the sampler accepts: at most ``float64 max / (2 ·
        capacity)`` (so that the total is finite), and positive unless ``p + ε = 0`` (a zero
        priority with ``ε = 0``, mass 0 on purpose)."""
        alpha = self.alpha if alpha is None else alpha
        try:
            mass = (value + self.eps) ** alpha
        except OverflowError:
            return False
        limit = np.finfo(np.float64).max / (2.0 * self.capacity)
        return mass <= limit and (mass > 0.0 or value + self.eps == 0.0)

    def update_priorities(self, slots: Iterable[int], values: Iterable[float]) -> None:
        pairs = [(int(s), float(v)) for s, v in zip(slots, values, strict=True)]
        if any(s not in self.raw for s, _ in pairs):
            raise ValueError("indices should be valid slots")
        if any(not (math.isfinite(v) and v >= 0.0) for _, v in pairs):
            raise ValueError("priorities should be finite and >= 0")
        if self.backend == "proportional" and not all(self.mass_ok(v) for _, v in pairs):
            raise ValueError("priorities should give a finite positive (p + eps)^alpha")
        for slot, value in pairs:
            self.raw[slot] = value
            self._stamp(slot)

    def remove(self, slots: Iterable[int]) -> None:
        for slot in slots:
            self.raw.pop(int(slot), None)
            self.corrections.pop(int(slot), None)
            self.written.pop(int(slot), None)

    # -- distribution -----------------------------------------------------------------------------
    def rank_order(self) -> list[int]:
        """Valid slots by priority descending, ties to the newest write (rank 1 first)."""
        return sorted(self.raw, key=lambda slot: (-self.raw[slot], -self.written[slot]))

    def distribution(self) -> dict[int, float]:
        """``P(i)`` of every valid slot under the exact formula of the backend."""
        n = self.size
        if n == 0:
            return {}
        if self.backend == "proportional":
            mass = {slot: (p + self.eps) ** self.alpha for slot, p in self.raw.items()}
            total = math.fsum(mass.values())
            if total == 0.0:  # every priority 0 with ε = 0: nothing can be drawn
                return dict.fromkeys(mass, 0.0)
            return {slot: m / total for slot, m in mass.items()}
        if self.backend == "rank":
            law = power_law(n, self.alpha)
            return {slot: float(law[r]) for r, slot in enumerate(self.rank_order())}
        if self.backend == "greedy":
            top = self.max_priority
            ties = sum(1 for p in self.raw.values() if p == top)
            return {slot: (1.0 / ties if p == top else 0.0) for slot, p in self.raw.items()}
        if self.backend == "uniform":
            return dict.fromkeys(self.raw, 1.0 / n)
        raise AssertionError(self.backend)

    def probabilities(self, slots: Iterable[int]) -> np.ndarray:
        dist = self.distribution()
        return np.array([dist[int(s)] for s in slots], dtype=np.float64)

    def drawable(self) -> bool:
        """Whether a draw is possible: some valid slot has ``P(i) > 0``."""
        return any(p > 0.0 for p in self.distribution().values())

    def min_probability(self) -> float:
        """Smallest positive ``P(i)`` (slots of probability 0 are never drawn)."""
        positive = [p for p in self.distribution().values() if p > 0.0]
        return min(positive) if positive else 0.0

    def weights(self, slots: Iterable[int], distribution: dict[int, float] | None = None) -> np.ndarray:
        """IS weights ``c_i (N·P(i))^-β`` of ``slots`` at the current ``β``, normalised; for greedy
        ``c_i`` alone, normalised the same way.  ``distribution`` overrides the exact ``P`` (the
        rank backend's piecewise power law)."""
        slots = [int(s) for s in slots]
        c = [self.corrections.get(s, 1.0) for s in slots]
        every = self.valid
        c_every = np.array([self.corrections.get(s, 1.0) for s in every])
        if self.backend == "greedy":
            largest = float(c_every.max())
            top = (math.log(largest) if largest > 0 else -math.inf) if self.weight_norm == "memory" else None
            return weight_formula(np.ones(len(slots)), self.size, 0.0, self.weight_norm, 1.0, c, top)
        dist = self.distribution() if distribution is None else distribution
        p = np.array([dist[s] for s in slots])
        p_every = np.array([dist[s] for s in every])
        p_min = float(p_every[p_every > 0].min()) if np.any(p_every > 0) else 0.0
        top = None
        if self.weight_norm == "memory":  # log max_j c_j (N·P_j)^-β
            keep = (p_every > 0) & (c_every > 0)
            logs = np.log(c_every[keep]) - self.beta * np.log(self.size * p_every[keep])
            top = float(logs.max(initial=-np.inf))
        return weight_formula(p, self.size, self.beta, self.weight_norm, p_min, c, top)

    def greedy_top(self, k: int) -> list[int]:
        """The ``k`` largest priorities, ties to the lower slot."""
        return sorted(self.raw, key=lambda slot: (-self.raw[slot], slot))[:k]


# ------------------------------------------------------------------------------------------------
# statistics
# ------------------------------------------------------------------------------------------------


def chi_square(counts: np.ndarray, probabilities: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of ``counts`` against ``probabilities`` and its degrees of freedom."""
    counts = np.asarray(counts, dtype=np.float64)
    expected = counts.sum() * np.asarray(probabilities, dtype=np.float64)
    assert np.all(counts[expected == 0.0] == 0.0), "a bin of probability 0 was drawn"
    keep = expected > 0.0
    statistic = float(np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep]))
    return statistic, int(keep.sum()) - 1


def chi_square_threshold(df: int, z: float = 5.5) -> float:
    """Upper quantile of χ²(df) at standard-normal level ``z`` (Wilson–Hilferty approximation).

    ``z = 5.5`` is a one-sided tail of about 2e-8: with fixed seeds a correct sampler fails with
    negligible probability, while any wrong formula at the sample sizes used is off by far more.
    Stratified batches have smaller count variance than multinomial ones, so the bound is
    conservative for them.
    """
    if df <= 0:
        return 0.0
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def assert_frequencies(counts: np.ndarray, probabilities: np.ndarray, z: float = 5.5) -> None:
    statistic, df = chi_square(counts, probabilities)
    threshold = chi_square_threshold(df, z)
    assert statistic <= threshold, f"chi-square {statistic:.1f} >= {threshold:.1f} with df={df}"


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64)).sum())


def draw_counts(sampler: PrioritizedSampler, calls: int, k: int) -> np.ndarray:
    counts = np.zeros(sampler.capacity, dtype=np.int64)
    for _ in range(calls):
        counts += np.bincount(sampler.sample(k).indices, minlength=sampler.capacity)
    return counts


# ------------------------------------------------------------------------------------------------
# state helpers
# ------------------------------------------------------------------------------------------------


def assert_same(a: Any, b: Any, path: str = "state") -> None:
    """Structural equality of nested dicts/lists/arrays (NaN equal to NaN)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {set(a)} != {set(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{path}: shape {a.shape} != {b.shape}"
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), f"{path}: {a} != {b}"
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: length"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def clone(sampler: PrioritizedSampler, seed: int = 12345) -> PrioritizedSampler:
    """A fresh sampler (other seed, default options) loaded with ``sampler``'s state."""
    other = type(sampler)(sampler.capacity, backend=sampler.backend_name, seed=seed)
    other.load_state_dict(copy.deepcopy(sampler.state_dict()))
    return other


def assert_draws_equal(a: Any, b: Any) -> None:
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(a.probabilities, b.probabilities)
    assert a.indices.dtype == np.int64 and a.weights.dtype == np.float32
    assert a.probabilities.dtype == np.float64
