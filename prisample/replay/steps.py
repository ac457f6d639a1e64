"""The sampler's side of a prioritized replay's steps: how new transitions enter the sampler, how a
draw is made and gathered, how a priority update is checked and written (Schaul et al. 2016,
Algorithm 1, lines 6 and 8-12).

:class:`ReplaySteps` is that interface, over a memory, its sampler, a write-back guard
(:mod:`prisample.replay.write_back`) and an eviction strategy (:mod:`prisample.replay.eviction`);
a :class:`~prisample.replay.PrioritizedReplay` holds one, chosen once with its sampler:

:class:`HostSteps`
    The priorities on the host (a :class:`~prisample.PrioritizedSampler`, or any
    :class:`~prisample.slot_sampler.SlotSampler` that takes and gives numpy): draws are numpy
    slots, gathered by :meth:`~prisample.replay.memory.ReplayMemory.read_drawn`; the common
    write may run in one compiled call (:meth:`HostSteps.write_compiled`).
:class:`~prisample.replay.device_steps.DeviceSteps`
    The priorities on the memory's device (a
    :class:`~prisample.device_sampler.DevicePrioritizedSampler`): every step in tensors there,
    with no host synchronisation.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import torch

from prisample._validation import as_indices, as_priorities, check_finite_priorities
from prisample.backends import ProportionalBackend
from prisample.device_sampler import DevicePrioritizedSampler
from prisample.replay.batch import ReplayBatch
from prisample.replay.eviction import Eviction, FifoEviction, Swaps, events
from prisample.replay.memory import Inserted, ReplayMemory
from prisample.replay.write_back import WriteBackGuard
from prisample.replay.writes import WriteRequest
from prisample.sampler import Draw, PrioritizedSampler
from prisample.slot_sampler import SlotSampler

__all__ = ["HostSteps", "ReplaySteps"]

IntArray = npt.NDArray[np.int64]


class ReplaySteps(abc.ABC):
    """The sampler's side of a replay's writes, draws and updates, over ``memory``, ``sampler``,
    ``guard`` and ``eviction`` (the parts it is given; it owns none).

    The replay calls :meth:`admit` after every memory write (under the lock), :meth:`sample` and
    :meth:`update` for its own ``sample`` and ``update_priorities`` (they take the lock
    themselves, converting host input before it).  The device-step methods (:meth:`stage`,
    :meth:`save`, :meth:`restore`, :meth:`sampler_on_device`) raise ``ValueError`` unless the
    priorities live on the device.
    """

    on_device = False
    """Whether the priorities live on the memory's device (draws and updates of tensors there)."""
    _host_updates_checked = False
    """Whether the sampler checks an update of host arrays itself (a host sampler's trusted
    path takes the numpy arrays converted and checked here as they are)."""

    def __init__(
        self, memory: ReplayMemory, sampler: SlotSampler, guard: WriteBackGuard, eviction: Eviction
    ) -> None:
        self.memory = memory
        self.sampler = sampler
        self.guard = guard
        self.eviction = eviction

    @property
    def nbytes(self) -> int:
        """Bytes of the guard's record (the parts given are counted by their owner)."""
        return self.guard.nbytes

    @abc.abstractmethod
    def admit(self, done: Inserted, swaps: Swaps, head: int) -> None:
        """The sampler's side of a write: evicted transitions leave, the new ones enter at the
        maximum priority of the memory they join (Algorithm 1, line 6); then the eviction
        strategy's side.  ``swaps`` (from :meth:`~prisample.replay.eviction.Eviction.arrange`)
        moved transitions before the write; ``head`` is the generation of its first row."""

    @abc.abstractmethod
    def sample(self, k: int) -> tuple[ReplayBatch, Any]:
        """Draw ``k`` live transitions: ``(batch, draw)``, the draw recorded in the guard."""

    def update(self, indices: Any, priorities: Any, generations: Any) -> None:
        """Set raw priorities of drawn slots, stale entries dropped (see
        :meth:`~prisample.replay.PrioritizedReplay.update_priorities`)."""
        self.update_from_host(indices, priorities, generations)

    def update_from_host(self, indices: Any, priorities: Any, generations: Any) -> None:
        """:meth:`update` of any input, converted to host arrays before the lock (a CUDA tensor
        copied) and checked there: an index out of range or of a slot never filled raises
        ``ValueError`` naming it, and then nothing changes."""
        idx = as_indices(indices, "indices")
        values = as_priorities(priorities, idx.shape[0])
        expected = None if generations is None else as_indices(generations, "generations")
        with self.sampler.lock:
            current = self.memory.live_generations(idx, "indices")
            if (current < 0).any():  # stale (dropped below) or never written (an error)
                never = (current < 0) & (self.memory.generations(idx) < 0)
                if never.any():
                    j = int(np.argmax(never))
                    raise ValueError(
                        f"indices should be slots that were filled (added), but got indices[{j}]={idx[j]} "
                        f"(never filled; all such: {np.unique(idx[never])[:8].tolist()}; "
                        f"{len(self.memory)} of {self.memory.capacity} slots hold transitions)"
                    )
            current = self.eviction.generations(idx, current)
            check_finite_priorities(values)
            keep = self.guard.keep_host(idx, current, expected)
            if not keep.all():
                idx, values = idx[keep], values[keep]
            if idx.shape[0]:
                # converted and checked above: a host sampler takes them as they are
                self.sampler.update_priorities(idx, values, checked=self._host_updates_checked)
                self.eviction.updated(idx, values)

    def write_compiled(self, request: WriteRequest) -> Inserted | None:
        """The memory's write and the sampler's side in one compiled call, where that exists;
        ``None``: nothing written, the general path writes.  Called under the lock."""
        return None

    def compiles(self) -> bool:
        """Whether :meth:`write_compiled` may write (decided once, with the parts)."""
        return False

    def sampler_on_device(self) -> DevicePrioritizedSampler:
        """The device sampler; ``ValueError`` unless the priorities live on the device."""
        raise _needs_device()

    def stage(self) -> None:
        """The host side of a captured device step (see
        :meth:`~prisample.replay.PrioritizedReplay.stage_device_step`)."""
        raise _needs_device()

    def save(self) -> tuple[list[torch.Tensor], int]:
        """Copies of what a device step changes (see
        :meth:`~prisample.replay.PrioritizedReplay.save_device_step`)."""
        raise _needs_device()

    def restore(self, saved: tuple[list[torch.Tensor], int]) -> None:
        """Put back what :meth:`save` copied, in place."""
        raise _needs_device()

    def step_tensors(self) -> list[torch.Tensor]:
        """The tensors a device step reads and writes (what :meth:`save` copies)."""
        raise _needs_device()


