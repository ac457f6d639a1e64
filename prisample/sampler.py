"""``PrioritizedSampler``: prioritized sampling of slots, as a ``torch.utils.data.Sampler[int]``.

Implements Schaul et al. (2016), "Prioritized Experience Replay": ``P(i) = p_i^α / Σ_k p_k^α``
(Eq. 1) with proportional ``p_i = |δ_i| + ε`` or rank-based ``p_i = 1 / rank(i)``, new slots at
the maximum priority of the memory, stratified batches, and importance-sampling weights
``w_i = (N · P(i))^-β / max_j w_j`` (Sec. 3.4), optionally times a per-slot correction factor
``c_i`` such as an off-policy importance ratio ``ρ_i`` (Sec. 6).
"""

from __future__ import annotations

import _thread
import numbers
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Sampler

from prisample._validation import (
    as_indices,
    as_priorities,
    check_integer,
    check_positive_int,
    check_real,
    check_seed,
    check_slots,
    short_repr,
)
from prisample.backends import (
    BACKENDS,
    Backend,
    ProportionalBackend,
    backend_from_state,
    make_backend,
    rank_memory_max,
)
from prisample.rank import RankBackend
from prisample.trees import ArgMaxTree, mass_limit
from prisample.weights import (
    WEIGHT_NORMS,
    LinearSchedule,
    WeightNorm,
    check_beta,
    corrected_weights_unchecked,
    log_memory_max,
    weights_unchecked,
)

# 2 added "corrections"; 3 the rank backend's write stamps (equal priorities ranked newest first).
# Older states still load: version 1 without corrections, a rank state of version <= 2 with
# ties ranked by slot as they were then.
STATE_VERSION = 3
_LOADABLE_VERSIONS = (1, 2, 3)
_STATE_KEYS = (
    "version", "capacity", "backend", "alpha", "eps", "beta", "weight_norm", "batch_size",
    "num_samples", "step", "epoch", "priorities", "backend_state", "rng",
)  # fmt: skip
_PCG64_STATE_KEYS = {"bit_generator", "state", "has_uint32", "uinteger"}


@dataclass(frozen=True)
class Draw:
    """One sampled batch: slots, their importance weights and their per-draw probabilities."""

    indices: npt.NDArray[np.int64]
    weights: npt.NDArray[np.float32]
    probabilities: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.indices.shape[0])


def _arrays_nbytes(*objects: object) -> int:
    """Total size of the distinct numpy arrays reachable through the objects' attributes."""
    sizes: dict[int, int] = {}
    seen: set[int] = set()
    stack = list(objects)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            sizes[id(obj)] = obj.nbytes
        elif hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
    return sum(sizes.values())


