"""Off-policy corrections (Schaul et al. 2016, Sec. 6): importance ratios ``ρ`` and per-slot
correction factors ``c_i`` on the importance weights.

With behaviour policy ``μ`` filling the memory and target policy ``π`` being learned about, the
per-decision importance ratio of a transition ``(s, a)`` is ``ρ = π(a|s) / μ(a|s)``
(:func:`importance_ratios`).  Sec. 6 maps the two standard off-policy corrections onto the
sampler:

* *weighted importance sampling*: uniform draws and ``w = ρ`` — ``CorrectedSampler(alpha=0,
  beta=1)`` with ``ρ`` as the slots' correction factors (:meth:`CorrectedSampler.set_corrections`);
  the memory normalisation then gives ``w_i = ρ_i / max_j ρ_j``;
* *rejection sampling*: ``p = min(1, ρ)`` with ``α = 1``, ``β = 0``, proportional and ``ε = 0``
  (:func:`~prisample.methods.rejection.rejection_priorities`), so a transition ``π`` never takes
  is never drawn;

and proposes hybrids ``p = ρ · |δ|`` (:func:`~prisample.methods.hybrid.hybrid_priorities`),
annealed or ranked.  With ``β = 1`` and ``ρ`` as correction factor, a hybrid's weight
``ρ_i (N·P(i))^-1`` undoes the ``ρ`` inside the priority and applies it once, so the expected
update is the ``ρ``-corrected one.

A factor ``c_i >= 0`` per slot multiplies the slot's weight before normalisation:
``w_i = c_i (N · P(i))^-β / max_j c_j (N · P(j))^-β`` under ``weight_norm="memory"``.  Two pieces:

* :class:`CorrectionFactors`: the factors and what the memory's maximum needs kept in step with
  them, computed from the backend's public methods only;
* :class:`CorrectedSampler`: a :class:`~prisample.PrioritizedSampler` whose weights carry them.

>>> from prisample.methods import hybrid_priorities, rejection_priorities
>>> rho = importance_ratios([0.9, 0.05], [0.25, 0.25])
>>> rho.round(6).tolist()
[3.6, 0.2]
>>> rejection_priorities(rho).round(6).tolist()
[1.0, 0.2]
>>> hybrid_priorities(rho, [-0.5, 2.0]).round(6).tolist()
[1.8, 0.4]
>>> s = CorrectedSampler(2, alpha=0.0, beta=1.0, seed=0)
>>> s.set_corrections([0, 1], rho)
>>> bool(np.allclose(s.weights([0, 1]), rho / rho.max()))   # weighted IS: ρ_i / max_j ρ_j
True
"""

from __future__ import annotations

import threading
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from prisample._validation import as_indices, as_priorities, check_real, check_slots, state_float_array
from prisample.backends import Backend, ProportionalBackend, UniformBackend
from prisample.methods._checks import check_each, reals
from prisample.rank import RankBackend
from prisample.sampler import PrioritizedSampler
from prisample.trees import ArgMaxTree
from prisample.weights import LinearSchedule, WeightNorm, corrected_weights_unchecked, log_memory_max

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

__all__ = ["CorrectedSampler", "CorrectionFactors", "importance_ratios"]


