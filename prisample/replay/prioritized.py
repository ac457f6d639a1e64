"""Prioritized replay: a replay memory and a prioritized sampler over its slots, joined by the
memory's public methods only (Schaul et al. 2016, Algorithm 1)."""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
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
    to_numpy,
)
from prisample.replay._checks import as_state_array, check_keys
from prisample.replay.batch import ReplayBatch
from prisample.replay.eviction import Swaps, check_eviction, events, make_eviction
from prisample.replay.frames import reserve_rows
from prisample.replay.memory import CheckedState, Inserted, ReplayMemory
from prisample.replay.prefetch import Prefetcher
from prisample.sampler import Draw, PrioritizedSampler
from prisample.weights import LinearSchedule, WeightNorm

__all__ = ["REPLAY_STATE_VERSION", "PrioritizedReplay"]


# PrioritizedReplay's state; 2 adds memory_head and memory_tail (the memory it was saved with), 3
# adds eviction and numbers (the transitions' numbers under eviction="priority", else None).
REPLAY_STATE_VERSION = 3
_LOADABLE_REPLAY_VERSIONS = (1, 2, 3)

IntArray = npt.NDArray[np.int64]


class PrioritizedReplay:
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
        self.sampler = PrioritizedSampler(
            check_positive_int(capacity, "capacity"),
            alpha=alpha,
            beta=beta,
            eps=eps,
            backend=backend,
            weight_norm=weight_norm,
            size=0,
            seed=seed,
        )
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
        self.dropped_updates = 0
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
            return self.memory.nbytes + self.sampler.nbytes + self._drawn.nbytes + extra

    def add(
        self,
        obs: Any,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: Any,
        episode_end: bool = False,
        stream: int = 0,
        **extras: npt.ArrayLike,
    ) -> int:
        """Store a transition (see :meth:`ReplayMemory.add`); it enters at the maximum priority
        (under n-step: once its window is complete)."""
        obs, next_obs, action = _host(obs, "obs"), _host(next_obs, "next_obs"), _host(action, "action")
        extras = {name: _host(value, name) for name, value in extras.items()}
        with self._write(1) as write:
            write.done = self.memory.insert(
                obs, action, reward, discount, next_obs, episode_end=episode_end, stream=stream, **extras
            )
        return int(write.done.slots[0])

    def add_many(
        self,
        obs: Any,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: Any,
        *,
        episode_end: npt.ArrayLike | None = None,
        streams: npt.ArrayLike | None = None,
        priorities: npt.ArrayLike | None = None,
        **extras: npt.ArrayLike,
    ) -> IntArray:
        """:meth:`add` for ``n`` transitions at once (see :meth:`ReplayMemory.add_many`).

        ``priorities`` (``n`` raw values ``|δ|``, finite and ``>= 0``) enter the transitions at
        these priorities instead of the maximum: Ape-X's actors compute them with their copy of
        the network (Horgan et al. 2018, Sec. 3).  The write and the priorities are one step under
        the lock; a transition the same call evicts again takes no priority.  ``n_step = 1`` only
        (an n-step window completes in a later call).
        """
        obs, next_obs, action = _host(obs, "obs"), _host(next_obs, "next_obs"), _host(action, "action")
        reward, discount = _host(reward, "reward"), _host(discount, "discount")
        extras = {name: _host(value, name) for name, value in extras.items()}
        initial = None if priorities is None else self._initial_priorities(priorities, _leading(reward))
        with self._write(_leading(reward), initial) as write:
            write.done = self.memory.insert_many(
                obs, action, reward, discount, next_obs, episode_end=episode_end, streams=streams, **extras
            )
        return write.done.slots

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
        last = slots.shape[0] - 1 - np.unique(slots[::-1], return_index=True)[1]  # each slot's last write
        slots, values = slots[last], values[last]
        live = self.memory.drawable(slots)
        if not live.all():
            slots, values = slots[live], values[live]
        if slots.shape[0]:
            self.sampler.update_priorities(slots, values)
            self._eviction.updated(slots, values)

    def add_vector_step(
        self,
        obs: Any,
        action: Any,
        reward: npt.ArrayLike,
        terminated: npt.ArrayLike,
        truncated: npt.ArrayLike,
        next_obs: Any,
        infos: Mapping[str, Any],
        gamma: float = 0.99,
        *,
        autoreset_mode: Any = None,
        **extras: npt.ArrayLike,
    ) -> IntArray:
        """Store one gymnasium vector-env step (see :meth:`ReplayMemory.add_vector_step`); the
        new transitions enter at the maximum priority (under n-step: once complete)."""
        obs, next_obs, reward = _host(obs, "obs"), _host(next_obs, "next_obs"), _host(reward, "reward")
        extras = {name: _host(value, name) for name, value in extras.items()}
        with self._write(_leading(reward)) as write:  # at most one row per env
            write.done = self.memory.insert_vector_step(
                obs,
                action,
                reward,
                terminated,
                truncated,
                next_obs,
                infos,
                gamma=gamma,
                autoreset_mode=autoreset_mode,
                **extras,
            )
        return write.done.slots

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
            if done.evicted.shape[0]:
                self.sampler.remove(done.evicted)
            if done.completed.shape[0]:
                self.sampler.add(done.completed)
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

        Atomic under threads: no add lands between the draw and the gather, so every transition
        in the batch is the one drawn (on a device, the gather is queued before any later write).
        """
        with self.lock:
            if self.sampler.size == 0 and len(self.memory):
                raise ValueError(
                    f"no transition can be drawn yet: with n_step={self.memory.n_step} a transition is "
                    "drawn once its window is complete (n_step transitions later on its stream, or at the "
                    f"end of its episode), and none of the {len(self.memory)} stored is"
                )
            draw = self.sampler.sample(k)
            batch = self.memory.get(draw.indices, weights=draw.weights)
            live = self.memory.generations(draw.indices)  # the host's copy (drawn: all live)
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
            if expected is None:
                expected = self._drawn[idx]
            elif expected.shape != idx.shape:
                raise ValueError(
                    f"generations should have one value per index ({idx.shape[0]}), "
                    f"but got {expected.shape[0]}"
                )
            keep = (current == expected) & (current >= 0)
            if not keep.all():
                self.dropped_updates += int(keep.shape[0] - np.count_nonzero(keep))
                idx, values = idx[keep], values[keep]
            if idx.shape[0]:
                self.sampler.update_priorities(idx, values)
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

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self, include_memory: bool = False, *, copy: bool = True) -> dict[str, Any]:
        """Sampler state, draw record and the memory's counters, plus the memory's state when
        ``include_memory`` (``copy`` as in :meth:`ReplayMemory.state_dict`): one consistent
        snapshot under threads (with ``copy=False`` the memory's arrays are views that later adds
        change)."""
        with self.lock:
            return self._state_dict(include_memory, copy=copy)

    def _state_dict(self, include_memory: bool, *, copy: bool) -> dict[str, Any]:
        state: dict[str, Any] = {
            "version": REPLAY_STATE_VERSION,
            "sampler": self.sampler.state_dict(),
            "drawn": self._drawn.copy(),
            "dropped_updates": self.dropped_updates,
            "memory_head": self.memory.num_added,
            "memory_tail": self.memory.num_evicted,
            "eviction": self.eviction,
            "numbers": self._eviction.state_generations(),
        }
        if include_memory:
            state["memory"] = self.memory.state_dict(copy=copy)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output, all of it or nothing.

        Without ``"memory"`` the current memory must be the one the state was saved with: it must
        have seen the same number of adds and evictions (``memory_head``, ``memory_tail``), so its
        live slots are the sampler's filled ones.  Everything is checked before anything changes:
        the memory's state completely (:meth:`ReplayMemory.load_state_dict`), the draw record, and
        that the sampler's filled slots are the memory's live ones; then the sampler loads (its own
        checks, which change nothing when they fail); then the memory, which cannot fail.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state should be a dict from state_dict(), but got {type(state).__name__}")
        with self.lock:  # checks and commit against one memory: no add may land in between
            self._load_state_dict(state)

    def _load_state_dict(self, state: dict[str, Any]) -> None:
        version = state.get("version")
        if type(version) is not int or version not in _LOADABLE_REPLAY_VERSIONS:
            raise ValueError(
                f"state_dict version should be one of {_LOADABLE_REPLAY_VERSIONS}, "
                f"but got version={version!r}"
            )
        keys = {"version", "sampler", "drawn", "dropped_updates"}
        if version >= 2:
            keys |= {"memory_head", "memory_tail"}
        if version >= 3:
            keys |= {"eviction", "numbers"}
        check_keys(state, keys | ({"memory"} & state.keys()), "state_dict")
        eviction = state.get("eviction", "fifo")
        if eviction not in ("fifo", self.eviction):  # a fifo state loads under either eviction
            raise ValueError(
                f"state_dict eviction should be {self.eviction!r} (or 'fifo'), but got eviction={eviction!r}"
            )
        counts = {}
        for key in keys - {"version", "sampler", "drawn", "eviction", "numbers"}:
            value = state[key]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"state_dict {key} should be an integer >= 0, but got {key}={value!r}")
            counts[key] = int(value)
        memory: CheckedState | None = None
        if "memory" in state:
            memory = self.memory.check_state(state["memory"])
            head, tail = memory.head, memory.tail
            generation, live = memory.generation, memory.drawable
        else:
            head, tail = self.memory.num_added, self.memory.num_evicted
            generation = self.memory.generations(np.arange(self.capacity))
            live = self.memory.drawable(np.arange(self.capacity))
        for key, mine in (("memory_head", head), ("memory_tail", tail)):
            if key in counts and counts[key] != mine:
                raise ValueError(
                    f"state_dict {key} should be {mine} (the memory's), but got {key}={counts[key]}: "
                    "the state was saved with another memory, or at another point of this one"
                )
        drawn = as_state_array(state["drawn"], "state_dict drawn")
        if drawn.shape != self._drawn.shape or drawn.dtype != self._drawn.dtype:
            raise ValueError(
                f"state_dict drawn should be int64{list(self._drawn.shape)}, "
                f"but got {drawn.dtype}{list(drawn.shape)}"
            )
        slot_numbers = self._checked_numbers(state.get("numbers"), eviction, generation, live, head)
        # A slot's draw record is -1 or a transition it has held: a number of that slot, not newer
        # (under priority eviction transitions move between slots: any number already given out).
        slots = np.arange(self.capacity)
        if eviction == "priority":
            held = (drawn == -1) | ((drawn >= 0) & (drawn < head))
        else:
            held = (drawn == -1) | ((drawn >= 0) & (drawn <= generation) & (drawn % self.capacity == slots))
        if not held.all():
            j = int(np.argmin(held))
            raise ValueError(
                f"state_dict drawn should hold, per slot, -1 or a transition the slot has held (at most "
                f"generation {generation[j]}), but got drawn[{j}]={drawn[j]}"
            )
        sampler_state = state["sampler"]
        if not isinstance(sampler_state, dict):
            raise TypeError(f"state_dict sampler should be a dict, but got {type(sampler_state).__name__}")
        try:
            filled = ~np.isnan(np.asarray(sampler_state["priorities"], dtype=np.float64))
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                "state_dict sampler should be a PrioritizedSampler state_dict with priorities"
            ) from None
        if filled.shape != live.shape or not np.array_equal(filled, live):
            raise ValueError(
                "state_dict sampler priorities should be filled exactly in the memory's live slots "
                "(with complete n-step windows) "
                f"({int(live.sum())} of {live.shape[0]})"
            )
        self.sampler.load_state_dict(sampler_state)
        if memory is not None:
            self.memory.commit_state(memory)
        self._drawn[:] = drawn
        self.dropped_updates = counts["dropped_updates"]
        self._eviction.load(self.sampler.priorities, slot_numbers)

    def _checked_numbers(
        self, value: Any, eviction: str, generation: IntArray, live: npt.NDArray[np.bool_], head: int
    ) -> IntArray:
        """The transitions' numbers per slot a state gives (``eviction="priority"``), or those of
        a fifo state: each live slot's generation, ``-1`` elsewhere."""
        if eviction == "fifo":
            if value is not None:
                raise ValueError(
                    f"state_dict numbers should be None for eviction='fifo', but got {type(value).__name__}"
                )
            return np.where(live, generation, -1)
        numbers = as_state_array(value, "state_dict numbers")
        if numbers.dtype != np.int64 or numbers.shape != (self.capacity,):
            raise ValueError(
                f"state_dict numbers should be int64[{self.capacity}], "
                f"but got {numbers.dtype}{list(numbers.shape)}"
            )
        ok = np.where(live, (numbers >= 0) & (numbers < head), numbers == -1)
        if not ok.all():
            j = int(np.argmin(ok))
            raise ValueError(
                f"state_dict numbers should be in [0, {head}) in live slots and -1 elsewhere, "
                f"but got numbers[{j}]={numbers[j]}"
            )
        if np.unique(numbers[live]).shape[0] != int(live.sum()):
            raise ValueError("state_dict numbers should be distinct in the live slots")
        return numbers


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


def _host(value: Any, name: str) -> Any:
    """A torch tensor as numpy (a CUDA tensor copied to the host), a dict's tensors likewise;
    anything else unchanged.  Done before the lock is taken: the copy waits for the device."""
    if isinstance(value, Mapping):
        return {key: _host(item, f"{name}[{key!r}]") for key, item in value.items()}
    if isinstance(value, torch.Tensor):
        return to_numpy(value, name)
    return value
