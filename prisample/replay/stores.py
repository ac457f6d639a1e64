"""Observation stores: where and how a replay memory's observations live, one strategy per kind.

:class:`~prisample.replay.memory.ReplayMemory` keeps the ring (slots, generations, streams,
n-step windows) and hands each write's checked observations to its store, which puts them
somewhere and gathers them back for a batch:

* :class:`FrameStore`: array observations as rows of a
  :class:`~prisample.replay.frames.FramePool` (each distinct frame once, reference-counted; host
  numpy or a torch device), the ring's slots naming their stacks' rows (``obs_rows``,
  ``next_rows``).  Frame sharing lets the pool run short before the ring is full, so a frame
  store may evict the oldest transitions early.
* :class:`DictStore`: dict observations (gymnasium ``Dict`` spaces), each key's ``s_t`` and
  ``s_{t+1}`` in a per-slot column (mirrored on a device).

Every store answers the same calls: :meth:`ObservationStore.write` (a batch of rows in ring
order, with the ring's evictions), :meth:`ObservationStore.read_plan` and
:meth:`ObservationStore.take` (a batch's stacks, on the host or sent with the read's one copy to
the device), :attr:`ObservationStore.nbytes`, and its part of the memory's state
(:meth:`ObservationStore.state_arrays`, :meth:`ObservationStore.check_state`,
:meth:`ObservationStore.commit_state`).  A store is made before the observation dtype is known
and allocates its buffers at the first write (:meth:`ObservationStore.allocate`).  A memory makes
its store with :func:`make_store`, or takes one passed in (``ReplayMemory(..., store=...)``),
checked against its arguments by :func:`check_store`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numba
import numpy as np
import numpy.typing as npt
import torch

from prisample.replay._checks import warn_if_too_large
from prisample.replay._rows import last_rows, previous_row
from prisample.replay.device import Columns, TorchFrames
from prisample.replay.frames import FramePool, reserve_rows

__all__ = [
    "DictStore",
    "FrameStore",
    "ObservationStore",
    "StoreWrite",
    "check_store",
    "make_store",
]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
DTypes = np.dtype[Any] | dict[str, np.dtype[Any]]
Spec = dict[str, tuple[np.dtype[Any], tuple[int, ...]]]

# Extra frame-pool rows per transition slot beyond one frame each: room for episode starts
# (documented bound in ReplayMemory's docstring).
_FRAME_SLACK_DIVISOR = 64
_SMALL_FRAME_BYTES = 1024


class StoreWrite(NamedTuple):
    """What :meth:`ObservationStore.write` did with ``n`` rows (transitions ``head .. head+n-1``)."""

    slots: IntArray
    """Per row, the ring slot written (``(head + i) % capacity``)."""
    tail: int
    """The ring's tail after the write: transitions numbered below it were evicted."""
    until: IntArray
    """Per row, how many slots the write evicted up to and including that row (the evicted
    slots are the first ``until[-1]`` entries of the caller's ``evicted`` buffer)."""
    continued: BoolArray
    """Per row, whether ``obs`` continued its stream's last transition (its last ``next_obs``,
    or for frame stacks its last ``obs`` moved on by one frame)."""
    had_last: BoolArray
    """Per row, whether its stream had a last transition in the store before the row."""


def _fifo(n: int, tail: int, head: int, capacity: int, evicted: IntArray) -> tuple[int, IntArray]:
    """The ring's own evictions for ``n`` rows from ``head``: each row evicts the oldest
    transition when the ring is full.  Returns the new tail and, per row, the evictions so far."""
    needed = head + np.arange(1, n + 1, dtype=np.int64) - capacity  # tail after each row, at least
    until = np.maximum(needed - tail, 0)
    count = int(until[-1])
    evicted[:count] = np.arange(tail, tail + count, dtype=np.int64) % capacity
    return tail + count, until


