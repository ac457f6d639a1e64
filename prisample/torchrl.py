"""prisample's sampler inside TorchRL's replay buffers: :class:`PrioritizedSampler`, a TorchRL ``Sampler``.

A TorchRL user swaps one import; storage, writer, transforms and the buffer stay TorchRL's::

    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from prisample.torchrl import PrioritizedSampler   # was torchrl.data.PrioritizedSampler

    rb = ReplayBuffer(storage=LazyTensorStorage(N), sampler=PrioritizedSampler(N, alpha=0.6, beta=0.4),
                      batch_size=32)

The constructor mirrors TorchRL's ``PrioritizedSampler(max_capacity, alpha, beta, eps=1e-8,
dtype=torch.float, reduction="max", max_priority_within_buffer=False, device=None)`` (torchrl
0.14) and adds ``backend``, ``weight_norm`` and ``seed``.  The engine is
:class:`prisample.PrioritizedSampler` over ``max_capacity`` slots, one per storage index.

Distribution (Schaul et al. 2016, "Prioritized Experience Replay", Sec. 3.3, Eq. 1), from the raw
priorities ``p_i`` given to ``update_priority`` (e.g. ``|δ_i|``):

* ``backend="proportional"``: ``P(i) = (p_i + ε)^α / Σ_k (p_k + ε)^α``.  ``ε`` is added to the
  raw priority *before* the power, as TorchRL does (its trees store ``(p + eps) ** alpha``,
  ``PrioritizedSampler.update_priority``), so the same priorities, ``α`` and ``ε`` give the same
  ``P(i)``;
* ``backend="rank"``: ``P(i) = rank(i)^-α / Σ_{r=1..N} r^-α``, ``rank`` by ``p_i`` descending over
  the ``N`` items in the memory, exact at every draw (equal priorities: the newest write ranks
  first).  ``ε`` plays no part.  TorchRL has no rank-based sampler.

``info["priority_weight"]`` (the key TorchRL's losses read) holds the importance weights
``w_i = (N · P(i))^-β / max_j (N · P(j))^-β = (P(i) / P_min)^-β`` (Sec. 3.4, the maximum over the
memory; ``weight_norm="memory"``, TorchRL's normalisation), or normalised by the batch's largest
weight (``"batch"``), or not at all (``"none"``).  Every batch's weights also go to
:attr:`PrioritizedSampler.weight_monitor` (a :class:`~prisample.diagnostics.WeightMonitor`):
:attr:`PrioritizedSampler.weight_mean` is their mean over the last 100 batches, and a
``RuntimeWarning`` is issued once if it falls below 0.01 (a tiny ``eps`` with the memory's maximum:
raise ``eps`` to 0.01 or use ``weight_norm="batch"``).

Differences from TorchRL's own sampler:

* **New items** enter at the largest raw priority *of the items now in the memory* (1 while it
  is empty; Algorithm 1, line 6), kept exactly by a max-tree.  Item by item, as
  :class:`~prisample.replay.PrioritizedReplay`: a written item first evicts the one its slot
  held, then enters at the maximum of the memory it joins
  (:meth:`PrioritizedSampler.mark_update`).  TorchRL's default
  (``max_priority_within_buffer=False``) is the running maximum since construction, so one early
  outlier sets the priority of every later item until the sampler is emptied (pytorch/rl#2210);
  its ``max_priority_within_buffer=True`` (pytorch/rl#2215) forgets the maximum when that item is
  overwritten and finds it again only on some later updates.  The argument is accepted for a
  drop-in constructor and both values mean the maximum of the current memory.
* **Draws** are stratified: one uniform draw in each of ``batch_size`` equal-mass ranges (App.
  B.2.1; for ``"rank"``, equal-probability strata of the power law); TorchRL draws
  ``batch_size`` independent masses.  Each draw's ``P(i)`` is the same; a batch's counts vary
  less around their expected values.  Sums are in float64 (TorchRL's trees are float32 unless
  ``dtype=torch.float64``); ``dtype`` sets the dtype of ``priority_weight``.
* **Randomness** comes from the sampler's own PCG64 generator, seeded by ``seed``; with
  ``seed=None`` it is seeded from torch's global RNG at construction, then once from the
  buffer's generator if the buffer hands one over (``ReplayBuffer(generator=g)``,
  ``rb.set_rng(g)``).  Its state is in :meth:`PrioritizedSampler.state_dict`, so a restored
  sampler draws what the saved one would have.  TorchRL draws every batch from the buffer's
  generator, or from ``np.random`` without one.
* ``update_priority`` refuses negative, infinite or NaN priorities (``ValueError`` naming
  ``priority``); ``beta`` must lie in ``[0, 1]`` (or be a :class:`~prisample.LinearSchedule`):
  TorchRL's ``ParameterScheduler`` sets ``alpha`` and ``beta`` as numbers or 0-d tensors, both
  taken, but a ``β`` stepped above 1 raises ``ValueError`` (give the scheduler ``max_value=1.0``)
  where TorchRL's sampler takes it.
* Storages must be one-dimensional (``storage.ndim == 1``): a multi-dimensional storage raises a
  ``ValueError`` naming its shape (flatten the data, e.g. ``rb.extend(td.reshape(-1))``).

Slots follow the storage: TorchRL's writers call :meth:`PrioritizedSampler.mark_update` on every
write (``Storage._attached_entities`` -> ``ReplayBuffer.mark_update``), which enters the written
slots at the maximum priority, so a slot overwritten when the ring wraps around starts again at
the maximum, as a new item.  Indices ``-1`` (what ``TensorDictMaxValueWriter`` marks for items it
did not write) are skipped, as TorchRL skips them.  Before each draw the sampler's slots are
checked against ``len(storage)``; slots the sampler was never told about (data set on the storage
directly, or a storage filled before the buffer was built) enter at the maximum priority, slots
beyond the storage's length leave.

The class is registered as a virtual subclass of TorchRL's ``PrioritizedSampler``
(``abc.ABCMeta.register``), so TorchRL's ``isinstance`` checks treat it as prioritized:
``TensorDictReplayBuffer.update_tensordict_priority`` (which does nothing for other samplers) and
the buffer's initialisation over a storage that already holds data.  Nothing is inherited from
that class.  ``TensorDictPrioritizedReplayBuffer`` builds TorchRL's sampler itself; use
``TensorDictReplayBuffer(sampler=PrioritizedSampler(...), priority_key="td_error")`` instead.

Distributed use: TorchRL's replay services take the sampler as a constructor argument, so they
accept this one, on the process that owns the buffer (the sampler is never shared between
processes; remote callers reach it through the buffer's ``sample``, ``update_priority`` and
``update_tensordict_priority``).  Another process would hold a copy whose updates never come back,
so the sampler refuses to go to one, as TorchRL's prioritized sampler does: pickled while a
process starts (``spawn`` or ``forkserver``: a buffer given to ``multiprocessing.Process``) it
raises ``RuntimeError`` at ``Process.start()``, and a forked copy raises it at its first
``update_priority`` or write; the message names the fix (keep the buffer in one process and send
it the data and priorities, e.g. through a ``multiprocessing.Queue``).  Pickling it otherwise (a
checkpoint, ``copy.deepcopy``) makes an independent copy, as before.

``RemoteTensorDictReplayBuffer`` (``torch.distributed.rpc``): build it on the owner with
``sampler=PrioritizedSampler(...)``.  Ray (``ReplayBuffer(..., service_backend="ray")`` or
``RayReplayBuffer``): pass a constructor, ``sampler=functools.partial(PrioritizedSampler, N,
alpha=0.6, beta=0.4)``, as TorchRL asks for its components.  Neither path is exercised by prisample's tests.

Needs the ``torchrl`` extra (``pip install prisample[torchrl]``); ``import prisample`` does not
import this module.

>>> import torch
>>> from tensordict import TensorDict
>>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
>>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), batch_size=4, priority_key="td_error",
...                             sampler=PrioritizedSampler(8, alpha=1.0, beta=1.0, seed=0))
>>> _ = rb.extend(TensorDict({"obs": torch.arange(8.0)}, batch_size=[8]))
>>> batch = rb.sample()
>>> batch["priority_weight"].tolist()                # every item entered at priority 1
[1.0, 1.0, 1.0, 1.0]
>>> _ = batch.set("td_error", torch.full((4,), 0.5))
>>> rb.update_tensordict_priority(batch)
>>> sorted(set(rb.sampler.engine.priorities.tolist()))
[0.5, 1.0]
"""

