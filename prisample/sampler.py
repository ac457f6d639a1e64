"""``PrioritizedSampler``: prioritized sampling of slots, as a ``torch.utils.data.Sampler[int]``.

Implements Schaul et al. (2016), "Prioritized Experience Replay": ``P(i) = p_i^α / Σ_k p_k^α``
(Eq. 1) with proportional ``p_i = |δ_i| + ε`` or rank-based ``p_i = 1 / rank(i)``, new slots at
the maximum priority of the memory, stratified batches, and importance-sampling weights
``w_i = (N · P(i))^-β / max_j w_j`` (Sec. 3.4).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Sampler

from prisample._validation import as_indices, as_priorities, check_positive_int, check_real, check_slots
from prisample.backends import BACKENDS, Backend, make_backend
from prisample.weights import WEIGHT_NORMS, LinearSchedule, WeightNorm, check_beta, weights_unchecked

STATE_VERSION = 1


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

    Slots become valid through :meth:`add` (or ``size`` at construction) and enter at the current
    maximum raw priority of the memory (1 while it is empty).  Weights are
    ``w_i = (N · P(i))^-β`` normalised by ``weight_norm``: ``"memory"`` (the paper's
    ``max_j w_j`` over the memory), ``"batch"`` or ``"none"``.  ``beta`` may be a
    :class:`~prisample.LinearSchedule`, evaluated at the number of batches drawn so far.

    Iterated by a ``DataLoader`` it yields ``num_samples`` indices per epoch, drawing
    ``batch_size`` at a time, so priorities updated between batches take effect at the next one.

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
    ) -> None:
        self.capacity = check_positive_int(capacity, "capacity")
        self._alpha = check_real(alpha, "alpha", minimum=0.0)
        self._eps = check_real(eps, "eps", minimum=0.0, strict=True)
        with np.errstate(over="ignore", under="ignore"):
            smallest_mass = np.float64(self._eps) ** self._alpha
        if not 0.0 < smallest_mass < np.inf:
            raise ValueError(f"eps**alpha should be a positive float, but got eps={eps!r}, alpha={alpha!r}")
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
        self.num_samples = None if num_samples is None else check_positive_int(num_samples, "num_samples")
        if seed is None:  # like torch's RandomSampler: reproducible under torch.manual_seed
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
        self.backend_name = backend
        self.weight_norm = weight_norm
        self._rng = np.random.default_rng(seed)
        self._step = 0
        self.epoch = 0
        self._raw = np.full(self.capacity, np.nan)  # raw priorities; NaN marks an empty slot
        self._backend: Backend = make_backend(backend, self._raw, self._alpha, self._eps)
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
        largest = max(self._backend.max_priority(), 1.0) if self.size else 1.0
        with np.errstate(over="ignore", under="ignore"):
            low, high = np.float64(self._eps) ** alpha, np.float64(largest + self._eps) ** alpha
        if not (low > 0.0 and high < np.inf):
            raise ValueError(f"alpha should keep (p + eps)^alpha a positive float, but got alpha={value!r}")
        self._alpha = alpha
        self._backend.set_alpha(alpha)

    @property
    def eps(self) -> float:
        return self._eps

    @property
    def beta(self) -> float:
        """``β`` for the next draw (the schedule's value at the number of batches drawn)."""
        return self._beta(self._step) if isinstance(self._beta, LinearSchedule) else self._beta

    @beta.setter
    def beta(self, value: float | LinearSchedule) -> None:
        if isinstance(value, LinearSchedule):
            check_beta(value.start, "beta.start")
            check_beta(value.end, "beta.end")
            self._beta: float | LinearSchedule = value
        else:
            self._beta = check_beta(value)

    @property
    def size(self) -> int:
        """Number of valid slots ``N``."""
        return self._backend.count

    @property
    def max_priority(self) -> float:
        """Largest raw priority among valid slots (1 while none is valid): new slots enter here."""
        return self._backend.max_priority() if self._backend.count else 1.0

    @property
    def priorities(self) -> npt.NDArray[np.float64]:
        """Copy of the raw priorities; NaN for empty slots (never added, or removed)."""
        return self._raw.copy()

    @property
    def nbytes(self) -> int:
        """Bytes held in the sampler's arrays (raw priorities and the backend's structure)."""
        return _arrays_nbytes(self._raw, self._backend)

    # -- writes ---------------------------------------------------------------------------------
    def add(self, indices: npt.ArrayLike) -> None:
        """Mark slots as (re)written: they enter at :attr:`max_priority` (Algorithm 1, line 6)."""
        idx = as_indices(indices)
        check_slots(self._raw, idx, need_filled=False)
        self._backend.write(idx, np.full(idx.shape[0], self.max_priority))

    def update_priorities(self, indices: npt.ArrayLike, priorities: npt.ArrayLike) -> None:
        """Set raw priorities (``|δ|`` or a per-sample loss) of filled slots; last duplicate wins.

        Accepts numpy arrays, torch tensors (any device) and lists.  Nothing changes unless every
        index is a filled slot and every priority is finite and non-negative.
        """
        idx = as_indices(indices)
        values = as_priorities(priorities, idx.shape[0])
        check_slots(self._raw, idx, values)
        self._backend.write(idx, values)

    def remove(self, indices: npt.ArrayLike) -> None:
        """Empty slots: they are never drawn until added again."""
        idx = as_indices(indices)
        check_slots(self._raw, idx, need_filled=False)
        self._backend.write(idx, np.full(idx.shape[0], np.nan))

    # -- draws ----------------------------------------------------------------------------------
    def sample(self, k: int) -> Draw:
        """Draw ``k`` slots (stratified) with their weights; advances the β schedule by one."""
        if type(k) is not int:
            k = check_positive_int(k, "k")
        elif k < 1:
            raise ValueError(f"k should be an integer >= 1, but got k={k}")
        if self._backend.count == 0:
            raise ValueError("cannot sample from an empty sampler (size=0): add slots first")
        slots, probabilities = self._backend.sample(k, self._rng)
        weights = self._weights(probabilities)
        self._step += 1
        return Draw(slots, weights, probabilities)

    def weights(self, indices: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """Importance weights of filled slots under the current distribution and ``β``."""
        return self._weights(self.probabilities(indices))

    def probabilities(self, indices: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Per-draw probabilities ``P(i)`` of filled slots."""
        idx = as_indices(indices)
        check_slots(self._raw, idx)
        return self._backend.probabilities(idx)

    def _weights(self, probabilities: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
        if self.backend_name == "greedy":
            return np.ones(probabilities.shape[0], dtype=np.float32)
        min_probability = self._backend.min_probability() if self.weight_norm == "memory" else 1.0
        return weights_unchecked(
            probabilities, self._backend.count, self.beta, self.weight_norm, min_probability
        )

    # -- torch Sampler protocol -----------------------------------------------------------------
    def __iter__(self) -> Iterator[int]:
        remaining = len(self)
        while remaining > 0:
            k = min(self.batch_size, remaining)
            yield from self.sample(k).indices.tolist()
            remaining -= k

    def __len__(self) -> int:
        return self.num_samples if self.num_samples is not None else self.size

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch (the ``DistributedSampler`` protocol); draws depend on the RNG only."""
        self.epoch = int(epoch)

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed for identical future draws (plain Python and numpy values)."""
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
            "backend_state": self._backend.state_dict(),
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output; the sampler then draws exactly as the saved one."""
        version = state.get("version")
        if version != STATE_VERSION:
            raise ValueError(f"state_dict version should be {STATE_VERSION}, but got version={version!r}")
        for key in ("capacity", "backend"):
            mine = self.capacity if key == "capacity" else self.backend_name
            if state.get(key) != mine:
                raise ValueError(f"state_dict {key} should be {mine!r}, but got {key}={state[key]!r}")
        try:  # build everything first, so that a malformed state changes nothing
            beta = state["beta"]
            beta = LinearSchedule(**beta) if isinstance(beta, dict) else check_beta(beta)
            raw = np.asarray(state["priorities"], dtype=np.float64)
            if raw.shape != self._raw.shape:
                raise ValueError(
                    f"state_dict priorities should have shape {self._raw.shape}, got {raw.shape}"
                )
            rng = np.random.default_rng()
            rng.bit_generator.state = state["rng"]
            alpha, eps = float(state["alpha"]), float(state["eps"])
            scalars = (state["weight_norm"], int(state["batch_size"]), state["num_samples"])
            step, epoch = int(state["step"]), int(state["epoch"])
            backend_state = state["backend_state"]
        except KeyError as missing:
            raise ValueError(f"state_dict is missing the key {missing}") from None
        self._raw[:] = raw
        self.beta = beta
        self._alpha, self._eps = alpha, eps
        self.weight_norm, self.batch_size, self.num_samples = scalars
        self._step, self.epoch = step, epoch
        self._backend = make_backend(self.backend_name, self._raw, self._alpha, self._eps)
        self._backend.load_state_dict(backend_state)
        self._rng = rng
