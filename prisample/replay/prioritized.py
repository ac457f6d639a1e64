"""Prioritized replay: a replay memory and a prioritized sampler over its slots, joined by the
memory's public methods only (Schaul et al. 2016, Algorithm 1)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from prisample._validation import as_indices, as_priorities, check_finite_priorities
from prisample.replay._rows import last_rows
from prisample.replay.batch import ReplayBatch
from prisample.replay.eviction import Eviction
from prisample.replay.memory import Inserted, ReplayMemory
from prisample.replay.prefetch import Prefetcher
from prisample.replay.replay_checkpoint import REPLAY_STATE_VERSION, ReplayCheckpoint
from prisample.replay.replay_parts import ReplayParts, build_replay_parts
from prisample.replay.steps import ReplaySteps
from prisample.replay.write_back import WriteBackGuard
from prisample.replay.writes import AddRequest, TransitionWrites, VectorAdd, WriteRequest
from prisample.sampler import Draw
from prisample.slot_sampler import SlotSampler
from prisample.weights import LinearSchedule, WeightNorm

__all__ = ["REPLAY_STATE_VERSION", "PrioritizedReplay"]


IntArray = npt.NDArray[np.int64]


class PrioritizedReplay(TransitionWrites):
    """A :class:`ReplayMemory` and a :class:`~prisample.PrioritizedSampler` over its slots.

    Implements the replay side of Schaul et al. (2016), Algorithm 1: a new transition enters at
    the maximum priority of the memory (line 6), batches are drawn with ``P(i) = p_i^α / Σ_k
    p_k^α`` (Eq. 1) and come with importance weights ``w_i = (N · P(i))^-β / max_j w_j``
    (Sec. 3.4), and ``|δ_i|`` updates the drawn slots (line 12).  A slot leaves the sampler the
    moment its transition is evicted, so a draw only ever returns live transitions.

    Priority updates for rewritten slots are dropped (a TD error computed for an evicted
    transition must not land on its successor; ray-project/ray#6534).  ``sample`` records, per
    slot, the generation (transition number) it held when last drawn, and puts it in
    ``batch["generation"]``.  :meth:`update_priorities` applies an entry only if its slot is live
    and still holds that generation: the one passed in ``generations=`` (exact), or else the one
    recorded at the slot's most recent draw.  Without ``generations=``, a stale update that
    arrives after its slot was rewritten *and drawn again* cannot be told from a fresh one; pass
    ``generations=batch["generation"]`` when updates may lag behind later draws.  Only stale
    entries are dropped (counted in :attr:`dropped_updates`): an update for a slot that never held
    a transition is a caller's error and raises ``ValueError``, as the sampler's does.

    ``eviction="fifo"`` (the default) evicts the oldest transition when the memory is full;
    ``eviction="priority"`` evicts the live transition of lowest raw priority, the oldest among
    equal priorities (Schaul et al. 2016, Sec. 6, "Prioritized Memories"; see
    :mod:`prisample.replay.eviction`).  A new transition enters at the maximum priority, so it is
    never the one evicted while an older one is live.  The evicted transition's slot takes the
    oldest survivor, which keeps its number (``batch.generation``) and priority: an update sent
    for it to its old slot is dropped like any stale one.  ``n_step = 1`` only.  Survivors are
    scattered in time, so under frame stacking a transition may keep ``frame_stack + 1`` frames
    of its own: ``frame_capacity`` then defaults to ``(frame_stack + 1) · capacity +
    2·frame_stack·(num_streams + 1)`` rows (about 2.4 frames per transition were used with random
    priorities).  With a smaller ``frame_capacity`` the pool may run short, and then extra
    transitions leave in ring order (oldest position first), as under ``"fifo"``.

    Where the priorities live is chosen apart from where batches go.  ``device=`` is the
    memory's device: batches are gathered there, and the priorities stay in host memory
    (:class:`~prisample.PrioritizedSampler`, every backend).  ``priorities_on=`` (that same
    device) keeps the priorities there too
    (:class:`~prisample.device_sampler.DevicePrioritizedSampler`, backends ``"proportional"`` and
    ``"uniform"``, ``eviction="fifo"``): :meth:`sample` draws and gathers there and
    :meth:`update_priorities` of device tensors checks the generations there, with no host
    synchronisation on the step.  ``backend="device_proportional"`` and ``"device_uniform"`` are
    aliases of ``backend="proportional"`` / ``"uniform"`` with ``priorities_on=device``.  The
    choice follows the backend registry (:func:`~prisample.backends.sampler_choice`) and the
    sampler is built by :func:`~prisample.slot_sampler.make_sampler`.

    ``sampler=`` passes a ready-made, empty sampler of ``capacity`` slots instead (anything
    implementing :class:`~prisample.slot_sampler.SlotSampler`); ``alpha``, ``beta``, ``eps``,
    ``backend``, ``weight_norm``, ``seed`` and ``priorities_on`` then stay unset.  A
    :class:`~prisample.device_sampler.DevicePrioritizedSampler` on the memory's device takes the
    device path, any other sampler the host path (numpy in and out).  ``memory=`` passes a
    ready-made, empty :class:`ReplayMemory` instead of the memory arguments (``obs_shape``,
    ``frame_stack``, ``obs_dtype``, ``action_shape``, ``action_dtype``, ``num_streams``,
    ``frame_capacity``, ``n_step``, ``extras``, ``device``), which then stay unset
    (``capacity`` too, or the memory's).  Whatever is not passed in is built by one factory,
    :func:`~prisample.replay.replay_parts.build_replay_parts`.

    The parts, each with one job: ``memory`` (the transitions), ``sampler`` (their
    priorities), ``eviction_strategy`` (who leaves a full memory), ``guard`` (the draw
    record and the stale updates dropped, :mod:`~prisample.replay.write_back`), ``steps``
    (how writes, draws and updates reach the sampler, on the host or the device,
    :mod:`~prisample.replay.steps`) and ``checkpointer`` (the state, all or nothing).

    Thread-safe: every public method holds :attr:`lock` (the sampler's reentrant lock) for its
    whole effect — the memory write with the sampler's removals and additions, the draw with the
    gather and the draw record, the generation check with the priority update — so actor threads
    may add while a learner samples and updates.  Hold ``replay.lock`` to make several calls one
    step.  :meth:`prefetch` draws the next batches in a background thread.

    >>> import numpy as np
    >>> replay = PrioritizedReplay(4, (3,), obs_dtype=np.float32, alpha=1.0, beta=1.0, seed=0)
    >>> for t in range(6):
    ...     slot = replay.add(np.full(3, t), t % 2, 1.0, 0.99, np.full(3, t + 1))
    >>> len(replay), slot
    (4, 1)
    >>> batch, draw = replay.sample(2)
    >>> batch["obs"].shape, draw.weights.dtype.name
    ((2, 3), 'float32')
    >>> replay.update_priorities(draw.indices, [0.5, 2.0])
    """

    def __init__(
        self,
        capacity: int | None = None,
        obs_shape: tuple[int, ...] | Mapping[str, tuple[int, ...]] | None = None,
        *,
        frame_stack: int = 1,
        obs_dtype: npt.DTypeLike | Mapping[str, npt.DTypeLike] | None = None,
        action_shape: tuple[int, ...] = (),
        action_dtype: npt.DTypeLike = np.int64,
        num_streams: int = 1,
        frame_capacity: int | None = None,
        n_step: int = 1,
        extras: Mapping[str, tuple[tuple[int, ...], npt.DTypeLike]] | None = None,
        device: Any = None,
        alpha: float = 0.6,
        beta: float | LinearSchedule = 0.4,
        eps: float = 1e-6,
        backend: str = "proportional",
        weight_norm: WeightNorm = "memory",
        seed: int | None = None,
        eviction: str = "fifo",
        priorities_on: Any = None,
        sampler: SlotSampler | None = None,
        memory: ReplayMemory | None = None,
    ) -> None:
        parts = build_replay_parts(
            capacity,
            obs_shape,
            frame_stack=frame_stack,
            obs_dtype=obs_dtype,
            action_shape=action_shape,
            action_dtype=action_dtype,
            num_streams=num_streams,
            frame_capacity=frame_capacity,
            n_step=n_step,
            extras=extras,
            device=device,
            alpha=alpha,
            beta=beta,
            eps=eps,
            backend=backend,
            weight_norm=weight_norm,
            seed=seed,
            eviction=eviction,
            priorities_on=priorities_on,
            memory=memory,
            sampler=sampler,
        )
        self._assemble(parts)

    def _assemble(self, parts: ReplayParts) -> None:
        self.memory: ReplayMemory = parts.memory
        """The transitions (:class:`ReplayMemory`)."""
        self.sampler: SlotSampler = parts.sampler
        """The prioritized sampler over the memory's slots (:class:`~prisample.slot_sampler.SlotSampler`)."""
        self.eviction_strategy: Eviction = parts.eviction
        """Which transition leaves a full memory (:mod:`~prisample.replay.eviction`)."""
        self.eviction = parts.eviction.name
        """``"fifo"``: the oldest transition leaves a full memory; ``"priority"``: the lowest."""
        self.guard: WriteBackGuard = parts.guard
        """The draw record and the count of stale updates dropped (:mod:`~prisample.replay.write_back`)."""
        self.steps: ReplaySteps = parts.steps
        """How writes, draws and updates reach the sampler (:mod:`~prisample.replay.steps`)."""
        self.checkpointer = ReplayCheckpoint(parts.memory, parts.sampler, parts.guard, parts.eviction)
        """``state_dict`` and ``load_state_dict`` (:mod:`~prisample.replay.replay_checkpoint`)."""
        self._compiles = parts.steps.compiles()  # the one-call write: host, FIFO, n_step = 1

    @property
    def on_device(self) -> bool:
        """The priorities live on the memory's device (a
        :class:`~prisample.device_sampler.DevicePrioritizedSampler`): draws, gathers and priority
        updates run there without the host."""
        return self.steps.on_device

    @property
    def lock(self) -> threading.RLock:
        """The reentrant lock every public method holds: the sampler's, so the memory and the
        sampler change together (copies and unpickled replays get a fresh one with the sampler)."""
        return self.sampler.lock

    def __len__(self) -> int:
        with self.lock:
            return len(self.memory)

    @property
    def capacity(self) -> int:
        return self.memory.capacity

    @property
    def nbytes(self) -> int:
        """Bytes held by the memory, the sampler, the draw record and the eviction strategy."""
        with self.lock:
            extra = self.eviction_strategy.nbytes + self.steps.nbytes
            return self.memory.nbytes + self.sampler.nbytes + extra

    @property
    def dropped_updates(self) -> int:
        """Priority updates dropped as stale (their slot rewritten or evicted since the draw);
        with the priorities on the device, reading it waits for the device."""
        with self.lock:
            return self.guard.dropped

    @dropped_updates.setter
    def dropped_updates(self, value: int) -> None:
        with self.lock:
            self.guard.dropped = value

    def write(self, request: WriteRequest) -> Inserted:
        """The memory's write (:meth:`ReplayMemory.write`) under the lock, with the sampler's side:
        the evicted transitions leave, the new ones enter at the maximum priority (under n-step:
        once complete), or at ``add_many``'s ``priorities=``."""
        plain = isinstance(request, VectorAdd) or request.priorities is None
        if self._compiles and plain and self.memory._compiled_write:
            with self.lock:
                done = self.steps.write_compiled(request)
            if done is not None:
                return done
        initial = None
        single = isinstance(request, AddRequest) and request.single
        n = 1 if single else _leading(request.reward)  # a vector step: at most one row per env
        if isinstance(request, AddRequest) and request.priorities is not None:
            initial = self._initial_priorities(request.priorities, n)
            request = request._replace(priorities=None)
        with self._write(n, initial) as write:
            write.done = self.memory.write(request)
        return write.done

    def _initial_priorities(self, priorities: npt.ArrayLike, n: int) -> npt.NDArray[np.float64]:
        """``priorities=`` of :meth:`add_many`, checked before anything is written."""
        if self.memory.n_step != 1:
            raise ValueError(
                f"priorities= needs n_step=1 (an n-step window completes in a later call), "
                f"but the memory has n_step={self.memory.n_step}"
            )
        values = as_priorities(priorities, n)
        check_finite_priorities(values)
        return values

    def _set_initial(self, slots: IntArray, values: npt.NDArray[np.float64]) -> None:
        """Priorities of the transitions just written; a slot written twice keeps the last."""
        last = last_rows(slots)  # each slot's last write
        slots, values = slots[last], values[last]
        live = self.memory.drawable(slots)
        if not live.all():
            slots, values = slots[live], values[live]
        if slots.shape[0]:
            self.sampler.update_priorities(slots, values)
            self.eviction_strategy.updated(slots, values)

    @contextlib.contextmanager
    def _write(self, n: int, initial: npt.NDArray[np.float64] | None = None) -> Iterator[_Write]:
        """The one write of :meth:`add`, :meth:`add_many` and :meth:`add_vector_step`, under the
        lock: the eviction strategy makes room for at most ``n`` rows, the body stores them in the
        memory (``write.done``), then the sampler admits them (:meth:`ReplaySteps.admit
        <prisample.replay.steps.ReplaySteps.admit>`) and ``initial`` priorities, if given,
        replace the maximum.  A body that raises undoes the arrangement.  (A context manager, not
        a callable, so that the memory's warnings still name the caller.)
        """
        with self.lock:
            write = _Write()
            strategy = self.eviction_strategy
            swaps, head = strategy.arrange(self.memory, n), self.memory.num_added
            try:
                yield write
            except BaseException:
                strategy.undo(self.memory, swaps)
                raise
            self.steps.admit(write.done, swaps, head)
            if initial is not None:
                self._set_initial(write.done.slots, initial)

    def sample(self, k: int) -> tuple[ReplayBatch, Draw]:
        """Draw ``k`` live transitions: ``(batch, draw)`` with ``batch`` as :meth:`ReplayMemory.get`
        returns it and ``draw`` the slots, importance weights and probabilities.  With a
        ``device`` the weights (``draw.weights`` and ``batch.weights``) are a float32 tensor there;
        indices and probabilities stay numpy on the host (``update_priorities`` takes them).

        With the priorities on the device (``backend="device_*"``) ``draw`` is a
        :class:`~prisample.device_sampler.DeviceDraw` of tensors there, and nothing is read back.

        Atomic under threads: no add lands between the draw and the gather, so every transition
        in the batch is the one drawn (on a device, the gather is queued before any later write).
        """
        return self.steps.sample(k)

    def prefetch(self, k: int, *, depth: int = 1, total: int | None = None) -> Prefetcher:
        """Draw and gather the next batches of ``k`` in a background thread while the caller
        trains: a :class:`~prisample.replay.prefetch.Prefetcher`, an iterator of ``(batch, draw)``
        (use it as a context manager, or call ``close()``).

        ``depth`` batches are drawn ahead of the one being trained on, so batch ``j`` is drawn
        before the priority updates of batches ``j - depth .. j - 1`` land (``depth=0``: drawn in
        ``next()``, exactly :meth:`sample`).  ``total`` stops after that many batches.  Pass
        ``generations=batch.generation`` to :meth:`update_priorities`.
        """
        return Prefetcher(self, k, depth=depth, total=total)

    def update_priorities(
        self, indices: npt.ArrayLike, priorities: npt.ArrayLike, *, generations: npt.ArrayLike | None = None
    ) -> None:
        """Set raw priorities (``|δ|``) of drawn slots; entries for rewritten slots are dropped.

        Accepts numpy arrays, torch tensors on any device and lists; duplicates: the last entry
        wins.  A CUDA tensor is copied to the host here (one implicit synchronisation: it waits
        for the work that computed it); ``generations=batch.generation`` on the device likewise.

        An entry whose slot was filled but no longer holds the transition drawn (rewritten or
        evicted since; stale) is dropped, and the number of dropped entries accumulates in
        :attr:`dropped_updates`.  An index out of range or of a slot never filled raises
        ``ValueError`` naming it, as :meth:`PrioritizedSampler.update_priorities` does, and then
        nothing changes (no entry is written, :attr:`dropped_updates` included).
        """
        self.steps.update(indices, priorities, generations)

    def generations(self, slots: npt.ArrayLike) -> IntArray:
        """Number of the transition each slot holds, as ``batch.generation`` gives it (``-1``:
        none).  Under ``eviction="priority"`` a transition keeps its number when it moves to
        another slot, so this is not always :meth:`ReplayMemory.generations`."""
        with self.lock:
            current = self.memory.live_generations(slots)
            return self.eviction_strategy.generations(as_indices(slots, "slots"), current)

    def check_valid(self) -> None:
        """Raise ``ValueError`` naming the first broken invariant: the memory's
        (:meth:`ReplayMemory.check_valid`), the sampler filled exactly in the drawable slots, and
        under ``eviction="priority"`` the eviction order agreeing with the sampler."""
        with self.lock:
            self.memory.check_valid()
            filled = ~np.isnan(self.sampler.priorities)
            if not np.array_equal(filled, self.memory.drawable(np.arange(self.capacity))):
                raise ValueError("sampler should be filled exactly in the memory's drawable slots")
            self.eviction_strategy.check(self.sampler.priorities)

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self, include_memory: bool = False, *, copy: bool = True) -> dict[str, Any]:
        """Sampler state, draw record and the memory's counters, plus the memory's state when
        ``include_memory`` (``copy`` as in :meth:`ReplayMemory.state_dict`): one consistent
        snapshot under threads (see :class:`~prisample.replay.replay_checkpoint.ReplayCheckpoint`)."""
        return self.checkpointer.state_dict(include_memory, copy=copy)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output, all of it or nothing (see
        :meth:`ReplayCheckpoint.load_state_dict
        <prisample.replay.replay_checkpoint.ReplayCheckpoint.load_state_dict>`)."""
        self.checkpointer.load_state_dict(state)

    # -- captured device steps ------------------------------------------------------------------
    def stage_device_step(self) -> None:
        """The host side of one ``sample`` and ``update_priorities`` on the device, for a CUDA
        graph that captured them (a graph replays kernels, never Python): the rows added since
        the last read and the ring's tail sent to the device, ``β`` at the schedule's step sent
        and the step advanced.  Call it before every replay of such a graph; eager calls do it
        themselves.  ``ValueError`` while no transition can be drawn, or with the priorities on
        the host."""
        self.steps.stage()

    def save_device_step(self) -> tuple[list[torch.Tensor], int]:
        """Copies of everything a device ``sample`` and ``update_priorities`` change: the
        priority tree, the random stream's state, the draw record, the dropped count (tensors on
        the device) and the β schedule's step; :meth:`restore_device_step` puts them back (e.g.
        around the warm-up steps before a CUDA graph capture)."""
        return self.steps.save()

    def restore_device_step(self, saved: tuple[list[torch.Tensor], int]) -> None:
        """Put back what :meth:`save_device_step` copied (in place: a captured graph keeps
        reading the same tensors)."""
        self.steps.restore(saved)


class _Write:
    """What :meth:`PrioritizedReplay._write`'s body stored."""

    done: Inserted


def _leading(value: Any) -> int:
    """Length of the leading axis of a batch argument (0 when it has none: the write will
    reject it)."""
    try:
        shape = tuple(value.shape) if isinstance(value, (np.ndarray, torch.Tensor)) else np.shape(value)
    except ValueError:  # ragged
        return 0
    return int(shape[0]) if len(shape) else 0