from __future__ import annotations

import os
from multiprocessing.context import get_spawning_popen
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torchrl.data.replay_buffers.samplers import PrioritizedSampler as TorchRLPrioritizedSampler
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.storages import Storage

from prisample._validation import as_indices, check_positive_int, short_repr, to_numpy
from prisample.diagnostics import WeightMonitor
from prisample.sampler import PrioritizedSampler as _Engine
from prisample.weights import LinearSchedule, WeightNorm

__all__ = ["PrioritizedSampler"]

EMPTY_STORAGE_ERROR = "Cannot sample from an empty storage."
"""The message of the ``RuntimeError`` TorchRL's samplers raise when drawing from an empty storage."""
TORCHRL_BACKENDS = ("proportional", "rank")
REDUCTIONS = ("max", "min", "mean", "median", "sum")  # what torchrl's `_reduce` knows
WEIGHT_DTYPES = (torch.float32, torch.float64)
STATE_VERSION = 1
STATE_FILE = "prisample_sampler.pt"
_STATE_KEYS = {"version", "max_capacity", "engine"}
NOT_SHARED_ERROR = (
    "prisample.torchrl.PrioritizedSampler cannot be shared between processes: another process "
    "holds a copy of its priorities, so its update_priority calls and writes never reach this "
    "one. Keep the buffer in one process and send it the other processes' data and priorities "
    "(e.g. through a multiprocessing.Queue from which the owner calls rb.extend and "
    "rb.update_priority). To save the sampler, use state_dict() (or pickle it outside "
    "Process.start())."
)
"""The message of the ``RuntimeError`` raised when the sampler would reach another process."""


