"""``DevicePrioritizedSampler``: prioritized sampling of slots (Schaul et al. 2016) whose priorities,
draws and importance weights stay on one torch device; ``DeviceDraw``, the batch it returns.

The distribution is :class:`~prisample.device_tree.DevicePriorityTree`'s, the random numbers a
SplitMix64 stream on the device (``prisample/_device_rng.py``); the semantics are those of
:class:`~prisample.PrioritizedSampler` with the ``"proportional"`` or ``"uniform"`` backend, and
the checkpoint format, the lock and the β schedule are the host sampler's
(``prisample/_sampler_state.py``).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from prisample._capture import capturing
from prisample._device_rng import SplitMix64, pcg64_to_word, word_to_pcg64
from prisample._devices import concrete_device
from prisample._sampler_state import SamplerState, ScheduledBeta, sampler_state_dict
from prisample._validation import (
    as_indices,
    as_priorities,
    check_positive_int,
    check_real,
    check_seed,
    check_size,
    short_repr,
)
from prisample.backends import NO_PRIORITIES, bad_mass, check_masses_fit, device_backend_names, mass_error
from prisample.device_tree import DevicePriorityTree
from prisample.weights import LinearSchedule, WeightNorm, as_weight_norm

__all__ = ["DEVICE_BACKENDS", "DeviceDraw", "DevicePrioritizedSampler", "device_weights"]

DEVICE_BACKENDS: tuple[str, ...] = device_backend_names()
"""The distributions a device sampler draws from (rank and greedy stay on the host): the
registry's (:func:`~prisample.backends.device_backend_names`)."""

_FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class DeviceDraw:
    """One sampled batch, every field a tensor on the sampler's device: slots (int64), importance
    weights (float32) and per-draw probabilities ``P(i)`` (float64)."""

    indices: torch.Tensor
    weights: torch.Tensor
    probabilities: torch.Tensor

    def __len__(self) -> int:
        return int(self.indices.shape[0])


def device_weights(
    p: torch.Tensor,
    n: torch.Tensor,
    beta: float | torch.Tensor,
    normalize: WeightNorm,
    min_probability: torch.Tensor | None = None,
) -> torch.Tensor:
    """The torch kernels' importance weights, float32: ``w_i = (N · P(i))^-β`` (Sec. 3.4) over
    ``n`` valid slots (a 0-d tensor), normalised as ``normalize`` says (as the host's
    :func:`~prisample.weights.importance_weights`): ``"memory"`` divides by ``max_j w_j =
    (N · P_min)^-β``, i.e. ``w_i = (P_min / P(i))^β`` with ``P_min = min_probability`` (a 0-d
    tensor); ``"batch"`` by the largest weight of ``p``; ``"none"`` leaves them raw, clipped to
    float32's largest.  ``P(i) = 0`` gets weight 0.  A fixed sequence of tensor operations, no
    host synchronisation."""
    positive = p > 0.0
    if normalize == "none":
        w = ((n.to(torch.float64) * p) ** -beta).clamp(max=_FLOAT32_MAX)
    else:
        if normalize == "memory":
            assert min_probability is not None, "the memory normalisation needs P_min"
            low = min_probability
        else:
            low = torch.where(positive, p, math.inf).amin()
        # The clamp guards against rounding: every slot has P(i) >= P_min.
        w = (low / p).clamp(max=1.0) ** beta
    return torch.where(positive, w, 0.0).to(torch.float32)


