"""Reads of slots drawn on the device: a replay memory's batch gathered from its device
mirrors with no host synchronisation.

:class:`DeviceReads` gives :class:`~prisample.replay.memory.ReplayMemory` on a torch device
:meth:`~DeviceReads.read_on_device` and :meth:`~DeviceReads.live_generations_on_device` for
slots given as a tensor there (a device sampler's draw), and keeps the n-step windows' results
(return, discount, last slot; Sutton & Barto 2018, Sec. 7.1) mirrored there as they complete.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from prisample._capture import capturing
from prisample.replay.batch import ReplayBatch
from prisample.replay.device import Columns, DeviceReader
from prisample.replay.nstep import NStepAccumulator
from prisample.replay.stores import ObservationStore

__all__ = ["DeviceReads"]

IntArray = npt.NDArray[np.int64]


class DeviceReads:
    """The device reads of a replay memory (mixed into
    :class:`~prisample.replay.memory.ReplayMemory`, whose columns, store and n-step windows they
    read)."""

    capacity: int
    device: torch.device | None
    _columns: Columns
    _store: ObservationStore
    _nstep: NStepAccumulator | None
    _windows: Columns | None
    _head: int
    _tail: int
    _tail_on_device: torch.Tensor  # the ring's tail where a captured read compares with it
    _tail_sent: int | None
    _reader: DeviceReader | None

    def _batch(self, columns: dict[str, Any], obs: Any, next_obs: Any, weights: Any) -> ReplayBatch:
        raise NotImplementedError

    def _send_windows(self, slots: IntArray) -> None:
        """The results of windows that just completed, to their device mirror."""
        windows, nstep = self._windows, self._nstep
        if windows is None or nstep is None or slots.shape[0] == 0:
            return
        results: dict[str, npt.NDArray[Any]] = {
            "reward": nstep.reward[slots],
            "discount": nstep.discount[slots],
            "last": nstep.last[slots],
        }
        windows.write_rows(slots, results)
        windows.resend(slots)

    def _resend_all_windows(self) -> None:
        """Every slot's window results to the device (after a load replaced them)."""
        if self._windows is not None:
            self._send_windows(np.arange(self.capacity, dtype=np.int64))

    def send_to_device(
        self, ints: list[npt.NDArray[Any]], floats: list[npt.NDArray[np.float32]]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Host arrays to the device in one pinned, asynchronous copy (no synchronisation): the
        ``ints`` as int64 tensors and the ``floats`` as float32 tensors, in order."""
        if self._reader is None:
            raise ValueError(f"send_to_device needs a device, but got device={self.device}")
        return self._reader.send(ints, floats)

    def stage_device_read(self) -> None:
        """The host side of a device read, which a captured CUDA graph cannot run: the rows
        added since the last read (columns, the store's tables and frames, each in one copy) and
        the ring's tail (a fill, when it moved) sent to the device.  :meth:`read_on_device` and
        :meth:`live_generations_on_device` call it themselves, except while capturing."""
        if self.device is None:
            raise ValueError(f"a device read needs a device, but got device={self.device}")
        self._columns.sync(self._head)
        self._store.stage_on_device(self._head)
        if self._tail != self._tail_sent:
            self._tail_on_device.fill_(self._tail)
            self._tail_sent = self._tail

    def read_on_device(self, slots: torch.Tensor, weights: torch.Tensor | None = None) -> ReplayBatch:
        """:meth:`~prisample.replay.memory.ReplayMemory.get` for slots drawn on the memory's
        device (an int64 tensor there, each
        :meth:`~prisample.replay.memory.ReplayMemory.drawable`: not checked), with no host
        synchronisation: the columns, the store's row tables, the frames and under n-step the
        windows' results (return, discount, last slot: sent to the device as each window
        completes) are gathered from their device mirrors (the rows added since the last read go
        over first, host to device: :meth:`stage_device_read`, skipped while capturing)."""
        if self.device is None:
            raise ValueError(f"read_on_device needs a device, but got device={self.device}")
        if not capturing():
            self.stage_device_read()
        columns: dict[str, Any] = dict(self._columns.gather(slots))
        last = slots
        if self._windows is not None:  # n-step: the window's return, discount and last slot
            window = self._windows.gather(slots)
            columns["reward"], columns["discount"], last = (
                window["reward"],
                window["discount"],
                window["last"],
            )
        obs, next_obs = self._store.take_on_device(slots, last)
        return self._batch(columns, obs, next_obs, weights)

    def live_generations_on_device(self, slots: torch.Tensor) -> torch.Tensor:
        """:meth:`~prisample.replay.memory.ReplayMemory.live_generations` of slots given as an
        int64 tensor on the device, computed there (``-1`` where a slot holds no live
        transition), with no host synchronisation (:meth:`stage_device_read` first, skipped while
        capturing)."""
        if not capturing():
            self.stage_device_read()
        generation = self._columns.gather(slots)["generation"]
        return torch.where(generation >= self._tail_on_device, generation, torch.full_like(generation, -1))
