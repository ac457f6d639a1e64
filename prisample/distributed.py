"""``DistributedPrioritizedSampler``: one prioritized distribution shared by every DDP rank.

Every rank holds the same priorities and the same RNG state.  Each batch is one stratified draw of
``k · R`` slots (``R`` ranks, ``k`` the per-rank batch) from ``P(i) = p_i^α / Σ_k p_k^α``
(Schaul et al. 2016, Eq. 1); rank ``r`` keeps the strided slice ``r, r + R, r + 2R, …``, so the
slices are disjoint positions of one draw and their union is exactly what a single process draws
with the same seed.  Only the union is a sample of ``P(i)``: rank ``r`` gets the strata
``r, r + R, …`` of the draw, so with fixed priorities it never draws a slot whose probability mass
lies within the other ranks' strata (under uniform priorities over 20 slots and ``k · R = 4``,
rank 0 of 2 only ever sees slots 0-4 and 10-14).  Gradients averaged over the ranks are unbiased;
per-rank statistics (BatchNorm, metrics) are not.  After a step the ``(index, priority)`` updates of
all ranks are all-gathered and applied in rank order on every rank (last write wins), so the
priorities stay identical everywhere.

Draws and their draw-time weights are kept by a :class:`~prisample.ledger.DrawLedger` (one global
draw per batch), so a training step claims its batch with :meth:`DistributedPrioritizedSampler.take`
and a checkpoint resumes exactly; on one process the ledger alone does that job.

A checkpoint records the world size ``R`` it was saved by, and resumes under another ``R'`` by
re-sharding the global draw.  Its unclaimed draws, read as one sequence of indices in the order
their updates are applied (draw by draw, rank by rank), are cut into global draws of ``k · R'``
(rank ``r`` taking the ``r``-th ``k`` of each); once the epoch is all drawn, what remains (fewer
than ``k · R'``, such as the old ranks' short last batches) makes one last draw, an equal share
per rank.  So every rank replays batches of ``k`` but the epoch's last, as its ``DataLoader``
groups them.  The ``G = R · (ceil(N / R) - yielded)`` global indices the epoch has still to draw
are shared as ``G / R'`` per rank.  So the resumed run trains on exactly the global indices the old
world had drawn (with their draw-time weights and ``β``), applies their updates in the same order
(priorities bitwise equal), and draws the epoch's remaining ``G`` indices, ``k · R'`` per batch.
Where that cannot be done (the indices in hand do not make whole batches of ``k`` for ``R'`` ranks,
or an equal share each at the epoch's end; one draw would mix indices drawn at different ``β``;
``R'`` does not divide ``G``, or the epoch has more left than ``R'`` ranks' epoch holds) the load is
refused, naming both world sizes, and nothing changes.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from prisample._validation import as_indices, as_priorities, check_integer
from prisample.ledger import DrawLedger, _pending_entry, _sampler_facts
from prisample.sampler import Draw, PrioritizedSampler
from prisample.weights import LinearSchedule

__all__ = ["DistributedPrioritizedSampler"]


def _world(process_group: Any) -> tuple[int, int] | None:
    """(number of replicas, this rank) of the default or given process group; None outside DDP."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(process_group), dist.get_rank(process_group)
    return None


