"""``DistributedPrioritizedSampler``: one prioritized distribution shared by every DDP rank.

Every rank holds the same priorities and the same RNG state.  Each batch is one stratified draw of
``k · R`` slots (``R`` ranks, ``k`` the per-rank batch) from ``P(i) = p_i^α / Σ_k p_k^α``
(Schaul et al. 2016, Eq. 1); rank ``r`` keeps the strided slice ``r, r + R, r + 2R, …``, so the
slices are disjoint positions of one draw, their union is exactly what a single process draws with
the same seed, and each rank's slice is itself stratified over the whole distribution.  After a
step the ``(index, priority)`` updates of all ranks are all-gathered and applied in rank order on
every rank (last write wins), so the priorities stay identical everywhere.

Draws and their draw-time weights are kept by a :class:`~prisample.ledger.DrawLedger` (one global
draw per batch), so a training step claims its batch with :meth:`DistributedPrioritizedSampler.take`
and a checkpoint resumes exactly; on one process the ledger alone does that job.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from prisample._validation import as_indices, as_priorities
from prisample.ledger import DrawLedger
from prisample.sampler import Draw, PrioritizedSampler
from prisample.weights import LinearSchedule

__all__ = ["DistributedPrioritizedSampler"]


def _world(process_group: Any) -> tuple[int, int]:
    """(number of replicas, this rank) of the default or given process group; (1, 0) outside DDP."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(process_group), dist.get_rank(process_group)
    return 1, 0