class PrioritizedSampler(Sampler):  # type: ignore[misc]  # torchrl ships no type information
    """TorchRL ``Sampler`` drawing with prioritized replay (Schaul et al. 2016) through
    :class:`prisample.PrioritizedSampler`.

    Arguments as TorchRL's ``PrioritizedSampler``: ``max_capacity`` (slots, at least the storage's
    ``max_size``), ``alpha`` (``α``, 0 is uniform), ``beta`` (``β`` in ``[0, 1]``, or a
    :class:`~prisample.LinearSchedule` counted in draws), ``eps`` (``ε`` of
    ``P(i) ∝ (p_i + ε)^α``), ``dtype`` (of ``priority_weight``: ``torch.float32`` or
    ``torch.float64``), ``reduction`` (how ``TensorDictReplayBuffer`` reduces a multi-element
    priority per item: ``"max"``, ``"min"``, ``"mean"``, ``"median"`` or ``"sum"``),
    ``max_priority_within_buffer`` (accepted; new items always enter at the maximum of the current
    memory), ``device`` (where ``sample`` puts the index and weights; ``None``: the storage's
    device).  Then prisample's: ``backend`` (``"proportional"`` or ``"rank"``), ``weight_norm``
    (``"memory"``, ``"batch"`` or ``"none"``) and ``seed`` (of the draws' generator).

    The module docstring states the distribution, the weights and what differs from TorchRL's
    sampler.  :attr:`weight_mean` is the mean importance weight over the last batches drawn
    (:attr:`weight_monitor`, which is neither in :meth:`state_dict` nor reset by it).
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float | LinearSchedule,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        max_priority_within_buffer: bool = False,
        device: torch.device | str | None = None,
        *,
        backend: str = "proportional",
        weight_norm: WeightNorm = "memory",
        seed: int | None = None,
    ) -> None:
        capacity = check_positive_int(max_capacity, "max_capacity")
        if not isinstance(dtype, torch.dtype) or dtype not in WEIGHT_DTYPES:
            raise ValueError(
                f"dtype should be torch.float32 or torch.float64, but got dtype={short_repr(dtype)}"
            )
        if not isinstance(reduction, str) or reduction not in REDUCTIONS:
            raise ValueError(
                f"reduction should be one of {REDUCTIONS}, but got reduction={short_repr(reduction)}"
            )
        if not isinstance(max_priority_within_buffer, bool):
            raise TypeError(
                "max_priority_within_buffer should be a bool, but got "
                f"max_priority_within_buffer={short_repr(max_priority_within_buffer)}"
            )
        out_device = _check_device(device)
        if not isinstance(backend, str) or backend not in TORCHRL_BACKENDS:
            raise ValueError(
                f"backend should be one of {TORCHRL_BACKENDS}, but got backend={short_repr(backend)}"
            )
        self._engine = _Engine(
            capacity,
            alpha=alpha,
            beta=beta,
            eps=eps,
            backend=backend,
            weight_norm=weight_norm,
            size=0,
            seed=seed,
        )
        self._max_capacity = capacity
        self.dtype = dtype
        self.reduction = reduction
        self._max_priority_within_buffer = max_priority_within_buffer
        self._device = out_device
        self._generator: torch.Generator | None = None
        # True once the draws' generator must not be reseeded by a buffer's generator: an explicit
        # seed, a first reseed, or a restored state (whose generator continues the saved draws).
        self._seeded = seed is not None
        self.weight_monitor = WeightMonitor()
        """The mean importance weight over the last batches; warns once if it collapses."""
        self._owner_pid = os.getpid()  # a forked copy is refused its writes (see _check_owner)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_capacity={self._max_capacity}, alpha={self.alpha}, "
            f"beta={self.beta}, eps={self.eps}, backend={self.backend!r}, "
            f"weight_norm={self.weight_norm!r}, reduction={self.reduction!r})"
        )

    # -- parameters -----------------------------------------------------------------------------
    @property
    def engine(self) -> _Engine:
        """The :class:`prisample.PrioritizedSampler` holding the priorities (one slot per index)."""
        return self._engine

    @property
    def max_size(self) -> int:
        return self._max_capacity

    @property
    def device(self) -> torch.device:
        """Where :meth:`sample` puts the index and weights when the storage has no device."""
        return torch.device("cpu") if self._device is None else self._device

    @property
    def alpha(self) -> float:
        """``α``; setting it (e.g. from TorchRL's ``ParameterScheduler``) rebuilds the distribution."""
        return self._engine.alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        self._engine.alpha = value

    @property
    def beta(self) -> float:
        """``β`` of the next draw; set a number in ``[0, 1]`` (a 0-d tensor too, as TorchRL's
        schedulers set it) or a :class:`~prisample.LinearSchedule`.  ``β > 1`` is refused
        (``ValueError``; cap a scheduler with ``max_value=1.0``)."""
        return self._engine.beta

    @beta.setter
    def beta(self, value: float | LinearSchedule) -> None:
        self._engine.beta = value

    @property
    def eps(self) -> float:
        return self._engine.eps

    @property
    def backend(self) -> str:
        return self._engine.backend_name

    @property
    def weight_norm(self) -> str:
        return self._engine.weight_norm

    @property
    def weight_mean(self) -> float:
        """Mean ``priority_weight`` over the last 100 batches drawn (NaN before the first)."""
        return self.weight_monitor.weight_mean

    @property
    def default_priority(self) -> float:
        """The raw priority new items enter at: the largest in the memory (1 while it is empty)."""
        return self._engine.max_priority

    @property
    def _rng(self) -> torch.Generator | None:
        """The buffer's generator (TorchRL's ``ReplayBuffer.set_rng`` assigns it)."""
        return self._generator

    @_rng.setter
    def _rng(self, generator: torch.Generator | None) -> None:
        self._generator = generator
        if generator is None or self._seeded:
            return
        seed = int(torch.randint(0, 2**63 - 1, (), generator=generator, device=generator.device).item())
        state = self._engine.state_dict()
        state["rng"] = np.random.default_rng(seed).bit_generator.state
        self._engine.load_state_dict(state)
        self._seeded = True

    def __getstate__(self) -> dict[str, Any]:
        if get_spawning_popen() is not None:  # pickled by Process.start() for a new process
            raise RuntimeError(NOT_SHARED_ERROR)
        state: dict[str, Any] = super().__getstate__()  # drops the buffer's generator, as TorchRL does
        state.pop("_rng", None)
        state["_generator"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "weight_monitor" not in state:  # pickled before the monitor existed
            self.weight_monitor = WeightMonitor()
        self._owner_pid = os.getpid()  # an unpickled copy is its process's own sampler

    def _check_owner(self) -> None:
        """``RuntimeError`` in a forked copy: its updates would never reach the sampler it copied."""
        if os.getpid() != self._owner_pid:
            raise RuntimeError(NOT_SHARED_ERROR)

    # -- TorchRL's sampler protocol ------------------------------------------------------------
    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Draw ``batch_size`` storage indices: ``(index, {"priority_weight": w})``.

        ``RuntimeError`` (TorchRL's) when the storage is empty.  Advances a
        :class:`~prisample.LinearSchedule` ``β`` by one draw.
        """
        if type(batch_size) is not int or batch_size < 1:
            batch_size = check_positive_int(batch_size, "batch_size")
        self._check_storage(storage)
        n = len(storage)
        if n == 0:
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        self._follow_storage(n)
        draw = self._engine.sample(batch_size)
        self.weight_monitor.update(draw.weights)
        index = torch.from_numpy(draw.indices)
        weight = torch.from_numpy(draw.weights)
        if self.dtype != torch.float32:
            weight = weight.to(self.dtype)
        device = self._out_device(storage)
        if device is not None:
            index, weight = index.to(device), weight.to(device)
        return index, {"priority_weight": weight}

    def mark_update(self, index: int | torch.Tensor, *, storage: Storage | None = None) -> None:
        """Slots just written (called by TorchRL's writers): the items they held leave, and the new
        items enter at the largest priority of the items then in the memory (1 if none).

        As :class:`~prisample.replay.PrioritizedReplay` does, item by item (Algorithm 1, line 6):
        each new item evicts the one in its slot, then joins at the memory's maximum.  After the
        first, every later item of the write meets that same maximum (the write's earlier items
        hold it, the older ones at most it), so the first slot's item leaves and every slot enters
        at the maximum read then.
        """
        self._check_owner()
        slots, _ = self._slots(index, storage)
        if slots.shape[0]:
            engine = self._engine
            with engine.lock:
                engine.remove(slots[:1])
                engine.add(slots)

    def add(self, index: int | torch.Tensor) -> None:
        """TorchRL's hook after a single write: nothing left to do (:meth:`mark_update` did it)."""

    def extend(self, index: torch.Tensor) -> None:
        """TorchRL's hook after a batch write: nothing left to do (:meth:`mark_update` did it)."""

    @torch.no_grad()
    def update_priority(
        self,
        index: int | torch.Tensor,
        priority: float | torch.Tensor,
        *,
        storage: Storage | None = None,
    ) -> None:
        """Set the raw priorities ``p_i`` (e.g. ``|δ_i|``) of items; the last of duplicates wins.

        ``priority`` is one value for every index or one per index (any shape with that many
        elements).  Every priority must be finite and ``>= 0``.  Items the sampler has not seen
        written (a storage filled before the buffer was built) are entered first, unless they
        lie beyond ``len(storage)``.  On any error nothing changes.  ``RuntimeError`` in a process
        the sampler was forked into (see the module).
        """
        self._check_owner()
        slots, keep = self._slots(index, storage)
        values = to_numpy(priority, "priority")
        if values.dtype.kind not in "fiu":
            raise TypeError(f"priority should hold real numbers, but got dtype {values.dtype}")
        count = slots.shape[0] if keep is None else keep.shape[0]
        if values.size == 1:
            values = np.full(count, float(values.reshape(-1)[0]))
        elif values.size == count:
            values = values.reshape(-1).astype(np.float64, copy=False)
        else:
            raise ValueError(
                f"priority should be one value or one per index ({count}), but got priority of shape "
                f"{tuple(values.shape)}"
            )
        if keep is not None:
            values = values[keep]
        bad = np.flatnonzero(~((values >= 0.0) & (values < np.inf)))
        if bad.shape[0]:
            j = int(bad[0])
            raise ValueError(
                f"priority should be finite and >= 0, but got priority[{j}]={float(values[j])!r}"
            )
        if slots.shape[0] == 0:
            return
        try:
            self._engine.update_priorities(slots, values)
        except ValueError:
            self._update_unseen(slots, values, storage)

    def _empty(self) -> None:
        """Forget every item (``ReplayBuffer.empty``); the generator and ``β`` schedule go on."""
        filled = np.flatnonzero(~np.isnan(self._engine.priorities))
        if filled.shape[0]:
            self._engine.remove(filled)

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything the draws depend on, as tensors and plain Python values (so
        ``torch.load(..., weights_only=True)`` reads it back)."""
        return {
            "version": STATE_VERSION,
            "max_capacity": self._max_capacity,
            "engine": _tensors(self._engine.state_dict()),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output: later draws are the ones the saved sampler would make.

        The whole state is checked first (``ValueError``/``TypeError`` naming the key); on error
        nothing changes.  A restored sampler keeps the restored generator: a buffer generator
        handed over afterwards (``ReplayBuffer.load_state_dict`` does so) does not reseed it.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict should be a dict, but got state_dict={short_repr(state_dict)}")
        missing = sorted(_STATE_KEYS - set(state_dict))
        extra = sorted(map(str, set(state_dict) - _STATE_KEYS))
        if missing:
            raise ValueError(f"state_dict is missing the key {missing[0]!r}")
        if extra:
            raise ValueError(f"state_dict has unexpected keys {extra}")
        version = state_dict["version"]
        if type(version) is not int or version != STATE_VERSION:
            raise ValueError(
                f"state_dict version should be {STATE_VERSION}, but got version={short_repr(version)}"
            )
        capacity = state_dict["max_capacity"]
        if type(capacity) is not int or capacity != self._max_capacity:
            raise ValueError(
                f"state_dict max_capacity should be {self._max_capacity}, but got "
                f"max_capacity={short_repr(capacity)}"
            )
        self._engine.load_state_dict(_arrays(state_dict["engine"]))
        self._seeded = True

    def dumps(self, path: str | Path) -> None:
        """Write :meth:`state_dict` to ``path/prisample_sampler.pt`` (``ReplayBuffer.dumps``)."""
        folder = Path(path).absolute()
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(self.state_dict(), folder / STATE_FILE)

    def loads(self, path: str | Path) -> None:
        """Restore what :meth:`dumps` wrote at ``path`` (``ReplayBuffer.loads``)."""
        state = torch.load(Path(path).absolute() / STATE_FILE, weights_only=True)
        self.load_state_dict(state)

    # -- helpers --------------------------------------------------------------------------------
    def _check_storage(self, storage: Storage | None) -> None:
        ndim = getattr(storage, "ndim", 1)
        if ndim != 1:
            shape = getattr(storage, "shape", None)
            raise ValueError(
                "storage should be one-dimensional (prisample.torchrl.PrioritizedSampler keeps one "
                f"priority per storage index), but got a storage of shape {_shape(shape)} (ndim={ndim}); "
                "flatten the data before extending, e.g. rb.extend(data.reshape(-1))"
            )

    def _slots(
        self, index: Any, storage: Storage | None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_] | None]:
        """The slots ``index`` names, without the ``-1`` entries, and the mask of those kept
        (``None`` when every entry is kept)."""
        self._check_storage(storage)
        if isinstance(index, tuple):
            raise ValueError(
                "index should be one tensor of storage indices, but got a tuple of "
                f"{len(index)} (a multi-dimensional index; the storage should be one-dimensional)"
            )
        array = to_numpy(index, "index")
        if array.ndim > 1:
            raise ValueError(
                f"index should be one-dimensional (a one-dimensional storage), but got index of shape "
                f"{tuple(array.shape)}"
            )
        slots = as_indices(array, "index")
        keep = None
        if slots.shape[0] and slots.min() < 0:
            keep = slots >= 0
            slots = slots[keep]
        if slots.shape[0] and slots.max() >= self._max_capacity:
            j = int(np.argmax(slots >= self._max_capacity))
            raise ValueError(
                f"index should lie in [0, max_capacity={self._max_capacity}) (max_capacity should be at "
                f"least the storage's max_size), but got index {int(slots[j])}"
            )
        return slots, keep

    def _update_unseen(
        self, slots: npt.NDArray[np.int64], values: npt.NDArray[np.float64], storage: Storage | None
    ) -> None:
        """``update_priority`` when some slots were never entered: enter them, then update."""
        raw = self._engine.priorities
        unseen = np.unique(slots[np.isnan(raw[slots])])
        if unseen.shape[0] == 0:  # the engine refused for another reason: let it say why
            self._engine.update_priorities(slots, values)
            return
        if storage is not None and unseen[-1] >= len(storage):
            raise ValueError(
                f"index should name items in the storage (length {len(storage)}), but got index "
                f"{int(unseen[-1])}"
            )
        self._engine.add(unseen)
        self._engine.update_priorities(slots, values)

    def _follow_storage(self, n: int) -> None:
        """Make the sampler's slots those of ``[0, n)``, the indices a one-dimensional storage of
        length ``n`` holds (a no-op unless the storage was written without :meth:`mark_update`)."""
        if self._engine.size == n:
            return
        if n > self._max_capacity:
            raise ValueError(
                f"max_capacity should be at least the storage's length, but got "
                f"max_capacity={self._max_capacity} for a storage of length {n}"
            )
        filled = ~np.isnan(self._engine.priorities)
        beyond = np.flatnonzero(filled[n:]) + n
        if beyond.shape[0]:
            self._engine.remove(beyond)
        missing = np.flatnonzero(~filled[:n])
        if missing.shape[0]:
            self._engine.add(missing)

    def _out_device(self, storage: Storage) -> torch.device | None:
        """The device for the outputs, ``None`` for the CPU (where the engine's arrays are)."""
        device = self._device
        if device is None:
            found = getattr(storage, "device", None)
            device = found if isinstance(found, torch.device) else None
        return None if device is None or device.type == "cpu" else device


TorchRLPrioritizedSampler.register(PrioritizedSampler)


def _check_device(device: Any) -> torch.device | None:
    if device is None:
        return None
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device should be a torch device, but got device={short_repr(device)}") from error


def _shape(shape: Any) -> str:
    return str(tuple(shape)) if shape is not None else "unknown"


def _tensors(value: Any) -> Any:
    """``value`` with every numpy array (in nested dicts) copied into a tensor."""
    if isinstance(value, dict):
        return {key: _tensors(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    return value


def _arrays(value: Any) -> Any:
    """The inverse of :func:`_tensors`: every tensor (in nested dicts) as a numpy array."""
    if isinstance(value, dict):
        return {key: _arrays(item) for key, item in value.items()}
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().copy()
    return value