def _needs_device() -> ValueError:
    return ValueError("this needs the priorities on the device (priorities_on=device, or backend='device_*')")


class HostSteps(ReplaySteps):
    """The steps with the priorities on the host: numpy slots in and out of the sampler, batches
    gathered by the memory (on its device, if it has one, with the weights there)."""

    def compiles(self) -> bool:
        return type(self.eviction) is FifoEviction and self.memory.n_step == 1

    def write_compiled(self, request: WriteRequest) -> Inserted | None:
        """The write in one compiled call (:meth:`ReplayMemory.write_compiled`) with the
        sampler's tree where the sampler is a proportional one without hooks (other samplers
        hear of the write as in :meth:`admit`); ``None``: nothing written, the general path
        writes.  Called under the lock, FIFO eviction and ``n_step = 1`` only."""
        sampler, head = self.sampler, self.memory.num_added
        if not isinstance(sampler, PrioritizedSampler):  # a sampler passed in: the general path
            return None
        backend = sampler.backend
        tree = None
        if (
            isinstance(backend, ProportionalBackend)
            and type(backend) is ProportionalBackend
            and backend._positive is None  # eps = 0 keeps a second index of the priorities
            and type(sampler)._written is PrioritizedSampler._written
        ):
            tree = backend.tree
        result = self.memory.write_compiled(request, tree, backend.count)
        if result is None:
            return None
        done, count = result
        if tree is not None and count is not None:
            cast(ProportionalBackend, backend).count = count
        else:
            self.admit(done, [], head)
        return done

    def admit(self, done: Inserted, swaps: Swaps, head: int) -> None:
        """Under n-step the write's removals come first, then its completed windows at once."""
        self.eviction.moved(self.sampler, swaps)
        if self.memory.n_step > 1:
            if done.evicted.shape[0]:
                self.sampler.remove(done.evicted)
            if done.completed.shape[0]:
                self.sampler.add(done.completed)
            return
        priorities = self.enter(done, head)
        self.eviction.admitted(done, priorities, head)

    def enter(self, done: Inserted, head: int) -> npt.NDArray[np.float64]:
        """``n_step = 1``: the sampler's side of a write, row by row in effect (each row's
        evictions leave, then the row enters at the maximum of the memory it joins, 1 if empty)
        but in two ordered sampler writes: the first row's evictions, then the rest of the write.
        Returns the rows' priorities.

        Unless the write evicted one of its own rows (more rows than room: then row by row),
        every row enters at the same ``p``, the maximum once the first row's evictions left: a
        later row joins a memory holding the earlier rows at ``p`` and older transitions at most
        ``p``.
        """
        slots, evicted, until = done.slots, done.evicted, done.evicted_until
        n = slots.shape[0]
        if n == 0:
            return np.empty(0, dtype=np.float64)
        if self.memory.num_evicted > head:  # a row of this write left again
            return self.enter_rows(done)
        first = int(until[0])
        if first:
            self.sampler.remove(evicted[:first])
        priorities = np.full(n, self.sampler.max_priority)
        self.sampler.write(*events(done, priorities, first))
        return priorities

    def enter_rows(self, done: Inserted) -> npt.NDArray[np.float64]:
        """:meth:`enter` row by row (a write that evicted its own rows)."""
        slots, evicted, until = done.slots, done.evicted, done.evicted_until
        priorities = np.empty(slots.shape[0], dtype=np.float64)
        start = 0
        for i in range(slots.shape[0]):
            if until[i] > start:
                self.sampler.remove(evicted[start : until[i]])
                start = int(until[i])
            priorities[i] = self.sampler.max_priority
            self.sampler.add(slots[i : i + 1])
        return priorities

    def sample(self, k: int) -> tuple[ReplayBatch, Draw]:
        """With a ``device`` the weights (``draw.weights`` and ``batch.weights``) are a float32
        tensor there; indices and probabilities stay numpy on the host."""
        with self.sampler.lock:
            if self.sampler.size == 0 and len(self.memory):
                raise ValueError(
                    f"no transition can be drawn yet: with n_step={self.memory.n_step} a transition is "
                    "drawn once its window is complete (n_step transitions later on its stream, or at the "
                    f"end of its episode), and none of the {len(self.memory)} stored is"
                )
            draw = cast(Draw, self.sampler.sample(k))  # a host sampler's: numpy
            batch, live = self.memory.read_drawn(draw.indices, draw.weights)
            generation = self.eviction.generations(draw.indices, live)
            if generation is not live:  # moved transitions keep their generations
                device_generation: Any = generation.copy()
                if self.memory.device is not None:
                    device_generation = torch.from_numpy(device_generation).to(self.memory.device)
                batch = dataclasses.replace(batch, generation=device_generation)
            self.guard.record(draw.indices, generation)
        if self.memory.device is not None:  # the weights as the learner needs them: on its device
            draw = dataclasses.replace(draw, weights=cast(Any, batch.weights))
        return batch, draw
