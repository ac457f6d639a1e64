"""Replay data on a torch device: frame storage, per-transition columns and batch reads there.

What lives where, for a memory built with ``device=`` a torch device (``None``: everything is a
numpy array on the host, as without this module):

=============================  ==============================  ====================================
data                           host (numpy)                    device (torch)
=============================  ==============================  ====================================
frames                         per stream, the frames of its   the pool: ``(frame_capacity,
                               last two stacks (dedup cache);  frame bytes)`` ``uint8``, viewed as
                               pinned staging of new frames    ``obs_dtype`` when read
frame rows, refcounts, free    all (bookkeeping)               —
list, streams' last rows
per-transition columns         all (authoritative: validation, a mirror, packed into one
(action, reward, discount,     ``state_dict``, generations)    ``(capacity, row bytes)`` ``uint8``
generation, extras; dict                                       tensor per group, synced before
observations' ``obs.<key>``,                                   each read
``next_obs.<key>``)
n-step windows (reward,        all (written when a window      the ``k`` read windows' reward and
discount, last slot)           completes, not in ring order)   discount, in the read's one copy
slots, rows, weights of a      computed there, packed into     one copy per read; the batch and
read                           one pinned buffer               ``batch.weights`` are gathered there
=============================  ==============================  ====================================

Writes never cross to the device one value at a time: an add stages its new frames in pinned
host memory and a vector step's frames go over in one copy and one ``index_copy_``; the columns'
rows written since the last read go over in one copy (two when the ring wrapped) at the next read.
A read sends its frame rows, slots (and under n-step the windows' last slots, rewards and
discounts) and importance weights in one small copy (:class:`DeviceReader`), then gathers frames
and each group of columns with one ``index_select``: no frames cross from host to device per step.
Pinned buffers are reused only after the copies that read them completed (CUDA events).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from prisample._devices import concrete_device
from prisample.replay._rows import last_rows

__all__ = ["Columns", "DeviceReader", "TorchFrames", "as_device", "concrete_device", "torch_dtype"]


IntArray = npt.NDArray[np.int64]

_STAGING_BUFFERS = 2  # staged frame buffers in flight (double buffering)
_READ_BUFFERS = 4  # pinned read buffers in flight


def as_device(device: Any) -> torch.device | None:
    """``None`` (numpy batches) or a ``torch.device`` from a string or device, named as the
    tensors made there report it (:func:`concrete_device`: ``"cuda"`` becomes ``cuda:<current
    index>``, ``"cpu:0"`` becomes ``cpu``); errors name it."""
    if device is None:
        return None
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            raise ValueError(f"device should be None or a torch device, but got device={device!r}") from None
    if not isinstance(device, torch.device):
        raise TypeError(f"device should be None, a str or a torch.device, but got device={device!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device should be available, but got device={device!r} without CUDA")
    return concrete_device(device)


def torch_dtype(dtype: np.dtype[Any], name: str) -> torch.dtype:
    """The torch dtype of a numpy dtype; ``TypeError`` naming ``name`` where torch has none."""
    try:
        return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    except TypeError:
        raise TypeError(
            f"{name} should be a dtype torch supports (device=), but got {name}={dtype}"
        ) from None


class _Pinned:
    """A ring of host byte buffers (pinned on CUDA) that copies to ``device`` read from; a buffer
    is handed out again only once the copies issued from it completed."""

    def __init__(self, device: torch.device, count: int) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self._buffers: list[torch.Tensor | None] = [None] * count
        self._events: list[Any] = [None] * count
        self._next = 0

    def take(self, nbytes: int) -> tuple[int, torch.Tensor]:
        """A free buffer of at least ``nbytes`` bytes and its number (for :meth:`done`)."""
        i = self._next
        self._next = (i + 1) % len(self._buffers)
        event = self._events[i]
        if event is not None:
            event.synchronize()
            self._events[i] = None
        buffer = self._buffers[i]
        if buffer is None or buffer.shape[0] < nbytes:
            size = max(nbytes, 2 * (0 if buffer is None else buffer.shape[0]), 4096)
            buffer = torch.empty(size, dtype=torch.uint8, pin_memory=self.cuda)
            self._buffers[i] = buffer
        return i, buffer

    def done(self, i: int) -> None:
        """Copies from buffer ``i`` were issued: it is busy until they complete."""
        if self.cuda:
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(torch.cuda.current_stream(self.device))
            self._events[i] = event

    def to_device(self, host: torch.Tensor) -> torch.Tensor:
        """A device copy of a pinned slice (asynchronous on CUDA, a real copy on the CPU too)."""
        return host.to(self.device, non_blocking=self.cuda, copy=True)

    def __getstate__(self) -> dict[str, Any]:
        # pinned buffers and CUDA events do not pickle: a copy starts with fresh ones
        return {"device": self.device, "count": len(self._buffers)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["device"], state["count"])  # type: ignore[misc]


class TorchFrames:
    """Frame storage on a torch device: ``(frame_capacity, frame bytes)`` ``uint8`` (any frame
    dtype: frames are bytes to store and gather, viewed as their dtype when read).

    The pool's kernel writes new frames to a pinned staging buffer with their rows
    (:meth:`stage`); :meth:`commit` sends them over in one copy and writes them with one
    ``index_copy_``.  The kernel never reads this storage (it compares against its host cache).
    """

    direct: npt.NDArray[Any] | None = None  # no host words to write into: frames are staged

    def __init__(
        self,
        frame_capacity: int,
        frame_shape: tuple[int, ...],
        dtype: np.dtype[Any],
        word: np.dtype[Any],
        device: torch.device,
        stage_frames: int,
    ) -> None:
        self.frame_shape, self.dtype, self.word, self.device = frame_shape, dtype, word, device
        self.torch_dtype = torch_dtype(dtype, "obs_dtype")
        self.frame_nbytes = dtype.itemsize * math.prod(frame_shape)
        self.data = torch.zeros((frame_capacity, self.frame_nbytes), dtype=torch.uint8, device=device)
        self.stage_frames = stage_frames
        self._pinned = _Pinned(device, _STAGING_BUFFERS)
        self._stage: tuple[int, torch.Tensor] | None = None

    @property
    def nbytes(self) -> int:
        return self.data.numel()

    def stage(self) -> tuple[npt.NDArray[Any], IntArray]:
        """The staging buffer as ``(frame words [stage_frames, words], rows [stage_frames])``."""
        if self._stage is None:
            frames = self.stage_frames * self.frame_nbytes
            self._stage = self._pinned.take(frames + 8 * self.stage_frames)
        buffer = self._stage[1].numpy()
        frames = self.stage_frames * self.frame_nbytes
        words = buffer[:frames].view(self.word).reshape(self.stage_frames, -1)
        rows: IntArray = buffer[frames : frames + 8 * self.stage_frames].view(np.int64)
        return words, rows

    def commit(self, n: int) -> None:
        """Write the first ``n`` staged frames to their rows (rows distinct)."""
        if n == 0 or self._stage is None:
            return
        i, buffer = self._stage
        frames = self.stage_frames * self.frame_nbytes
        new = self._pinned.to_device(buffer[: n * self.frame_nbytes]).view(n, self.frame_nbytes)
        rows = self._pinned.to_device(buffer[frames : frames + 8 * n]).view(torch.int64)
        self.data.index_copy_(0, rows, new)
        self._pinned.done(i)
        self._stage = None

    def gather_bytes(self, rows: torch.Tensor) -> torch.Tensor:
        """Frames of a flat int64 tensor of rows on the device, as bytes ``(n, frame bytes)``."""
        return self.data.index_select(0, rows)

    def as_frames(self, raw: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        """Gathered bytes viewed as frames of ``shape + frame_shape`` and the frame dtype."""
        if self.torch_dtype != torch.uint8:
            raw = raw.view(self.torch_dtype)
        return raw.view(*shape, *self.frame_shape)

    def gather(self, rows: npt.NDArray[Any]) -> torch.Tensor:
        flat = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)).to(self.device)
        return self.as_frames(self.gather_bytes(flat), rows.shape)

    def to_numpy(self) -> npt.NDArray[Any]:
        """A host copy of every frame, ``(frame_capacity, *frame_shape)`` of the frame dtype."""
        host = self.data.cpu().numpy()
        return host.view(self.dtype).reshape(host.shape[0], *self.frame_shape)

    def assign(self, frames: npt.NDArray[Any]) -> None:
        """Overwrite every frame with ``frames`` (host, ``(frame_capacity, *frame_shape)``)."""
        raw = np.ascontiguousarray(frames).reshape(frames.shape[0], -1).view(np.uint8)
        self.data.copy_(torch.from_numpy(raw))


def _align(offset: int, size: int) -> int:
    return -(-offset // size) * size


class Columns:
    """Per-transition columns (``capacity`` rows each): numpy arrays on the host, and with a
    torch ``device`` a mirror there.

    The host arrays are authoritative (validation, ``state_dict``, generations read on the
    host).  With a device they are views into one packed ``(capacity, row bytes)`` host array,
    mirrored by one tensor on the device; :meth:`sync` copies the rows written since the last
    sync (a contiguous range of the ring, two when it wrapped), and :meth:`gather` reads ``k``
    rows with one ``index_select``, returning each column as a (strided) view.  Only arrays written
    in ring order (row ``t % capacity`` at add ``t``) belong here: the memory's action, reward,
    discount, generation and extras (``extra.<name>``), and dict observations' ``obs.<key>`` and
    ``next_obs.<key>`` (two instances: gathered at the slots and at the windows' last slots).
    The n-step windows' results are written when a window completes, out of ring order: they
    travel with the read instead (:class:`DeviceReader`).

    >>> import numpy as np
    >>> cols = Columns(4, {"reward": ((), np.dtype(np.float32)), "action": ((2,), np.dtype(np.int64))})
    >>> cols.host["action"].shape, cols.device is None
    ((4, 2), True)
    """

    def __init__(
        self,
        capacity: int,
        spec: dict[str, tuple[tuple[int, ...], np.dtype[Any]]],
        device: torch.device | None = None,
    ) -> None:
        self.capacity, self.spec, self.device = capacity, dict(spec), device
        self.host: dict[str, npt.NDArray[Any]] = {}
        if device is None:
            for name, (shape, dtype) in self.spec.items():
                self.host[name] = np.zeros((capacity, *shape), dtype=dtype)
            return
        self._layout: dict[str, tuple[int, int, torch.dtype]] = {}
        offset, widest = 0, 8
        for name, (shape, dtype) in self.spec.items():
            offset = _align(offset, dtype.itemsize)
            nbytes = dtype.itemsize * math.prod(shape)
            self._layout[name] = (offset, nbytes, torch_dtype(dtype, f"{name} dtype"))
            offset += nbytes
            widest = max(widest, dtype.itemsize)
        self.row_nbytes = _align(max(offset, 1), widest)
        self._packed = np.zeros((capacity, self.row_nbytes), dtype=np.uint8)
        for name, (shape, dtype) in self.spec.items():
            start, nbytes, _ = self._layout[name]
            self.host[name] = self._packed[:, start : start + nbytes].view(dtype).reshape(capacity, *shape)
        self.mirror = torch.zeros((capacity, self.row_nbytes), dtype=torch.uint8, device=device)
        self._pinned = _Pinned(device, _READ_BUFFERS)
        self._synced = 0  # rows written before add number _synced are on the device
        self._stale = False  # everything must go over (after a load)

    @property
    def nbytes(self) -> int:
        """Bytes of the host arrays and of the device mirror."""
        return sum(a.nbytes for a in self.host.values()) + self.mirror_nbytes

    @property
    def mirror_nbytes(self) -> int:
        """Bytes of the device mirror (0 without a device)."""
        return 0 if self.device is None else self.mirror.numel()

    def invalidate(self) -> None:
        """The host arrays were replaced wholesale: the next :meth:`sync` copies every row."""
        self._stale = True

    def sync(self, head: int) -> None:
        """Bring the device mirror up to date with the rows of adds ``< head`` (rows are written
        in ring order: add ``t`` in row ``t % capacity``)."""
        if self.device is None:
            return
        c = self.capacity
        lo = head - c if self._stale or head - self._synced >= c else self._synced
        self._stale = False
        self._synced = head
        if head <= lo:
            return
        if head - lo >= c:
            ranges = [(0, c)]
        else:
            a, b = lo % c, head % c
            ranges = [(a, b)] if a < b else [(a, c), (0, b)]
            ranges = [(x, y) for x, y in ranges if y > x]
        n = sum(y - x for x, y in ranges)
        i, buffer = self._pinned.take(n * self.row_nbytes)
        host = buffer[: n * self.row_nbytes].numpy().reshape(n, self.row_nbytes)
        at = 0
        for x, y in ranges:
            host[at : at + y - x] = self._packed[x:y]
            at += y - x
        device = self._pinned.to_device(buffer[: n * self.row_nbytes]).view(n, self.row_nbytes)
        at = 0
        for x, y in ranges:
            self.mirror[x:y] = device[at : at + y - x]
            at += y - x
        self._pinned.done(i)

    def write_rows(self, slots: npt.NDArray[np.int64], values: dict[str, npt.NDArray[Any]]) -> None:
        """Rows ``values[name][i]`` written to the host columns at ``slots[i]``, one assignment per
        column (``values`` names some or all columns); a slot named twice keeps its last row.
        The device mirror takes them at the next :meth:`sync`."""
        rows: Any = slice(None)
        if slots.shape[0] > self.capacity:  # a write longer than the ring: each slot's last row
            rows = last_rows(slots)
            slots = slots[rows]
        for name, column in values.items():
            self.host[name][slots] = column[rows]

    def resend(self, rows: npt.NDArray[np.int64]) -> None:
        """Copy ``rows`` to the device mirror now: rows rewritten out of ring order (a
        :meth:`~prisample.replay.memory.ReplayMemory.swap_slots`); rows not yet synced are copied
        again at the next :meth:`sync`, from the same host bytes."""
        if self.device is None or rows.shape[0] == 0:
            return
        n, width = rows.shape[0], self.row_nbytes
        i, buffer = self._pinned.take(8 * n + n * width)  # the index and the rows: one copy
        host = buffer.numpy()
        host[: 8 * n].view(np.int64)[:] = rows
        host[8 * n : 8 * n + n * width].reshape(n, width)[:] = self._packed[rows]
        sent = self._pinned.to_device(buffer[: 8 * n + n * width])
        self._pinned.done(i)
        self.mirror.index_copy_(0, sent[: 8 * n].view(torch.int64), sent[8 * n :].view(n, width))

    def gather(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every column at ``slots`` (an int64 tensor on the device): views of one gathered array."""
        rows = self.mirror.index_select(0, slots)
        k = rows.shape[0]
        out = {}
        for name, (start, nbytes, dtype) in self._layout.items():
            column = rows[:, start : start + nbytes].view(dtype)
            shape = self.spec[name][0]
            out[name] = column.view(k, *shape) if shape else column[:, 0]
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self.device is not None:
            del state["host"]  # views of _packed: rebuilt so that copies keep sharing it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.device is not None:
            self.host = {}
            for name, (shape, dtype) in self.spec.items():
                start, nbytes, _ = self._layout[name]
                self.host[name] = (
                    self._packed[:, start : start + nbytes].view(dtype).reshape(self.capacity, *shape)
                )


class DeviceReader:
    """Sends what a read computed on the host to the device in one small copy: index arrays (slots,
    the n-step windows' last slots, frame rows) as int64 and per-slot values (the n-step windows'
    reward and discount, importance weights) as float32, packed into one pinned buffer."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pinned = _Pinned(device, _READ_BUFFERS)

    def send(
        self, ints: Sequence[npt.NDArray[Any]], floats: Sequence[npt.NDArray[np.float32]]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """``ints`` (any integer arrays) as flat int64 tensors and ``floats`` as flat float32
        tensors on the device, in order."""
        n_int, n_float = sum(a.size for a in ints), sum(a.size for a in floats)
        nbytes = 8 * n_int + 4 * n_float
        i, buffer = self._pinned.take(nbytes)
        host = buffer.numpy()
        int_view, float_view = host[: 8 * n_int].view(np.int64), host[8 * n_int : nbytes].view(np.float32)
        sizes = []
        at = 0
        for a in ints:
            int_view[at : at + a.size] = a.reshape(-1)
            sizes.append(a.size)
            at += a.size
        at = 0
        for f in floats:
            float_view[at : at + f.size] = f.reshape(-1)
            at += f.size
        device = self._pinned.to_device(buffer[:nbytes])
        self._pinned.done(i)
        index = device[: 8 * n_int].view(torch.int64)
        values = device[8 * n_int :].view(torch.float32)
        out_ints, out_floats = [], []
        at = 0
        for size in sizes:
            out_ints.append(index[at : at + size])
            at += size
        at = 0
        for f in floats:
            out_floats.append(values[at : at + f.size])
            at += f.size
        return out_ints, out_floats