def _is_count(value: Any) -> bool:
    """An integer >= 1 (not a bool), as a checkpoint may hold it (numpy or Python)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral) and int(value) >= 1


class DistributedPrioritizedSampler(Sampler[int]):
    """Per-batch prioritized draws split across DDP ranks, with all-gathered priority updates.

    Wraps a :class:`~prisample.PrioritizedSampler` (the same construction, seed included, on every
    rank; rank 0's state is broadcast at the first iteration in any case).  Iterated by a
    ``DataLoader`` whose ``batch_size`` equals ``sampler.batch_size``, each epoch yields
    ``ceil(len(sampler) / R)`` indices per rank, drawn one batch at a time, so priority updates
    take effect at the next draw (a ``DataLoader`` or Lightning prefetching ``m`` batches ahead
    draws them ``m`` updates late).

    Every rank must call :meth:`update_priorities` once per step (it is a collective).  An explicit
    ``num_replicas`` or ``rank`` must equal the process group's once one is initialised (checked at
    construction and at every draw, update and load), else ``ValueError`` names both values.

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
        self.ledger = DrawLedger(sampler, topology=self._topology)
        self._synced = False
        self._topology()  # a misdeclared world fails here when the process group already exists

    # -- topology -------------------------------------------------------------------------------
    def _topology(self) -> tuple[int, int]:
        """``(R, r)``; an explicit ``num_replicas`` or ``rank`` must match the process group's.

        Checked at every read, not only at construction: a sampler may be built before
        ``init_process_group`` (a ``DataModule``), and a wrong ``R`` would otherwise draw
        overlapping or unequal slices and let the ranks' priorities diverge without an error.
        """
        world = _world(self.process_group)
        if world is None:
            replicas = 1 if self._num_replicas is None else self._num_replicas
            rank = 0 if self._rank is None else self._rank
            if rank >= replicas:
                raise ValueError(
                    f"rank should be < num_replicas={replicas} (no process group is initialised), "
                    f"but got rank={rank}"
                )
            return replicas, rank
        size, rank = world
        if self._num_replicas is not None and self._num_replicas != size:
            raise ValueError(
                f"num_replicas should be the process group's world size {size} (or None), "
                f"but got num_replicas={self._num_replicas}"
            )
        if self._rank is not None and self._rank != rank:
            raise ValueError(
                f"rank should be this process's rank {rank} in the process group (or None), "
                f"but got rank={self._rank}"
            )
        return size, rank

    @property
    def num_replicas(self) -> int:
        """``R``: the process group's world size (an explicit value must equal it); outside DDP
        the explicit value, else 1."""
        return self._topology()[0]

    @property
    def rank(self) -> int:
        """This replica's rank: the process group's (an explicit value must equal it); outside DDP
        the explicit value, else 0."""
        return self._topology()[1]

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
        """Record the epoch (``DistributedSampler`` protocol); draws depend on the RNG only.

        ``epoch`` must be an integer >= 0 (what :meth:`load_state_dict` accepts); anything else
        raises before the wrapper or the wrapped sampler changes.
        """
        value = check_integer(epoch, "epoch")
        if value < 0:
            raise ValueError(f"epoch should be an integer >= 0, but got epoch={epoch!r}")
        self.ledger.set_epoch(value)
        self.epoch = value

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The ledger's state (the wrapped sampler's, the epoch position and the unclaimed global
        draws), the epoch and the world size ``num_replicas``; the same on every rank, so rank 0's
        checkpoint restores all of them, under this world size or another (see the module)."""
        replicas = self.num_replicas
        return {**self.ledger.state_dict(), "epoch": self.epoch, "num_replicas": replicas}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; a malformed state raises and changes nothing.

        Every key is validated before the wrapped sampler's (atomic) load.  If the saved epoch was
        not finished, the next iteration finishes it: it replays the batches drawn but not claimed
        at save time, then draws exactly as the saved sampler would have.  A state saved by another
        world size is re-sharded (the module docstring), or refused with both sizes named where it
        cannot be; a state without ``num_replicas`` (written before it was recorded) counts as
        saved by this world size.
        """
        replicas = self.num_replicas  # a misdeclared world raises before the state is read
        saved, keys = replicas, frozenset({"epoch"})
        if isinstance(state, Mapping) and "num_replicas" in state:
            saved, keys = state["num_replicas"], keys | {"num_replicas"}
            if not _is_count(saved):
                raise ValueError(
                    f"state_dict num_replicas should be an integer >= 1, but got num_replicas={saved!r:.80}"
                )
            saved = int(saved)
        if saved != replicas:
            state = self._reshard(state, keys, saved, replicas)
        parsed = self.ledger.parse(state, extra_keys=keys)
        epoch = state["epoch"]
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral) or epoch < 0:
            raise ValueError(f"state_dict epoch should be an integer >= 0, but got epoch={epoch!r}")
        for i, (draw, _) in enumerate(parsed.pending):
            if draw.indices.shape[0] % replicas:
                raise ValueError(
                    f"state_dict pending[{i}] should hold a multiple of num_replicas={replicas} "
                    f"indices (one batch per rank), but got {draw.indices.shape[0]}"
                )
        self.ledger.apply(parsed)
        self.epoch = int(epoch)
        self._synced = True

    def _reshard(
        self, state: Mapping[str, Any], keys: frozenset[str], saved: int, replicas: int
    ) -> dict[str, Any]:
        """``state``, saved by ``saved`` ranks, as ``replicas`` ranks would have written it at the
        same point of the global draw; raises (changing nothing) where no such state exists."""
        old = DrawLedger(self.sampler, topology=lambda: (saved, 0)).parse(state, extra_keys=keys)
        _, k, length = _sampler_facts(old.sampler, self.sampler.capacity)
        total, new_total = math.ceil(length / saved), math.ceil(length / replicas)
        refused = f"a state saved by num_replicas={saved} cannot resume with num_replicas={replicas}"
        # The per-rank batches in hand, in the order their updates are applied: draw by draw, rank by rank.
        batches: list[tuple[Draw, float]] = []
        for i, (draw, beta) in enumerate(old.pending):
            if draw.indices.shape[0] % saved:
                raise ValueError(
                    f"{refused}: its pending[{i}] holds {draw.indices.shape[0]} indices, "
                    f"not a multiple of {saved} (one batch per rank)"
                )
            batches += [(_slice(draw, slice(r, None, saved)), beta) for r in range(saved)]
        if not batches and old.yielded in (0, total):  # between epochs: the next one is R''s own
            return {**state, "yielded": 0 if old.yielded == 0 else new_total, "pending": []}
        left = saved * (total - old.yielded)  # global indices the epoch has still to draw
        pending = [
            _interleave(group, beta) for group, beta in _regroup(batches, k, saved, replicas, left == 0)
        ]
        held = sum(d.indices.shape[0] for d, _ in batches)
        yielded = new_total - left // replicas
        if left % replicas or yielded < held // replicas:
            raise ValueError(
                f"{refused} here: the {left + held} global indices left in this epoch (of {length} "
                f"slots) do not make whole per-rank shares of an epoch of {replicas} ranks "
                f"({new_total} indices each)"
            )
        return {**state, "yielded": yielded, "pending": pending}