class DistributedPrioritizedSampler(Sampler[int]):
    """Per-batch prioritized draws split across DDP ranks, with all-gathered priority updates.

    Wraps a :class:`~prisample.PrioritizedSampler` (the same construction, seed included, on every
    rank; rank 0's state is broadcast at the first iteration in any case).  Iterated by a
    ``DataLoader`` whose ``batch_size`` equals ``sampler.batch_size``, each epoch yields
    ``ceil(len(sampler) / R)`` indices per rank, drawn one batch at a time, so priority updates
    take effect at the next draw (a ``DataLoader`` or Lightning prefetching ``m`` batches ahead
    draws them ``m`` updates late).

    Every rank must call :meth:`update_priorities` once per step (it is a collective).

    >>> s = DistributedPrioritizedSampler(PrioritizedSampler(6, alpha=1.0, batch_size=2, seed=0))
    >>> batch = list(iter(s))[:2]
    >>> d = s.take(batch)
    >>> bool((d.indices == batch).all()), d.weights.dtype.name
    (True, 'float32')
    >>> s.update_priorities(batch, [0.5, 2.0])
    """

    def __init__(
        self,
        sampler: PrioritizedSampler,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        process_group: Any = None,
    ) -> None:
        if not isinstance(sampler, PrioritizedSampler):
            raise TypeError(f"sampler should be a PrioritizedSampler, but got sampler={sampler!r}")
        if num_replicas is not None and (type(num_replicas) is not int or num_replicas < 1):
            raise ValueError(f"num_replicas should be an integer >= 1, but got num_replicas={num_replicas!r}")
        if rank is not None and (type(rank) is not int or rank < 0):
            raise ValueError(f"rank should be an integer >= 0, but got rank={rank!r}")
        if num_replicas is not None and rank is not None and rank >= num_replicas:
            raise ValueError(f"rank should be < num_replicas={num_replicas}, but got rank={rank}")
        self.sampler = sampler
        self._num_replicas = num_replicas
        self._rank = rank
        self.process_group = process_group
        self.epoch = 0
        self.ledger = DrawLedger(sampler, topology=lambda: (self.num_replicas, self.rank))
        self._synced = False

    # -- topology -------------------------------------------------------------------------------
    @property
    def num_replicas(self) -> int:
        """``R``: the explicit value, else the process group's world size (1 outside DDP)."""
        return self._num_replicas if self._num_replicas is not None else _world(self.process_group)[0]

    @property
    def rank(self) -> int:
        """This replica's rank: the explicit value, else the process group's (0 outside DDP)."""
        return self._rank if self._rank is not None else _world(self.process_group)[1]

    @property
    def batch_size(self) -> int:
        """Indices per rank per batch (the wrapped sampler's ``batch_size``)."""
        return self.ledger.batch_size

    @property
    def beta(self) -> float:
        """The wrapped sampler's current ``β``; set a float or a :class:`~prisample.LinearSchedule`."""
        return self.ledger.beta

    @beta.setter
    def beta(self, value: float | LinearSchedule) -> None:
        self.ledger.beta = value

    @property
    def max_priority(self) -> float:
        """The wrapped sampler's largest raw priority (the same on every rank)."""
        return self.ledger.max_priority

    def _communicates(self) -> bool:
        return self.num_replicas > 1 and dist.is_available() and dist.is_initialized()

    def _device(self) -> torch.device:
        if dist.get_backend(self.process_group) == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def sync(self) -> None:
        """Give every rank rank 0's sampler state (priorities, RNG, β count); a collective."""
        if self._communicates():
            objects: list[Any] = [self.sampler.state_dict() if self.rank == 0 else None]
            src = dist.get_global_rank(self.process_group, 0) if self.process_group is not None else 0
            dist.broadcast_object_list(objects, src=src, group=self.process_group)
            if self.rank != 0:
                self.sampler.load_state_dict(objects[0])
        self._synced = True

    # -- draws ----------------------------------------------------------------------------------
    def sample(self, k: int) -> Draw:
        """Draw one global batch of ``k · R`` slots; returns this rank's slice of ``k``."""
        if not self._synced:
            self.sync()
        return self.ledger.sample(k)

    def take(self, indices: npt.ArrayLike) -> Draw:
        """Claim the oldest unclaimed batch, which must be ``indices``: its draw-time weights.

        Raises ``ValueError`` (claiming nothing) when ``indices`` is not the next drawn batch, e.g.
        when the ``DataLoader``'s ``batch_size`` differs from the sampler's.
        """
        return self.ledger.take(indices)

    def take_with_beta(self, indices: npt.ArrayLike) -> tuple[Draw, float]:
        """:meth:`take`, plus the ``β`` the batch's weights were computed with."""
        return self.ledger.take_with_beta(indices)

    @property
    def pending(self) -> int:
        """Batches drawn (e.g. prefetched by a ``DataLoader``) and not yet claimed by :meth:`take`."""
        return self.ledger.pending

    # -- writes ---------------------------------------------------------------------------------
    def update_priorities(self, indices: npt.ArrayLike, priorities: npt.ArrayLike) -> None:
        """Apply every rank's ``(indices, priorities)`` in rank order on every rank (a collective).

        Outside DDP this is ``sampler.update_priorities``.  Input is converted before any
        communication; the wrapped sampler's validation then runs on the gathered arrays, so a bad
        value raises on every rank and changes nothing anywhere.
        """
        idx = as_indices(indices)
        values = as_priorities(priorities, idx.shape[0])
        if self._communicates():
            idx, values = self._all_gather(idx, values)
        self.sampler.update_priorities(idx, values)

    def _all_gather(
        self, idx: npt.NDArray[np.int64], values: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        R, device, group = self.num_replicas, self._device(), self.process_group
        count = torch.tensor([idx.shape[0]], dtype=torch.int64, device=device)
        counts = [torch.empty_like(count) for _ in range(R)]
        dist.all_gather(counts, count, group=group)
        sizes = [int(c.item()) for c in counts]
        width = max(sizes)
        packed = torch.zeros((2, width), dtype=torch.float64, device=device)
        # Slot numbers below 2^53 are exact in float64: one message carries both rows.
        packed[0, : idx.shape[0]] = torch.from_numpy(idx.astype(np.float64))
        packed[1, : idx.shape[0]] = torch.from_numpy(values)
        gathered = [torch.empty_like(packed) for _ in range(R)]
        dist.all_gather(gathered, packed, group=group)
        rows = np.concatenate([g[:, :n].cpu().numpy() for g, n in zip(gathered, sizes, strict=True)], axis=1)
        return rows[0].astype(np.int64), rows[1]

    # -- torch Sampler protocol -----------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ledger)

    def __iter__(self) -> Iterator[int]:
        if not self._synced:
            self.sync()
        yield from self.ledger

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch (``DistributedSampler`` protocol); draws depend on the RNG only."""
        self.epoch = int(epoch)
        self.ledger.set_epoch(epoch)

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The ledger's state (the wrapped sampler's, the epoch position and the unclaimed global
        draws) and the epoch; the same on every rank, so rank 0's checkpoint restores all of them."""
        return {**self.ledger.state_dict(), "epoch": self.epoch}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; a malformed state raises and changes nothing.

        Every key is validated before the wrapped sampler's (atomic) load.  If the saved epoch was
        not finished, the next iteration finishes it: it replays the batches drawn but not claimed
        at save time, then draws exactly as the saved sampler would have.
        """
        parsed = self.ledger.parse(state, extra_keys=frozenset({"epoch"}))
        epoch = state["epoch"]
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral) or epoch < 0:
            raise ValueError(f"state_dict epoch should be an integer >= 0, but got epoch={epoch!r}")
        self.ledger.apply(parsed)
        self.epoch = int(epoch)
        self._synced = True
