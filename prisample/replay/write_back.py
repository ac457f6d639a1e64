"""The write-back guard: which priority updates still name the item they were computed for.

A learner computes a priority for an item it drew, and writes it back later; by then the item's
slot may hold another item (a ring wrapped, an eviction moved it).  Each item carries a
*generation*, the number it got when it entered (``-1``: none), and an update names
``(item, generation)``: it lands only where the item still holds that generation, else it is
dropped as *stale* and counted (a TD error of an evicted transition must not land on its
successor; ray-project/ray#6534).  Without the generations the update came with, the guard
compares against its *draw record*: the generation each item held at its last draw.

The guard knows items only by their index in ``[0, n_items)`` and their generation numbers, so
any item kind uses it alike: a replay's slots (one transition each), or windows of a stream's
steps, each with a generation of its own.  Two implementations, chosen once with the sampler:

:class:`HostWriteBackGuard`
    The record and the dropped count in numpy, for a sampler whose priorities live on the host.
:class:`DeviceWriteBackGuard`
    The record and the dropped count as tensors on the sampler's device: recording a draw and
    checking an update of device tensors issue tensor operations only, never a read back to the
    host (so a CUDA graph can capture them).  Updates of host arrays are checked against a host
    copy of the needed entries.

Both give the same answers on the same sequence of draws and updates (``tests/test_write_back.py``).
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from prisample._validation import check_positive_int
from prisample.replay._checks import as_state_array

__all__ = ["DeviceWriteBackGuard", "HostWriteBackGuard", "WriteBackGuard", "check_generations_shape"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def check_generations_shape(n: int, m: int) -> None:
    """``ValueError`` unless an update's ``generations`` has one value per index."""
    if m != n:
        raise ValueError(f"generations should have one value per index ({n}), but got {m}")


class WriteBackGuard(abc.ABC):
    """The draw record of ``n_items`` items and the count of stale updates dropped.

    An update entry for item ``i`` with expected generation ``g`` (the one passed in, else
    ``record[i]``) is kept iff ``current[i] == g`` and ``current[i] >= 0``, where ``current`` is
    the generation the item holds now (``-1``: none).  Every entry not kept adds one to
    :attr:`dropped`.  :meth:`record` and :meth:`keep` work on the guard's own arrays (numpy for
    the host guard, tensors on the device for the device guard); :meth:`keep_host`,
    :meth:`last_drawn`, :meth:`record_state` and :meth:`load` on numpy arrays for both.
    """

    n_items: int
    """Number of items (slots) the record covers."""

    @abc.abstractmethod
    def record(self, items: Any, generations: Any) -> None:
        """A draw: ``items`` were drawn holding ``generations`` (a later entry wins for an item
        named twice)."""

    @abc.abstractmethod
    def keep(self, items: Any, current: Any, generations: Any = None) -> Any:
        """The entries of an update to apply (a bool mask): those whose item still holds the
        generation expected (``generations`` if given, else the draw record's); the others
        are counted in :attr:`dropped`.  ``ValueError`` (nothing counted) when ``generations``
        has not one value per item."""

    @abc.abstractmethod
    def last_drawn(self, items: IntArray) -> IntArray:
        """A host copy of the draw record at ``items`` (``-1``: never drawn)."""

    @property
    @abc.abstractmethod
    def dropped(self) -> int:
        """Stale update entries dropped so far (reading the device guard's waits for the device)."""

    @dropped.setter
    @abc.abstractmethod
    def dropped(self, value: int) -> None: ...

    @property
    @abc.abstractmethod
    def nbytes(self) -> int:
        """Bytes held by the record."""

    @abc.abstractmethod
    def record_state(self) -> IntArray:
        """A host copy of the whole draw record (a checkpoint's ``"drawn"``)."""

    @abc.abstractmethod
    def load(self, drawn: IntArray, dropped: int) -> None:
        """Assign a checked record (:meth:`check_record`) and dropped count."""

    def keep_host(self, items: IntArray, current: IntArray, generations: IntArray | None = None) -> BoolArray:
        """:meth:`keep` of host arrays, whatever the guard: the record's entries read as a host
        copy (:meth:`last_drawn`), the drops counted on the host."""
        if generations is None:
            expected = self.last_drawn(items)
        else:
            check_generations_shape(items.shape[0], generations.shape[0])
            expected = generations
        keep: BoolArray = (current == expected) & (current >= 0)
        stale = int(keep.shape[0] - np.count_nonzero(keep))
        if stale:
            self._count_host(stale)
        return keep

    @abc.abstractmethod
    def _count_host(self, stale: int) -> None:
        """Add ``stale`` drops counted on the host."""

    def check_record(self, value: Any, name: str = "state_dict drawn") -> IntArray:
        """``value`` as a draw record (``int64[n_items]``), else ``ValueError`` naming ``name``;
        the entries' meaning (a generation the item has held) is the owner's to check."""
        drawn = as_state_array(value, name)
        if drawn.shape != (self.n_items,) or drawn.dtype != np.int64:
            raise ValueError(
                f"{name} should be int64[{self.n_items}], but got {drawn.dtype}{list(drawn.shape)}"
            )
        return drawn