class PrioritizedSampler(Sampler[int]):
    """Prioritized sampling over ``capacity`` slots (Schaul et al. 2016).

    Raw priorities ``p_i`` (e.g. ``|δ_i|``) are stored; each backend derives its distribution:

    * ``"proportional"``: ``P(i) = (p_i + ε)^α / Σ_k (p_k + ε)^α``, sum tree, one uniform draw in
      each of ``k`` equal-mass ranges (App. B.2.1);
    * ``"rank"``: ``P(i) = rank(i)^-α / Σ_r r^-α``, rank by ``p_i`` descending (exact at every
      draw), one draw per equal-probability stratum of the power law;
    * ``"greedy"``: the ``k`` largest ``p_i`` (Sec. 3.2), unit weights;
    * ``"uniform"``: ``P(i) = 1/N`` over valid slots.

    With ``eps=0`` and ``α > 0`` a zero priority has ``P(i) = 0`` and is never drawn (the
    proportional rejection sampling of Sec. 6); drawing while every valid slot has priority 0
    raises ``ValueError``.

    Slots become valid through :meth:`add` (or ``size`` at construction) and enter at the current
    maximum raw priority of the memory (1 while it is empty).  Weights are
    ``w_i = (N · P(i))^-β`` normalised by ``weight_norm``: ``"memory"`` (the paper's
    ``max_j w_j`` over the memory), ``"batch"`` or ``"none"``.  ``beta`` may be a
    :class:`~prisample.LinearSchedule`, evaluated at the number of batches drawn so far.

    A per-slot *correction factor* ``c_i >= 0`` (:meth:`set_corrections`, or ``add(...,
    corrections=...)``; 1 unless set) multiplies the weight before normalisation:
    ``w_i = c_i (N · P(i))^-β / max_j c_j (N · P(j))^-β`` under ``"memory"``, the maximum taken
    over valid slots with ``P(j) > 0``.  With ``α = 0``, ``β = 1`` and ``c_i = ρ_i``, an
    off-policy importance ratio, the weights are ``ρ_i / max_j ρ_j``: weighted importance
    sampling in replay (Sec. 6).  Greedy draws get ``c_i`` normalised the same way (``β`` plays no
    part there).  A slot with ``P(i) = 0`` gets weight 0.

    Iterated by a ``DataLoader`` it yields ``num_samples`` indices per epoch, drawing
    ``batch_size`` at a time, so priorities updated between batches take effect at the next one.

    Every public call is atomic under threads: it holds :attr:`lock`, a reentrant lock (one per
    sampler, or the one passed as ``lock=``).  Hold :attr:`lock` yourself to make several calls
    one atomic step, e.g. a draw and the reads of the data it names (``with s.lock: ...``).

    >>> s = PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=1e-9, seed=0)
    >>> s.update_priorities([0, 1, 2, 3], [1.0, 1.0, 1.0, 5.0])
    >>> round(float(s.probabilities([3])[0]), 6)
    0.625
    >>> d = s.sample(2)
    >>> d.indices.shape, d.weights.dtype.name
    ((2,), 'float32')
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
        self._lock = _check_lock(lock)
        self.capacity = check_positive_int(capacity, "capacity")
        self._alpha = check_real(alpha, "alpha", minimum=0.0)
        self._eps = check_real(eps, "eps", minimum=0.0)
        _check_masses_fit(self._alpha, self._eps, self.capacity, _NO_PRIORITIES, "alpha", alpha)
        self.beta = beta
        if backend not in BACKENDS:
            raise ValueError(f"backend should be one of {BACKENDS}, but got backend={backend!r}")
        if weight_norm not in WEIGHT_NORMS:
            raise ValueError(
                f"weight_norm should be one of {WEIGHT_NORMS}, but got weight_norm={weight_norm!r}"
            )
        initial = self.capacity if size is None else check_positive_int(size, "size", minimum=0)
        if initial > self.capacity:
            raise ValueError(f"size should be at most capacity={self.capacity}, but got size={size!r}")
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.num_samples = None if num_samples is None else _check_num_samples(num_samples)
        if seed is None:  # like torch's RandomSampler: reproducible under torch.manual_seed
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
        seed = check_seed(seed)
        self.backend_name = backend
        self.weight_norm = weight_norm
        self._rng = np.random.default_rng(seed)
        self._step = 0
        self.epoch = 0
        self._raw = np.full(self.capacity, np.nan)  # raw priorities; NaN marks an empty slot
        self._backend: Backend = make_backend(backend, self._raw, self._alpha, self._eps)
        # Correction factors exist only once set (NaN for empty slots, like ``_raw``), so that
        # samplers that never use them pay nothing.
        self._corrections: npt.NDArray[np.float64] | None = None
        self._corrections_max: ArgMaxTree | None = None
        self._log_corrections: npt.NDArray[np.float64] | None = None  # log c_i
        self._log_shifted: npt.NDArray[np.float64] | None = None  # log(p_i + ε), proportional only
        self._writes = 0  # bumped by every change of the distribution or the corrections
        self._memory_max_cache: tuple[int, float, float] | None = None
        if initial:
            self.add(np.arange(initial))

    # -- parameters -----------------------------------------------------------------------------
    @property
    def alpha(self) -> float:
        """Prioritization exponent ``α`` (0: uniform); setting it rebuilds the distribution."""
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        alpha = check_real(value, "alpha", minimum=0.0)
        with self._lock:
            weighed = self._raw if self.backend_name == "proportional" else _NO_PRIORITIES
            _check_masses_fit(alpha, self._eps, self.capacity, weighed, "alpha", value)
            self._alpha = alpha
            self._backend.set_alpha(alpha)
            self._writes += 1

    @property
    def eps(self) -> float:
        return self._eps

    @property
    def beta(self) -> float:
        """``β`` for the next draw (the schedule's value at the number of batches drawn)."""
        with self._lock:
            return self._current_beta()

    @beta.setter
    def beta(self, value: float | LinearSchedule) -> None:
        if isinstance(value, LinearSchedule):
            check_beta(value.start, "beta.start")
            check_beta(value.end, "beta.end")
            beta: float | LinearSchedule = value
        else:
            beta = check_beta(value)
        with self._lock:
            self._beta = beta

    def _current_beta(self) -> float:
        return self._beta(self._step) if isinstance(self._beta, LinearSchedule) else self._beta

    @property
    def size(self) -> int:
        """Number of valid slots ``N``."""
        with self._lock:
            return self._backend.count

    @property
    def max_priority(self) -> float:
        """Largest raw priority among valid slots (1 while none is valid): new slots enter here."""
        with self._lock:
            return self._max_priority()

    def _max_priority(self) -> float:
        return self._backend.max_priority() if self._backend.count else 1.0

    @property
    def total_mass(self) -> float:
        """The normaliser ``Σ_k m_k`` of ``P(i) = m_i / Σ_k m_k`` over valid slots (Eq. 1): ``m_i =
        (p_i + ε)^α`` (proportional), ``rank(i)^-α`` (rank: ``H(N) = Σ_{r≤N} r^-α``), ``1``
        (uniform), ``1`` for each slot tied at the maximum (greedy); 0 while none is valid.

        Memories split over shards weigh each shard by it: drawing shard ``s`` with probability
        ``M_s / Σ_t M_t`` and then slot ``i`` by the shard's own ``P_s(i)`` draws ``i`` with
        ``m_i / Σ_t M_t``, the distribution of one memory holding every shard (proportional).
        """
        with self._lock:
            return self._backend.total_mass() if self._backend.count else 0.0

    @property
    def min_probability(self) -> float:
        """Smallest positive ``P(i)`` over valid slots: ``P_min`` of the memory-normalised
        weights ``w_i = (P_min / P(i))^β`` (Algorithm 1, line 10); 0 while none is valid."""
        with self._lock:
            return self._backend.min_probability() if self._backend.count else 0.0

    @property
    def priorities(self) -> npt.NDArray[np.float64]:
        """Copy of the raw priorities; NaN for empty slots (never added, or removed)."""
        with self._lock:
            return self._raw.copy()

    @property
    def corrections(self) -> npt.NDArray[np.float64]:
        """Copy of the per-slot correction factors ``c_i`` (1 unless set); NaN for empty slots."""
        with self._lock:
            if self._corrections is not None:
                return self._corrections.copy()
            return np.where(np.isnan(self._raw), np.nan, 1.0)

    @property
    def nbytes(self) -> int:
        """Bytes held in the sampler's arrays (priorities, corrections, the backend's structure)."""
        with self._lock:
            return _arrays_nbytes(
                self._raw, self._backend, self._corrections, self._corrections_max,
                self._log_corrections, self._log_shifted,
            )  # fmt: skip

    @property
    def lock(self) -> threading.RLock:
        """The reentrant lock every public call holds (the one passed as ``lock=``, if any).

        Hold it to make several calls one atomic step for other threads, e.g. a draw and the
        gather of the data it names::

            with sampler.lock:
                draw = sampler.sample(32)
                batch = storage[draw.indices]

        Copies and unpickled samplers get a fresh lock; to copy or pickle a sampler that other
        threads are writing to, hold its lock around the copy.
        """
        return self._lock

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = self.__dict__.copy()
        del state["_lock"]  # a lock cannot be pickled, and a copy must not share it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # -- writes ---------------------------------------------------------------------------------
    def add(self, indices: npt.ArrayLike, *, corrections: npt.ArrayLike | None = None) -> None:
        """Mark slots as (re)written: they enter at :attr:`max_priority` (Algorithm 1, line 6).

        Their correction factors become ``corrections`` (one finite ``c >= 0`` per index, e.g.
        the importance ratio ``ρ`` of the transition written there), or 1 when it is ``None``.
        """
        idx = as_indices(indices)
        factors = None if corrections is None else self._check_corrections(corrections, idx)
        with self._lock:
            check_slots(self._raw, idx, need_filled=False)
            self._backend.write(idx, np.full(idx.shape[0], self._max_priority()))
            self._priorities_written(idx)
            if factors is not None:
                self._write_corrections(idx, factors)
            elif self._corrections_max is not None:
                self._write_corrections(idx, np.ones(idx.shape[0]))

    def set_corrections(self, indices: npt.ArrayLike, corrections: npt.ArrayLike) -> None:
        """Set the correction factors ``c_i`` of filled slots; last duplicate wins.

        ``c_i`` multiplies slot ``i``'s importance weight before normalisation, e.g. the
        off-policy ratio ``ρ_i = π(a_i|s_i) / μ(a_i|s_i)`` (Schaul et al. 2016, Sec. 6).  It does
        not change ``P(i)``.  Nothing changes unless every index is a filled slot and every factor
        is finite and ``>= 0``.

        >>> s = PrioritizedSampler(3, alpha=0.0, beta=1.0, seed=0)
        >>> s.set_corrections([0, 1, 2], [0.5, 2.0, 1.0])
        >>> s.weights([0, 1, 2]).tolist()               # ρ_i / max_j ρ_j
        [0.25, 1.0, 0.5]
        """
        idx = as_indices(indices)
        factors = self._check_corrections(corrections, idx)
        with self._lock:
            check_slots(self._raw, idx)
            self._write_corrections(idx, factors)

    @staticmethod
    def _check_corrections(corrections: npt.ArrayLike, idx: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        factors = as_priorities(corrections, idx.shape[0], name="corrections")
        bad = np.flatnonzero(~((factors >= 0.0) & (factors < np.inf)))
        if bad.shape[0]:
            j = int(bad[0])
            raise ValueError(
                f"corrections should be finite and >= 0, but got corrections[{j}]={factors[j]!r}"
            )
        return factors

    def _write_corrections(self, idx: npt.NDArray[np.int64], factors: npt.NDArray[np.float64]) -> None:
        """``c[idx] = factors`` (NaN empties), keeping the arg-max index and the logs in step."""
        if self._corrections_max is None:
            self._start_corrections(np.where(np.isnan(self._raw), np.nan, 1.0))
        assert self._corrections_max is not None and self._corrections is not None
        assert self._log_corrections is not None
        self._corrections_max.write(idx, factors)
        with np.errstate(divide="ignore"):  # log 0 = -inf: a zero factor never sets the maximum
            self._log_corrections[idx] = np.log(self._corrections[idx])  # after the write: last wins
        self._writes += 1

    def _start_corrections(self, corrections: npt.NDArray[np.float64]) -> None:
        (self._corrections, self._corrections_max, self._log_corrections, self._log_shifted) = (
            _correction_structures(corrections, self._raw, self._eps, self.backend_name)
        )

    def _priorities_written(self, idx: npt.NDArray[np.int64]) -> None:
        self._writes += 1
        if self._log_shifted is not None:
            with np.errstate(divide="ignore"):
                self._log_shifted[idx] = np.log(self._raw[idx] + self._eps)

    def update_priorities(self, indices: npt.ArrayLike, priorities: npt.ArrayLike) -> None:
        """Set raw priorities (``|δ|`` or a per-sample loss) of filled slots; last duplicate wins.

        Accepts numpy arrays, torch tensors (any device) and lists.  Nothing changes unless every
        index is a filled slot and every priority is finite and non-negative.
        """
        idx = as_indices(indices)
        values = as_priorities(priorities, idx.shape[0])
        with self._lock:
            check_slots(self._raw, idx, values)
            self._backend.write(idx, values)
            self._priorities_written(idx)

    def remove(self, indices: npt.ArrayLike) -> None:
        """Empty slots: they are never drawn until added again."""
        idx = as_indices(indices)
        with self._lock:
            check_slots(self._raw, idx, need_filled=False)
            self._backend.write(idx, np.full(idx.shape[0], np.nan))
            self._priorities_written(idx)
            if self._corrections_max is not None:
                self._write_corrections(idx, np.full(idx.shape[0], np.nan))

    # -- draws ----------------------------------------------------------------------------------
    def sample(self, k: int) -> Draw:
        """Draw ``k`` slots (stratified) with their weights; advances the β schedule by one."""
        if type(k) is not int:
            k = check_positive_int(k, "k")
        elif k < 1:
            raise ValueError(f"k should be an integer >= 1, but got k={k}")
        with self._lock:
            if self._backend.count == 0:
                raise ValueError("cannot sample from an empty sampler (size=0): add slots first")
            slots, probabilities = self._backend.sample(k, self._rng)
            weights = self._weights(slots, probabilities)
            self._step += 1
        return Draw(slots, weights, probabilities)

    def weights(self, indices: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """Importance weights of filled slots under the current distribution, ``β`` and
        correction factors (0 for a slot of probability 0)."""
        idx = as_indices(indices)
        with self._lock:
            check_slots(self._raw, idx)
            if idx.shape[0] == 0:
                return np.empty(0, dtype=np.float32)
            return self._weights(idx, self._backend.probabilities(idx))

    def probabilities(self, indices: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Per-draw probabilities ``P(i)`` of filled slots."""
        idx = as_indices(indices)
        with self._lock:
            check_slots(self._raw, idx)
            if idx.shape[0] == 0:
                return np.empty(0, dtype=np.float64)
            return self._backend.probabilities(idx)

    def _weights(
        self, slots: npt.NDArray[np.int64], probabilities: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float32]:
        if self._corrections is not None:
            return self._corrected_weights(slots, probabilities)
        if self.backend_name == "greedy":
            return np.ones(probabilities.shape[0], dtype=np.float32)
        min_probability = self._backend.min_probability() if self.weight_norm == "memory" else 1.0
        return weights_unchecked(
            probabilities, self._backend.count, self._current_beta(), self.weight_norm, min_probability
        )

    def _corrected_weights(
        self, slots: npt.NDArray[np.int64], probabilities: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float32]:
        assert self._corrections is not None
        factors = self._corrections[slots]
        n, norm = self._backend.count, self.weight_norm
        greedy = self.backend_name == "greedy"  # no importance sampling: the factors alone
        p = np.ones(slots.shape[0]) if greedy else probabilities
        beta = 0.0 if greedy else self._current_beta()
        min_probability, memory_max = 1.0, 1.0
        if norm == "memory":
            # Factors are taken relative to the largest in the memory, so tiny ones cannot
            # underflow the normaliser to 0.
            top = self._max_correction()
            if not top > 0.0:
                return np.zeros(slots.shape[0], dtype=np.float32)
            factors = factors / top
            if not greedy:
                min_probability = self._backend.min_probability()
                memory_max = self._memory_max(beta, min_probability, top)
        return corrected_weights_unchecked(p, factors, n, beta, norm, min_probability, memory_max)

    def _max_correction(self) -> float:
        assert self._corrections is not None and self._corrections_max is not None
        slot = self._corrections_max.argmax()
        return float(self._corrections[slot]) if slot >= 0 else 0.0

    def _memory_max(self, beta: float, min_probability: float, top: float) -> float:
        """``max_j (c_j / top) (P_min / P(j))^β`` over valid slots with ``P(j) > 0``, exactly
        (``top = max_j c_j``, so the result lies in ``(0, 1]``).

        * every drawable slot equally likely (uniform backend, ``α = 0``) or ``β = 0``:
          ``max_j c_j``, ``O(1)`` from the arg-max index of the corrections;
        * proportional: ``P(j) ∝ exp(α log(p_j + ε))``, so the maximum is that of
          ``log c_j - αβ log(p_j + ε)``, one ``O(N)`` pass over two kept log arrays (no powers);
        * rank: ``P`` is constant on each segment of the power law and falls with rank, so the
          segments are scanned from the least probable up, each giving ``max c`` of its slots,
          stopping once ``max_j c_j (P_min / P_segment)^β`` cannot beat the best so far.

        Cached until the next write or change of ``β``.
        """
        zero_mass = (
            isinstance(self._backend, ProportionalBackend)
            and self._eps == 0.0
            and self._alpha > 0.0
            and self._backend.tree.min_raw() == 0.0
        )
        flat = self.backend_name == "uniform" or self._alpha == 0.0 or beta == 0.0
        if flat and not zero_mass:
            return 1.0
        cached = self._memory_max_cache
        if cached is not None and cached[0] == self._writes and cached[1] == beta:
            return cached[2]
        assert self._corrections is not None and self._log_corrections is not None
        if isinstance(self._backend, ProportionalBackend):
            assert self._log_shifted is not None
            value = log_memory_max(
                self._log_corrections, self._log_shifted, self._alpha, beta,
                min_probability, self._backend.tree.total(), top,
            )  # fmt: skip
        else:
            assert isinstance(self._backend, RankBackend)
            value = rank_memory_max(self._backend, self._corrections, top, beta, min_probability)
        self._memory_max_cache = (self._writes, beta, value)
        return value

    # -- torch Sampler protocol -----------------------------------------------------------------
    def __iter__(self) -> Iterator[int]:
        # One sample() per batch: the lock is never held across a yield.
        remaining = len(self)
        while remaining > 0:
            k = min(self.batch_size, remaining)
            yield from self.sample(k).indices.tolist()
            remaining -= k

    def __len__(self) -> int:
        with self._lock:
            return self.num_samples if self.num_samples is not None else self._backend.count

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch (the ``DistributedSampler`` protocol); draws depend on the RNG only."""
        epoch = check_integer(epoch, "epoch")
        with self._lock:
            self.epoch = epoch

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed for identical future draws (plain Python and numpy values)."""
        with self._lock:
            return self._state_dict()

    def _state_dict(self) -> dict[str, Any]:
        beta = self._beta
        return {
            "version": STATE_VERSION,
            "capacity": self.capacity,
            "backend": self.backend_name,
            "alpha": self._alpha,
            "eps": self._eps,
            "beta": {"start": beta.start, "end": beta.end, "steps": beta.steps}
            if isinstance(beta, LinearSchedule)
            else beta,
            "weight_norm": self.weight_norm,
            "batch_size": self.batch_size,
            "num_samples": self.num_samples,
            "step": self._step,
            "epoch": self.epoch,
            "priorities": self._raw.copy(),
            "corrections": None if self._corrections is None else self._corrections.copy(),
            "backend_state": self._backend.state_dict(),
            "rng": self._rng.bit_generator.state,
        }

    def check_state_dict(self, state: dict[str, Any]) -> None:
        """Raise ``ValueError``/``TypeError`` (naming the key) unless :meth:`load_state_dict`
        would accept ``state``; changes nothing.  For owners that load several pieces at once
        (e.g. a replay memory and its sampler) and must check all of them before any is loaded."""
        _restore(state, self.capacity, self.backend_name)  # reads only what never changes: no lock

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output; the sampler then draws exactly as the saved one.

        The whole state is validated first and the restored pieces are built aside (types,
        shapes, ranges, the version, consistency of corrections and of the backend's state with
        the priorities, the RNG state); a state the constructor or the setters would refuse
        raises ``ValueError``/``TypeError`` naming the key, and leaves the sampler as it was.
        """
        restored = _restore(state, self.capacity, self.backend_name)  # built aside: no lock needed
        with self._lock:
            (
                self._raw, self._alpha, self._eps, self._beta, self.weight_norm, self.batch_size,
                self.num_samples, self._step, self.epoch, self._backend, self._rng,
                self._corrections, self._corrections_max, self._log_corrections, self._log_shifted,
            ) = restored  # fmt: skip
            self._memory_max_cache = None
            self._writes += 1


def _check_lock(lock: Any) -> threading.RLock:
    """A fresh ``threading.RLock``, or ``lock`` if it is one.  A plain ``Lock`` is refused: the
    owner of a shared lock holds it around sampler calls, which take it again."""
    if lock is None:
        return threading.RLock()
    if not isinstance(lock, _thread.RLock):
        raise TypeError(
            f"lock should be a threading.RLock (reentrant: whoever holds it calls the sampler, "
            f"which takes it again), but got a {type(lock).__module__}.{type(lock).__qualname__}"
        )
    return lock


def _check_num_samples(value: Any) -> int:
    """``num_samples`` is what ``len()`` returns, so it must fit in an index-sized integer."""
    return check_positive_int(value, "num_samples", maximum=sys.maxsize)


_NO_PRIORITIES = np.empty(0, dtype=np.float64)


def _check_masses_fit(
    alpha: float, eps: float, capacity: int, raw: npt.NDArray[np.float64], name: str, value: Any
) -> None:
    """Raise unless ``α`` keeps every mass ``(p + ε)^α`` of ``raw`` (NaN: empty), and that of a
    slot added at priority 1 into an empty memory, a positive float at most
    :func:`~prisample.trees.mass_limit` (``capacity`` of them sum finitely), and ``ε^α`` positive
    when ``ε > 0``: the one rule of the constructor, the ``alpha`` setter and
    :meth:`PrioritizedSampler.load_state_dict`.  Only proportional draws use masses, so other
    backends pass no priorities (any finite priority is theirs to hold)."""
    with np.errstate(over="ignore", under="ignore"):
        smallest_mass = np.float64(eps) ** alpha
    if eps > 0.0 and not 0.0 < smallest_mass < np.inf:
        raise ValueError(f"eps**alpha should be a positive float, but got eps={eps!r}, alpha={alpha!r}")
    filled = raw[~np.isnan(raw)]
    largest = max(float(filled.max()), 1.0) if filled.shape[0] else 1.0
    smallest = eps
    if smallest == 0.0:  # zero priorities keep mass 0; the smallest positive one must not vanish
        positive = filled[filled > 0.0]
        smallest = float(positive.min()) if positive.shape[0] else 1.0
    with np.errstate(over="ignore", under="ignore"):
        low, high = np.float64(smallest) ** alpha, np.float64(largest + eps) ** alpha
    if not (low > 0.0 and high <= mass_limit(capacity)):
        raise ValueError(
            f"{name} should keep (p + eps)^alpha a positive float <= {mass_limit(capacity):.3g} "
            f"for priorities in [{smallest!r}, {largest!r}], but got {name}={value!r}"
        )


def _correction_structures(
    corrections: npt.NDArray[np.float64], raw: npt.NDArray[np.float64], eps: float, backend: str
) -> tuple[npt.NDArray[np.float64], ArgMaxTree, npt.NDArray[np.float64], npt.NDArray[np.float64] | None]:
    """The corrections, their arg-max index, ``log c_i`` and (proportional) ``log(p_i + ε)``."""
    with np.errstate(divide="ignore"):
        log_shifted = np.log(raw + eps) if backend == "proportional" else None
        return corrections, ArgMaxTree(corrections), np.log(corrections), log_shifted


def _float_array(value: Any, key: str, shape: tuple[int, ...]) -> npt.NDArray[np.float64]:
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
        raise TypeError(
            f"state_dict {key} should be a floating-point numpy array, but got {key}={short_repr(value)}"
        )
    if value.shape != shape:
        raise ValueError(f"state_dict {key} should have shape {shape}, but got shape {value.shape}")
    return value.astype(np.float64)  # a copy: the caller's state is never shared


def _check_rng_state(value: Any) -> np.random.Generator:
    """A fresh generator in the saved PCG64 state (the kind ``np.random.default_rng`` makes)."""
    problem = f"state_dict rng should be a PCG64 bit-generator state, but got rng={short_repr(value)}"
    if not isinstance(value, dict) or set(value) != _PCG64_STATE_KEYS:
        raise ValueError(problem)
    inner, has_uint32, uinteger = value["state"], value["has_uint32"], value["uinteger"]
    words: list[Any] = []
    if isinstance(inner, dict) and set(inner) == {"state", "inc"}:
        words = [inner["state"], inner["inc"]]
    if not (
        isinstance(value["bit_generator"], str)
        and value["bit_generator"] == "PCG64"
        and len(words) == 2
        and all(type(w) is int and 0 <= w < 2**128 for w in words)
        and words[1] % 2 == 1  # PCG64's increment is odd
        and type(has_uint32) is int
        and has_uint32 in (0, 1)
        and type(uinteger) is int
        and 0 <= uinteger < 2**32
    ):
        raise ValueError(problem)
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = value
    return rng


def _check_beta_state(value: Any) -> float | LinearSchedule:
    if isinstance(value, dict):
        if set(value) != {"start", "end", "steps"}:
            raise ValueError(
                f"state_dict beta should be a float or a dict with keys start, end, steps, but got "
                f"beta={short_repr(value)}"
            )
        schedule = LinearSchedule(**value)
        check_beta(schedule.start, "beta.start")
        check_beta(schedule.end, "beta.end")
        return schedule
    return check_beta(value)


def _restore(state: Any, capacity: int, backend_name: str) -> tuple[Any, ...]:
    """Validate a state for a sampler of ``capacity`` and ``backend_name`` and build, aside,
    every attribute :meth:`PrioritizedSampler.load_state_dict` assigns (in its order)."""
    if not isinstance(state, dict):
        raise TypeError(f"state_dict should be a dict, but got state_dict={short_repr(state)}")
    version = state.get("version")
    integral = isinstance(version, numbers.Integral) and not isinstance(version, bool)
    if not integral or version not in _LOADABLE_VERSIONS:
        raise ValueError(
            f"state_dict version should be one of {_LOADABLE_VERSIONS}, but got version={short_repr(version)}"
        )
    expected = set(_STATE_KEYS) | ({"corrections"} if version >= 2 else set())
    missing, extra = sorted(expected - set(state)), sorted(map(str, set(state) - expected))
    if missing:
        raise ValueError(f"state_dict is missing the key {missing[0]!r} (version {version})")
    if extra:
        raise ValueError(f"state_dict has unexpected keys {extra} (version {version})")
    if check_integer(state["capacity"], "capacity") != capacity:
        raise ValueError(
            f"state_dict capacity should be {capacity}, but got capacity={short_repr(state['capacity'])}"
        )
    if not isinstance(state["backend"], str) or state["backend"] != backend_name:
        raise ValueError(
            f"state_dict backend should be {backend_name!r}, but got backend={short_repr(state['backend'])}"
        )
    alpha = check_real(state["alpha"], "alpha", minimum=0.0)
    eps = check_real(state["eps"], "eps", minimum=0.0)
    beta = _check_beta_state(state["beta"])
    norm = state["weight_norm"]
    if not isinstance(norm, str) or norm not in WEIGHT_NORMS:
        raise ValueError(
            f"weight_norm should be one of {WEIGHT_NORMS}, but got weight_norm={short_repr(norm)}"
        )
    batch_size = check_positive_int(state["batch_size"], "batch_size")
    num_samples = state["num_samples"]
    if num_samples is not None:
        num_samples = _check_num_samples(num_samples)
    step = check_positive_int(state["step"], "step", minimum=0)
    epoch = check_integer(state["epoch"], "epoch")
    raw = _float_array(state["priorities"], "priorities", (capacity,))
    filled = ~np.isnan(raw)
    bad = np.flatnonzero(filled & ~((raw >= 0.0) & (raw < np.inf)))
    if bad.shape[0]:
        j = int(bad[0])
        raise ValueError(
            f"state_dict priorities should be NaN or finite and >= 0, but got priorities[{j}]={raw[j]!r}"
        )
    weighed = raw if backend_name == "proportional" else _NO_PRIORITIES
    _check_masses_fit(alpha, eps, capacity, weighed, "alpha", alpha)
    corrections = state["corrections"] if version >= 2 else None
    structures: tuple[Any, ...] = (None, None, None, None)
    if corrections is not None:
        corrections = _float_array(corrections, "corrections", (capacity,))
        on_filled = corrections[filled]
        if not np.array_equal(np.isnan(corrections), ~filled) or not np.all(
            (on_filled >= 0.0) & (on_filled < np.inf)
        ):
            raise ValueError(
                "state_dict corrections should be finite and >= 0 on the slots whose priority is "
                "set and NaN on the empty ones"
            )
        structures = _correction_structures(corrections, raw, eps, backend_name)
    backend = backend_from_state(backend_name, raw, alpha, eps, state["backend_state"], legacy=version < 3)
    rng = _check_rng_state(state["rng"])
    return (raw, alpha, eps, beta, norm, batch_size, num_samples, step, epoch, backend, rng, *structures)