def importance_ratios(pi_tm1: npt.ArrayLike, mu_tm1: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Per-decision importance ratios ``ρ_{t-1} = π(a_{t-1}|s_{t-1}) / μ(a_{t-1}|s_{t-1})``.

    ``pi_tm1`` and ``mu_tm1`` are the probabilities the target and the behaviour policy give the
    action that was taken (same shape).  ``μ > 0`` is required (the action was taken under
    ``μ``); ``π = 0`` gives ``ρ = 0``.  Precup, Sutton and Singh (2000), per-decision importance
    sampling; Schaul et al. (2016), Sec. 6.

    >>> importance_ratios([0.5, 0.0, 1.0], [0.25, 0.5, 0.5]).tolist()
    [2.0, 0.0, 2.0]
    """
    pi = reals(pi_tm1, "pi_tm1")
    mu = reals(mu_tm1, "mu_tm1")
    if pi.shape != mu.shape:
        raise ValueError(f"pi_tm1 and mu_tm1 should have the same shape, but got {pi.shape} and {mu.shape}")
    check_each((pi >= 0.0) & (pi <= 1.0), pi, "pi_tm1", "probabilities in [0, 1]")
    check_each((mu > 0.0) & (mu <= 1.0), mu, "mu_tm1", "probabilities in (0, 1] (the action was taken)")
    return pi / mu


class CorrectionFactors:
    """The factors ``c_i`` of a sampler's slots (``NaN`` on empty ones) and what the memory's
    normaliser ``max_j c_j (P_min / P(j))^β`` needs at hand: the arg-max index of ``c``,
    ``log c_i`` and, for proportional draws, ``log(p_i + ε)``.

    :meth:`write` sets factors and :meth:`priorities_written` follows writes of the raw
    priorities; the owner calls both under its lock.
    """

    def __init__(self, values: FloatArray, raw: FloatArray, eps: float, *, proportional: bool) -> None:
        """``values`` (kept, not copied) over the raw priorities ``raw`` (read, not kept)."""
        self.values = values
        self.eps = eps
        self._max = ArgMaxTree(values)
        with np.errstate(divide="ignore"):  # log 0 = -inf: a zero factor never sets the maximum
            self._log = np.log(values)
            self._log_shifted = np.log(raw + eps) if proportional else None
        self._writes = 0
        self._cache: tuple[int, float, float, float] | None = None  # (writes, α, β, maximum)

    @property
    def nbytes(self) -> int:
        shifted = 0 if self._log_shifted is None else self._log_shifted.nbytes
        return self.values.nbytes + self._max.index.nbytes + self._log.nbytes + shifted

    def write(self, slots: IntArray, factors: FloatArray) -> None:
        """``c[slots] = factors`` in order (last duplicate wins; ``NaN`` empties a slot)."""
        self._max.write(slots, factors)
        with np.errstate(divide="ignore"):
            self._log[slots] = np.log(self.values[slots])  # read after the write: last one wins
        self._writes += 1

    def priorities_written(self, slots: IntArray, raw: FloatArray) -> None:
        """The raw priorities ``raw`` changed at ``slots``."""
        if self._log_shifted is not None:
            with np.errstate(divide="ignore"):
                self._log_shifted[slots] = np.log(raw[slots] + self.eps)
        self._writes += 1

    def top(self) -> float:
        """``max_j c_j`` over valid slots (0 when there are none)."""
        slot = self._max.argmax()
        return float(self.values[slot]) if slot >= 0 else 0.0

    def memory_max(
        self, backend: Backend, alpha: float, beta: float, min_probability: float, top: float
    ) -> float:
        """``max_j (c_j / top) (P_min / P(j))^β`` over valid slots with ``P(j) > 0``, exactly
        (``top = max_j c_j``, so the result lies in ``(0, 1]``).

        * every drawable slot equally likely (uniform backend, ``α = 0``) or ``β = 0``:
          ``max_j c_j``, ``O(1)`` from the arg-max index;
        * proportional: ``P(j) ∝ exp(α log(p_j + ε))``, so the maximum is that of
          ``log c_j - αβ log(p_j + ε)``, one ``O(N)`` pass over the two kept log arrays;
        * rank: ``P`` is constant on each segment of the power law and falls with rank, so the
          segments are scanned from the least probable up, each giving ``max c`` of its slots,
          stopping once ``max_j c_j (P_min / P_segment)^β`` cannot beat the best so far.

        Cached until the next write, or a change of ``α`` or ``β``.
        """
        zero_mass = (
            isinstance(backend, ProportionalBackend)
            and self.eps == 0.0
            and alpha > 0.0
            and backend.min_priority() == 0.0
        )
        flat = isinstance(backend, UniformBackend) or alpha == 0.0 or beta == 0.0
        if flat and not zero_mass:
            return 1.0
        cached = self._cache
        if cached is not None and cached[:3] == (self._writes, alpha, beta):
            return cached[3]
        if isinstance(backend, ProportionalBackend):
            assert self._log_shifted is not None
            value = log_memory_max(
                self._log, self._log_shifted, alpha, beta, min_probability, backend.total_mass(), top
            )
        else:
            assert isinstance(backend, RankBackend)
            value = _rank_memory_max(backend, self.values, top, beta, min_probability)
        self._cache = (self._writes, alpha, beta, value)
        return value


def _rank_memory_max(
    backend: RankBackend, corrections: FloatArray, top: float, beta: float, min_probability: float
) -> float:
    """:meth:`CorrectionFactors.memory_max` of a rank backend, segment by segment."""
    starts, density = backend.segments()
    best = 0.0
    for segment in range(density.shape[0] - 1, -1, -1):
        factor = min(min_probability / density[segment], 1.0) ** beta
        if factor <= best:
            break
        slots = backend.order.select(np.arange(starts[segment], starts[segment + 1], dtype=np.int64))
        best = max(best, float(corrections[slots].max()) / top * factor)
    return best


class CorrectedSampler(PrioritizedSampler):
    """A :class:`~prisample.PrioritizedSampler` whose weights carry a per-slot correction factor
    ``c_i >= 0`` (Schaul et al. 2016, Sec. 6).

    ``c_i`` (:meth:`set_corrections`, or ``add(..., corrections=...)``; 1 unless set) multiplies
    the weight before normalisation: ``w_i = c_i (N · P(i))^-β / max_j c_j (N · P(j))^-β`` under
    ``"memory"``, the maximum taken over valid slots with ``P(j) > 0``.  With ``α = 0``,
    ``β = 1`` and ``c_i = ρ_i``, an off-policy importance ratio, the weights are
    ``ρ_i / max_j ρ_j``: weighted importance sampling in replay.  Greedy draws get ``c_i``
    normalised the same way (``β`` plays no part there).  A slot with ``P(i) = 0`` gets weight
    0.  Factors do not change ``P(i)``.  Until a factor is set the sampler draws, weighs and
    saves exactly as a :class:`~prisample.PrioritizedSampler`, and pays nothing for them.

    >>> s = CorrectedSampler(3, alpha=0.0, beta=1.0, seed=0)
    >>> s.set_corrections([0, 1, 2], [0.5, 2.0, 1.0])
    >>> s.weights([0, 1, 2]).tolist()               # ρ_i / max_j ρ_j
    [0.25, 1.0, 0.5]
    """

    def __init__(
        self,
        capacity: int,
        *,
        alpha: float = 0.6,
        beta: float | LinearSchedule = 0.4,
        eps: float = 1e-6,
        backend: str = "proportional",
        weight_norm: WeightNorm = "memory",
        size: int | None = None,
        batch_size: int = 32,
        num_samples: int | None = None,
        seed: int | None = None,
        lock: threading.RLock | None = None,
    ) -> None:
        self._factors: CorrectionFactors | None = None  # built by the first factor set
        super().__init__(
            capacity,
            alpha=alpha,
            beta=beta,
            eps=eps,
            backend=backend,
            weight_norm=weight_norm,
            size=size,
            batch_size=batch_size,
            num_samples=num_samples,
            seed=seed,
            lock=lock,
        )

    @property
    def corrections(self) -> FloatArray:
        """Copy of the per-slot correction factors ``c_i`` (1 unless set); NaN for empty slots."""
        with self.lock:
            if self._factors is not None:
                return self._factors.values.copy()
            return np.where(np.isnan(self.backend.raw), np.nan, 1.0)

    @property
    def nbytes(self) -> int:
        """Bytes held in the sampler's arrays (priorities, the backend's structure, factors)."""
        with self.lock:
            return super().nbytes + (0 if self._factors is None else self._factors.nbytes)

    # -- writes ---------------------------------------------------------------------------------
    def add(
        self, indices: npt.ArrayLike, *, corrections: npt.ArrayLike | None = None, checked: bool = True
    ) -> None:
        """Mark slots as (re)written: they enter at :attr:`max_priority` (Algorithm 1, line 6).

        Their correction factors become ``corrections`` (one finite ``c >= 0`` per index, e.g.
        the importance ratio ``ρ`` of the transition written there), or 1 when it is ``None``.
        ``checked=False``: ``indices`` trusted (:meth:`PrioritizedSampler.add`).
        """
        idx = as_indices(indices) if checked else cast(IntArray, indices)
        factors = None if corrections is None else _check_factors(corrections, idx)
        with self.lock:
            super().add(idx, checked=checked)
            if factors is not None:
                self._write(idx, factors)
            elif self._factors is not None:
                self._write(idx, np.ones(idx.shape[0]))

    def set_corrections(self, indices: npt.ArrayLike, corrections: npt.ArrayLike) -> None:
        """Set the correction factors ``c_i`` of filled slots; last duplicate wins.

        ``c_i`` multiplies slot ``i``'s importance weight before normalisation, e.g. the
        off-policy ratio ``ρ_i = π(a_i|s_i) / μ(a_i|s_i)`` (Schaul et al. 2016, Sec. 6).  It does
        not change ``P(i)``.  Nothing changes unless every index is a filled slot and every factor
        is finite and ``>= 0``.
        """
        idx = as_indices(indices)
        factors = _check_factors(corrections, idx)
        with self.lock:
            check_slots(self.backend.raw, idx)
            self._write(idx, factors)

    def remove(self, indices: npt.ArrayLike, *, checked: bool = True) -> None:
        """Empty slots (and drop their factors): they are never drawn until added again."""
        idx = as_indices(indices) if checked else cast(IntArray, indices)
        with self.lock:
            super().remove(idx, checked=checked)
            if self._factors is not None:
                self._factors.write(idx, np.full(idx.shape[0], np.nan))

    def write(self, indices: npt.ArrayLike, priorities: npt.ArrayLike, *, checked: bool = True) -> None:
        """:meth:`PrioritizedSampler.write`; emptied slots drop their factors, filled ones get 1
        (as :meth:`remove` and :meth:`add` without ``corrections``)."""
        idx = as_indices(indices) if checked else cast(IntArray, indices)
        values = np.asarray(priorities, dtype=np.float64)
        with self.lock:
            super().write(idx, values, checked=checked)
            if self._factors is not None:
                self._factors.write(idx, np.where(np.isnan(values), np.nan, 1.0))

    def _write(self, idx: IntArray, factors: FloatArray) -> None:
        if self._factors is None:
            raw = self.backend.raw
            ones = np.where(np.isnan(raw), np.nan, 1.0)
            self._factors = CorrectionFactors(ones, raw, self.eps, proportional=self.backend.priority_masses)
        self._factors.write(idx, factors)

    def _written(self, slots: IntArray) -> None:
        if self._factors is not None:
            self._factors.priorities_written(slots, self.backend.raw)

    # -- weights --------------------------------------------------------------------------------
    def _weights(self, slots: IntArray, probabilities: FloatArray) -> npt.NDArray[np.float32]:
        """``c_i (N · P(i))^-β`` normalised by ``weight_norm``; the factors are taken relative to
        the largest in the memory first, so that tiny ones cannot underflow the normaliser."""
        if self._factors is None:
            return super()._weights(slots, probabilities)
        factors = self._factors.values[slots]
        backend, norm = self.backend, self.weight_norm
        greedy = not backend.importance_sampling  # no importance sampling: the factors alone
        p = np.ones(slots.shape[0]) if greedy else probabilities
        beta = 0.0 if greedy else self.beta
        min_probability, memory_max = 1.0, 1.0
        if norm == "memory":
            top = self._factors.top()
            if not top > 0.0:
                return np.zeros(slots.shape[0], dtype=np.float32)
            factors = factors / top
            if not greedy:
                min_probability = backend.min_probability()
                memory_max = self._factors.memory_max(backend, self.alpha, beta, min_probability, top)
        return corrected_weights_unchecked(p, factors, backend.count, beta, norm, min_probability, memory_max)

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """:meth:`PrioritizedSampler.state_dict` with ``"corrections"``: ``None`` until a factor
        is set, then the factors (NaN on empty slots)."""
        with self.lock:
            state = super().state_dict()
            if self._factors is not None:
                state["corrections"] = self._factors.values.copy()
            return state

    def check_state_dict(self, state: dict[str, Any]) -> None:
        """Raise ``ValueError``/``TypeError`` (naming the key) unless :meth:`load_state_dict`
        would accept ``state``; changes nothing."""
        self._factors_from_state(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output, or that of a :class:`~prisample.PrioritizedSampler`
        of any version (no factors); the sampler then draws and weighs exactly as the saved one.

        Validated in full first: besides what the sampler checks, ``corrections`` must be
        ``None`` or finite and ``>= 0`` on exactly the filled slots (NaN on the empty ones).  A
        rejected state raises ``ValueError``/``TypeError`` naming the key and changes nothing.
        """
        factors = self._factors_from_state(state)
        with self.lock:
            super().load_state_dict(_without_factors(state))
            self._factors = factors

    def _factors_from_state(self, state: Any) -> CorrectionFactors | None:
        """The factors ``state`` restores, built aside after validating all of ``state``."""
        super().check_state_dict(_without_factors(state))
        value = state.get("corrections")  # version 1 has no such key
        if value is None:
            return None
        raw = state_float_array(state["priorities"], "priorities", (self.capacity,))
        corrections = state_float_array(value, "corrections", (self.capacity,))
        filled = ~np.isnan(raw)
        on_filled = corrections[filled]
        if not np.array_equal(np.isnan(corrections), ~filled) or not np.all(
            (on_filled >= 0.0) & (on_filled < np.inf)
        ):
            raise ValueError(
                "state_dict corrections should be finite and >= 0 on the slots whose priority is "
                "set and NaN on the empty ones"
            )
        eps = check_real(state["eps"], "eps", minimum=0.0)
        return CorrectionFactors(corrections, raw, eps, proportional=self.backend.priority_masses)


def _without_factors(state: Any) -> Any:
    """``state`` as the core sampler checks it: any factors set aside (``None`` in their place)."""
    if isinstance(state, dict) and "corrections" in state:
        return {**state, "corrections": None}
    return state


def _check_factors(corrections: npt.ArrayLike, idx: IntArray) -> FloatArray:
    factors = as_priorities(corrections, idx.shape[0], name="corrections")
    bad = np.flatnonzero(~((factors >= 0.0) & (factors < np.inf)))
    if bad.shape[0]:
        j = int(bad[0])
        raise ValueError(f"corrections should be finite and >= 0, but got corrections[{j}]={factors[j]!r}")
    return factors