class HostWriteBackGuard(WriteBackGuard):
    """The guard in numpy: ``record[i]`` the generation item ``i`` held at its last draw.

    >>> guard = HostWriteBackGuard(4)
    >>> guard.record(np.array([1, 2]), np.array([5, 6]))
    >>> guard.keep(np.array([1, 2]), current=np.array([5, 10])).tolist(), guard.dropped
    ([True, False], 1)
    """

    def __init__(self, n_items: int) -> None:
        self.n_items = check_positive_int(n_items, "n_items")
        self.drawn = np.full(self.n_items, -1, dtype=np.int64)
        """The generation each item held at its last draw (``-1``: never drawn)."""
        self._dropped = 0

    def record(self, items: IntArray, generations: IntArray) -> None:
        self.drawn[items] = generations

    def keep(self, items: IntArray, current: IntArray, generations: IntArray | None = None) -> BoolArray:
        return self.keep_host(items, current, generations)

    def last_drawn(self, items: IntArray) -> IntArray:
        return self.drawn[items]

    def _count_host(self, stale: int) -> None:
        self._dropped += stale

    @property
    def dropped(self) -> int:
        return self._dropped

    @dropped.setter
    def dropped(self, value: int) -> None:
        self._dropped = int(value)

    @property
    def nbytes(self) -> int:
        return int(self.drawn.nbytes)

    def record_state(self) -> IntArray:
        return self.drawn.copy()

    def load(self, drawn: IntArray, dropped: int) -> None:
        self.drawn[:] = drawn
        self._dropped = int(dropped)


class DeviceWriteBackGuard(WriteBackGuard):
    """The guard as tensors on ``device``: the record (int64) and a 0-d count of the drops
    counted there; drops counted on the host (updates of host arrays) add to it when read.

    :meth:`record` and :meth:`keep` take tensors on ``device`` and issue a fixed sequence of
    tensor operations (no host synchronisation, no data-dependent shapes).
    """

    def __init__(self, n_items: int, device: torch.device) -> None:
        self.n_items = check_positive_int(n_items, "n_items")
        self.device = device
        """Where the record lives (the sampler's device)."""
        self.drawn = torch.full((self.n_items,), -1, dtype=torch.int64, device=device)
        """The generation each item held at its last draw (``-1``: never drawn), on the device."""
        self.dropped_on_device = torch.zeros((), dtype=torch.int64, device=device)
        """Drops counted on the device (by :meth:`keep`)."""
        self._dropped = 0  # drops counted on the host (by keep_host)

    def record(self, items: torch.Tensor, generations: torch.Tensor) -> None:
        self.drawn[items] = generations

    def keep(
        self, items: torch.Tensor, current: torch.Tensor, generations: torch.Tensor | None = None
    ) -> torch.Tensor:
        if generations is None:
            expected = self.drawn[items]
        else:
            check_generations_shape(items.shape[0], generations.shape[0])  # shapes: known to the host
            expected = generations
        keep = (current == expected) & (current >= 0)
        self.dropped_on_device += (~keep).sum()
        return keep

    def last_drawn(self, items: IntArray) -> IntArray:
        return self.drawn[torch.from_numpy(np.asarray(items, dtype=np.int64)).to(self.device)].cpu().numpy()

    def _count_host(self, stale: int) -> None:
        self._dropped += stale

    @property
    def dropped(self) -> int:
        return self._dropped + int(self.dropped_on_device.item())

    @dropped.setter
    def dropped(self, value: int) -> None:
        self._dropped = int(value)
        self.dropped_on_device.zero_()

    @property
    def nbytes(self) -> int:
        return self.drawn.numel() * self.drawn.element_size()

    def record_state(self) -> IntArray:
        # a copy: on CPU tensors numpy() would share the record's memory
        out: IntArray = self.drawn.cpu().numpy().copy()
        return out

    def load(self, drawn: IntArray, dropped: int) -> None:
        self.drawn.copy_(torch.from_numpy(np.ascontiguousarray(drawn, dtype=np.int64)))
        self.dropped = dropped

    def step_tensors(self) -> list[torch.Tensor]:
        """The tensors a device step changes (the record, the device count): saved and restored
        in place around a CUDA graph capture."""
        return [self.drawn, self.dropped_on_device]
