"""Reads of a replay memory on its torch device: batches gathered from the device mirrors with no
host synchronisation.

:class:`DeviceReads` is the part a :class:`~prisample.replay.memory.ReplayMemory` with
``device=`` holds: it sends a host read's index arrays in one copy (:meth:`DeviceReads.send`),
stages what a captured CUDA graph cannot (:meth:`DeviceReads.stage`: new rows, the ring's tail),
gathers a batch for slots drawn on the device (:meth:`DeviceReads.read`,
:meth:`DeviceReads.live_generations`), and keeps the n-step windows' results (return, discount,
last slot; Sutton & Barto 2018, Sec. 7.1) mirrored there as they complete.
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
from prisample.replay.ring import Ring
from prisample.replay.stores import ObservationStore

__all__ = ["DeviceReads"]

IntArray = npt.NDArray[np.int64]


class DeviceReads:
    """The device side of a memory's reads over its ``ring`` (whose columns are mirrored on
    ``device``), its observation ``store`` and, under n-step, its windows ``nstep``.

    The host stays authoritative: the ring's rows and the store's tables and frames go to the
    device when a read needs them (:meth:`stage`), the ring's tail as a tensor there
    (:attr:`tail_on_device`) so that a captured read can tell live slots without the host.
    ``n_step > 1`` mirrors the windows' results (``reward``, ``discount``, ``last``), sent as
    each window completes (:meth:`send_windows`): they are written out of ring order.
    """

    def __init__(
        self, device: torch.device, ring: Ring, store: ObservationStore, nstep: NStepAccumulator | None
    ) -> None:
        self.device, self.ring = device, ring
        self.store, self.nstep = store, nstep
        self.reader = DeviceReader(device)
        """Sends a host read's index arrays and floats in one pinned copy."""
        self.tail_on_device = torch.zeros((), dtype=torch.int64, device=device)
        """The ring's tail as of the last :meth:`stage`: where a captured read compares with it."""
        self._tail_sent: int | None = 0
        self.windows: Columns | None = None
        """The completed windows' results mirrored on the device (``None`` for ``n_step = 1``)."""
        if nstep is not None:
            spec = {"reward": ((), np.dtype(np.float32)), "discount": ((), np.dtype(np.float32))}
            self.windows = Columns(ring.capacity, {**spec, "last": ((), np.dtype(np.int64))}, device)

    def adopt(self, store: ObservationStore, nstep: NStepAccumulator | None) -> None:
        """Read from ``store`` and ``nstep`` from now on (what a loaded state committed); every
        window's results go to the device again, the ring's tail at the next :meth:`stage`."""
        self.store, self.nstep = store, nstep
        self._tail_sent = None
        if self.windows is not None:
            self.send_windows(np.arange(self.ring.capacity, dtype=np.int64))

    def send_windows(self, slots: IntArray) -> None:
        """The results of the windows of ``slots`` (just completed), to their device mirror."""
        windows, nstep = self.windows, self.nstep
        if windows is None or nstep is None or slots.shape[0] == 0:
            return
        results: dict[str, npt.NDArray[Any]] = {
            "reward": nstep.reward[slots],
            "discount": nstep.discount[slots],
            "last": nstep.last[slots],
        }
        windows.write_rows(slots, results)
        windows.resend(slots)

    def send(
        self, ints: list[npt.NDArray[Any]], floats: list[npt.NDArray[np.float32]]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Host arrays to the device in one pinned, asynchronous copy (no synchronisation): the
        ``ints`` as int64 tensors and the ``floats`` as float32 tensors, in order."""
        return self.reader.send(ints, floats)

    def stage(self) -> None:
        """The host side of a device read, which a captured CUDA graph cannot run: the rows
        added since the last read (the ring's columns, the store's tables and frames, each in one
        copy) and the ring's tail (a fill, when it moved) sent to the device."""
        ring = self.ring
        ring.columns.sync(ring.head)
        self.store.stage_on_device(ring.head)
        if ring.tail != self._tail_sent:
            self.tail_on_device.fill_(ring.tail)
            self._tail_sent = ring.tail

    def read(self, slots: torch.Tensor, weights: torch.Tensor | None = None) -> ReplayBatch:
        """The batch of ``slots`` (an int64 tensor on the device, each drawable: not checked),
        with no host synchronisation: the ring's columns, the store's row tables, the frames and
        under n-step the windows' results are gathered from their mirrors (:meth:`stage` first,
        skipped while capturing)."""
        if not capturing():
            self.stage()
        columns: dict[str, Any] = dict(self.ring.columns.gather(slots))
        last = slots
        if self.windows is not None:  # n-step: the window's return, discount and last slot
            window = self.windows.gather(slots)
            columns["reward"], columns["discount"], last = (
                window["reward"],
                window["discount"],
                window["last"],
            )
        obs, next_obs = self.store.take_on_device(slots, last)
        return ReplayBatch.from_columns(columns, obs, next_obs, self.ring.extra_names, weights)

    def live_generations(self, slots: torch.Tensor) -> torch.Tensor:
        """The generation of the live transition each of ``slots`` (an int64 tensor on the
        device) holds, ``-1`` where it holds none, computed there with no host synchronisation
        (:meth:`stage` first, skipped while capturing)."""
        if not capturing():
            self.stage()
        generation = self.ring.columns.gather(slots)["generation"]
        return torch.where(generation >= self.tail_on_device, generation, torch.full_like(generation, -1))
