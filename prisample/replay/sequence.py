"""Prioritized sequence replay for recurrent agents (R2D2): items of a stream's consecutive steps,
with burn-in, stored recurrent state and one priority per item.

:class:`SequenceReplay` is composed of the transition replay's parts, not a second memory: a
:class:`~prisample.replay.memory.ReplayMemory` (``n_step = 1``, FIFO: the ring, the stores, frames
stored once) holds the steps; :class:`~prisample.replay.sequence_items.SequenceItems` says which
steps form which item; a sampler from :func:`~prisample.slot_sampler.make_sampler` holds one
priority per item (over the memory's slots: an item is named by its first step's slot); a
:class:`~prisample.replay.write_back.HostWriteBackGuard` drops stale write-backs.
:class:`SequenceBatch` is what a draw returns.
"""

from __future__ import annotations

import dataclasses
import numbers
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import numpy as np
import numpy.typing as npt
import torch

from prisample._validation import (
    as_indices,
    as_priorities,
    check_finite_priorities,
    check_positive_int,
    short_repr,
    to_numpy,
)
from prisample.device_sampler import DevicePrioritizedSampler
from prisample.methods._checks import unit
from prisample.methods.sequence import sequence_priority
from prisample.replay._checks import check_keys
from prisample.replay.batch import BatchMapping, Obs
from prisample.replay.device import as_device
from prisample.replay.memory import ReplayMemory
from prisample.replay.prefetch import Prefetcher
from prisample.replay.replay_parts import _SAMPLER_DEFAULTS, _check_given_sampler, _sampler_place
from prisample.replay.sequence_device import SequenceDeviceSteps
from prisample.replay.sequence_items import (
    COMPLETE,
    SequenceItems,
    as_state_rows,
    state_spec,
)
from prisample.replay.stores import FrameStore
from prisample.replay.write_back import DeviceWriteBackGuard, HostWriteBackGuard, WriteBackGuard
from prisample.replay.writes import AddRequest, Inserted, VectorAdd, host
from prisample.sampler import Draw
from prisample.slot_sampler import SlotSampler, make_sampler
from prisample.weights import LinearSchedule, WeightNorm

__all__ = ["SEQUENCE_STATE_VERSION", "SequenceBatch", "SequenceReplay"]

IntArray = npt.NDArray[np.int64]

SEQUENCE_STATE_VERSION = 1
"""The version of :meth:`SequenceReplay.state_dict`'s format."""

SEQUENCE_FIELDS = ("obs", "action", "reward", "discount", "valid", "learn", "state", "generation", "length")


@dataclass(frozen=True, eq=False)
class SequenceBatch(BatchMapping):
    """``B`` sequence items of ``W = burn_in + length + bootstrap`` steps each: numpy arrays, or
    torch tensors on the replay's ``device``; also readable by key (``batch["obs"]``, an extra's
    name).

    Step ``j`` of item ``b`` is the transition ``(s_{t+j}, a_{t+j}, r_{t+j}, γ_{t+j},
    s_{t+j+1})`` of its stream.  Steps past the item's end (``j >= length[b]``, at an episode end)
    repeat the last valid step's data and are masked: ``valid[b, j] = j < length[b]``,
    ``learn[b, j] = valid[b, j] and burn_in <= j < burn_in + length``.
    """

    obs: Obs
    """``(B, W + 1, *obs_shape)`` (``(B, W + 1, frame_stack, *obs_shape)`` with frame stacks;
    dicts of such arrays for dict observations): index ``j`` is ``s_{t+j}`` for ``j < L`` (``L =
    length``), index ``L`` the last step's ``next_obs``.  Past ``L`` is padding, for the learner
    to mask (``valid``): without frame stacks the last ``next_obs`` repeats; with them, position
    ``L + d`` holds that stack moved on by ``d`` frames, its last frame repeated (what a view of
    the window's frames, each stored once, reads there).  With frame stacks it is a read-only
    view of one array holding each frame of the window once (stacks overlap): write to a copy."""
    action: Any
    """``(B, W, *action_shape)``."""
    reward: Any
    """``(B, W)`` float32: ``r_{t+j}``."""
    discount: Any
    """``(B, W)`` float32: ``γ_{t+j}`` (0 at termination)."""
    valid: Any
    """``(B, W)`` bool: the step exists in the item's episode."""
    learn: Any
    """``(B, W)`` bool: valid and past burn-in, within ``length``: the steps a loss uses."""
    state: Any
    """The recurrent state at each item's first step: ``(B, *shape)``, a dict of them, or
    ``None`` (the replay stores none)."""
    generation: Any
    """``(B,)`` int64: the item's number (its first step's): pass to ``update_priorities``."""
    length: Any
    """``(B,)`` int64: the item's valid steps."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Declared extras, ``(B, W, *shape)`` each."""
    weights: Any = None
    """``(B,)`` float32 importance weights of the draw (not a mapping key)."""

    mapped_fields: ClassVar[tuple[str, ...]] = SEQUENCE_FIELDS
    readable_fields: ClassVar[tuple[str, ...]] = ("weights",)


