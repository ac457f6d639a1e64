"""The steps of a prioritized replay whose priorities live on the device.

:class:`DeviceSteps` is the :class:`~prisample.replay.steps.ReplaySteps` of a
:class:`~prisample.replay.PrioritizedReplay` with its priorities on the memory's device
(``priorities_on=device``, or ``backend="device_proportional"`` / ``"device_uniform"``): new
transitions enter at the device's maximum, draws are gathered from the device mirrors, priority
updates have their generations checked there, and the draw record and the dropped count are kept
there (a :class:`~prisample.replay.write_back.DeviceWriteBackGuard`), all without reading a value
back to the host (Schaul et al. 2016, Algorithm 1, lines 6 and 8-12).
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import torch

from prisample.device_sampler import DeviceDraw, DevicePrioritizedSampler
from prisample.replay.batch import ReplayBatch
from prisample.replay.eviction import Eviction, Swaps, events
from prisample.replay.memory import Inserted, ReplayMemory
from prisample.replay.steps import ReplaySteps
from prisample.replay.write_back import DeviceWriteBackGuard

__all__ = ["DeviceSteps"]

IntArray = npt.NDArray[np.int64]

_READ_AROUND = 64
"""The most evictions whose maximum is read around (``O(k²)`` work per tree level) so that an
add evicts and enters in one write; more are removed in a write of their own first."""


class DeviceSteps(ReplaySteps):
    """The steps with the priorities on the memory's device (FIFO eviction only): a
    :class:`~prisample.device_sampler.DevicePrioritizedSampler` and a
    :class:`~prisample.replay.write_back.DeviceWriteBackGuard` on the memory's device."""

    on_device = True
    _host_updates_checked = True  # host arrays go to the device sampler's checked path

    def __init__(
        self,
        memory: ReplayMemory,
        sampler: DevicePrioritizedSampler,
        guard: DeviceWriteBackGuard,
        eviction: Eviction,
    ) -> None:
        super().__init__(memory, sampler, guard, eviction)
        self.device_sampler = sampler
        """The sampler, as the device sampler it is."""
        self.device_guard = guard
        """The guard, as the device guard it is."""
        # whether a window ever completed (one-step: every add): what the host knows of the
        # device sampler being non-empty, without asking it
        self._drawable_seen = memory.n_step == 1

    # -- writes ---------------------------------------------------------------------------------
    def admit(self, done: Inserted, swaps: Swaps, head: int) -> None:
        self.eviction.moved(self.sampler, swaps)
        if self.memory.n_step > 1:
            self._admit_windows(done)
        else:  # FIFO only: no eviction strategy to tell
            self._enter(done, head)

    def _enter(self, done: Inserted, head: int) -> None:
        """:meth:`HostSteps.enter <prisample.replay.steps.HostSteps.enter>` with the priorities
        on the device: the same two ordered writes, the maximum read there (never on the host),
        the slots and marks sent over with the write."""
        sampler = self.device_sampler
        slots, evicted, until = done.slots, done.evicted, done.evicted_until
        n = slots.shape[0]
        if n == 0:
            return
        if self.memory.num_evicted > head:  # a row of this write left again: row by row
            start = 0
            for i in range(n):
                if until[i] > start:
                    sampler.remove(evicted[start : until[i]], checked=False)
                    start = int(until[i])
                sampler.add(slots[i : i + 1], checked=False)
            return
        first = int(until[0])
        order, marks = events(done, np.zeros(n), first)  # NaN marks the later rows' evictions
        # the first row's evictions leave in the same write, ahead of the rows: the write's
        # slots and marks go over in one pinned, asynchronous copy
        (slots_on_device,), (marks_on_device,) = self.memory.send_to_device(
            [np.concatenate([evicted[:first], order])],
            [np.concatenate([np.full(first, np.nan), marks]).astype(np.float32)],
        )
        # the maximum once the first row's evictions left (an evicted transition's priority is
        # not a live one's), read around them: one write then evicts and enters
        high = self._max_without(slots_on_device[:first])
        values = torch.where(torch.isnan(marks_on_device), math.nan, high)
        sampler.write(slots_on_device, values, checked=False)

    def _admit_windows(self, done: Inserted) -> None:
        """Under n-step: the write's evicted transitions leave, its completed windows enter at
        the device's maximum (trusted: the memory's own slots)."""
        self._drawable_seen |= done.completed.shape[0] > 0
        leaving, entering = done.evicted.shape[0], done.completed.shape[0]
        if leaving == 0 and entering == 0:  # known from the host's shapes: nothing to write
            return
        # the evictions and the completed windows as one write (the windows last: a slot in both
        # is live after the host's remove-then-add too), the windows at the maximum once the
        # evictions left
        (slots_on_device,), _ = self.memory.send_to_device(
            [np.concatenate([done.evicted, done.completed])], []
        )
        high = self._max_without(slots_on_device[:leaving])
        values = torch.cat(
            [
                torch.full((leaving,), math.nan, dtype=torch.float64, device=slots_on_device.device),
                high.expand(entering),
            ]
        )
        self.device_sampler.write(slots_on_device, values, checked=False)

    def _max_without(self, leaving: torch.Tensor) -> torch.Tensor:
        """The maximum new transitions enter at once ``leaving`` (slots on the device, about to be
        emptied by the same write) left: read around them, or for many of them after a removal
        of their own; the choice rests on their number, which the host knows."""
        sampler = self.device_sampler
        k = leaving.shape[0]
        if 0 < k <= _READ_AROUND:
            return sampler.max_priority_without(leaving)
        if k:
            sampler.remove(leaving, checked=False)
        return sampler.max_priority

    # -- draws and updates ----------------------------------------------------------------------
    def sample(self, k: int) -> tuple[ReplayBatch, DeviceDraw]:
        """The draw, the gather and the draw record stay on the device (no host
        synchronisation); ``draw`` is a :class:`~prisample.device_sampler.DeviceDraw` of tensors."""
        with self.sampler.lock:
            self._check_drawable()
            draw = self.device_sampler.sample(k)
            batch = self.memory.read_on_device(draw.indices, draw.weights)
            self.device_guard.record(draw.indices, cast(torch.Tensor, batch.generation))
        return batch, draw

    def update(self, indices: Any, priorities: Any, generations: Any) -> None:
        """Indices on the memory's device (a draw's) take :meth:`update_on_device`; anything
        else is converted to the host and checked there."""
        if isinstance(indices, torch.Tensor) and indices.device == self.memory.device:
            self.update_on_device(indices, priorities, generations)
        else:
            self.update_from_host(indices, priorities, generations)

    def update_on_device(self, indices: torch.Tensor, priorities: Any, generations: Any) -> None:
        """:meth:`update` of indices on the device (a draw's): the generations checked there,
        the dropped count kept there, and the live entries written with the stale ones masked
        out (a stale entry changes nothing; a slot named twice keeps its last live entry, as on
        the host), in a fixed sequence of tensor operations with no host synchronisation.  The
        indices are trusted to be a draw's (in range, filled when drawn)."""
        device = self.memory.device
        idx = indices.to(torch.int64).reshape(-1)
        values = torch.as_tensor(priorities, dtype=torch.float64, device=device).reshape(-1)
        expected = (
            None
            if generations is None
            else torch.as_tensor(generations, dtype=torch.int64, device=device).reshape(-1)
        )
        with self.sampler.lock:
            current = self.memory.live_generations_on_device(idx)
            keep = self.device_guard.keep(idx, current, expected)
            self.device_sampler.update_priorities(idx, values, checked=False, keep=keep)

    def _check_drawable(self) -> None:
        if len(self.memory) and not self._drawable_seen:
            # not seen since construction: a loaded state may hold complete windows (the host's
            # own record, read while nothing is drawable; sticks once true)
            self._drawable_seen = bool(self.memory.drawable(np.arange(self.memory.capacity)).any())
        if len(self.memory) == 0 or not self._drawable_seen:  # the host's knowledge: no wait
            raise ValueError(
                f"no transition can be drawn yet: the memory holds {len(self.memory)} and with "
                f"n_step={self.memory.n_step} none has completed its window"
            )

    # -- captured steps -------------------------------------------------------------------------
    def sampler_on_device(self) -> DevicePrioritizedSampler:
        return self.device_sampler

    def stage(self) -> None:
        """The rows added since the last read and the ring's tail sent to the device, ``β`` at
        the schedule's step sent and the step advanced; ``ValueError`` while no transition can
        be drawn."""
        with self.sampler.lock:
            self._check_drawable()
            self.memory.stage_device_read()
            self.device_sampler.stage_draw()

    def save(self) -> tuple[list[torch.Tensor], int]:
        """Copies of the priority tree, the random stream's state, the draw record, the dropped
        count (tensors on the device) and the β schedule's step."""
        with self.sampler.lock:
            return [t.clone() for t in self.step_tensors()], self.device_sampler.step

    def restore(self, saved: tuple[list[torch.Tensor], int]) -> None:
        tensors, step = saved
        with self.sampler.lock:
            for target, value in zip(self.step_tensors(), tensors, strict=True):
                target.copy_(value)
            self.device_sampler.step = step

    def step_tensors(self) -> list[torch.Tensor]:
        """Everything a device ``sample`` and ``update`` change, as the tensors themselves (a
        captured graph reads and writes these)."""
        sampler = self.device_sampler
        return [*sampler.tree.state_tensors(), sampler.rng_state, *self.device_guard.step_tensors()]