@numba.njit(cache=True)
def _read_rows(
    obs_rows: np.ndarray, next_rows: np.ndarray, idx: np.ndarray, last: np.ndarray, step: int
) -> tuple[np.ndarray, int]:
    """The frame rows of slots ``idx`` (``next_obs`` at ``last``): ``(k, stack + step)`` rows and
    ``step`` when every ``next_obs`` stack is its ``obs`` stack moved on by ``step`` frames, else
    ``(k, 2·stack)`` rows (``obs`` then ``next_obs``) and 0."""
    k, stack = idx.shape[0], obs_rows.shape[1]
    shift = step if 0 < step < stack else 0
    for i in range(k):
        if shift == 0:
            break
        for j in range(stack - shift):
            if obs_rows[idx[i], j + shift] != next_rows[last[i], j]:
                shift = 0
                break
    width = stack + shift if shift else 2 * stack
    rows = np.empty((k, width), dtype=np.int64)
    for i in range(k):
        for j in range(stack):
            rows[i, j] = obs_rows[idx[i], j]
        if shift:
            for j in range(shift):
                rows[i, stack + j] = next_rows[last[i], stack - shift + j]
        else:
            for j in range(stack):
                rows[i, stack + j] = next_rows[last[i], j]
    return rows, shift


class ObservationStore:
    """Where a memory's observations live (see the module); subclasses are the strategies."""

    dtype: DTypes | None = None
    """The observation dtype (``None`` until :meth:`allocate`)."""
    frame_capacity: int | None = None
    """Frame pool rows (:class:`FrameStore` once allocated; otherwise ``None``)."""
    pool: FramePool | None = None
    """The frame pool (:class:`FrameStore` once allocated; otherwise ``None``)."""

    def __init__(self, capacity: int, num_streams: int, device: torch.device | None) -> None:
        self.capacity, self.num_streams, self.device = capacity, num_streams, device

    @property
    def allocated(self) -> bool:
        """Whether the buffers exist (the dtype is known)."""
        return self.dtype is not None

    def allocate(self, dtype: DTypes, other_nbytes: int) -> None:
        """Allocate the buffers for observations of ``dtype`` (warns first when they and
        ``other_nbytes`` of the memory's own arrays will not fit in RAM)."""
        raise NotImplementedError

    def fresh(self, dtype: DTypes | None, other_nbytes: int) -> ObservationStore:
        """A new store of the same kind and configuration, allocated for ``dtype`` unless it is
        ``None`` (what a loaded state with another dtype, or with nothing added, commits)."""
        store = self._empty()
        if dtype is not None:
            store.allocate(dtype, other_nbytes)
        return store

    def _empty(self) -> ObservationStore:
        """A new unallocated store of the same kind and configuration."""
        raise NotImplementedError

    def frame_capacity_for(self, dtype: DTypes) -> int | None:
        """The :attr:`frame_capacity` an allocation for ``dtype`` gets."""
        return None

    @property
    def nbytes(self) -> int:
        """Bytes of the store's arrays (host and device)."""
        raise NotImplementedError

    def write(
        self, obs: Any, next_obs: Any, streams: IntArray, tail: int, head: int, evicted: IntArray
    ) -> StoreWrite:
        """Store ``n`` checked rows (leading axis ``n``, cast to :attr:`dtype`) as transitions
        ``head .. head + n - 1`` in ring order, evicting ring transitions from ``tail`` on as
        needed; the evicted slots go to ``evicted`` (at least ``capacity + n`` long)."""
        raise NotImplementedError

    def broken_streams(
        self, written: StoreWrite, ends: BoolArray, streams: IntArray, ended: BoolArray
    ) -> list[int]:
        """Rows of ``written`` whose ``obs`` broke their stream, to warn of: the stream went on
        (its last transition did not end the episode: ``ends`` of the write's earlier rows, else
        ``ended`` per stream before the write) but ``obs`` did not continue it and was stored in
        full.  Only a frame store stores a broken stack at a cost (``frame_stack`` frames)."""
        return []

    def read_plan(self, idx: IntArray, last: IntArray, step: int) -> tuple[list[npt.NDArray[Any]], Any]:
        """What a read of slots ``idx`` (``next_obs`` at the windows' last slots ``last``,
        ``step`` transitions on) needs: the index arrays to gather with (sent to the device
        with the read on a device) and a plan for :meth:`take`."""
        raise NotImplementedError

    def take(self, index: list[Any], plan: Any, head: int) -> tuple[Any, Any]:
        """``(obs, next_obs)`` gathered with :meth:`read_plan`'s index arrays (numpy on the host,
        tensors on the device; ``head``: the adds so far, for device mirrors)."""
        raise NotImplementedError

    def stage_on_device(self, head: int) -> None:
        """Bring the device mirrors up to date with the adds before ``head`` (the host side of
        :meth:`take_on_device`, which a captured graph cannot run)."""
        raise NotImplementedError

    def take_on_device(self, slots: torch.Tensor, last: torch.Tensor) -> tuple[Any, Any]:
        """``(obs, next_obs)``: ``obs`` of ``slots`` and ``next_obs`` of ``last`` (the windows'
        last slots; ``slots`` for one-step transitions), int64 tensors on the device, gathered
        there from the mirrors :meth:`stage_on_device` brought up to date, with no host work."""
        raise NotImplementedError

    def swap(self, both: IntArray, back: IntArray) -> None:
        """Exchange the observations of two slots (``both`` takes ``back``'s)."""
        raise NotImplementedError

    def table_arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The per-slot tables that are part of the memory's state whether or not allocated."""
        raise NotImplementedError

    def state_arrays(self, *, frames: bool = True) -> dict[str, npt.NDArray[Any]]:
        """The allocated buffers' state arrays by name (live arrays; a device's frames as a host
        copy unless ``frames=False``, which leaves them out)."""
        raise NotImplementedError

    def state_spec(self) -> Spec:
        """Dtype and shape of each :meth:`state_arrays` array (frames included, not copied)."""
        raise NotImplementedError

    def counters(self) -> dict[str, int]:
        """Integer counters of the state (the pool's free rows)."""
        return {}

    def check_state(
        self, a: dict[str, npt.NDArray[Any]], counters: dict[str, int], live: BoolArray, prefix: str
    ) -> None:
        """Raise ``ValueError`` naming the key unless the state arrays ``a`` are consistent with
        the ring's ``live`` slots."""
        raise NotImplementedError

    def commit_state(self, a: dict[str, npt.NDArray[Any]], counters: dict[str, int]) -> None:
        """Assign arrays :meth:`check_state` accepted (cannot fail)."""
        for name, target in {**self.table_arrays(), **self.state_arrays(frames=False)}.items():
            target[...] = a[name]

    def check_cache(self) -> None:
        """Raise ``ValueError`` if a cache the store keeps disagrees with its arrays."""


