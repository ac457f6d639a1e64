"""``DrawLedger``: each batch's draw kept until trained on, and the epoch position, for exact resume.

A ``DataLoader`` asks its sampler for indices ahead of the train step (one batch ahead in Lightning,
``prefetch_factor × num_workers`` batches with workers), so the batch being trained was drawn some
updates ago.  The ledger draws an epoch one batch at a time from a
:class:`~prisample.PrioritizedSampler` and keeps every draw, with the β it was drawn at, until the
train step claims it with :meth:`DrawLedger.take`: the step then gets the importance weights
``w_i = (N · P(i))^-β / max_j w_j`` (Schaul et al. 2016, Sec. 3.4) of the distribution its batch
was drawn from.  Its state holds the sampler's state, the epoch position and the draws not yet
claimed, so a resumed run first replays those batches and then draws exactly what the
uninterrupted run would have.

Threads: the ledger guards its own state with its sampler's :attr:`~prisample.PrioritizedSampler.lock`
(one lock, so there is no lock order to get wrong); each public call is atomic, and an iteration
holds the lock per batch, never across a ``yield``.  ``topology`` is called under that lock and must
not take other locks.

Under DDP (``R`` ranks) each recorded draw is one global draw of ``k · R`` slots, of which this rank
yields the strided slice ``r, r + R, …`` (:mod:`prisample.distributed` supplies ``R`` and ``r``).
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from torch.utils.data import Sampler

from prisample._validation import to_numpy
from prisample.sampler import Draw, PrioritizedSampler, as_batch_indices
from prisample.weights import LinearSchedule

__all__ = ["MAX_PENDING", "STATE_VERSION", "DrawLedger"]


STATE_VERSION = 1
MAX_PENDING = 1024  # far above any DataLoader's prefetch; bounds a checkpoint's size
_STATE_KEYS = frozenset({"version", "sampler", "yielded", "pending"})
_PENDING_KEYS = frozenset({"indices", "weights", "probabilities", "beta"})


def _single() -> tuple[int, int]:
    return 1, 0


def _strided(draw: Draw, replicas: int, rank: int) -> Draw:
    if replicas == 1:
        return draw
    s = slice(rank, None, replicas)
    return Draw(draw.indices[s], draw.weights[s], draw.probabilities[s])


@dataclass(frozen=True)
class _Parsed:
    """A validated ledger state, ready to apply without a failure."""

    sampler: Any
    yielded: int
    pending: list[tuple[Draw, float]]


class DrawLedger(Sampler[int]):
    """An epoch of a ``PrioritizedSampler`` drawn one batch at a time, each draw kept until trained on.

    Iterated by a ``DataLoader`` whose ``batch_size`` equals ``sampler.batch_size``, an epoch yields
    ``ceil(len(sampler) / R)`` indices (``R = 1`` on one process), one ``sample`` call per batch, so
    priority updates take effect at the next draw.  :meth:`take` hands the train step its batch's
    draw: indices, draw-time weights and probabilities.

    Args:
        sampler: the sampler to draw from.
        topology: ``() -> (R, r)``, the number of replicas and this rank, read at each draw;
            :class:`~prisample.distributed.DistributedPrioritizedSampler` passes its own.

    >>> ledger = DrawLedger(PrioritizedSampler(6, alpha=1.0, beta=0.5, batch_size=2, seed=0))
    >>> it = iter(ledger)
    >>> batch = [next(it), next(it)]              # what a DataLoader with batch_size=2 collects
    >>> draw = ledger.take(batch)                 # the weights computed when it was drawn
    >>> draw.weights.dtype.name, ledger.pending
    ('float32', 0)
    """

    def __init__(
        self, sampler: PrioritizedSampler, *, topology: Callable[[], tuple[int, int]] = _single
    ) -> None:
        if not isinstance(sampler, PrioritizedSampler):
            raise TypeError(f"sampler should be a PrioritizedSampler, but got sampler={sampler!r}")
        self.sampler = sampler
        self._topology = topology
        # Global draws (with the β they were drawn at) yielded but not yet claimed by take().
        self._pending: deque[tuple[Draw, float]] = deque(maxlen=MAX_PENDING)
        self._yielded = 0  # indices this rank has yielded in the current epoch
        self._resume: _Parsed | None = None  # a loaded epoch position awaiting the next __iter__

    # -- what the train step reads --------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        """Indices per rank per batch (the sampler's ``batch_size``)."""
        return self.sampler.batch_size

    @property
    def beta(self) -> float:
        """The sampler's current ``β``; set a float or a :class:`~prisample.LinearSchedule`."""
        return self.sampler.beta

    @beta.setter
    def beta(self, value: float | LinearSchedule) -> None:
        self.sampler.beta = value

    @property
    def max_priority(self) -> float:
        """The sampler's largest raw priority (what new slots enter with)."""
        return self.sampler.max_priority

    @property
    def pending(self) -> int:
        """Batches drawn (e.g. prefetched by a ``DataLoader``) and not yet claimed by :meth:`take`."""
        with self.sampler.lock:
            return len(self._pending)

    @property
    def yielded(self) -> int:
        """Indices this rank has yielded in the current epoch."""
        with self.sampler.lock:
            return self._yielded

    def _local(self, draw: Draw) -> Draw:
        return _strided(draw, *self._topology())

    # -- draws ----------------------------------------------------------------------------------
    def sample(self, k: int) -> Draw:
        """Draw one batch of ``k · R`` slots and record it; returns this rank's ``k``."""
        with self.sampler.lock:  # β, the draw and its record: one step for other threads
            replicas, rank = self._topology()
            beta = self.sampler.beta
            draw = self.sampler.sample(k * replicas)
            self._pending.append((draw, beta))
        return _strided(draw, replicas, rank)

    def take(self, indices: npt.ArrayLike) -> Draw:
        """Claim the oldest unclaimed batch, which must be ``indices``: its draw-time ``Draw``.

        Raises ``ValueError`` (claiming nothing) when ``indices`` is not the next drawn batch, e.g.
        when the ``DataLoader``'s ``batch_size`` differs from the sampler's or its dataset is not an
        :class:`~prisample.IndexedDataset`.
        """
        return self.take_with_beta(indices)[0]

    def take_with_beta(self, indices: npt.ArrayLike) -> tuple[Draw, float]:
        """:meth:`take`, plus the ``β`` the batch's weights were computed with."""
        idx = as_batch_indices(indices)
        with self.sampler.lock:
            if not self._pending:
                raise ValueError(
                    "indices should be the next batch this sampler drew, but none is pending "
                    f"(indices={idx[:8]}): is the DataLoader iterating this sampler?"
                )
            draw, beta = self._pending[0]
            local = self._local(draw)
            if not np.array_equal(local.indices, idx):
                raise ValueError(
                    "indices should be the next drawn batch (a prisample.IndexedDataset, and DataLoader "
                    f"batch_size == sampler.batch_size={self.batch_size}), but got indices={idx[:8]} "
                    f"for the batch {local.indices[:8]}"
                )
            self._pending.popleft()
        return local, beta

    def update_priorities(self, indices: npt.ArrayLike, priorities: npt.ArrayLike) -> None:
        """The sampler's ``update_priorities`` (raw errors ``|δ_i|`` or losses; validated there)."""
        self.sampler.update_priorities(indices, priorities)

    # -- torch Sampler protocol -----------------------------------------------------------------
    def __len__(self) -> int:
        return math.ceil(len(self.sampler) / self._topology()[0])

    def __iter__(self) -> Iterator[int]:
        lock = self.sampler.lock
        with lock:
            total, resume = len(self), self._resume
            self._resume = None
            replay: list[tuple[Draw, float]] = []
            self._yielded = 0
            if resume is not None:
                consumed = resume.yielded - sum(len(self._local(d).indices) for d, _ in resume.pending)
                if consumed < total:  # continue the checkpointed epoch, untrained batches first
                    replay, self._yielded = resume.pending, consumed
            self._pending.clear()
        for draw, beta in replay:
            with lock:  # a draw is pending exactly while its indices count as yielded
                self._pending.append((draw, beta))
                local = self._local(draw)
                self._yielded += len(local.indices)
            yield from local.indices.tolist()
        while True:
            with lock:
                if self._yielded >= total:
                    return
                k = min(self.batch_size, total - self._yielded)
                local = self.sample(k)
                self._yielded += k
            yield from local.indices.tolist()

    def set_epoch(self, epoch: int) -> None:
        """The ``DistributedSampler`` protocol; draws depend on the sampler's RNG only."""
        self.sampler.set_epoch(epoch)

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The sampler's state, the epoch position and the unclaimed draws (the same on every rank)."""
        with self.sampler.lock:
            # Loaded and not yet iterated: the loaded draws are not in _pending until the replay.
            pending = self._pending if self._resume is None else self._resume.pending
            return {
                "version": STATE_VERSION,
                "sampler": self.sampler.state_dict(),
                "yielded": self._yielded,
                "pending": [_pending_entry(d, beta) for d, beta in pending],
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; a malformed state raises and changes nothing.

        The ledger's own keys are validated completely (types, ranges, and consistency with the
        sampler state they come with) before the sampler's state is loaded, which is atomic.  If the
        saved epoch was not finished, the next iteration finishes it: the batches drawn but not
        claimed at save time first, then exactly what the saved sampler would have drawn.
        """
        self.apply(self.parse(state))

    def parse(self, state: Any, extra_keys: frozenset[str] = frozenset()) -> _Parsed:
        """Validate a state without changing anything (``extra_keys``: keys a wrapper handles)."""
        _check_keys(state, _STATE_KEYS | extra_keys, "state_dict")
        version = state["version"]
        if type(version) is not int or version != STATE_VERSION:
            raise ValueError(f"state_dict version should be {STATE_VERSION}, but got version={version!r}")
        sampler_state = state["sampler"]
        filled, batch_size, length = _sampler_facts(sampler_state, self.sampler.capacity)
        replicas, rank = self._topology()
        pending = state["pending"]
        if not isinstance(pending, (list, tuple)):
            raise TypeError(f"state_dict pending should be a list, but got pending={pending!r}")
        if len(pending) > MAX_PENDING:
            raise ValueError(f"state_dict pending should hold <= {MAX_PENDING} draws, but got {len(pending)}")
        bounded = sampler_state.get("weight_norm") != "none"  # normalised weights lie in [0, 1]
        draws = [_parse_draw(p, i, filled, batch_size * replicas, bounded) for i, p in enumerate(pending)]
        yielded = state["yielded"]
        if isinstance(yielded, bool) or not isinstance(yielded, numbers.Integral):
            raise TypeError(f"state_dict yielded should be an integer, but got yielded={yielded!r}")
        unclaimed = sum(len(_strided(d, replicas, rank).indices) for d, _ in draws)
        per_rank = math.ceil(length / replicas)
        if not unclaimed <= int(yielded) <= per_rank:
            raise ValueError(
                f"state_dict yielded should lie in [{unclaimed}, {per_rank}] (the unclaimed draws' "
                f"indices up to the epoch's length), but got yielded={yielded!r}"
            )
        return _Parsed(sampler_state, int(yielded), draws)

    def apply(self, parsed: _Parsed) -> None:
        """Load a state :meth:`parse` accepted (the sampler's load is atomic; the rest cannot fail)."""
        with self.sampler.lock:
            self.sampler.load_state_dict(parsed.sampler)
            self._pending.clear()
            self._yielded = parsed.yielded
            self._resume = parsed


def _check_keys(state: Any, keys: frozenset[str], name: str) -> None:
    if not isinstance(state, Mapping):
        raise TypeError(f"{name} should be a dict, but got {name}={state!r:.80}")
    missing, unknown = sorted(keys - state.keys()), sorted(map(str, state.keys() - keys))
    if missing:
        raise ValueError(f"{name} is missing the keys {missing}")
    if unknown:
        raise ValueError(f"{name} has unknown keys {unknown}")


def _pending_entry(draw: Draw, beta: float) -> dict[str, Any]:
    """One drawn, unclaimed batch as ``DrawLedger.state_dict`` writes it under ``pending``."""
    return {
        "indices": draw.indices.copy(),
        "weights": draw.weights.copy(),
        "probabilities": draw.probabilities.copy(),
        "beta": beta,
    }


def _sampler_facts(sampler_state: Any, capacity: int) -> tuple[npt.NDArray[np.bool_], int, int]:
    """(filled slots, batch size, epoch length) of a sampler state, as far as the ledger
    needs them; the sampler's own load validates the rest."""
    if not isinstance(sampler_state, Mapping):
        raise TypeError(f"state_dict sampler should be a dict, but got sampler={sampler_state!r:.80}")
    for key in ("priorities", "batch_size", "num_samples"):
        if key not in sampler_state:
            raise ValueError(f"state_dict sampler is missing the key {key!r}")
    raw = to_numpy(sampler_state["priorities"], "sampler.priorities")
    if raw.dtype.kind != "f" or raw.shape != (capacity,):
        raise ValueError(
            f"state_dict sampler.priorities should be floats of shape ({capacity},), "
            f"but got dtype {raw.dtype} and shape {raw.shape}"
        )
    batch_size, num_samples = sampler_state["batch_size"], sampler_state["num_samples"]
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ValueError(f"state_dict sampler.batch_size should be an integer >= 1, but got {batch_size!r}")
    if num_samples is not None and (
        isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral) or num_samples < 1
    ):
        raise ValueError(
            f"state_dict sampler.num_samples should be None or an integer >= 1, but got {num_samples!r}"
        )
    filled = ~np.isnan(raw)
    length = int(num_samples) if num_samples is not None else int(filled.sum())
    return filled, int(batch_size), length


def _parse_draw(
    entry: Any, i: int, filled: npt.NDArray[np.bool_], most: int, bounded: bool
) -> tuple[Draw, float]:
    name = f"pending[{i}]"
    _check_keys(entry, _PENDING_KEYS, f"state_dict {name}")
    arrays = {key: to_numpy(entry[key], f"{name}.{key}") for key in ("indices", "weights", "probabilities")}
    n = arrays["indices"].shape[0] if arrays["indices"].ndim == 1 else -1
    for key, array in arrays.items():
        if array.ndim != 1 or array.shape[0] != n or not 1 <= n <= most:
            raise ValueError(
                f"state_dict {name}.{key} should be one-dimensional with the same 1 to {most} entries "
                f"as {name}.indices, but got shape {array.shape}"
            )
    indices, weights, probabilities = arrays["indices"], arrays["weights"], arrays["probabilities"]
    if indices.dtype.kind not in "iu":
        raise TypeError(f"state_dict {name}.indices should hold integers, but got dtype {indices.dtype}")
    if weights.dtype != np.float32 or probabilities.dtype != np.float64:
        raise TypeError(
            f"state_dict {name}.weights should be float32 and .probabilities float64, but got "
            f"{weights.dtype} and {probabilities.dtype}"
        )
    idx = indices.astype(np.int64)
    inside = (idx >= 0) & (idx < filled.shape[0])
    if not inside.all() or not filled[idx].all():
        bad = idx[~inside] if not inside.all() else idx[~filled[idx]]
        raise ValueError(
            f"state_dict {name}.indices should be filled slots in [0, {filled.shape[0]}), "
            f"but got {bad[:5].tolist()}"
        )
    # A drawn weight can underflow float32 to 0 (a slot far more probable than the least one).
    top = 1.0 if bounded else np.inf
    if not np.all((weights >= 0.0) & (weights <= top) & np.isfinite(weights)):
        want = "in [0, 1] (normalised)" if bounded else "finite and >= 0"
        raise ValueError(f"state_dict {name}.weights should be {want}, but got {weights[:8]}")
    if not np.all((probabilities > 0.0) & (probabilities <= 1.0)):
        raise ValueError(f"state_dict {name}.probabilities should lie in (0, 1], but got {probabilities[:8]}")
    beta = entry["beta"]
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not 0.0 <= float(beta) <= 1.0:
        raise ValueError(f"state_dict {name}.beta should be a float in [0, 1], but got beta={beta!r}")
    draw = Draw(idx.copy(), weights.copy(), probabilities.copy())
    return draw, float(beta)