def _slice(draw: Draw, part: slice) -> Draw:
    return Draw(draw.indices[part], draw.weights[part], draw.probabilities[part])


def _regroup(
    batches: list[tuple[Draw, float]], k: int, saved: int, replicas: int, epoch_drawn: bool
) -> list[tuple[list[Draw], float]]:
    """The per-rank batches in hand, as ``replicas`` ranks would hold them: their indices, in update
    order, cut into global draws of ``k · replicas`` (rank ``r`` taking the ``r``-th ``k``), and
    what remains (only the epoch's last draws may leave some) into one last draw of an equal share
    per rank.  Each rank then replays batches of ``k`` but the epoch's last, as its ``DataLoader``
    groups them; each returned draw is ``(per-rank slices, β)``.  Raises where no such cut exists."""
    if not batches:
        return []
    refused = f"a state saved by num_replicas={saved} cannot resume with num_replicas={replicas} here"
    indices = np.concatenate([d.indices for d, _ in batches])
    weights = np.concatenate([d.weights for d, _ in batches])
    probabilities = np.concatenate([d.probabilities for d, _ in batches])
    betas = np.concatenate([np.full(d.indices.shape[0], beta) for d, beta in batches])
    held, full = indices.shape[0], k * replicas
    rest = held % full
    if rest and (not epoch_drawn or rest % replicas):
        where = "before more of the epoch is drawn" if not epoch_drawn else "at the end of the epoch"
        raise ValueError(
            f"{refused}: the {held} global indices drawn and not yet trained on cannot be shared "
            f"evenly by {replicas} ranks in batches of {k} ({rest} left over {where}; resume with "
            f"num_replicas={saved}, or from a checkpoint taken with none in hand)"
        )
    draws: list[tuple[list[Draw], float]] = []
    for start in range(0, held, full):
        stop = min(start + full, held)
        if np.any(betas[start:stop] != betas[start]):
            raise ValueError(
                f"{refused}: the indices in hand from {start} to {stop - 1} were drawn at "
                f"different β, so they cannot make one draw of {replicas} ranks"
            )
        share = (stop - start) // replicas
        parts = [slice(start + r * share, start + (r + 1) * share) for r in range(replicas)]
        draws.append(([Draw(indices[p], weights[p], probabilities[p]) for p in parts], float(betas[start])))
    return draws


def _interleave(group: list[Draw], beta: float) -> dict[str, Any]:
    """One global draw whose rank ``r`` slice (positions ``r, r + R, …``) is ``group[r]``: the
    pending entry of :meth:`~prisample.ledger.DrawLedger.state_dict`."""
    replicas, k = len(group), group[0].indices.shape[0]
    indices = np.empty(k * replicas, dtype=np.int64)
    weights = np.empty(k * replicas, dtype=np.float32)
    probabilities = np.empty(k * replicas, dtype=np.float64)
    for r, draw in enumerate(group):
        indices[r::replicas], weights[r::replicas] = draw.indices, draw.weights
        probabilities[r::replicas] = draw.probabilities
    return _pending_entry(Draw(indices, weights, probabilities), beta)
