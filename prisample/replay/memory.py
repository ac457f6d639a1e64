"""A replay memory composed of parts: the last ``capacity`` transitions, written and read in batches.

:class:`ReplayMemory` keeps the last ``capacity`` transitions ``(s_t, a_t, r_t, γ_t, s_{t+1})``,
one slot per transition, written in arrival order and evicted oldest first.  It holds its parts
and joins them in its writes and reads:

* its :class:`~prisample.replay.ring.Ring`: the live range, each slot's columns (action, reward,
  discount, generation, extras) and the streams' episode ends;
* its observation store (:mod:`~prisample.replay.stores`: a frame pool holding each distinct
  frame once, or per-key columns for dict observations), built from the arguments or passed in
  (``store=``);
* with ``n_step = n`` an :class:`~prisample.replay.nstep.NStepAccumulator`, which forms each
  transition's n-step window as its stream moves on;
* its checkpoint (:class:`~prisample.replay.checkpoint.MemoryCheckpoint`) and, with ``device=``,
  its device reads (:class:`~prisample.replay.device_reads.DeviceReads`).

Every add is one batch write (:meth:`ReplayMemory.write`) that reports what it evicted and which
slots became drawable (:class:`~prisample.replay.writes.Inserted`), which is what
:class:`~prisample.replay.PrioritizedReplay` builds on.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from prisample._validation import as_indices, check_positive_int, to_numpy
from prisample.replay import _compiled_write as compiled
from prisample.replay._checks import (
    as_dtype,
    as_shape,
    caller_stacklevel,
    cast,
)
from prisample.replay._rows import last_rows
from prisample.replay.batch import ReplayBatch
from prisample.replay.checkpoint import STATE_VERSION, CheckedState, MemoryCheckpoint
from prisample.replay.device import as_device
from prisample.replay.device_reads import DeviceReads
from prisample.replay.frames import FramePool, reserve_rows
from prisample.replay.nstep import NStepAccumulator
from prisample.replay.ring import Ring
from prisample.replay.spec import DTypes, Transitions, TransitionSpec
from prisample.replay.stores import FrameStore, ObservationStore, check_store, make_store
from prisample.replay.vector_env import (
    VectorStepConverter,
    VectorTransitions,
    converter_for,
    rows_of_extras,
)
from prisample.replay.writes import Inserted, TransitionWrites, VectorAdd, WriteRequest

__all__ = ["STATE_VERSION", "CheckedState", "DTypes", "Inserted", "ReplayMemory"]


IntArray = npt.NDArray[np.int64]


class ReplayMemory(TransitionWrites):
    """The last ``capacity`` transitions ``(s_t, a_t, r_t, γ_t, s_{t+1})`` with frames stored once.

    ``obs`` and ``next_obs`` passed to :meth:`add` have shape ``(frame_stack, *obs_shape)`` when
    ``frame_stack > 1``, else ``obs_shape``.  Each stack is stored as pool rows: a frame already in
    the stream's previous transition is shared when its bytes are equal (``s_t`` equal to the
    previous ``s_{t+1}``, stacks shifted by one frame, repeated frames inside a stack); any other
    frame is stored anew.  Reads therefore return exactly the arrays that were added.

    ``obs_dtype=None`` (the default) takes the dtype of the first ``obs`` added (CartPole's
    float32, Atari's uint8; a Python list of floats gives float64): until then no frame memory is
    allocated.  Later observations must cast to it safely.

    Dict observations (gymnasium ``Dict`` spaces): ``obs_shape`` a dict name -> shape, ``obs_dtype``
    ``None``, one dtype for all keys, or a dict name -> dtype (or ``None``: inferred).  Each key's
    ``obs`` and ``next_obs`` are stored per transition (no frame sharing, so ``frame_stack`` must be
    1: stack inside the space), and batches hold dicts of arrays.

    ``n_step=n`` replays each transition ``t`` as its n-step window (Sutton & Barto 2018, Sec. 7.1;
    see :mod:`prisample.replay.nstep`): ``reward = Σ_{k<m} (Π_{j<k} γ_{t+j}) r_{t+k}``, ``discount =
    Π_{k<m} γ_{t+k}``, ``next_obs = s_{t+m}`` with ``m = n``, or fewer where the episode ends
    inside the window; a window never crosses an episode end, a stream boundary or the write head,
    and a transition is drawable (:meth:`drawable`, :meth:`get`) only once its window is complete.

    ``extras={"log_prob": ((), np.float32), "mask": ((4,), np.bool_)}`` declares per-transition
    arrays passed to :meth:`add` as keywords (``log_prob=lp``) and returned in ``batch.extras``
    (the start transition's under n-step).

    Frame pool bound: a transition that continues its stream needs one new frame; an episode start
    needs at most ``frame_stack + 1`` (two when a reset stack repeats one frame, as Atari frame
    stacking does).  With ``E`` stream restarts among the live transitions, ``capacity``
    transitions fit when ``capacity + frame_stack·(E + 2·num_streams + 2) <= frame_capacity``.
    The default ``frame_capacity`` is ``capacity + ⌈capacity / 64⌉ + 2·frame_stack·(num_streams
    + 1)`` for frames over 1 KiB (≈1.6% extra frames: no early eviction while restarts cost at most
    ``capacity / 64`` extra frames, e.g. Atari episodes of ≥ 64 transitions on average) and
    ``2·capacity + 2·frame_stack·(num_streams + 1)`` for smaller frames.  When the pool runs short
    the oldest transitions are evicted early, so ``len(memory)`` is then below ``capacity``.

    ``stream`` lets several environments stepped in turn share one memory: each stream keeps its
    own stack continuity (and n-step windows), transitions go into one ring in arrival order.

    ``device=None`` returns numpy batches; ``device="cuda"`` (a str or ``torch.device``) keeps the
    frames, the per-transition columns (action, reward, discount, generation, extras, dict
    observations' keys) on that device and returns batches of tensors there (see
    :mod:`prisample.replay.device`).  The host keeps everything else and stays authoritative:
    deduplication, n-step windows, validation and :meth:`state_dict` (host numpy, loadable on any
    device).  Under ``n_step = n`` the windows' reward and discount are read on the host and go to
    the device in the read's one small copy, with the slots and weights.

    ``store=`` a ready observation store (:mod:`~prisample.replay.stores`: a
    :class:`~prisample.replay.stores.FrameStore` for array observations, a
    :class:`~prisample.replay.stores.DictStore` for dict ones, or a subclass of either) replaces
    the one the arguments would build: fresh (not yet allocated) and made for this memory's
    ``capacity``, ``obs_shape``, ``frame_stack``, ``num_streams``, ``frame_capacity`` and
    ``device``, which are checked against it (``ValueError``/``TypeError`` naming ``store`` and
    the mismatch).  The memory allocates it (for the declared ``obs_dtype``, else at the first
    add) and writes and reads through its methods.

    >>> import numpy as np
    >>> mem = ReplayMemory(8, (2,), frame_stack=2)
    >>> s0 = np.array([[0, 0], [1, 1]], np.float32)
    >>> s1 = np.array([[1, 1], [2, 2]], np.float32)
    >>> mem.add(s0, 1, 0.5, 1.0, s1)
    0
    >>> mem.obs_dtype, mem.get([0])["next_obs"].tolist()
    (dtype('float32'), [[[1.0, 1.0], [2.0, 2.0]]])
    >>> len(mem), mem.num_frames                       # three distinct frames
    (1, 3)
    """

    _compiled_write = True
    """Whether one-step host writes go through the compiled write (:meth:`write_compiled`);
    an instance set to ``False`` takes the general path only (the reference the compiled one
    is tested against)."""

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...] | Mapping[str, tuple[int, ...]],
        *,
        obs_dtype: npt.DTypeLike | Mapping[str, npt.DTypeLike] | None = None,
        frame_stack: int = 1,
        action_shape: tuple[int, ...] = (),
        action_dtype: npt.DTypeLike = np.int64,
        num_streams: int = 1,
        frame_capacity: int | None = None,
        n_step: int = 1,
        extras: Mapping[str, tuple[tuple[int, ...], npt.DTypeLike]] | None = None,
        device: Any = None,
        store: ObservationStore | None = None,
    ) -> None:
        self.capacity = check_positive_int(capacity, "capacity")
        self.device = as_device(device)
        """``None``: numpy batches; a ``torch.device``: batches of tensors there (see
        :mod:`prisample.replay.device` for what lives where)."""
        self.frame_stack = stack = check_positive_int(frame_stack, "frame_stack")
        self.action_shape = as_shape(action_shape, "action_shape")
        self.action_dtype = as_dtype(action_dtype, "action_dtype")
        self.num_streams = check_positive_int(num_streams, "num_streams")
        self.n_step = check_positive_int(n_step, "n_step")
        self.spec = TransitionSpec(
            obs_shape, obs_dtype, stack, self.action_shape, self.action_dtype, self.num_streams, extras
        )
        """The shapes and dtypes of the transitions, and the checks of a write's arguments."""
        self.extras = self.spec.extras
        """Declared extras: name -> (shape, dtype)."""
        self.obs_keys = self.spec.obs_keys
        """The keys of dict observations (``None``: array observations)."""
        self.obs_shape: Any = self.spec.obs_shape
        reserve = reserve_rows(stack, self.num_streams)
        if frame_capacity is not None:
            frame_capacity = check_positive_int(frame_capacity, "frame_capacity", minimum=reserve)
            if frame_capacity >= 2**31:
                raise ValueError(
                    f"frame_capacity should be below 2**31, but got frame_capacity={frame_capacity}"
                )
        c, streams = self.capacity, self.num_streams
        if store is None:
            store = make_store(
                c,
                self.obs_shape,
                frame_stack=stack,
                num_streams=streams,
                frame_capacity=frame_capacity,
                device=self.device,
            )
        else:  # checked against the arguments that would have built it
            check_store(
                store,
                c,
                self.obs_shape,
                frame_stack=stack,
                num_streams=streams,
                frame_capacity=frame_capacity,
                device=self.device,
            )
        self._store = store  # where the observations live (prisample.replay.stores)
        self._ring = Ring(c, self._column_spec(), self.num_streams, self.device)
        self._nstep = NStepAccumulator(self.n_step, self.num_streams, c) if self.n_step > 1 else None
        self._device = (
            None if self.device is None else DeviceReads(self.device, self._ring, store, self._nstep)
        )
        self._checkpoint = MemoryCheckpoint(self)
        self.vector_converter: VectorStepConverter | None = None
        """The converter of :meth:`add_vector_step` (made at its first call)."""
        self._vector_configured: Any = None
        declared = self.spec.declared_dtype
        if declared is not None:
            store.allocate(declared, self._ring_nbytes())

    def _column_spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
        """The per-transition columns of the ring (``action``, ..., ``extra.<name>``; on a device
        mirrored there and gathered there)."""
        spec = {
            "action": (self.action_shape, self.action_dtype),
            "reward": ((), np.dtype(np.float32)),
            "discount": ((), np.dtype(np.float32)),
            "generation": ((), np.dtype(np.int64)),
        }
        spec.update({f"extra.{name}": (shape, dtype) for name, (shape, dtype) in self.extras.items()})
        return spec

    def _adopt(
        self,
        store: ObservationStore,
        nstep: NStepAccumulator | None,
        vector: tuple[VectorStepConverter, Any] | None,
    ) -> None:
        """Take the parts a loaded state brought (its checkpoint's commit): the observation
        store, the n-step accumulator and the vector-step converter with its autoreset mode."""
        self._store, self._nstep = store, nstep
        self.vector_converter, self._vector_configured = (None, None) if vector is None else vector
        if self._device is not None:
            self._device.adopt(store, nstep)

    def _ring_nbytes(self) -> int:
        """Bytes of the ring's per-slot arrays (frame rows, columns): what a new store adds to."""
        action_nbytes = self.action_dtype.itemsize * math.prod(self.action_shape)
        return self.capacity * (8 * self.frame_stack + 16 + action_nbytes)

    @property
    def ring(self) -> Ring:
        """The transitions' slots: the live range, each slot's columns, the streams' episode
        ends (:class:`~prisample.replay.ring.Ring`)."""
        return self._ring

    @property
    def store(self) -> ObservationStore:
        """Where the observations live (:mod:`~prisample.replay.stores`): a frame pool or
        per-key columns, chosen by ``obs_shape`` (or passed in as ``store=``)."""
        return self._store

    @property
    def obs_dtype(self) -> Any:
        """The observation dtype (a dict for dict observations); ``None`` until the first add
        when it is inferred."""
        return self._store.dtype

    @property
    def frame_capacity(self) -> int | None:
        """Frame pool rows (``None`` until the pool is allocated; dict observations: ``None``)."""
        return self._store.frame_capacity

    @property
    def frame_pool(self) -> FramePool | None:
        """The frames of the stored stacks (each distinct frame once); ``None`` until allocated."""
        return self._store.pool

    # -- properties -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._ring.head - self._ring.tail

    @property
    def num_added(self) -> int:
        """Transitions added since construction (the next one gets this generation number)."""
        return self._ring.head

    @property
    def num_evicted(self) -> int:
        """Transitions evicted since construction: those numbered ``[num_evicted, num_added)`` live."""
        return self._ring.tail

    @property
    def num_frames(self) -> int:
        """Frames held in the pool (by live transitions and the streams' last stacks)."""
        return 0 if self.frame_pool is None else self.frame_pool.num_used

    @property
    def nbytes(self) -> int:
        """Bytes held in the memory's arrays (frame pool, rows, actions, rewards, bookkeeping)."""
        total = self._ring.nbytes + self._store.nbytes  # device mirrors included
        if self._nstep is not None:
            total += self._nstep.nbytes
        return total

    # -- writes ---------------------------------------------------------------------------------
    def write(self, request: WriteRequest) -> Inserted:
        """The one write path (``add``, ``add_many``, ``add_vector_step`` and their ``insert``
        forms come here): the request's arguments checked once into rows
        (:class:`~prisample.replay.spec.TransitionSpec`), then stored as one batch; a rejected
        request changes nothing (the vector-step converter included).  Returns what changed."""
        if isinstance(request, VectorAdd):
            return self._write_vector_step(request)[0]
        if request.priorities is not None:
            raise TypeError(
                "priorities= needs a PrioritizedReplay (a ReplayMemory holds no priorities), "
                f"but got priorities={request.priorities!r}"
            )
        done = self.write_compiled(request)
        if done is not None:
            return done[0]
        rows = self.spec.rows(self.obs_dtype, request)
        return self._write(rows)

    def _compiles(self) -> bool:
        """Whether writes may take the compiled path: host frames, one-step transitions, the
        pool allocated (the first write, which may set the dtype, takes the general path)."""
        return (
            self._compiled_write
            and self._nstep is None
            and self.device is None
            and type(self._store) is FrameStore
            and self._store.pool is not None
        )

    def write_compiled(
        self, request: WriteRequest, tree: Any = None, count: int = 0
    ) -> tuple[Inserted, int | None] | None:
        """:meth:`write` of an ``add``, ``add_many`` or ``add_vector_step`` in one call of compiled code
        (:mod:`prisample.replay._compiled_write`) when the memory and the request are the common
        case (host frames, ``n_step = 1``, arguments already of the stored dtypes and shapes);
        ``None`` (nothing written) otherwise, and for a request the general path must reject.
        ``tree``: a :class:`~prisample.trees.PriorityTree` holding ``count`` slots that the
        write's evictions leave and its rows enter at the maximum priority, in the same call
        (a :class:`~prisample.replay.PrioritizedReplay`'s sampler).  Returns what changed and the
        tree's new count.  A vector step is always written (its converter has stepped): where
        it is not the common case the general path writes it, and the count is ``None`` (the
        tree not written)."""
        if isinstance(request, VectorAdd):
            return self._write_vector_step(request, tree, count)
        if not self._compiles():
            return None
        rows = compiled.add_arrays(self.spec, self._store.dtype, request)
        return None if rows is None else self._write_rows(rows, tree, count)

    def _write_rows(
        self, rows: compiled.CompiledRows, tree: Any, count: int
    ) -> tuple[Inserted, int | None] | None:
        """The compiled write of checked rows (see :meth:`write_compiled`)."""
        store, ring = self._store, self._ring
        assert isinstance(store, FrameStore)
        n, head = rows.streams.shape[0], ring.head
        code, tail, count, slots, until, gone, ready, broke = compiled.write_rows(
            store.pool,
            (store.obs_rows, store.next_rows),
            rows,
            (ring.action, ring.reward, ring.discount, ring.generation),
            ring.stream_ended,
            ring.tail,
            head,
            ring.evicted_room(n),
            tree,
            count,
        )
        if code > 0:  # a row the general path rejects: nothing was written
            return None
        ring.tail, ring.head = tail, head + n
        if rows.extras:
            ring.columns.write_rows(slots, {f"extra.{name}": v for name, v in rows.extras.items()})
        if code < 0:  # the memory was written, the tree refused a mass (the general path raises too)
            raise RuntimeError(f"the sampler's tree refused the write (code {-code})")
        for i in broke:
            self._warn_broken(int(rows.streams[i]))
        return Inserted(slots, gone, until, ready), count

    def _warn_broken(self, stream: int) -> None:
        warnings.warn(
            f"obs does not continue the last transition of stream {stream} and was stored "
            "in full: pass episode_end=True at the end of an episode, and one stream= per "
            "environment when several share the memory",
            RuntimeWarning,
            stacklevel=caller_stacklevel(),
        )

    def swap_slots(self, a: int, b: int) -> None:
        """Exchange the transitions held in live slots ``a`` and ``b``: their frame rows (so
        their frames, whose reference counts are unchanged), action, reward, discount, extras
        and dict observations.  Each slot keeps its generation (its number in the ring), so the
        ring evicts the transition now in the older slot first: this is how a
        :class:`~prisample.replay.PrioritizedReplay` with ``eviction="priority"`` makes the
        transition it chose leave next.  ``n_step = 1`` only (n-step windows name slots).
        """
        if self._nstep is not None:
            raise ValueError(
                f"swap_slots needs n_step=1 (windows name their slots), but got n_step={self.n_step}"
            )
        idx = self._slots([a, b])
        dead = ~self._ring.live(idx)
        if dead.any():
            j = int(np.argmax(dead))
            raise ValueError(f"swap_slots should name live slots, but got slot {idx[j]} (empty)")
        if idx[0] == idx[1]:
            return
        both, back = idx, idx[::-1]
        columns = self._ring.columns
        for name, array in columns.host.items():
            if name != "generation":
                array[both] = array[back]
        columns.resend(both)
        self._store.swap(both, back)

    def _write_vector_step(
        self, request: VectorAdd, tree: Any = None, count: int = 0
    ) -> tuple[Inserted, int | None]:
        """A vector step: the converter's rows (made at the first call), checked and written
        (compiled where :meth:`write_compiled` would be, with ``tree``); the converter is
        restored when the rows are rejected.  Returns what changed and the tree's new count
        (``None``: the general path wrote the rows, not the tree)."""
        mode = request.autoreset_mode
        converter = converter_for(self.vector_converter, request.reward, mode, self.num_streams)
        saved = converter.state_dict()
        rows = converter.step(*request[:7], gamma=request.gamma)
        try:
            picked = rows_of_extras(request.extras, rows, converter.num_envs)
            fast = None
            if self._compiles():
                checked = compiled.vector_arrays(self.spec, self._store.dtype, rows, picked)
                fast = None if checked is None else self._write_rows(checked, tree, count)
            done, after = (
                fast
                if fast is not None
                else (self._write(self.spec.converted(self.obs_dtype, rows, picked)), None)
            )
        except BaseException:
            converter.load_state_dict(saved)
            raise
        if converter is not self.vector_converter:
            self.vector_converter, self._vector_configured = converter, getattr(mode, "value", mode)
        return done, after

    @contextlib.contextmanager
    def vector_step_rows(
        self, request: VectorAdd
    ) -> Iterator[tuple[VectorTransitions, dict[str, npt.NDArray[Any]]]]:
        """A vector step's rows and their extras as this memory's converter makes them (made at
        the first call), for an owner that writes them itself (as ``add_many`` rows, with data
        of its own per row): the converter is restored when the body raises and kept (with its
        autoreset mode, part of :meth:`state_dict`) when it returns."""
        mode = request.autoreset_mode
        converter = converter_for(self.vector_converter, request.reward, mode, self.num_streams)
        saved = converter.state_dict()
        rows = converter.step(*request[:7], gamma=request.gamma)
        try:
            yield rows, rows_of_extras(request.extras, rows, converter.num_envs)
        except BaseException:
            converter.load_state_dict(saved)
            raise
        if converter is not self.vector_converter:
            self.vector_converter, self._vector_configured = converter, getattr(mode, "value", mode)

    def _write(self, rows: Transitions) -> Inserted:
        """The one write: ``n`` checked transitions (:class:`~prisample.replay.spec.Transitions`)
        stored in order; returns what changed.

        The store puts every row's observations in place with the ring's evictions (one call);
        the per-transition columns take the rows in one assignment each; only the n-step windows
        go row by row, since each row's window depends on the evictions and rows before it."""
        n, ids, ends = rows.n, rows.streams, rows.episode_end
        empty = np.empty(0, dtype=np.int64)
        if n == 0:
            return Inserted(empty, empty, empty, empty)
        store, ring = self._store, self._ring
        if not store.allocated:
            store.allocate(rows.dtype, self._ring_nbytes())
        evicted = ring.evicted_room(n)
        head0, tail0 = ring.head, ring.tail
        written = store.write(rows.obs, rows.next_obs, ids, tail0, head0, evicted)
        slots, until = written.slots, written.until
        breaks = store.broken_streams(written, ends, ids, ring.stream_ended)
        final = last_rows(ids)
        ring.stream_ended[ids[final]] = ends[final]
        ring.tail, ring.head = written.tail, head0 + n
        columns = {"generation": head0 + np.arange(n, dtype=np.int64), "action": rows.action}
        columns.update(reward=rows.reward, discount=rows.discount)
        columns.update((f"extra.{name}", values) for name, values in (rows.extras or {}).items())
        ring.columns.write_rows(slots, columns)
        total = int(until[-1])
        gone = evicted[:total].copy()
        if self._nstep is None:
            # a slot written here and evicted later in the call is not drawable
            ready = slots if total == 0 else slots[ring.live(slots)]
        else:
            ready = self._nstep.push_write(written, gone, tail0, head0, rows.reward, rows.discount, ends, ids)
            if self._device is not None:
                self._device.send_windows(ready)
        for i in breaks:
            self._warn_broken(int(ids[i]))
        return Inserted(slots, gone, until, ready)

    # -- reads ----------------------------------------------------------------------------------
    def valid(self, slots: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each slot holds a live transition (added and not yet evicted)."""
        return self._ring.live(self._slots(slots))

    def drawable(self, slots: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each slot holds a live transition whose n-step window is complete (``n_step =
        1``: live): the slots :meth:`get` reads and a sampler over the memory holds."""
        idx = self._slots(slots)
        live = self._ring.live(idx)
        if self._nstep is not None:
            live &= self._nstep.is_complete(idx)
        return np.asarray(live)

    def generations(self, slots: npt.ArrayLike) -> IntArray:
        """Number of the transition each slot holds (``-1`` never written): changes on rewrite."""
        return self._ring.generation[self._slots(slots)].copy()

    def live_generations(self, slots: npt.ArrayLike, name: str = "slots") -> IntArray:
        """Number of the live transition each slot holds, ``-1`` where it holds none (never
        written or evicted); errors name the argument ``name``."""
        idx = self._slots(slots, name)
        generation = self._ring.generation[idx]
        return np.where(generation >= self._ring.tail, generation, -1)

    def get(self, slots: npt.ArrayLike, *, weights: npt.ArrayLike | None = None) -> ReplayBatch:
        """Transitions in ``slots`` as a :class:`ReplayBatch`: ``obs``, ``action``, ``reward``
        (float32), ``discount`` (float32), ``next_obs``, ``generation`` (the transition's number,
        int64) and ``extras``, also readable as ``batch["obs"]``, ``batch["log_prob"]``.

        ``obs``/``next_obs`` have shape ``(k, frame_stack, *obs_shape)``, or ``(k, *obs_shape)``
        when ``frame_stack = 1`` (dicts of ``(k, *shape)`` arrays for dict observations); they may
        be views of one array holding each frame once, so write to copies.  Under ``n_step = n``
        reward, discount and ``next_obs`` are the window's.  Every slot must be :meth:`drawable`.

        With a torch ``device`` every field (extras and dict observations' keys too) is a tensor
        there, of the same dtype and shape (possibly strided views of one gathered tensor).
        ``weights`` (importance weights, one per slot) are carried along as ``batch.weights``
        (float32; on a device sent in the same copy as the slots).
        """
        idx = self._slots(slots)
        dead = ~self._ring.live(idx)
        if dead.any():
            j = int(np.argmax(dead))
            raise ValueError(f"slots should hold live transitions, but got slots[{j}]={idx[j]} (empty)")
        if self._nstep is not None:
            pending = ~self._nstep.is_complete(idx)
            if pending.any():
                j = int(np.argmax(pending))
                raise ValueError(
                    f"slots should hold transitions whose {self.n_step}-step window is complete, but got "
                    f"slots[{j}]={idx[j]} (its window waits for the next transitions of its stream)"
                )
        w = None
        if weights is not None:
            w = cast(to_numpy(weights, "weights"), np.dtype(np.float32), "weights")
            if w.shape != idx.shape:
                raise ValueError(
                    f"weights should have one value per slot ({idx.shape[0]}), but got shape {w.shape}"
                )
        return self._gather(idx, w)

    def read_drawn(
        self, slots: IntArray, weights: npt.NDArray[np.float32] | None = None
    ) -> tuple[ReplayBatch, IntArray]:
        """:meth:`get` for slots a sampler over this memory just drew, under the lock that
        keeps it in step with the memory (int64 slots, each :meth:`drawable`: not checked again),
        with the slots' generations on the host (what ``batch.generation`` holds, a tensor on a
        device)."""
        return self._gather(slots, weights), self._ring.generation[slots]

    def _gather(self, idx: IntArray, weights: npt.NDArray[np.float32] | None = None) -> ReplayBatch:
        """Read on the host (numpy), or on the device: the host computes what the store gathers
        with (frame rows, slots) and under n-step the windows' last slots, rewards and discounts,
        and sends them with the slots and weights in one copy; the columns and observations are
        gathered there."""
        nstep = self._nstep
        last = idx if nstep is None else nstep.last[idx]
        index: list[Any]
        index, plan = self._store.read_plan(idx, last, 1 if nstep is None else self.n_step)
        floats: list[Any] = [] if nstep is None else [nstep.reward[idx], nstep.discount[idx]]
        batch_weights: Any = weights
        ring = self._ring
        columns: dict[str, Any] = {}
        if self._device is None:
            columns.update((name, array[idx]) for name, array in ring.columns.host.items())
        else:
            sent, floats = self._device.send([idx, *index], floats + ([] if weights is None else [weights]))
            ring.columns.sync(ring.head)
            columns.update(ring.columns.gather(sent[0]))
            index = sent[1:]
            if weights is not None:
                batch_weights = floats.pop()
        if nstep is not None:
            columns["reward"], columns["discount"] = floats[0], floats[1]
        obs, next_obs = self._store.take(index, plan, ring.head)
        return ReplayBatch.from_columns(columns, obs, next_obs, ring.extra_names, batch_weights)

    def _slots(self, slots: npt.ArrayLike, name: str = "slots") -> IntArray:
        """``slots`` checked in range; errors name the argument as the caller's caller calls it."""
        idx = as_indices(slots, name)
        bad = (idx < 0) | (idx >= self.capacity)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"{name} should lie in [0, {self.capacity}), but got {name}[{j}]={idx[j]}")
        return idx

    # -- device reads (the part built with device=) ------------------------------------------------
    def _device_reads(self, what: str) -> DeviceReads:
        if self._device is None:
            raise ValueError(f"{what} needs a device, but got device={self.device}")
        return self._device

    def send_to_device(
        self, ints: list[npt.NDArray[Any]], floats: list[npt.NDArray[np.float32]]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Host arrays to the device in one pinned, asynchronous copy (no synchronisation): the
        ``ints`` as int64 tensors and the ``floats`` as float32 tensors, in order."""
        return self._device_reads("send_to_device").send(ints, floats)

    def stage_device_read(self) -> None:
        """The host side of a device read, which a captured CUDA graph cannot run: the rows
        added since the last read (columns, the store's tables and frames, each in one copy) and
        the ring's tail (a fill, when it moved) sent to the device.  :meth:`read_on_device` and
        :meth:`live_generations_on_device` call it themselves, except while capturing."""
        self._device_reads("a device read").stage()

    def read_on_device(self, slots: torch.Tensor, weights: torch.Tensor | None = None) -> ReplayBatch:
        """:meth:`get` for slots drawn on the memory's device (an int64 tensor there, each
        :meth:`drawable`: not checked), with no host synchronisation: the columns, the store's
        row tables, the frames and under n-step the windows' results (return, discount, last
        slot: sent to the device as each window completes) are gathered from their device
        mirrors (the rows added since the last read go over first, host to device:
        :meth:`stage_device_read`, skipped while capturing)."""
        return self._device_reads("read_on_device").read(slots, weights)

    def live_generations_on_device(self, slots: torch.Tensor) -> torch.Tensor:
        """:meth:`live_generations` of slots given as an int64 tensor on the device, computed
        there (``-1`` where a slot holds no live transition), with no host synchronisation
        (:meth:`stage_device_read` first, skipped while capturing)."""
        return self._device_reads("live_generations_on_device").live_generations(slots)

    # -- checkpoints (the checkpoint part) ---------------------------------------------------------
    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """Everything needed to continue exactly (numpy arrays and plain values): the config, the
        arrays, the counters, the n-step accumulator's state (``"nstep"``, ``None`` for ``n_step =
        1``) and the vector-step converter's (``"vector"``, ``None`` before the first
        ``add_vector_step``).

        ``copy=False`` returns the live arrays themselves (no second copy of a large frame pool);
        serialise them before the next ``add``.
        """
        return self._checkpoint.state_dict(copy=copy)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output into a memory built with the same arguments.

        The state is checked completely first (:meth:`check_valid`'s invariants, the config, every
        array's dtype and shape, the n-step windows against the live transitions, the converter):
        a malformed or inconsistent state raises ``ValueError`` or ``TypeError`` naming the key,
        and the memory is left exactly as it was.  A memory built with ``obs_dtype=None`` takes
        the state's dtype.  Version 1 states (before n-step and extras) load into a memory with
        ``n_step=1`` and no extras.
        """
        self._checkpoint.load_state_dict(state)

    def check_state(self, state: Any) -> CheckedState:
        """The state's arrays and counters, after checking everything :meth:`load_state_dict`
        will assign; raises ``ValueError``/``TypeError`` naming the key, changes nothing."""
        return self._checkpoint.check_state(state)

    def commit_state(self, checked: CheckedState) -> None:
        """Assign a state that :meth:`check_state` accepted (cannot fail: dtypes and shapes match)."""
        self._checkpoint.commit_state(checked)

    def check_valid(self) -> None:
        """Raise ``ValueError`` naming the first broken invariant of the memory's bookkeeping.

        The invariants :meth:`load_state_dict` demands of a state: each slot holds the transition
        last written there (its generation follows from the number of adds) and the live ones are
        the most recent ``len(memory)``; every frame row that a live transition or a stream's last
        stack names is in the pool; each row's reference count equals its number of such uses;
        the free list holds exactly the unused rows, once each; live rewards are finite, live
        discounts in ``[0, 1]``, live float actions, extras and observations, and used float
        frames finite.  Also that the frame pool's dedup cache holds each stream's last stacks.
        """
        self._checkpoint.check_valid()