class SequenceReplay:
    """Prioritized replay of sequences (Kapturowski et al. 2019, R2D2): items of ``W = burn_in +
    length + bootstrap`` consecutive steps of one stream within one episode, on a period grid,
    each with the recurrent state at its start and one priority.

    **Items.** An item starts at the episode steps ``0, period, 2·period, …`` of its stream (the
    grid restarts at every episode start) and takes the next ``W`` steps; items overlap when
    ``period < W``.  Defaults are R2D2's (and Acme's r2d2 config): ``burn_in=40, length=80,
    period=40``.  An item never mixes two episodes: when an episode ends (``episode_end``:
    terminated or truncated) its open items complete with fewer steps, padded and masked
    (:class:`SequenceBatch`).  ``episode_tail`` chooses which of these shorter items are kept:

    * ``"pad"`` (default): every item with at least one ``learn`` step (``burn_in + 1`` valid
      steps);
    * ``"drop"``: only items of all ``W`` steps (Acme's adder: an episode's last short pieces
      are not added).

    An item with no learn step (fewer than ``burn_in + 1`` steps) is never added under either
    policy.  An item is drawable ("complete") once its ``W`` steps are written or its episode
    ended.  It is named by the memory slot of its first step (``draw.indices``) and numbered by
    that step's generation (``batch.generation``).

    **Priorities.** A new item enters at the maximum priority of the memory (Schaul et al. 2016,
    Algorithm 1, line 6), or, when the actor gave its own ``|δ|`` for every learn step of the
    item (``add(..., priority=)``, ``add_many(..., priorities=)``, ``add_vector_step(...,
    priorities=)``, as Ape-X and R2D2 actors compute them), at the R2D2 mix ``p = η·max_t|δ_t| +
    (1 − η)·mean_t|δ_t|`` over those steps (``eta``).  Draws follow ``P(i) = p_i^α / Σ_k p_k^α``
    (Eq. 1; ``backend="rank"``: the rank-based variant; ``"uniform"``) with importance weights
    ``w_i = (N · P(i))^-β`` normalised by ``weight_norm``: ``"memory"`` divides by the largest
    weight over the drawable items (Sec. 3.4), ``"batch"`` by the batch's largest (Acme's R2D2);
    ``N`` the drawable items; ``β`` a constant or a :class:`~prisample.weights.LinearSchedule`
    evaluated at the number of batches drawn.  Defaults ``alpha=0.9, beta=0.6`` are R2D2's.
    :meth:`update_from_td` writes back the R2D2 mix of the TD errors over each item's learn steps.

    **Stale write-backs.** An item leaves when its first step is evicted (FIFO: its later steps
    are newer, so they are live while the start is), and a new item may start at that slot.  An
    update names ``(item, generation)``: it lands only if the item drawn is still there, else it
    is dropped and counted in :attr:`dropped_updates` (pass ``generations=batch.generation``;
    without it, the generation recorded at the item's last draw is used).

    **Recurrent state.** ``state=None`` (no state), a ``(shape, dtype)`` pair, or a dict
    ``{name: (shape, dtype)}``.  The actor passes the state it had before acting at ``s_t`` with
    every step (``state=``); the replay keeps it only where an item starts, in a pool of
    ``state_capacity`` rows (default ``⌈capacity / period⌉ + num_streams · ⌈W / period⌉``, enough
    for full-length episodes).  When every row is held (many short episodes), the oldest item
    holding one is retired (it leaves the sampler) and counted in :attr:`retired_items`.

    **Memory.** Steps are stored in a :class:`~prisample.replay.memory.ReplayMemory` (its
    arguments: ``frame_stack``, ``obs_dtype``, ``action_shape``, ``action_dtype``,
    ``num_streams``, ``frame_capacity``, ``extras``), each frame once: overlapping items share
    their frames.  Eviction is FIFO only; ``capacity`` must be at least ``num_streams · W``.
    Streams may interleave in the ring in any order (vector envs, actor threads).

    **Device.** ``device=None`` returns numpy batches; with a torch ``device`` the batch is
    gathered on the host and sent there (tensors).  With ``priorities_on=device`` too (or
    ``backend="device_proportional"`` / ``"device_uniform"``) the priorities live in a
    :class:`~prisample.device_sampler.DevicePrioritizedSampler` there, the memory is mirrored
    there, and ``sample`` draws and gathers on the device with no host synchronisation (the
    item windows, lengths and states are sent to tables there as items complete:
    :mod:`prisample.replay.sequence_device`); ``draw`` is then a
    :class:`~prisample.device_sampler.DeviceDraw`, and updates of its indices (with
    ``generations=batch.generation``) are checked and written there (stale entries counted
    there), :meth:`update_from_td` mixing in tensor operations.  Adds may wait for the device.

    ``sampler=`` a ready, empty :class:`~prisample.slot_sampler.SlotSampler` of ``capacity``
    slots (host) replaces ``alpha``, ``beta``, ``eps``, ``backend``, ``weight_norm`` and ``seed``.

    Thread-safe: every public method holds :attr:`lock` (the sampler's reentrant lock) for its
    whole effect, so actor threads may add while a learner samples and updates.

    >>> import numpy as np
    >>> replay = SequenceReplay(64, (2,), burn_in=1, length=2, period=2, seed=0,
    ...                         state=((3,), np.float32))
    >>> for t in range(5):
    ...     _ = replay.add(np.full(2, t, np.float32), 0, 1.0, 0.9, np.full(2, t + 1, np.float32),
    ...                    episode_end=t == 4, state=np.full(3, t, np.float32))
    >>> len(replay), replay.num_steps          # items at steps 0, 2 (full) and 4 (too short)
    (2, 5)
    >>> batch, draw = replay.sample(4)
    >>> batch.obs.shape, batch.state.shape, batch.learn.shape
    ((4, 4, 2), (4, 3), (4, 3))
    >>> replay.update_from_td(draw.indices, np.ones((4, 3)), batch.learn, generations=batch.generation)
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...] | Mapping[str, tuple[int, ...]],
        *,
        burn_in: int = 40,
        length: int = 80,
        period: int = 40,
        bootstrap: int = 0,
        episode_tail: str = "pad",
        state: Any = None,
        state_capacity: int | None = None,
        eta: float = 0.9,
        frame_stack: int = 1,
        obs_dtype: npt.DTypeLike | Mapping[str, npt.DTypeLike] | None = None,
        action_shape: tuple[int, ...] = (),
        action_dtype: npt.DTypeLike = np.int64,
        num_streams: int = 1,
        frame_capacity: int | None = None,
        extras: Mapping[str, tuple[tuple[int, ...], npt.DTypeLike]] | None = None,
        device: Any = None,
        alpha: float = 0.9,
        beta: float | LinearSchedule = 0.6,
        eps: float = 1e-6,
        backend: str = "proportional",
        weight_norm: WeightNorm = "memory",
        seed: int | None = None,
        eviction: str = "fifo",
        priorities_on: Any = None,
        sampler: SlotSampler | None = None,
    ) -> None:
        if eviction != "fifo":
            raise ValueError(
                f"eviction should be 'fifo' (an item's steps are consecutive in its stream: the oldest "
                f"leave first), but got eviction={short_repr(eviction)}"
            )
        capacity = check_positive_int(capacity, "capacity")
        self.eta = unit(eta, "eta")
        """``η`` of the R2D2 priority mix ``η·max + (1−η)·mean``."""
        self.device = as_device(device)
        """``None``: numpy batches; a ``torch.device``: batches of tensors there."""
        spec, self._single_state = state_spec(state)
        self.items = SequenceItems(
            capacity,
            check_positive_int(num_streams, "num_streams"),
            burn_in=burn_in,
            length=length,
            period=period,
            bootstrap=bootstrap,
            episode_tail=episode_tail,
            state=spec,
            state_capacity=state_capacity,
        )
        """Which slots form which item (:class:`~prisample.replay.sequence_items.SequenceItems`)."""
        sampler_args: dict[str, Any] = {"alpha": alpha, "beta": beta, "eps": eps, "backend": backend}
        sampler_args |= {"weight_norm": weight_norm, "seed": seed, "priorities_on": priorities_on}
        if sampler is not None:
            defaults = {**_SAMPLER_DEFAULTS, "alpha": 0.9, "beta": 0.6}  # this constructor's (R2D2's)
            _check_given_sampler(sampler, capacity, self.device, "fifo", sampler_args, defaults)
            on_device = isinstance(sampler, DevicePrioritizedSampler)
        else:
            name, sampler_device = _sampler_place(backend, priorities_on, self.device, "fifo")
            on_device = sampler_device is not None
            sampler = make_sampler(
                capacity,
                backend=name,
                device=sampler_device,
                alpha=alpha,
                beta=beta,
                eps=eps,
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
            extras=extras,
            device=self.device if on_device else None,
        )
        """The steps (:class:`~prisample.replay.memory.ReplayMemory`, ``n_step = 1``; mirrored
        on the device with the priorities there)."""
        self.sampler: SlotSampler = sampler
        """One priority per drawable item, over the memory's slots."""
        self.guard: WriteBackGuard = HostWriteBackGuard(capacity)
        """The draw record and the count of stale write-backs dropped."""
        self.device_steps: SequenceDeviceSteps | None = None
        """With the priorities on the device: draws, gathers and updates there
        (:class:`~prisample.replay.sequence_device.SequenceDeviceSteps`); ``None`` on the host."""
        if isinstance(sampler, DevicePrioritizedSampler):
            guard = DeviceWriteBackGuard(capacity, sampler.device)
            self.guard = guard
            self.device_steps = SequenceDeviceSteps(
                self.memory, self.items, sampler, guard, eta=self.eta, single_state=self._single_state
            )

    # -- properties -------------------------------------------------------------------------------
    @property
    def lock(self) -> threading.RLock:
        """The reentrant lock every public method holds (the sampler's)."""
        return self.sampler.lock

    @property
    def capacity(self) -> int:
        return self.memory.capacity

    @property
    def burn_in(self) -> int:
        return self.items.burn_in

    @property
    def length(self) -> int:
        return self.items.length

    @property
    def period(self) -> int:
        return self.items.period

    @property
    def bootstrap(self) -> int:
        return self.items.bootstrap

    @property
    def window(self) -> int:
        """``W = burn_in + length + bootstrap``: steps per item."""
        return self.items.window

    @property
    def episode_tail(self) -> str:
        return self.items.episode_tail

    @property
    def state_capacity(self) -> int:
        """Rows of the recurrent-state pool (0 without a state)."""
        return self.items.state_capacity

    def __len__(self) -> int:
        """Drawable items."""
        with self.lock:
            return int(self.sampler.size)

    @property
    def num_steps(self) -> int:
        """Steps stored (live transitions of the memory)."""
        with self.lock:
            return len(self.memory)

    @property
    def retired_items(self) -> int:
        """Items retired because the state pool needed their row for a newer item."""
        with self.lock:
            return self.items.retired

    @property
    def dropped_updates(self) -> int:
        """Priority updates dropped as stale (their item left or was replaced since the draw)."""
        with self.lock:
            return self.guard.dropped

    @property
    def nbytes(self) -> int:
        """Bytes held by the memory, the item index and state pool, the sampler and the draw record."""
        with self.lock:
            device = 0 if self.device_steps is None else self.device_steps.nbytes
            return self.memory.nbytes + self.items.nbytes + self.sampler.nbytes + self.guard.nbytes + device

    # -- writes -----------------------------------------------------------------------------------
    def add(
        self,
        obs: Any,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: Any,
        episode_end: bool = False,
        stream: int = 0,
        state: Any = None,
        priority: Any = None,
        **extras: npt.ArrayLike,
    ) -> int:
        """Store one step of ``stream`` and return its slot (arguments as
        :meth:`ReplayMemory.add <prisample.replay.memory.ReplayMemory.add>`): ``discount`` is
        ``γ_t`` (0 at termination), ``episode_end=True`` ends the episode at ``next_obs``.
        ``state`` the actor's recurrent state before acting at ``obs`` (required when the replay
        declares one); ``priority`` the actor's ``|δ|`` of this step.  Bad input raises
        ``ValueError``/``TypeError`` naming the argument and stores nothing."""
        states = self._states(state, None)
        values = None if priority is None else self._priorities(priority, 1, "priority")
        request = AddRequest(
            True,
            host(obs, "obs"),
            host(action, "action"),
            reward,
            discount,
            host(next_obs, "next_obs"),
            episode_end,
            stream,
            None,
            {name: host(value, name) for name, value in extras.items()},
        )
        return int(self._write(request, states, values).slots[0])

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
        state: Any = None,
        priorities: npt.ArrayLike | None = None,
        **extras: npt.ArrayLike,
    ) -> IntArray:
        """:meth:`add` for ``n`` steps at once, in order (each argument with a leading axis ``n``;
        ``streams`` defaults to ``0 .. n-1``, ``episode_end`` to all ``False``; ``state`` ``(n,
        *shape)``; ``priorities`` ``n`` values).  Everything is checked before anything is
        stored.  Returns the slots."""
        n = _leading(reward)
        states = self._states(state, n)
        values = None if priorities is None else self._priorities(priorities, n, "priorities")
        request = AddRequest(
            False,
            host(obs, "obs"),
            host(action, "action"),
            host(reward, "reward"),
            host(discount, "discount"),
            host(next_obs, "next_obs"),
            episode_end,
            streams,
            None,
            {name: host(value, name) for name, value in extras.items()},
        )
        return self._write(request, states, values).slots

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
        state: Any = None,
        priorities: npt.ArrayLike | None = None,
        autoreset_mode: Any = None,
        **extras: npt.ArrayLike,
    ) -> IntArray:
        """One step of a gymnasium vector env, as :meth:`ReplayMemory.add_vector_step
        <prisample.replay.memory.ReplayMemory.add_vector_step>` stores it (both autoreset modes;
        env ``i`` on stream ``i``; the memory's converter); ``state`` and ``priorities`` carry a
        leading ``num_envs`` axis (the rows of envs that only reset are skipped with theirs).
        Returns the slots.  A rejected call changes nothing (the converter included)."""
        n = _leading(reward)
        states = self._states(state, n)
        values = None if priorities is None else self._priorities(priorities, n, "priorities")
        request = VectorAdd(
            host(obs, "obs"),
            action,
            host(reward, "reward"),
            terminated,
            truncated,
            host(next_obs, "next_obs"),
            infos,
            gamma,
            autoreset_mode,
            {name: host(value, name) for name, value in extras.items()},
        )
        with self.lock, self.memory.vector_step_rows(request) as (rows, picked):
            envs = rows.streams
            step = AddRequest(
                False,
                rows.obs,
                rows.action,
                rows.reward,
                rows.discount,
                rows.next_obs,
                rows.episode_end,
                envs,
                None,
                picked,
            )
            chosen = None if states is None else {name: a[envs] for name, a in states.items()}
            return self._write(step, chosen, None if values is None else values[envs]).slots

    def _states(self, state: Any, n: int | None) -> dict[str, npt.NDArray[Any]] | None:
        spec = self.items.state
        if spec is None:
            if state is not None:
                raise ValueError(
                    "state should be None: this replay keeps no recurrent state (declare one with "
                    f"SequenceReplay(..., state=(shape, dtype))), but got state={short_repr(state)}"
                )
            return None
        if state is None:
            raise ValueError(
                "state should be given with every step (the actor's recurrent state before acting), "
                "but got state=None"
            )
        return as_state_rows(state, spec, self._single_state, n)

    @staticmethod
    def _priorities(value: Any, n: int, name: str) -> npt.NDArray[np.float64]:
        values = as_priorities(value, n, name)
        check_finite_priorities(values, name)
        return values

    def _write(
        self,
        request: AddRequest,
        states: dict[str, npt.NDArray[Any]] | None,
        priorities: npt.NDArray[np.float64] | None,
    ) -> Inserted:
        """The one write: the memory stores the steps (checked there: a rejected request
        changes nothing), the items follow, then the sampler: items that left are removed, new
        ones enter (Algorithm 1, line 6)."""
        with self.lock:
            head, tail = self.memory.num_added, self.memory.num_evicted
            done = self.memory.write(request)
            n = done.slots.shape[0]
            if request.single:
                streams = np.array([int(request.streams)], dtype=np.int64)
                ends = np.array([bool(request.episode_end)])
            else:
                streams = (
                    np.arange(n, dtype=np.int64) if request.streams is None else as_indices(request.streams)
                )
                ends = (
                    np.zeros(n, dtype=np.bool_)
                    if request.episode_end is None
                    else np.asarray(to_numpy(request.episode_end, "episode_end"), dtype=np.bool_)
                )
            changes = self.items.advance(
                done.slots,
                streams,
                ends,
                done.evicted,
                done.evicted_until,
                head=head,
                tail=tail,
                states=states,
                priorities=priorities,
            )
            if self.device_steps is not None:
                self.device_steps.admit(changes)
                return done
            if changes.removed.shape[0]:
                self.sampler.remove(changes.removed)
            if changes.added.shape[0]:
                top = float(self.sampler.max_priority)
                self.sampler.write(changes.added, self.items.initial_priorities(changes.added, self.eta, top))
            return done

    # -- draws ------------------------------------------------------------------------------------
    def sample(self, k: int) -> tuple[SequenceBatch, Draw]:
        """Draw ``k`` items: ``(batch, draw)``, ``draw`` the items (``draw.indices``), their
        importance weights and probabilities (numpy; with a ``device`` the weights are a tensor
        there, like ``batch.weights``).  Atomic under threads: no add lands between the draw and
        the gather.  ``ValueError`` while no item is drawable."""
        k = check_positive_int(k, "k")
        if self.device_steps is not None:  # drawn and gathered on the device, no host wait
            fields, device_draw = self.device_steps.sample(k)
            return SequenceBatch(**fields), cast(Any, device_draw)
        with self.lock:
            if self.sampler.size == 0:
                raise ValueError(
                    f"no item can be drawn yet: an item is drawable once its W={self.window} steps are "
                    f"stored or its episode ended with at least {self.items.min_steps} of them "
                    f"({len(self.memory)} steps stored)"
                )
            draw = cast(Draw, self.sampler.sample(k))
            items = np.asarray(draw.indices, dtype=np.int64)
            batch = self.gather(items, np.asarray(draw.weights, dtype=np.float32))
            self.guard.record(items, self.items.item_gen[items])
        if self.device is not None:
            batch = self._to_device(batch)
            draw = dataclasses.replace(draw, weights=batch.weights)
        return batch, draw

    def gather(self, items: IntArray, weights: npt.NDArray[np.float32] | None = None) -> SequenceBatch:
        """The batch of drawable ``items`` (their first steps' slots), gathered on the host
        (numpy): the one gather, which a device gather can replace.  Call under :attr:`lock`."""
        win = self.items.windows(items)
        lengths, valid, learn = self.items.masks(items)
        ring = self.memory.ring
        state: Any = None
        if self.items.state is not None:
            rows = self.items.states(items)
            state = rows[""] if self._single_state else rows
        return SequenceBatch(
            obs=self._gather_obs(win, lengths, valid),
            action=ring.action[win],
            reward=ring.reward[win],
            discount=ring.discount[win],
            valid=valid,
            learn=learn,
            state=state,
            generation=ring.generation[items],
            length=lengths,
            extras={name: column[win] for name, column in ring.extra.items()},
            weights=weights,
        )

    def _gather_obs(self, win: IntArray, lengths: IntArray, valid: npt.NDArray[np.bool_]) -> Obs:
        """``(B, W + 1, ...)`` observations: the steps' ``obs``, then the last step's
        ``next_obs``, then padding (:class:`SequenceBatch`).  Frames: one gather of pool rows."""
        store = self.memory.store
        if isinstance(store, FrameStore):
            pool = store.pool
            assert pool is not None
            stack = self.memory.frame_stack
            if stack > 1:  # each frame gathered once, the stacks overlapping views of it
                rows = self.items.shifted_rows(store.obs_rows, store.next_rows, win, lengths)
                if rows is not None:
                    frames = pool.gather(rows)
                    step = frames.strides[1]
                    shape = (win.shape[0], win.shape[1] + 1, stack, *frames.shape[2:])
                    strides = (frames.strides[0], step, step, *frames.strides[2:])
                    return np.lib.stride_tricks.as_strided(frames, shape, strides, writeable=False)
            frames = pool.gather(self.items.frame_rows(store.obs_rows, store.next_rows, win, lengths))
            return frames[:, :, 0] if stack == 1 else frames
        b = np.arange(win.shape[0])
        last = win[b, lengths - 1]
        pad_b, pad_j = np.nonzero(~valid)
        out = {}
        for key in store.keys:  # type: ignore[attr-defined]
            step_obs = store.columns[f"obs.{key}"]  # type: ignore[attr-defined]
            final = store.columns[f"next_obs.{key}"][last]  # type: ignore[attr-defined]
            both = np.empty((win.shape[0], win.shape[1] + 1, *step_obs.shape[1:]), dtype=step_obs.dtype)
            both[:, :-1] = step_obs[win]
            both[:, -1] = final
            both[pad_b, pad_j] = final[pad_b]
            out[key] = both
        return out

    def _to_device(self, batch: SequenceBatch) -> SequenceBatch:
        """The host batch as tensors on the replay's device (one copy per array)."""
        device = self.device

        def send(value: Any) -> Any:
            if value is None:
                return None
            if isinstance(value, dict):
                return {key: send(item) for key, item in value.items()}
            return torch.from_numpy(np.ascontiguousarray(value)).to(device, non_blocking=True)

        return SequenceBatch(**{f.name: send(getattr(batch, f.name)) for f in dataclasses.fields(batch)})

    def prefetch(self, k: int, *, depth: int = 1, total: int | None = None) -> Prefetcher:
        """Draw and gather the next batches of ``k`` in a background thread (as
        :meth:`PrioritizedReplay.prefetch <prisample.replay.PrioritizedReplay.prefetch>`): an
        iterator of ``(batch, draw)``; pass ``generations=batch.generation`` to the updates."""
        return Prefetcher(cast(Any, self), k, depth=depth, total=total)

    # -- write-backs ------------------------------------------------------------------------------
    def update_priorities(
        self, indices: npt.ArrayLike, priorities: npt.ArrayLike, *, generations: npt.ArrayLike | None = None
    ) -> None:
        """Set raw priorities of drawn items (``indices``: ``draw.indices``); an entry whose item
        left or was replaced since its draw (checked against ``generations=batch.generation``,
        else the draw record) is dropped and counted in :attr:`dropped_updates`.  Numpy arrays,
        lists and torch tensors (any device) are taken.  An index out of range or where no item
        ever started, or a priority not finite and ``>= 0``, raises ``ValueError`` naming it and
        nothing changes.  With the priorities on the device, indices on the device (a draw's)
        are trusted and checked there, with no host synchronisation."""
        if self.device_steps is not None and self.device_steps.takes(indices):
            self.device_steps.update(cast(torch.Tensor, indices), priorities, generations)
            return
        idx = as_indices(indices, "indices")
        values = as_priorities(priorities, idx.shape[0])
        expected = None if generations is None else as_indices(generations, "generations")
        with self.lock:
            bad = (idx < 0) | (idx >= self.capacity)
            if bad.any():
                j = int(np.argmax(bad))
                raise ValueError(f"indices should lie in [0, {self.capacity}), but got indices[{j}]={idx[j]}")
            never = self.items.item_gen[idx] < 0
            if never.any():
                j = int(np.argmax(never))
                raise ValueError(
                    f"indices should be items (a drawn item's first slot), but got indices[{j}]={idx[j]} "
                    "(no item ever started there)"
                )
            check_finite_priorities(values)
            current = self.items.live_generations(idx)
            keep = self.guard.keep_host(idx, current, expected)
            if not keep.all():
                idx, values = idx[keep], values[keep]
            if idx.shape[0]:
                self.sampler.update_priorities(idx, values)

    def update_from_td(
        self,
        indices: npt.ArrayLike,
        td_errors: npt.ArrayLike,
        learn: npt.ArrayLike,
        *,
        eta: float | None = None,
        generations: npt.ArrayLike | None = None,
    ) -> None:
        """Write back the R2D2 priority of each drawn item, ``p = η·max_t|δ_t| + (1 − η)·mean_t|δ_t|``
        over its ``learn`` steps (Kapturowski et al. 2019; :func:`prisample.methods.sequence_priority`):
        ``td_errors`` and ``learn`` of shape ``(B, W)`` (``batch.learn``), ``eta`` the replay's
        unless given; then :meth:`update_priorities` (on the device, for a draw's indices there:
        the mix in tensor operations)."""
        if self.device_steps is not None and self.device_steps.takes(indices):
            mix = self.eta if eta is None else unit(eta, "eta")
            self.device_steps.update_from_td(cast(torch.Tensor, indices), td_errors, learn, mix, generations)
            return
        values = sequence_priority(td_errors, self.eta if eta is None else eta, mask=to_numpy(learn, "learn"))
        self.update_priorities(indices, values, generations=generations)

    # -- checkpoints ------------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        it = self.items
        return {
            "capacity": self.capacity,
            "num_streams": it.num_streams,
            "burn_in": it.burn_in,
            "length": it.length,
            "period": it.period,
            "bootstrap": it.bootstrap,
            "episode_tail": it.episode_tail,
            "state_capacity": it.state_capacity,
        }

    def state_dict(self, include_memory: bool = False, *, copy: bool = True) -> dict[str, Any]:
        """Everything needed to continue exactly: the configuration, the sampler's state (its
        random generator included), the draw record and dropped count, the item index with the
        state pool, the memory's counters, and with ``include_memory`` the memory's state
        (``copy`` as in :meth:`ReplayMemory.state_dict
        <prisample.replay.memory.ReplayMemory.state_dict>`).  One consistent snapshot under threads."""
        with self.lock:
            state: dict[str, Any] = {
                "version": SEQUENCE_STATE_VERSION,
                "config": self._config(),
                "sampler": self.sampler.state_dict(),
                "drawn": self.guard.record_state(),
                "dropped_updates": self.guard.dropped,
                "items": self.items.state_dict(),
                "memory_head": self.memory.num_added,
                "memory_tail": self.memory.num_evicted,
            }
            if include_memory:
                state["memory"] = self.memory.state_dict(copy=copy)
            return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output, all of it or nothing: the configuration must be
        this replay's; without ``"memory"`` the memory must be the one saved with (same adds and
        evictions).  Everything is checked first (the memory's state, the item index against
        the memory's steps, the draw record, the sampler filled exactly at the complete items,
        its own state); a rejected state raises ``ValueError``/``TypeError`` naming the key and
        changes nothing."""
        if not isinstance(state, dict):
            raise TypeError(f"state should be a dict from state_dict(), but got {type(state).__name__}")
        with self.lock:
            version = state.get("version")
            if type(version) is not int or version != SEQUENCE_STATE_VERSION:
                raise ValueError(
                    f"state_dict version should be {SEQUENCE_STATE_VERSION}, but got version={version!r}"
                )
            keys = {
                "version",
                "config",
                "sampler",
                "drawn",
                "dropped_updates",
                "items",
                "memory_head",
                "memory_tail",
            }
            check_keys(state, keys | ({"memory"} & state.keys()), "state_dict")
            config = state["config"]
            mine = self._config()
            if not isinstance(config, dict) or set(config) != set(mine):
                raise ValueError(f"state_dict config should have the keys {sorted(mine)}")
            for key, value in mine.items():
                if type(config[key]) is not type(value) or config[key] != value:
                    raise ValueError(
                        f"state_dict config {key} should be this replay's {value!r}, but got {config[key]!r}"
                    )
            counts = {}
            for key in ("dropped_updates", "memory_head", "memory_tail"):
                value = state[key]
                if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                    raise ValueError(f"state_dict {key} should be an integer >= 0, but got {key}={value!r}")
                counts[key] = int(value)
            memory = None
            if "memory" in state:
                memory = self.memory.check_state(state["memory"])
                head, tail, generation = memory.head, memory.tail, memory.generation
            else:
                head, tail = self.memory.num_added, self.memory.num_evicted
                generation = self.memory.generations(np.arange(self.capacity))
            for key, have in (("memory_head", head), ("memory_tail", tail)):
                if counts[key] != have:
                    raise ValueError(
                        f"state_dict {key} should be {have} (the memory's), but got {key}={counts[key]}: "
                        "the state was saved with another memory, or at another point of this one"
                    )
            items = self.items.check_state(state["items"], generation, head, tail)
            drawn = self.guard.check_record(state["drawn"], "state_dict drawn")
            slots = np.arange(self.capacity)
            held = (drawn == -1) | ((drawn >= 0) & (drawn < head) & (drawn % self.capacity == slots))
            if not held.all():
                j = int(np.argmin(held))
                raise ValueError(
                    f"state_dict drawn should hold, per slot, -1 or an item number of that slot, "
                    f"but got drawn[{j}]={drawn[j]}"
                )
            sampler_state = state["sampler"]
            if not isinstance(sampler_state, dict):
                raise TypeError(
                    f"state_dict sampler should be a dict, but got {type(sampler_state).__name__}"
                )
            try:
                filled = ~np.isnan(np.asarray(sampler_state["priorities"], dtype=np.float64))
            except (KeyError, TypeError, ValueError):
                raise ValueError(
                    "state_dict sampler should be a sampler state_dict with priorities"
                ) from None
            complete = items["slot"]["status"] == COMPLETE
            if filled.shape != complete.shape or not np.array_equal(filled, complete):
                raise ValueError(
                    "state_dict sampler priorities should be filled exactly at the complete items "
                    f"({int(complete.sum())} of {self.capacity} slots)"
                )
            self.sampler.check_state_dict(sampler_state)
            self.sampler.load_state_dict(sampler_state)
            if memory is not None:
                self.memory.commit_state(memory)
            self.items.commit_state(items)
            self.guard.load(drawn, counts["dropped_updates"])
            if self.device_steps is not None:
                self.device_steps.rebuild()

    def check_valid(self) -> None:
        """Raise ``ValueError`` naming the first broken invariant: the memory's, the item
        index's (as a loaded state is checked) and the sampler filled exactly at the complete
        items."""
        with self.lock:
            self.memory.check_valid()
            generation = self.memory.generations(np.arange(self.capacity))
            self.items.check_state(
                self.items.state_dict(), generation, self.memory.num_added, self.memory.num_evicted
            )
            filled = ~np.isnan(self.sampler.priorities)
            if not np.array_equal(filled, self.items.status == COMPLETE):
                raise ValueError("sampler should be filled exactly at the complete items")
            if self.device_steps is not None:
                self.device_steps.check()


def _leading(value: Any) -> int:
    """Length of the leading axis of a batch argument (0 when it has none: the write rejects it)."""
    try:
        shape = tuple(value.shape) if isinstance(value, (np.ndarray, torch.Tensor)) else np.shape(value)
    except ValueError:
        return 0
    return int(shape[0]) if len(shape) else 0