class DevicePrioritizedSampler(ScheduledBeta):
    """Prioritized sampling over ``capacity`` slots on a torch ``device`` (Schaul et al. 2016).

    Raw priorities ``p_i`` (e.g. ``|δ_i|``) are stored; ``backend`` picks ``P(i)``:

    * ``"proportional"``: ``P(i) = (p_i + ε)^α / Σ_k (p_k + ε)^α`` (Eq. 1);
    * ``"uniform"``: ``P(i) = 1/N`` over the ``N`` non-empty slots.

    A batch of ``k`` is stratified (App. B.2.1): the total mass is cut into ``k`` equal ranges and
    one target drawn uniformly in each (uniform: the ``j``-th draw lies in the ``j``-th of ``k``
    equal runs of the non-empty slots in slot order; the host uniform backend draws independently,
    with the same ``P(i)``).  With ``eps=0`` a zero priority has ``P(i) = 0`` and is never drawn.

    Importance weights are ``w_i = (N · P(i))^-β`` (Sec. 3.4) normalised by ``weight_norm``:
    ``"memory"`` divides by ``max_j w_j = (N · P_min)^-β`` over the memory (``P_min`` the smallest
    positive ``P(i)``; Algorithm 1, line 10), ``"batch"`` by the batch's largest, ``"none"`` leaves
    them raw (clipped to float32's largest).  A draw with ``P(i) = 0`` gets weight 0.  ``beta`` may
    be a :class:`~prisample.LinearSchedule`, evaluated at the number of batches drawn (a host
    counter).

    The hot path never synchronises with the host: :meth:`sample` and the writes with
    ``checked=False`` (:meth:`add`, :meth:`write`, :meth:`remove`, :meth:`update_priorities`) issue
    a fixed number of tensor operations on the device, read nothing back, and trust their input
    (device tensors, or anything ``torch.as_tensor`` takes).  So :meth:`sample` cannot refuse a
    memory whose total mass is 0 (empty, or only zero priorities with ``eps=0``): its draws then
    have probability 0 and weight 0; :meth:`check_drawable` raises in that case, at the cost of
    one synchronisation.  With ``checked=True`` (the default) a write validates first, copying
    the indices and priorities to the host, and raises ``ValueError``/``TypeError`` naming the
    argument with nothing changed.

    Every public call holds :attr:`lock` (reentrant).

    >>> s = DevicePrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0, size=4, seed=0)
    >>> s.update_priorities([0, 1, 2, 3], [1.0, 1.0, 1.0, 5.0])
    >>> round(float(s.probabilities([3])[0]), 6)
    0.625
    >>> d = s.sample(2)
    >>> d.indices.shape, d.weights.dtype
    (torch.Size([2]), torch.float32)
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
        size: int | None = 0,
        seed: int | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        self.capacity = check_positive_int(capacity, "capacity")
        alpha = check_real(alpha, "alpha", minimum=0.0)
        eps = check_real(eps, "eps", minimum=0.0)
        check_masses_fit(alpha, eps, self.capacity, NO_PRIORITIES, "alpha", alpha)
        self._start_schedule(beta, threading.RLock())
        if not isinstance(backend, str) or backend not in DEVICE_BACKENDS:
            raise ValueError(
                f"backend should be one of {DEVICE_BACKENDS}, but got backend={short_repr(backend)}"
            )
        self.backend_name: str = backend
        self.weight_norm: WeightNorm = as_weight_norm(weight_norm)
        initial = check_size(size, self.capacity)
        self.device = concrete_device("cpu" if device is None else device)
        if seed is None:  # as the host sampler: reproducible under torch.manual_seed
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
        self._rng = SplitMix64(check_seed(seed), self.device)
        # β of the next draw, where a captured draw reads it (sent when it changes).
        self._beta_on_device = torch.zeros((), dtype=torch.float64, device=self.device)
        self._beta_sent: float | None = None
        # What the checkpoint format holds for the host sampler's DataLoader role: carried through.
        self._batch_size: int = 32
        self._num_samples: int | None = None
        self._epoch: int = 0
        self._tree = DevicePriorityTree(
            self.capacity, alpha=alpha, eps=eps, uniform=backend == "uniform", device=self.device
        )
        if initial:
            raw = torch.full((self.capacity,), math.nan, dtype=torch.float64)
            raw[:initial] = 1.0
            self._tree.load(raw.to(self.device))

    # -- parameters and reads -------------------------------------------------------------------
    @property
    def tree(self) -> DevicePriorityTree:
        """The distribution (:class:`~prisample.device_tree.DevicePriorityTree`), to read."""
        return self._tree

    @property
    def alpha(self) -> float:
        """Prioritization exponent ``α``; setting it (a number, or a 0-d tensor or array holding
        one) rebuilds the tree from the raw priorities, in place (synchronises: not for the hot
        path).  ``ValueError`` naming it, nothing changed, when a mass ``(p + ε)^α`` would not fit
        (as the host sampler's setter)."""
        return self._tree.alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        alpha = check_real(value, "alpha", minimum=0.0)
        with self._lock:
            weighed = self.priorities if self.backend_name == "proportional" else NO_PRIORITIES
            check_masses_fit(alpha, self.eps, self.capacity, weighed, "alpha", value)
            raw = self._tree.raw[: self.capacity].clone()
            self._tree.alpha = alpha
            self._tree.load(raw)

    @property
    def eps(self) -> float:
        return self._tree.eps

    @property
    def size(self) -> int:
        """Number of non-empty slots ``N`` (synchronises: not for the hot path)."""
        with self._lock:
            return int(self._tree.count.item())

    @property
    def count(self) -> torch.Tensor:
        """Number of non-empty slots ``N`` as a 0-d int64 tensor on the device (a copy)."""
        with self._lock:
            return self._tree.count.clone()

    @property
    def rng_state(self) -> torch.Tensor:
        """The random stream's state: a 0-d int64 tensor on the device, advanced in place by
        each draw (a CUDA graph that captured :meth:`sample` advances it on every replay)."""
        return self._rng.state

    @property
    def nbytes(self) -> int:
        """Bytes held on the device (the priority tree)."""
        return self._tree.nbytes

    @property
    def max_priority(self) -> torch.Tensor:
        """Largest raw priority of a non-empty slot, 1 while none is (0-d float64 on the device):
        new slots enter here (Algorithm 1, line 6)."""
        with self._lock:
            return self._max_priority()

    def _max_priority(self) -> torch.Tensor:
        high = self._tree.max_raw
        return torch.where(high > -math.inf, high, 1.0)

    def max_priority_without(self, indices: torch.Tensor) -> torch.Tensor:
        """:attr:`max_priority` as it will be once the slots ``indices`` (an int64 tensor on the
        device, non-empty, trusted) are emptied, read without emptying them (0-d float64): a
        write can then remove them and add new slots at that maximum in one pass."""
        with self._lock:
            high = self._tree.max_without(indices)
            return torch.where(high > -math.inf, high, 1.0)

    @property
    def total_mass(self) -> torch.Tensor:
        """``Σ_k m_k`` over non-empty slots, the normaliser of ``P(i)`` (0-d float64)."""
        with self._lock:
            return self._tree.total.clone()

    @property
    def min_probability(self) -> torch.Tensor:
        """Smallest positive ``P(i)``, ``P_min`` of the memory normalisation (0-d float64; 0 while
        no slot has positive mass)."""
        with self._lock:
            return self._tree.min_probability()

    @property
    def priorities(self) -> npt.NDArray[np.float64]:
        """Host copy of the raw priorities; NaN for empty slots (synchronises)."""
        with self._lock:
            return np.array(self._tree.raw[: self.capacity].cpu().numpy(), dtype=np.float64)

    def check_drawable(self) -> None:
        """``ValueError`` unless some non-empty slot has positive mass (synchronises once)."""
        with self._lock:
            if not float(self._tree.total.item()) > 0.0:
                raise ValueError(
                    "cannot sample: no slot has positive probability (the memory is empty, or every "
                    "priority is 0 with eps=0)"
                )

    # -- input ----------------------------------------------------------------------------------
    def _tensor(self, values: Any, dtype: torch.dtype) -> torch.Tensor:
        """``values`` as a 1-d tensor of ``dtype`` on the device, unchecked (no synchronisation)."""
        if isinstance(values, torch.Tensor):
            return values.to(device=self.device, dtype=dtype).reshape(-1)
        return torch.as_tensor(np.asarray(values), dtype=dtype, device=self.device).reshape(-1)

    def _checked_slots(
        self, indices: Any, *, need_filled: bool
    ) -> tuple[npt.NDArray[np.int64], torch.Tensor]:
        idx = as_indices(indices)
        outside = np.flatnonzero((idx < 0) | (idx >= self.capacity))
        if outside.shape[0]:
            j = int(outside[0])
            raise ValueError(f"indices should lie in [0, {self.capacity}), but got indices[{j}]={idx[j]}")
        slots = torch.from_numpy(idx).to(self.device)
        if need_filled and idx.shape[0]:
            empty = np.flatnonzero(np.isnan(self._tree.raw[slots].cpu().numpy()))
            if empty.shape[0]:
                j = int(empty[0])
                raise ValueError(
                    f"indices should be slots that were added, but got indices[{j}]={idx[j]} (empty)"
                )
        return idx, slots

    def _checked_values(self, priorities: Any, k: int, *, allow_nan: bool) -> torch.Tensor:
        values = as_priorities(priorities, k)
        filled = ~np.isnan(values) if allow_nan else np.ones(k, dtype=bool)
        bad = np.flatnonzero(filled & ~((values >= 0.0) & (values < math.inf)))
        if bad.shape[0]:
            j = int(bad[0])
            raise ValueError(f"priorities should be finite and >= 0, but got priorities[{j}]={values[j]!r}")
        if self.backend_name == "proportional":
            j = bad_mass(values, self.alpha, self.eps, self.capacity)
            if j >= 0:
                raise mass_error(values, j, self.alpha, self.eps, self.capacity, "priorities")
        return torch.from_numpy(np.array(values, dtype=np.float64)).to(self.device)

    # -- writes ---------------------------------------------------------------------------------
    def add(self, indices: Any, *, checked: bool = True) -> None:
        """Mark slots as (re)written: they enter at :attr:`max_priority`, computed on the device
        (Algorithm 1, line 6)."""
        with self._lock:
            if checked:
                slots = self._checked_slots(indices, need_filled=False)[1]
            else:
                slots = self._tensor(indices, torch.int64)
            if slots.shape[0]:  # known from the shape: an empty add issues nothing
                self._tree.write(slots, self._max_priority().expand(slots.shape[0]))

    def write(self, indices: Any, priorities: Any, *, checked: bool = True) -> None:
        """Removals and additions as one ordered write: ``priorities[j]`` NaN empties slot
        ``indices[j]``, a finite value ``>= 0`` fills it at that raw priority; a slot named twice
        keeps the last.  ``checked``: every index in range, every value NaN or finite ``>= 0``
        (with an allowed mass), else ``ValueError`` and nothing written."""
        with self._lock:
            if checked:
                idx, slots = self._checked_slots(indices, need_filled=False)
                values = self._checked_values(priorities, idx.shape[0], allow_nan=True)
            else:
                slots, values = self._tensor(indices, torch.int64), self._tensor(priorities, torch.float64)
            self._tree.write(slots, values)

    def remove(self, indices: Any, *, checked: bool = True) -> None:
        """Empty slots: they are never drawn until added again."""
        with self._lock:
            if checked:
                slots = self._checked_slots(indices, need_filled=False)[1]
            else:
                slots = self._tensor(indices, torch.int64)
            if slots.shape[0]:  # known from the shape: an empty removal issues nothing
                self._tree.write(
                    slots, torch.full(slots.shape, math.nan, dtype=torch.float64, device=self.device)
                )

    def update_priorities(
        self, indices: Any, priorities: Any, *, checked: bool = True, keep: Any = None
    ) -> None:
        """Set raw priorities (``|δ|`` or a per-sample loss) of filled slots; last duplicate wins.

        ``checked=True``: ``ValueError``/``TypeError`` naming the argument, nothing changed, unless
        every index is a filled slot and every priority finite, ``>= 0`` and of an allowed mass
        (one small device-to-host copy of the slots' priorities, and the inputs' own copies when
        they are device tensors).  ``checked=False``: the trusted hot path, no synchronisation
        (a NaN there empties the slot, as in :meth:`write`).

        ``keep`` (bools, one per index; e.g. a generation check made on the device): an entry
        where it is ``False`` changes nothing, and a slot named twice keeps its last kept entry
        (:meth:`DevicePriorityTree.write <prisample.device_tree.DevicePriorityTree.write>`).
        """
        with self._lock:
            if checked:
                idx, slots = self._checked_slots(indices, need_filled=True)
                values = self._checked_values(priorities, idx.shape[0], allow_nan=False)
            else:
                slots, values = self._tensor(indices, torch.int64), self._tensor(priorities, torch.float64)
            mask = None
            if keep is not None:
                mask = self._tensor(keep, torch.bool)
                if checked and mask.shape[0] != slots.shape[0]:
                    raise ValueError(
                        f"keep should have one value per index ({slots.shape[0]}), but got {mask.shape[0]}"
                    )
            self._tree.write(slots, values, mask)

    # -- draws ----------------------------------------------------------------------------------
    def sample(self, k: int) -> DeviceDraw:
        """Draw ``k`` slots (stratified, App. B.2.1) with their weights (Sec. 3.4), without a host
        synchronisation; advances the β schedule by one.

        Inside a CUDA graph capture only the tensor work is recorded; call :meth:`stage_draw`
        before each replay of the graph (it sends β and advances the schedule)."""
        k = check_positive_int(k, "k")
        with self._lock:
            if not capturing():
                self.stage_draw()
            slots, probabilities = self._tree.draw(self._rng, k)
            weights = self._weights(probabilities, self._beta_on_device)
        return DeviceDraw(slots, weights, probabilities)

    def stage_draw(self) -> None:
        """The host side of one :meth:`sample`: ``β`` at the schedule's step sent to the device
        (a fill, only when it changed) and the step advanced by one."""
        with self._lock:
            beta = self._beta_now()
            if beta != self._beta_sent:
                self._beta_on_device.fill_(beta)
                self._beta_sent = beta
            self._step += 1

    def _weights(self, p: torch.Tensor, beta: float | torch.Tensor) -> torch.Tensor:
        """``(N · P(i))^-β`` normalised by ``weight_norm`` (:func:`device_weights`)."""
        low = self._tree.min_probability() if self.weight_norm == "memory" else None
        return device_weights(p, self._tree.root[1], beta, self.weight_norm, low)

    def probabilities(self, indices: Any) -> torch.Tensor:
        """Per-draw probabilities ``P(i)`` of filled slots (checked; float64 on the device)."""
        with self._lock:
            slots = self._checked_slots(indices, need_filled=True)[1]
            return self._tree.probabilities(slots)

    def weights(self, indices: Any) -> torch.Tensor:
        """Importance weights of filled slots under the current distribution and ``β`` (checked)."""
        with self._lock:
            return self._weights(self.probabilities(indices), self._beta_now())

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """:meth:`PrioritizedSampler.state_dict <prisample.PrioritizedSampler.state_dict>`'s format
        for the same backend (host numpy values; synchronises).

        Carried over to and from a host sampler: capacity, backend, ``alpha``, ``eps``, ``beta``
        (or its schedule), ``weight_norm``, ``step`` (so the schedule goes on), the raw priorities
        and so every ``P(i)``, and ``batch_size``, ``num_samples``, ``epoch`` (held here only to
        be passed on).  ``"rng"`` is a PCG64 state whose 128-bit word holds the device stream's
        64-bit state: a device sampler loading its own state draws exactly as before, a host
        sampler loads it as a valid (different) stream, and a device sampler loading a host
        state seeds its stream from the xor of the two 64-bit halves.  ``backend_state`` of a
        uniform sampler lists the filled slots in slot order (a host sampler's own order of them
        is not kept: device draws go in slot order).
        """
        with self._lock:
            raw = self.priorities
            backend_state: dict[str, Any] = {}
            if self.backend_name == "uniform":
                backend_state = {"dense": np.flatnonzero(~np.isnan(raw)).astype(np.int32)}
            return sampler_state_dict(
                capacity=self.capacity,
                backend=self.backend_name,
                alpha=self.alpha,
                eps=self.eps,
                beta=self._beta,
                weight_norm=self.weight_norm,
                batch_size=self._batch_size,
                num_samples=self._num_samples,
                step=self._step,
                epoch=self._epoch,
                priorities=raw,
                backend_state=backend_state,
                rng=word_to_pcg64(self._rng.get_word()),
            )

    def check_state_dict(self, state: dict[str, Any]) -> None:
        """Raise ``ValueError``/``TypeError`` (naming the key) unless :meth:`load_state_dict`
        would accept ``state``; changes nothing."""
        SamplerState.from_dict(state, self.capacity, self.backend_name)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output, or a :class:`~prisample.PrioritizedSampler`'s of the
        same capacity and backend.  The state is validated in full first, by the host sampler's
        own rules; a rejected one raises ``ValueError``/``TypeError`` naming the key and leaves
        the sampler as it was.  The tree is reloaded in place (its tensors are kept)."""
        new = SamplerState.from_dict(state, self.capacity, self.backend_name)
        word = pcg64_to_word(new.rng)
        raw = torch.from_numpy(new.raw).to(self.device)
        with self._lock:
            self._beta, self._step, self.weight_norm = new.beta, new.step, new.weight_norm
            self._batch_size, self._num_samples, self._epoch = new.batch_size, new.num_samples, new.epoch
            self._tree.alpha, self._tree.eps = new.alpha, new.eps
            self._tree.load(raw)
            self._rng.set_word(word)
