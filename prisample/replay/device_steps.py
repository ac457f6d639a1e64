"""The steps of a prioritized replay whose priorities live on the device.

:class:`DeviceSteps` gives :class:`~prisample.replay.PrioritizedReplay` with
its priorities on the memory's device (``priorities_on=device``, or ``backend="device_proportional"``
/ ``"device_uniform"``) its device side: new transitions
entering at the device's maximum, draws gathered from the device mirrors, priority updates whose
generations are checked there, and the draw record and the dropped count kept there, all without
reading a value back to the host (Schaul et al. 2016, Algorithm 1, lines 6 and 8-12).
"""

from __future__ import annotations

import math
import threading
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import torch

from prisample.device_sampler import DevicePrioritizedSampler
from prisample.replay.batch import ReplayBatch
from prisample.replay.eviction import events
from prisample.replay.memory import Inserted, ReplayMemory

__all__ = ["DeviceSteps"]

IntArray = npt.NDArray[np.int64]

_READ_AROUND = 64
"""The most evictions whose maximum is read around (``O(k²)`` work per tree level) so that an
add evicts and enters in one write; more are removed in a write of their own first."""


class DeviceSteps:
    """The device side of a prioritized replay (mixed into
    :class:`~prisample.replay.PrioritizedReplay`, whose memory, device sampler and records it
    uses)."""

    memory: ReplayMemory
    on_device: bool
    _device_sampler: DevicePrioritizedSampler | None
    _drawn: IntArray
    _drawn_on_device: torch.Tensor
    _dropped: int
    _dropped_on_device: torch.Tensor
    _drawable_seen: bool

    @property
    def lock(self) -> threading.RLock:
        raise NotImplementedError

    @property
    def dropped_updates(self) -> int:
        """Priority updates dropped as stale (their slot rewritten or evicted since the draw);
        with the priorities on the device, reading it waits for the device."""
        with self.lock:
            if self.on_device:
                return self._dropped + int(self._dropped_on_device.item())
            return self._dropped

    @dropped_updates.setter
    def dropped_updates(self, value: int) -> None:
        with self.lock:
            self._dropped = value
            if self.on_device:
                self._dropped_on_device.zero_()

    def _enter_on_device(self, done: Inserted, head: int) -> None:
        """``_enter`` with the priorities on the device: the same two ordered writes, the
        maximum read there (never on the host), the slots and marks sent over with the write."""
        sampler = self._device_sampler
        assert sampler is not None
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

    def _sample_on_device(self, k: int) -> tuple[ReplayBatch, Any]:
        """:meth:`~prisample.replay.PrioritizedReplay.sample` with the priorities on the device:
        the draw, the gather and the draw record stay there (no host synchronisation); ``draw`` is
        a :class:`~prisample.device_sampler.DeviceDraw` of tensors."""
        sampler = self._device_sampler
        assert sampler is not None
        with self.lock:
            self._check_drawable()
            draw = sampler.sample(k)
            batch = self.memory.read_on_device(draw.indices, draw.weights)
            self._drawn_on_device[draw.indices] = cast(torch.Tensor, batch.generation)
        return batch, draw

    def stage_device_step(self) -> None:
        """The host side of one ``sample`` and ``update_priorities`` on the device (see
        :class:`~prisample.replay.PrioritizedReplay`), for a CUDA graph that captured them (a
        graph replays kernels, never Python): the rows added since the last read and the ring's
        tail sent to the device, ``β`` at the schedule's step sent and the step advanced.  Call it
        before every replay of such a graph; eager calls do it themselves.  ``ValueError`` while
        no transition can be drawn."""
        sampler = self._sampler_on_device()
        with self.lock:
            self._check_drawable()
            self.memory.stage_device_read()
            sampler.stage_draw()

    def save_device_step(self) -> tuple[list[torch.Tensor], int]:
        """Copies of everything a device ``sample`` and ``update_priorities`` change: the
        priority tree, the random stream's state, the draw record, the dropped count (tensors on
        the device) and the β schedule's step; :meth:`restore_device_step` puts them back (e.g.
        around the warm-up steps before a CUDA graph capture)."""
        with self.lock:
            return [t.clone() for t in self._device_step_tensors()], self._sampler_on_device().step

    def restore_device_step(self, saved: tuple[list[torch.Tensor], int]) -> None:
        """Put back what :meth:`save_device_step` copied (in place: a captured graph keeps
        reading the same tensors)."""
        tensors, step = saved
        with self.lock:
            for target, value in zip(self._device_step_tensors(), tensors, strict=True):
                target.copy_(value)
            self._sampler_on_device().step = step

    def _sampler_on_device(self) -> DevicePrioritizedSampler:
        if self._device_sampler is None:
            raise ValueError(
                "this needs the priorities on the device (priorities_on=device, or backend='device_*')"
            )
        return self._device_sampler

    def _device_step_tensors(self) -> list[torch.Tensor]:
        sampler = self._sampler_on_device()
        own = [self._drawn_on_device, self._dropped_on_device]
        return [*sampler.tree.state_tensors(), sampler.rng_state, *own]

    def _check_drawable(self) -> None:
        if len(self.memory) == 0 or not self._drawable_seen:  # the host's knowledge: no wait
            raise ValueError(
                f"no transition can be drawn yet: the memory holds {len(self.memory)} and with "
                f"n_step={self.memory.n_step} none has completed its window"
            )

    def _draw_record(self) -> IntArray:
        if self.on_device:
            return self._drawn_on_device.cpu().numpy().copy()
        return self._drawn.copy()

    def _set_draw_record(self, drawn: IntArray) -> None:
        self._drawn[:] = drawn
        if self.on_device:
            self._drawn_on_device.copy_(torch.from_numpy(self._drawn))

    def _admit_windows_on_device(self, done: Inserted) -> None:
        """Under n-step: the write's evicted transitions leave, its completed windows enter at
        the device's maximum (trusted: the memory's own slots)."""
        sampler = self._device_sampler
        assert sampler is not None
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
        sampler.write(slots_on_device, values, checked=False)

    def _max_without(self, leaving: torch.Tensor) -> torch.Tensor:
        """The maximum new transitions enter at once ``leaving`` (slots on the device, about to be
        emptied by the same write) left: read around them, or for many of them after a removal
        of their own; the choice rests on their number, which the host knows."""
        sampler = self._device_sampler
        assert sampler is not None
        k = leaving.shape[0]
        if 0 < k <= _READ_AROUND:
            return sampler.max_priority_without(leaving)
        if k:
            sampler.remove(leaving, checked=False)
        return sampler.max_priority

    def _update_on_device(self, indices: torch.Tensor, priorities: Any, generations: Any) -> None:
        """:meth:`~prisample.replay.PrioritizedReplay.update_priorities` of indices on the device
        (a draw's): the generations checked there, the dropped count kept there, and the live
        entries written with the stale ones masked out (a stale entry changes nothing; a slot
        named twice keeps its last live entry, as on the host), in a fixed sequence of tensor
        operations with no host synchronisation.  The indices are trusted to be a draw's (in
        range, filled when drawn)."""
        sampler = self._device_sampler
        assert sampler is not None
        device = self.memory.device
        idx = indices.to(torch.int64).reshape(-1)
        values = torch.as_tensor(priorities, dtype=torch.float64, device=device).reshape(-1)
        with self.lock:
            current = self.memory.live_generations_on_device(idx)
            expected = (
                self._drawn_on_device[idx]
                if generations is None
                else torch.as_tensor(generations, dtype=torch.int64, device=device).reshape(-1)
            )
            keep = (current == expected) & (current >= 0)
            self._dropped_on_device += (~keep).sum()
            sampler.update_priorities(idx, values, checked=False, keep=keep)