def make_store(
    capacity: int,
    obs_shape: Any,
    *,
    frame_stack: int,
    num_streams: int,
    frame_capacity: int | None,
    device: torch.device | None,
) -> ObservationStore:
    """The store for ``obs_shape``: a dict of shapes gets a :class:`DictStore` (``frame_stack``
    must be 1, no ``frame_capacity``), a shape a :class:`FrameStore`."""
    if isinstance(obs_shape, Mapping):
        if frame_stack != 1:
            raise ValueError(
                f"frame_stack should be 1 for dict observations (stack inside the space), "
                f"but got frame_stack={frame_stack}"
            )
        if frame_capacity is not None:
            raise ValueError(
                "frame_capacity applies to array observations only (dict observations have no pool)"
            )
        return DictStore(capacity, dict(obs_shape), num_streams, device)
    return FrameStore(capacity, obs_shape, frame_stack, num_streams, frame_capacity, device)


def check_store(
    store: Any,
    capacity: int,
    obs_shape: Any,
    *,
    frame_stack: int,
    num_streams: int,
    frame_capacity: int | None,
    device: torch.device | None,
) -> None:
    """Raise ``TypeError``/``ValueError`` naming ``store`` unless it is a fresh store that
    :func:`make_store` could have made with these arguments: an :class:`ObservationStore` not yet
    allocated, of the kind ``obs_shape`` asks for (a :class:`DictStore` for a dict of shapes, a
    :class:`FrameStore` otherwise, or a subclass), and with the same ``capacity``,
    ``num_streams``, ``device``, shapes and (frame stores) ``frame_stack`` and ``frame_capacity``."""
    if not isinstance(store, ObservationStore):
        raise TypeError(f"store should be an ObservationStore, but got {type(store).__name__}")
    if store.allocated:
        raise ValueError(
            f"store should be fresh (not yet allocated: the memory allocates it), but got a store "
            f"allocated for obs_dtype={store.dtype!r}"
        )
    dict_obs = isinstance(obs_shape, Mapping)
    kind = DictStore if dict_obs else FrameStore
    if not isinstance(store, kind):
        raise TypeError(
            f"store should be a {kind.__name__} for obs_shape={obs_shape!r}, but got {type(store).__name__}"
        )
    expected: dict[str, Any] = {"capacity": capacity, "num_streams": num_streams, "device": device}
    if dict_obs:
        if frame_stack != 1:  # what make_store refuses for dict observations, refused here too
            raise ValueError(
                f"frame_stack should be 1 for dict observations (stack inside the space), "
                f"but got frame_stack={frame_stack}"
            )
        if frame_capacity is not None:
            raise ValueError(
                "frame_capacity applies to array observations only (dict observations have no pool)"
            )
        assert isinstance(store, DictStore)
        given: dict[str, Any] = {"obs_shape": store.obs_shape}
        expected["obs_shape"] = dict(obs_shape)
    else:
        assert isinstance(store, FrameStore)
        given = {
            "obs_shape": store.frame_shape,
            "frame_stack": store.frame_stack,
            "frame_capacity": store.requested_frame_capacity,
        }
        expected.update(obs_shape=tuple(obs_shape), frame_stack=frame_stack, frame_capacity=frame_capacity)
    given.update(capacity=store.capacity, num_streams=store.num_streams, device=store.device)
    for name, value in expected.items():
        if given[name] != value:
            raise ValueError(
                f"store should have {name}={value!r} (the memory's), but got {name}={given[name]!r}"
            )


