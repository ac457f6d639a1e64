"""Prioritized replay: a replay memory and a prioritized sampler over its slots, joined by the
memory's public methods only (Schaul et al. 2016, Algorithm 1)."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator, Mapping
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import torch

from prisample._validation import (
    as_indices,
    as_priorities,
    check_finite_priorities,
    check_positive_int,
    short_repr,
)
from prisample.backends import ProportionalBackend, sampler_choice
from prisample.device_sampler import DevicePrioritizedSampler
from prisample.replay._rows import last_rows
from prisample.replay.batch import ReplayBatch
from prisample.replay.device import as_device
from prisample.replay.device_steps import DeviceSteps
from prisample.replay.eviction import FifoEviction, Swaps, check_eviction, events, make_eviction
from prisample.replay.frames import reserve_rows
from prisample.replay.memory import Inserted, ReplayMemory
from prisample.replay.prefetch import Prefetcher
from prisample.replay.replay_checkpoint import REPLAY_STATE_VERSION, ReplayCheckpoint
from prisample.replay.writes import AddRequest, TransitionWrites, VectorAdd, WriteRequest
from prisample.sampler import Draw, PrioritizedSampler
from prisample.slot_sampler import SlotSampler, make_sampler
from prisample.weights import LinearSchedule, WeightNorm

__all__ = ["REPLAY_STATE_VERSION", "PrioritizedReplay"]


IntArray = npt.NDArray[np.int64]


class PrioritizedReplay(TransitionWrites, DeviceSteps, ReplayCheckpoint):
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
    device path, any other sampler the host path (numpy in and out).

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
        capacity: int,
        obs_shape: tuple[int, ...] | Mapping[str, tuple[int, ...]],
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
    ) -> None:
        self.eviction = check_eviction(eviction)
        """``"fifo"``: the oldest transition leaves a full memory; ``"priority"``: the lowest."""
        if self.eviction == "priority" and n_step != 1:
            raise ValueError(
                f"eviction='priority' needs n_step=1 (an open n-step window names the slots after it), "
                f"but got eviction={eviction!r} with n_step={n_step!r}"
            )
        if (
            self.eviction == "priority"
            and frame_capacity is None
            and frame_stack != 1
            and not isinstance(obs_shape, Mapping)
        ):
            # survivors are scattered, so each may hold frame_stack + 1 frames of its own
            stack = check_positive_int(frame_stack, "frame_stack")
            frame_capacity = (stack + 1) * check_positive_int(capacity, "capacity") + reserve_rows(
                stack, check_positive_int(num_streams, "num_streams")
            )
        if sampler is None:
            name, sampler_device = _sampler_place(backend, priorities_on, device, self.eviction)
            sampler = make_sampler(
                check_positive_int(capacity, "capacity"),
                backend=name,
                device=sampler_device,
                alpha=alpha,
                beta=beta,
                eps=eps,
                weight_norm=weight_norm,
                size=0,
                seed=seed,
            )
        else:
            given: dict[str, Any] = {"alpha": alpha, "beta": beta, "eps": eps, "backend": backend}
            given |= {"weight_norm": weight_norm, "seed": seed, "priorities_on": priorities_on}
            _check_given_sampler(sampler, capacity, device, self.eviction, given)
        self.sampler: SlotSampler = sampler
        """The prioritized sampler over the memory's slots (:class:`~prisample.slot_sampler.SlotSampler`)."""
        self.on_device = isinstance(sampler, DevicePrioritizedSampler)
        """The priorities live on the memory's device (a
        :class:`~prisample.device_sampler.DevicePrioritizedSampler`): draws, gathers and priority
        updates run there without the host."""
        self.memory = ReplayMemory(
            capacity,
            obs_shape,
            obs_dtype=obs_dtype,
            frame_stack=frame_stack,
            action_shape=action_shape,
            action_dtype=action_dtype,
            num_streams=num_streams,
            frame_capacity=frame_capacity,
            n_step=n_step,
            extras=extras,
            device=device,
        )
        self._drawn = np.full(self.memory.capacity, -1, dtype=np.int64)  # generation at last draw
        self._dropped = 0
        self._device_sampler: DevicePrioritizedSampler | None = None
        # whether a window ever completed (one-step: every add): what the host knows of the
        # device sampler being non-empty, without asking it
        self._drawable_seen = n_step == 1
        if self.on_device:  # the draw record and the dropped count stay where the draws are
            # the same object as ``sampler``, which answers every call the host path makes of it
            self._device_sampler = cast(DevicePrioritizedSampler, self.sampler)
            # a copy (on CPU tensors ``to`` would share the host array, unlike on a GPU)
            self._drawn_on_device = torch.from_numpy(self._drawn).to(self.memory.device, copy=True)
            self._dropped_on_device = torch.zeros((), dtype=torch.int64, device=self.memory.device)
        self._eviction = make_eviction(self.eviction, self.memory.capacity)

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
        """Bytes held by the memory, the sampler and the draw record."""
        with self.lock:
            extra = self._eviction.nbytes
            if self.on_device:
                extra += self._drawn_on_device.numel() * self._drawn_on_device.element_size()
            return self.memory.nbytes + self.sampler.nbytes + self._drawn.nbytes + extra

    def write(self, request: WriteRequest) -> Inserted:
        """The memory's write (:meth:`ReplayMemory.write`) under the lock, with the sampler's side:
        the evicted transitions leave, the new ones enter at the maximum priority (under n-step:
        once complete), or at ``add_many``'s ``priorities=``."""
        if self.memory._compiled_write and not self.on_device and self.memory.n_step == 1:
            plain = isinstance(request, VectorAdd) or request.priorities is None
            if plain and type(self._eviction) is FifoEviction:
                with self.lock:
                    done = self._write_compiled(request)
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

    def _write_compiled(self, request: WriteRequest) -> Inserted | None:
        """The write in one compiled call (:meth:`ReplayMemory.write_compiled`) with the
        sampler's tree where the sampler is a proportional one without hooks (other samplers
        hear of the write as in :meth:`_admit`); ``None``: nothing written, the general path
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
            self._admit(done, [], head)
        return done

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
            self._eviction.updated(slots, values)

    @contextlib.contextmanager
    def _write(self, n: int, initial: npt.NDArray[np.float64] | None = None) -> Iterator[_Write]:
        """The one write of :meth:`add`, :meth:`add_many` and :meth:`add_vector_step`, under the
        lock: the eviction strategy makes room for at most ``n`` rows, the body stores them in the
        memory (``write.done``), then the sampler admits them (:meth:`_admit`) and ``initial``
        priorities, if given, replace the maximum.  A body that raises undoes the arrangement.
        (A context manager, not a callable, so that the memory's warnings still name the caller.)
        """
        with self.lock:
            write = _Write()
            swaps, head = self._eviction.arrange(self.memory, n), self.memory.num_added
            try:
                yield write
            except BaseException:
                self._eviction.undo(self.memory, swaps)
                raise
            self._admit(write.done, swaps, head)
            if initial is not None:
                self._set_initial(write.done.slots, initial)

    def _admit(self, done: Inserted, swaps: Swaps, head: int) -> None:
        """The sampler's side of a write: evicted transitions leave, the new ones enter at the
        maximum priority of the memory they join; then the eviction strategy's side.

        ``swaps`` (from :meth:`~prisample.replay.eviction.Eviction.arrange`) moved transitions
        before the write; ``head`` is the generation of the write's first transition.  Under n-step
        the step's removals come first, then its completed windows at once.
        """
        self._eviction.moved(self.sampler, swaps)
        if self.memory.n_step > 1:
            if self.on_device:
                self._admit_windows_on_device(done)
                return
            if done.evicted.shape[0]:
                self.sampler.remove(done.evicted)
            if done.completed.shape[0]:
                self.sampler.add(done.completed)
            return
        if self.on_device:  # FIFO only: no eviction strategy to tell
            self._enter_on_device(done, head)
            return
        priorities = self._enter(done, head)
        self._eviction.admitted(done, priorities, head)

    def _enter(self, done: Inserted, head: int) -> npt.NDArray[np.float64]:
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
            return self._enter_rows(done)
        first = int(until[0])
        if first:
            self.sampler.remove(evicted[:first])
        priorities = np.full(n, self.sampler.max_priority)
        self.sampler.write(*events(done, priorities, first))
        return priorities

    def _enter_rows(self, done: Inserted) -> npt.NDArray[np.float64]:
        """:meth:`_enter` row by row (a write that evicted its own rows)."""
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
        """Draw ``k`` live transitions: ``(batch, draw)`` with ``batch`` as :meth:`ReplayMemory.get`
        returns it and ``draw`` the slots, importance weights and probabilities.  With a
        ``device`` the weights (``draw.weights`` and ``batch.weights``) are a float32 tensor there;
        indices and probabilities stay numpy on the host (``update_priorities`` takes them).

        With the priorities on the device (``backend="device_*"``) ``draw`` is a
        :class:`~prisample.device_sampler.DeviceDraw` of tensors there, and nothing is read back.

        Atomic under threads: no add lands between the draw and the gather, so every transition
        in the batch is the one drawn (on a device, the gather is queued before any later write).
        """
        if self.on_device:
            return self._sample_on_device(k)
        with self.lock:
            if self.sampler.size == 0 and len(self.memory):
                raise ValueError(
                    f"no transition can be drawn yet: with n_step={self.memory.n_step} a transition is "
                    "drawn once its window is complete (n_step transitions later on its stream, or at the "
                    f"end of its episode), and none of the {len(self.memory)} stored is"
                )
            draw = cast(Draw, self.sampler.sample(k))  # a host sampler's: numpy
            batch, live = self.memory.read_drawn(draw.indices, draw.weights)
            generation = self._eviction.generations(draw.indices, live)
            if generation is not live:  # moved transitions keep their generations
                device_generation: Any = generation.copy()
                if self.memory.device is not None:
                    device_generation = torch.from_numpy(device_generation).to(self.memory.device)
                batch = dataclasses.replace(batch, generation=device_generation)
            self._drawn[draw.indices] = generation
        if self.memory.device is not None:  # the weights as the learner needs them: on its device
            draw = dataclasses.replace(draw, weights=cast(Any, batch.weights))
        return batch, draw

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
        if self.on_device and isinstance(indices, torch.Tensor) and indices.device == self.memory.device:
            self._update_on_device(indices, priorities, generations)
            return
        idx = as_indices(indices, "indices")  # converted (a CUDA tensor copied) before the lock
        values = as_priorities(priorities, idx.shape[0])
        expected = None if generations is None else as_indices(generations, "generations")
        with self.lock:
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
            current = self._eviction.generations(idx, current)
            check_finite_priorities(values)
            if expected is None and self.on_device:  # the record is where the draws were made
                expected = self._drawn_on_device[torch.from_numpy(idx).to(self.memory.device)].cpu().numpy()
            elif expected is None:
                expected = self._drawn[idx]
            elif expected.shape != idx.shape:
                raise ValueError(
                    f"generations should have one value per index ({idx.shape[0]}), "
                    f"but got {expected.shape[0]}"
                )
            keep = (current == expected) & (current >= 0)
            if not keep.all():
                self._dropped += int(keep.shape[0] - np.count_nonzero(keep))
                idx, values = idx[keep], values[keep]
            if idx.shape[0]:
                # converted and checked above: the sampler takes them as they are (a device
                # sampler's trusted path would also skip its mass and filled-slot checks)
                self.sampler.update_priorities(idx, values, checked=self.on_device)
                self._eviction.updated(idx, values)

    def generations(self, slots: npt.ArrayLike) -> IntArray:
        """Number of the transition each slot holds, as ``batch.generation`` gives it (``-1``:
        none).  Under ``eviction="priority"`` a transition keeps its number when it moves to
        another slot, so this is not always :meth:`ReplayMemory.generations`."""
        with self.lock:
            current = self.memory.live_generations(slots)
            return self._eviction.generations(as_indices(slots, "slots"), current)

    def check_valid(self) -> None:
        """Raise ``ValueError`` naming the first broken invariant: the memory's
        (:meth:`ReplayMemory.check_valid`), the sampler filled exactly in the drawable slots, and
        under ``eviction="priority"`` the eviction order agreeing with the sampler."""
        with self.lock:
            self.memory.check_valid()
            filled = ~np.isnan(self.sampler.priorities)
            if not np.array_equal(filled, self.memory.drawable(np.arange(self.capacity))):
                raise ValueError("sampler should be filled exactly in the memory's drawable slots")
            self._eviction.check(self.sampler.priorities)


_SAMPLER_DEFAULTS: dict[str, Any] = {
    "alpha": 0.6,
    "beta": 0.4,
    "eps": 1e-6,
    "backend": "proportional",
    "weight_norm": "memory",
    "seed": None,
    "priorities_on": None,
}
"""The constructor's sampler arguments at their defaults: what they must be beside ``sampler=``."""


def _sampler_place(backend: Any, priorities_on: Any, device: Any, eviction: str) -> tuple[str, Any]:
    """The registered backend and the device of the replay's sampler: ``None`` (the host) unless
    ``priorities_on`` is given or ``backend`` is a ``"device_<name>"`` alias, and then the
    memory's ``device``, which must be set, equal ``priorities_on`` if that is given, and go with
    FIFO eviction; ``ValueError`` naming the arguments otherwise."""
    name, on_device = sampler_choice(backend, priorities_on)
    if not on_device:
        return name, None
    if device is None or eviction != "fifo":
        raise ValueError(
            f"backend={backend!r} with priorities_on={short_repr(priorities_on)} keeps the priorities on "
            f"the memory's device and needs device= set and eviction='fifo', but got device={device!r}, "
            f"eviction={eviction!r}"
        )
    memory_device = as_device(device)
    if priorities_on is not None:
        try:
            place = as_device(priorities_on)
        except (TypeError, ValueError):
            place = None
        if place != memory_device:
            raise ValueError(
                f"priorities_on should be None or the memory's device ({memory_device}), but got "
                f"priorities_on={short_repr(priorities_on)}"
            )
    return name, memory_device


def _check_given_sampler(
    sampler: Any, capacity: Any, device: Any, eviction: str, given: dict[str, Any]
) -> None:
    """``sampler=`` must implement :class:`~prisample.slot_sampler.SlotSampler`, hold
    ``capacity`` empty slots and come without the arguments that would build one; a device
    sampler must be on the memory's ``device``, with FIFO eviction."""
    if not isinstance(sampler, SlotSampler):
        raise TypeError(
            f"sampler should implement prisample.slot_sampler.SlotSampler (e.g. a PrioritizedSampler), "
            f"but got sampler={short_repr(sampler)}"
        )
    set_too = [key for key, value in given.items() if not _is_default(value, _SAMPLER_DEFAULTS[key])]
    if set_too:
        raise ValueError(
            f"sampler= replaces the arguments that build one: {', '.join(set_too)} should be left "
            f"unset, but got {', '.join(f'{key}={short_repr(given[key])}' for key in set_too)}"
        )
    if sampler.capacity != check_positive_int(capacity, "capacity") or sampler.size != 0:
        raise ValueError(
            f"sampler should be empty and of the memory's capacity ({capacity}), but got a sampler of "
            f"capacity {sampler.capacity} holding {sampler.size} slots"
        )
    if isinstance(sampler, DevicePrioritizedSampler) and (
        as_device(device) != sampler.device or eviction != "fifo"
    ):
        raise ValueError(
            f"a DevicePrioritizedSampler should be on the memory's device with eviction='fifo', but got "
            f"sampler.device={sampler.device}, device={device!r}, eviction={eviction!r}"
        )


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (type(value) is type(default) and value == default)


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