class FrameStore(ObservationStore):
    """Array observations as frame-pool rows, each distinct frame once (host or device); slot
    ``i``'s stacks are the rows ``obs_rows[i]`` and ``next_rows[i]``."""

    def __init__(
        self,
        capacity: int,
        frame_shape: tuple[int, ...],
        frame_stack: int,
        num_streams: int,
        frame_capacity: int | None,
        device: torch.device | None,
    ) -> None:
        super().__init__(capacity, num_streams, device)
        self.frame_shape, self.frame_stack = frame_shape, frame_stack
        self.requested_frame_capacity = frame_capacity
        row = ((frame_stack,), np.dtype(np.int32))
        # On a device the row tables are mirrored there (written in ring order, like the columns),
        # so that a draw made on the device finds its frames without the host.
        self._tables = Columns(capacity, {"obs_rows": row, "next_rows": row}, device)
        self._bind_tables()
        self._staged_rows = np.empty(0, dtype=np.int64)  # the kernel's marker: no staging buffer

    def _bind_tables(self) -> None:
        self.obs_rows: npt.NDArray[np.int32] = self._tables.host["obs_rows"]
        self.next_rows: npt.NDArray[np.int32] = self._tables.host["next_rows"]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["obs_rows"], state["next_rows"]  # views of the tables: rebound on load
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind_tables()

    def rows_for(self, dtype: np.dtype[Any]) -> int:
        """Frame pool rows for ``dtype``: the requested ``frame_capacity``, else the default
        (``ReplayMemory``'s docstring states the bound)."""
        if self.requested_frame_capacity is not None:
            return self.requested_frame_capacity
        frame_nbytes = dtype.itemsize * math.prod(self.frame_shape)
        small = frame_nbytes <= _SMALL_FRAME_BYTES
        extra = self.capacity if small else -(-self.capacity // _FRAME_SLACK_DIVISOR)
        f = self.capacity + extra + reserve_rows(self.frame_stack, self.num_streams)
        if f >= 2**31:
            raise ValueError(
                f"frame_capacity should be below 2**31, but got frame_capacity={f} (from capacity)"
            )
        return f

    def allocate(self, dtype: DTypes, other_nbytes: int) -> None:
        assert isinstance(dtype, np.dtype)
        f = self.rows_for(dtype)
        warn_if_too_large(f * dtype.itemsize * math.prod(self.frame_shape) + other_nbytes)
        self.pool = FramePool(f, self.frame_shape, dtype, self.frame_stack, self.num_streams, self.device)
        self.dtype, self.frame_capacity = dtype, f

    def _empty(self) -> FrameStore:
        return FrameStore(
            self.capacity,
            self.frame_shape,
            self.frame_stack,
            self.num_streams,
            self.requested_frame_capacity,
            self.device,
        )

    def frame_capacity_for(self, dtype: DTypes) -> int | None:
        assert isinstance(dtype, np.dtype)
        return self.rows_for(dtype)

    @property
    def nbytes(self) -> int:
        pool = 0 if self.pool is None else self.pool.nbytes
        return self._tables.nbytes + pool

    def write(
        self, obs: Any, next_obs: Any, streams: IntArray, tail: int, head: int, evicted: IntArray
    ) -> StoreWrite:
        """Every row's stacks in one call of the pool's kernel per staging buffer (one call on
        the host): rows continue the deduplication of the rows before them."""
        pool = self.pool
        assert pool is not None
        obs_words, next_words = pool.as_words(obs), pool.as_words(next_obs)
        n = streams.shape[0]
        slots = np.empty(n, dtype=np.int64)
        until = np.empty(n, dtype=np.int64)
        continued = np.empty(n, dtype=np.bool_)
        had_last = np.empty(n, dtype=np.bool_)
        done = nevicted = 0
        while done < n:
            done, tail, nevicted = pool.store_rows(
                obs_words,
                next_words,
                streams,
                done,
                self.obs_rows,
                self.next_rows,
                tail,
                head,
                evicted,
                nevicted,
                (slots, until, continued, had_last),
            )
        pool.flush()  # a vector step's new frames in one write on a device
        return StoreWrite(slots, tail, until, continued, had_last)

    def broken_streams(
        self, written: StoreWrite, ends: BoolArray, streams: IntArray, ended: BoolArray
    ) -> list[int]:
        broke = written.had_last & ~written.continued
        if self.frame_stack == 1 or not broke.any():
            return []
        previous = previous_row(streams)
        ended_before = ended[streams]
        earlier = previous >= 0
        ended_before[earlier] = ends[previous[earlier]]
        return [int(i) for i in np.flatnonzero(broke & ~ended_before)]

    def read_plan(self, idx: IntArray, last: IntArray, step: int) -> tuple[list[npt.NDArray[Any]], Any]:
        """The frame rows to gather: ``next_obs`` sharing all but its newest ``step`` frames with
        ``obs`` (1 for one step, n for n-step windows none of which ended early) is gathered
        once with ``obs`` as a ``(k, frame_stack + step)`` block and returned as two overlapping
        views; otherwise ``(k, 2, frame_stack)`` rows."""
        rows, shift = _read_rows(self.obs_rows, self.next_rows, idx, last, step)
        if not shift:
            rows = rows.reshape(idx.shape[0], 2, self.frame_stack)
        return [rows], (rows.shape, shift)

    def take(self, index: list[Any], plan: Any, head: int) -> tuple[Any, Any]:
        pool = self.pool
        assert pool is not None
        shape, shift = plan
        if isinstance(index[0], np.ndarray):
            both = pool.gather(index[0])
        else:
            assert isinstance(pool.storage, TorchFrames)
            pool.flush()
            both = pool.storage.as_frames(pool.storage.gather_bytes(index[0]), shape)
        stack = self.frame_stack
        if shift:
            return both[:, :stack], both[:, shift:]
        if stack == 1:
            return both[:, 0, 0], both[:, 1, 0]
        return both[:, 0], both[:, 1]

    def stage_on_device(self, head: int) -> None:
        """The row tables' new rows and the staged frames, each in one copy."""
        assert self.pool is not None
        self._tables.sync(head)
        self.pool.flush()

    def take_on_device(self, slots: torch.Tensor, last: torch.Tensor) -> tuple[Any, Any]:
        """Both stacks of every slot: ``2·frame_stack`` frames each, since whether ``next_obs``
        shares frames with ``obs`` is a fact of the data that only a synchronisation could act on."""
        pool = self.pool
        assert pool is not None and isinstance(pool.storage, TorchFrames)
        tables = self._tables.gather(slots)
        next_rows = tables["next_rows"] if last is slots else self._tables.gather(last)["next_rows"]
        rows = torch.cat((tables["obs_rows"], next_rows), dim=1).to(torch.int64)
        k, stack = slots.shape[0], self.frame_stack
        both = pool.storage.as_frames(pool.storage.gather_bytes(rows.reshape(-1)), (k, 2, stack))
        if stack == 1:
            return both[:, 0, 0], both[:, 1, 0]
        return both[:, 0], both[:, 1]

    def tables_on_device(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        """The row tables ``obs_rows`` and ``next_rows`` at ``slots`` (int64 on the device), each
        ``(k, frame_stack)`` int32, from their device mirror (brought up to date by
        :meth:`stage_on_device`)."""
        return self._tables.gather(slots)

    def swap(self, both: IntArray, back: IntArray) -> None:
        for table in (self.obs_rows, self.next_rows):
            table[both] = table[back]
        self._tables.resend(both)

    def table_arrays(self) -> dict[str, npt.NDArray[Any]]:
        return {"obs_rows": self.obs_rows, "next_rows": self.next_rows}

    def state_arrays(self, *, frames: bool = True) -> dict[str, npt.NDArray[Any]]:
        if self.pool is None:
            return {}
        if frames:
            return self.pool.state_arrays()
        return self.pool.state_arrays_but_frames()

    def state_spec(self) -> Spec:
        return {} if self.pool is None else self.pool.state_spec()

    def counters(self) -> dict[str, int]:
        return {} if self.pool is None else {"nfree": self.pool.num_free}

    def check_state(
        self, a: dict[str, npt.NDArray[Any]], counters: dict[str, int], live: BoolArray, prefix: str
    ) -> None:
        """Rows in range; the pool's counts, free list and frames consistent with the live
        slots' stacks (:meth:`FramePool.check_state`)."""
        pool = self.pool
        assert pool is not None
        for key in ("obs_rows", "next_rows"):
            pool.check_rows(a[key], key, prefix)
        pool.check_state(a, counters["nfree"], [a["obs_rows"][live], a["next_rows"][live]], prefix)

    def commit_state(self, a: dict[str, npt.NDArray[Any]], counters: dict[str, int]) -> None:
        """The tables, then the pool: frames (to the device), bookkeeping, dedup cache."""
        self.obs_rows[...] = a["obs_rows"]
        self.next_rows[...] = a["next_rows"]
        self._tables.invalidate()  # the device mirror takes every row at the next read
        if self.pool is not None:
            self.pool.commit_state(a, counters["nfree"])

    def check_cache(self) -> None:
        if self.pool is not None:
            self.pool.check_cache()


class DictStore(ObservationStore):
    """Dict observations: each key's ``obs`` and ``next_obs`` in a per-slot column (two
    :class:`~prisample.replay.device.Columns`, mirrored on the device: ``obs`` gathered at the
    slots, ``next_obs`` at the windows' last slots), and per stream its last ``next_obs`` (to
    tell whether the next ``obs`` continues it)."""

    def __init__(
        self,
        capacity: int,
        obs_shape: dict[str, tuple[int, ...]],
        num_streams: int,
        device: torch.device | None,
    ) -> None:
        super().__init__(capacity, num_streams, device)
        self.obs_shape, self.keys = obs_shape, tuple(obs_shape)
        self.columns: dict[str, npt.NDArray[Any]] = {}
        self.mirrors: tuple[Columns, ...] = ()
        self._no_rows = np.zeros((capacity, 0), dtype=np.int32)  # the state's (empty) row tables

    def allocate(self, dtype: DTypes, other_nbytes: int) -> None:
        assert isinstance(dtype, dict)
        c = self.capacity
        per = sum(dtype[k].itemsize * math.prod(self.obs_shape[k]) for k in self.keys)
        warn_if_too_large(2 * c * per + other_nbytes)
        self.mirrors = tuple(
            Columns(c, {f"{part}.{k}": (self.obs_shape[k], dtype[k]) for k in self.keys}, self.device)
            for part in ("obs", "next_obs")
        )
        columns = {**self.mirrors[0].host, **self.mirrors[1].host}
        for k in self.keys:
            columns[f"stream_next_obs.{k}"] = np.zeros((self.num_streams, *self.obs_shape[k]), dtype=dtype[k])
        columns["stream_live"] = np.zeros(self.num_streams, dtype=np.bool_)
        self.columns, self.dtype = columns, dict(dtype)

    def _empty(self) -> DictStore:
        return DictStore(self.capacity, self.obs_shape, self.num_streams, self.device)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.columns.values()) + sum(m.mirror_nbytes for m in self.mirrors)

    def write(
        self, obs: Any, next_obs: Any, streams: IntArray, tail: int, head: int, evicted: IntArray
    ) -> StoreWrite:
        """Columns written in one assignment per key (a slot written twice keeps its last row);
        a row continues its stream when its ``obs`` equals the stream's previous ``next_obs``."""
        n, c, cols = streams.shape[0], self.capacity, self.columns
        tail, until = _fifo(n, tail, head, c, evicted)
        slots = (head + np.arange(n, dtype=np.int64)) % c
        previous = previous_row(streams)
        earlier = previous >= 0
        live = cols["stream_live"]
        had_last = earlier | live[streams]
        continued = had_last.copy()
        for k in self.keys:
            last = cols[f"stream_next_obs.{k}"][streams]
            last[earlier] = next_obs[k][previous[earlier]]
            continued &= (last == obs[k]).reshape(n, -1).all(axis=1)
        rows = last_rows(slots)
        final = last_rows(streams)  # each stream's last row
        for k in self.keys:
            cols[f"obs.{k}"][slots[rows]] = obs[k][rows]
            cols[f"next_obs.{k}"][slots[rows]] = next_obs[k][rows]
            cols[f"stream_next_obs.{k}"][streams[final]] = next_obs[k][final]
        live[streams] = True
        return StoreWrite(slots, tail, until, continued, had_last)

    def read_plan(self, idx: IntArray, last: IntArray, step: int) -> tuple[list[npt.NDArray[Any]], Any]:
        return [idx, last], None

    def take(self, index: list[Any], plan: Any, head: int) -> tuple[Any, Any]:
        at, last = index
        if isinstance(at, np.ndarray):
            cols = self.columns
            obs = {k: cols[f"obs.{k}"][at] for k in self.keys}
            return obs, {k: cols[f"next_obs.{k}"][last] for k in self.keys}
        self.stage_on_device(head)
        return self.take_on_device(at, last)

    def stage_on_device(self, head: int) -> None:
        for mirror in self.mirrors:
            mirror.sync(head)

    def take_on_device(self, slots: torch.Tensor, last: torch.Tensor) -> tuple[Any, Any]:
        obs_cols, next_cols = self.mirrors[0].gather(slots), self.mirrors[1].gather(last)
        return {k: obs_cols[f"obs.{k}"] for k in self.keys}, {
            k: next_cols[f"next_obs.{k}"] for k in self.keys
        }

    def swap(self, both: IntArray, back: IntArray) -> None:
        for name, column in self.columns.items():
            if name.startswith(("obs.", "next_obs.")):
                column[both] = column[back]
        for mirror in self.mirrors:
            mirror.resend(both)

    def table_arrays(self) -> dict[str, npt.NDArray[Any]]:
        return {"obs_rows": self._no_rows, "next_rows": self._no_rows}

    def state_arrays(self, *, frames: bool = True) -> dict[str, npt.NDArray[Any]]:
        return dict(self.columns)

    def state_spec(self) -> Spec:
        return {name: (a.dtype, a.shape) for name, a in self.columns.items()}

    def check_state(
        self, a: dict[str, npt.NDArray[Any]], counters: dict[str, int], live: BoolArray, prefix: str
    ) -> None:
        """Live slots' float observations finite, and the live streams' last ``next_obs``."""
        for key in self.columns:
            column = a[key]
            if column.dtype.kind not in "fc":
                continue
            if key.startswith(("obs.", "next_obs.")):
                finite = np.isfinite(column[live].reshape(int(live.sum()), -1)).all(axis=1)
                if not finite.all():
                    j = int(np.flatnonzero(live)[np.argmin(finite)])
                    raise ValueError(
                        f"{prefix}{key} should be finite in live slots, but got {key}[{j}]={column[j]!r}"
                    )
            elif key.startswith("stream_next_obs.") and not np.isfinite(column[a["stream_live"]]).all():
                raise ValueError(f"{prefix}{key} should be finite for streams with transitions")

    def commit_state(self, a: dict[str, npt.NDArray[Any]], counters: dict[str, int]) -> None:
        for name, target in self.columns.items():
            target[...] = a[name]
        for mirror in self.mirrors:
            mirror.invalidate()  # the device mirrors take every row at the next read

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        mirrored = {name for cols in self.mirrors for name in cols.host}
        state["columns"] = {name: a for name, a in self.columns.items() if name not in mirrored}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for cols in self.mirrors:  # views of the mirrors' host arrays: rebound so they keep sharing
            self.columns.update(cols.host)
