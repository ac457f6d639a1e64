"""Transition ring of a replay memory: per-transition columns, generations, streams.

:class:`ReplayMemory` keeps the last ``capacity`` transitions ``(s_t, a_t, r_t, γ_t, s_{t+1})`` in
preallocated numpy arrays, one slot per transition, written in arrival order and evicted oldest
first.  Observations go to a :class:`~prisample.replay.frames.FramePool` (each distinct frame once;
the ring keeps each transition's pool rows) through its public methods.  Every write reports what
it evicted (:meth:`ReplayMemory.insert`), which is what :class:`~prisample.replay.PrioritizedReplay`
builds on.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from prisample._validation import as_indices, check_positive_int, to_numpy
from prisample.replay._checks import (
    as_dtype,
    as_real,
    as_shape,
    as_state_array,
    cast,
    check_keys,
    same_config_value,
    warn_if_too_large,
)
from prisample.replay.batch import ReplayBatch
from prisample.replay.device import Columns, DeviceReader, TorchFrames, as_device
from prisample.replay.frames import POOL_ARRAYS, FramePool, reserve_rows

STATE_VERSION = 1  # ReplayMemory's state
# Extra frame-pool rows per transition slot beyond one frame each: room for episode starts
# (documented bound in ReplayMemory's docstring).
_FRAME_SLACK_DIVISOR = 64
_SMALL_FRAME_BYTES = 1024

IntArray = npt.NDArray[np.int64]


class Inserted(NamedTuple):
    """What one :meth:`ReplayMemory.insert` or :meth:`ReplayMemory.insert_many` call did."""

    slots: IntArray
    """The slots written, in order (one per transition)."""
    evicted: IntArray
    """The slots whose transitions left, in eviction order (a slot written by this call too when
    the call wrapped around the ring)."""
    evicted_until: IntArray
    """Per transition ``i``: how many of ``evicted`` left up to and including its write."""
    completed: IntArray
    """The slots that became drawable in this call and still are, in order: a sampler over the
    memory adds exactly these."""


@dataclass(frozen=True)
class CheckedState:
    """A memory state that :meth:`ReplayMemory.check_state` accepted, ready to commit."""

    arrays: dict[str, npt.NDArray[Any]]
    counters: dict[str, int]

    @property
    def head(self) -> int:
        """Transitions added (:attr:`ReplayMemory.num_added`)."""
        return self.counters["head"]

    @property
    def tail(self) -> int:
        """Transitions evicted (:attr:`ReplayMemory.num_evicted`)."""
        return self.counters["tail"]

    @property
    def generation(self) -> IntArray:
        """Per slot, the number of the transition it holds (-1: never written)."""
        return self.arrays["generation"]

    @property
    def drawable(self) -> npt.NDArray[np.bool_]:
        """Per slot, whether a sampler over the memory holds it (live)."""
        live: npt.NDArray[np.bool_] = self.generation >= self.tail
        return live


class ReplayMemory:
    """The last ``capacity`` transitions ``(s_t, a_t, r_t, γ_t, s_{t+1})`` with frames stored once.

    ``obs`` and ``next_obs`` passed to :meth:`add` have shape ``(frame_stack, *obs_shape)`` when
    ``frame_stack > 1``, else ``obs_shape``.  Each stack is stored as pool rows: a frame already in
    the stream's previous transition is shared when its bytes are equal (``s_t`` equal to the
    previous ``s_{t+1}``, stacks shifted by one frame, repeated frames inside a stack); any other
    frame is stored anew.  Reads therefore return exactly the arrays that were added.

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
    own stack continuity, transitions go into one ring in arrival order.

    >>> import numpy as np
    >>> mem = ReplayMemory(8, (2,), obs_dtype=np.float32, frame_stack=2)
    >>> s0 = np.array([[0, 0], [1, 1]], np.float32)
    >>> s1 = np.array([[1, 1], [2, 2]], np.float32)
    >>> mem.add(s0, 1, 0.5, 1.0, s1)
    0
    >>> mem.get([0])["next_obs"].tolist()
    [[[1.0, 1.0], [2.0, 2.0]]]
    >>> len(mem), mem.num_frames                       # three distinct frames
    (1, 3)
    """

    # Per-transition columns: views of ``_columns.host`` (see :meth:`_column_spec`).
    _action: npt.NDArray[Any]
    _reward: npt.NDArray[np.float32]
    _discount: npt.NDArray[np.float32]
    _generation: IntArray

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        *,
        obs_dtype: npt.DTypeLike = np.uint8,
        frame_stack: int = 1,
        action_shape: tuple[int, ...] = (),
        action_dtype: npt.DTypeLike = np.int64,
        num_streams: int = 1,
        frame_capacity: int | None = None,
        device: Any = None,
    ) -> None:
        self.capacity = check_positive_int(capacity, "capacity")
        self.device = as_device(device)
        """``None``: numpy batches; a ``torch.device``: batches of tensors there (see
        :mod:`prisample.replay.device` for what lives where)."""
        self.obs_shape = as_shape(obs_shape, "obs_shape")
        self.obs_dtype = as_dtype(obs_dtype, "obs_dtype")
        self.frame_stack = check_positive_int(frame_stack, "frame_stack")
        self.action_shape = as_shape(action_shape, "action_shape")
        self.action_dtype = as_dtype(action_dtype, "action_dtype")
        self.num_streams = check_positive_int(num_streams, "num_streams")
        stack = self.frame_stack
        reserve = reserve_rows(stack, self.num_streams)
        frame_nbytes = self.obs_dtype.itemsize * math.prod(self.obs_shape)
        if frame_capacity is None:
            small = frame_nbytes <= _SMALL_FRAME_BYTES
            extra = self.capacity if small else -(-self.capacity // _FRAME_SLACK_DIVISOR)
            frame_capacity = self.capacity + extra + reserve
        self.frame_capacity = check_positive_int(frame_capacity, "frame_capacity", minimum=reserve)
        if self.frame_capacity >= 2**31:
            raise ValueError(f"frame_capacity should be below 2**31, but got frame_capacity={frame_capacity}")
        self._stack_shape = (stack, *self.obs_shape) if stack > 1 else self.obs_shape
        f, c = self.frame_capacity, self.capacity
        action_nbytes = self.action_dtype.itemsize * math.prod(self.action_shape)
        warn_if_too_large(f * frame_nbytes + c * (8 * stack + 16 + action_nbytes))
        self.frame_pool = FramePool(f, self.obs_shape, self.obs_dtype, stack, self.num_streams, self.device)
        """The frames of the stored stacks (each distinct frame once)."""
        self._float_obs = self.obs_dtype.kind in "fc"  # checked finite on every add
        self._obs_rows = np.zeros((c, stack), dtype=np.int32)
        self._next_rows = np.zeros((c, stack), dtype=np.int32)
        self._columns = Columns(c, self._column_spec(), self.device)  # mirrored on a device
        self._bind_columns()
        self._generation[...] = -1  # number of the transition in the slot
        self._reader = None if self.device is None else DeviceReader(self._pool_storage(), self._columns)
        self._stream_ended = np.ones(self.num_streams, dtype=np.bool_)
        self._evicted = np.zeros(c + 1, dtype=np.int64)
        self._tail = 0  # transitions numbered [tail, head) are live
        self._head = 0

    def _column_spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
        """The per-transition columns (host arrays ``_<name>``; gathered on the device too)."""
        return {
            "action": (self.action_shape, self.action_dtype),
            "reward": ((), np.dtype(np.float32)),
            "discount": ((), np.dtype(np.float32)),
            "generation": ((), np.dtype(np.int64)),
        }

    def _bind_columns(self) -> None:
        for name, array in self._columns.host.items():
            setattr(self, f"_{name}", array)

    def _pool_storage(self) -> TorchFrames:
        storage = self.frame_pool.storage
        assert isinstance(storage, TorchFrames)
        return storage

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in self._columns.host:  # views of the columns' arrays: rebound on load
            del state[f"_{name}"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind_columns()
        if self._reader is not None:
            self._reader = DeviceReader(self._pool_storage(), self._columns)

    # -- properties -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._head - self._tail

    @property
    def num_added(self) -> int:
        """Transitions added since construction (the next one gets this generation number)."""
        return self._head

    @property
    def num_evicted(self) -> int:
        """Transitions evicted since construction: those numbered ``[num_evicted, num_added)`` live."""
        return self._tail

    @property
    def num_frames(self) -> int:
        """Frames held in the pool (by live transitions and the streams' last stacks)."""
        return self.frame_pool.num_used

    @property
    def nbytes(self) -> int:
        """Bytes held in the memory's arrays (frame pool, rows, actions, rewards, bookkeeping)."""
        arrays = (self._obs_rows, self._next_rows, self._stream_ended, self._evicted)
        return self.frame_pool.nbytes + self._columns.nbytes + sum(a.nbytes for a in arrays)

    # -- writes ---------------------------------------------------------------------------------
    def add(
        self,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        *,
        episode_end: bool = False,
        stream: int = 0,
    ) -> int:
        """Store one transition and return its slot; the oldest transition makes room.

        ``discount`` is the per-step continuation (0 at termination, 1 or ``γ`` otherwise): the
        caller forms ``γ_t`` of Algorithm 1 from it.  ``episode_end=True`` marks that the episode
        ended at ``next_obs`` (terminated or truncated): the next add on ``stream`` starts a new
        episode.  Without it, an ``obs`` that does not continue the stream's last transition is
        stored in full with a ``RuntimeWarning`` (usually a missing ``stream=`` for interleaved
        environments, which costs ``frame_stack`` frames per transition).

        Raises ``ValueError``/``TypeError`` naming the argument, and stores nothing, for a wrong
        shape, a dtype that does not cast safely, an integer outside its dtype's range, a float or
        complex ``obs``/``next_obs``/``action`` that is not finite once cast to its dtype, a
        ``reward`` that is not finite as float32, a ``discount`` outside ``[0, 1]``.
        """
        return int(self.insert(obs, action, reward, discount, next_obs, episode_end=episode_end,
                               stream=stream).slots[0])  # fmt: skip

    def insert(
        self,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        *,
        episode_end: bool = False,
        stream: int = 0,
    ) -> Inserted:
        """:meth:`add`, returning what changed: the slot, the evicted slots, the completed ones."""
        obs_w = self._stack_words(obs, "obs")
        next_w = self._stack_words(next_obs, "next_obs")
        action_a = cast(
            np.asarray(action) if type(action) is int else to_numpy(action, "action"),
            self.action_dtype,
            "action",
        )
        if action_a.shape != self.action_shape:
            raise ValueError(f"action should have shape {self.action_shape}, but got shape {action_a.shape}")
        reward_f = as_real(reward, "reward")
        discount_f = as_real(discount, "discount", unit=True)
        if type(episode_end) is not bool and not isinstance(episode_end, np.bool_):
            raise TypeError(f"episode_end should be a bool, but got episode_end={episode_end!r}")
        if type(stream) is not int and (isinstance(stream, bool) or not isinstance(stream, numbers.Integral)):
            raise TypeError(f"stream should be an integer, but got stream={stream!r}")
        if not 0 <= stream < self.num_streams:
            raise ValueError(f"stream should lie in [0, {self.num_streams}), but got stream={stream}")
        slot, evicted = self._commit(obs_w, next_w, action_a, reward_f, discount_f, bool(episode_end),
                                     int(stream))  # fmt: skip
        self.frame_pool.flush()
        slots = np.array([slot], dtype=np.int64)
        return Inserted(slots, evicted, np.array([evicted.shape[0]], dtype=np.int64), slots)

    def _commit(
        self,
        obs_w: npt.NDArray[Any],
        next_w: npt.NDArray[Any],
        action: npt.NDArray[Any],
        reward: float,
        discount: float,
        episode_end: bool,
        stream: int,
    ) -> tuple[int, IntArray]:
        expected = not self._stream_ended[stream] and self.frame_pool.stream_live(stream)
        slot, self._tail, n, continued = self.frame_pool.store(
            obs_w, next_w, stream, self._obs_rows, self._next_rows, self._tail, self._head, self._evicted
        )
        self._generation[slot] = self._head
        self._action[slot] = action
        self._reward[slot] = reward
        self._discount[slot] = discount
        self._stream_ended[stream] = episode_end
        self._head += 1
        if expected and not continued and self.frame_stack > 1:
            warnings.warn(
                f"obs does not continue the last transition of stream {stream} and was stored in full: "
                "pass episode_end=True at the end of an episode, and one stream= per environment "
                "when several share the memory",
                RuntimeWarning,
                stacklevel=4,
            )
        return slot, self._evicted[:n].copy()

    def add_many(
        self,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        *,
        episode_end: npt.ArrayLike | None = None,
        streams: npt.ArrayLike | None = None,
    ) -> IntArray:
        """:meth:`add` for ``n`` transitions at once (a vectorised environment's step), in order.

        Arguments carry a leading axis of length ``n``; ``streams`` defaults to ``0 .. n-1`` (one
        stream per environment) and ``episode_end`` to all ``False``.  Everything is checked
        before anything is stored.  Returns the slots.
        """
        return self.insert_many(
            obs, action, reward, discount, next_obs, episode_end=episode_end, streams=streams
        ).slots

    def insert_many(
        self,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        *,
        episode_end: npt.ArrayLike | None = None,
        streams: npt.ArrayLike | None = None,
    ) -> Inserted:
        """:meth:`add_many`, returning what changed (see :class:`Inserted`)."""
        obs_a = self._batch(obs, "obs", self._stack_shape, self.obs_dtype)
        n = obs_a.shape[0]
        next_a = self._batch(next_obs, "next_obs", self._stack_shape, self.obs_dtype, n)
        action_a = self._batch(action, "action", self.action_shape, self.action_dtype, n)
        rewards = self._batch(reward, "reward", (), np.dtype(np.float32), n, real=True)
        discounts = self._batch(discount, "discount", (), np.dtype(np.float32), n, real=True)
        outside = ~((discounts >= 0.0) & (discounts <= 1.0))
        if outside.any():
            j = int(np.argmax(outside))
            given = to_numpy(discount, "discount")[j].item()
            raise ValueError(f"discount should lie in [0, 1], but got discount[{j}]={given!r}")
        if episode_end is None:
            ends = np.zeros(n, dtype=np.bool_)
        else:
            ends = to_numpy(episode_end, "episode_end")
            if ends.dtype != np.bool_ or ends.shape != (n,):
                raise TypeError(f"episode_end should be {n} bools, but got {ends.dtype}{list(ends.shape)}")
        ids = np.arange(n, dtype=np.int64) if streams is None else as_indices(streams, "streams")
        if ids.shape != (n,):
            raise ValueError(f"streams should have one value per transition ({n}), but got {ids.shape[0]}")
        bad = (ids < 0) | (ids >= self.num_streams)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"streams should lie in [0, {self.num_streams}), but got streams[{j}]={ids[j]}")
        obs_w = self.frame_pool.as_words(obs_a)
        next_w = self.frame_pool.as_words(next_a)
        slots = np.empty(n, dtype=np.int64)
        until = np.empty(n, dtype=np.int64)
        evicted: list[IntArray] = []
        total = 0
        for i in range(n):
            slots[i], out = self._commit(obs_w[i], next_w[i], action_a[i], float(rewards[i]),
                                         float(discounts[i]), bool(ends[i]), int(ids[i]))  # fmt: skip
            if out.shape[0]:
                evicted.append(out)
                total += out.shape[0]
            until[i] = total
        self.frame_pool.flush()  # a vector step's new frames in one write
        gone = np.concatenate(evicted) if evicted else np.empty(0, dtype=np.int64)
        # a slot written here and evicted later in the call is not drawable
        live = slots if total == 0 else slots[self._generation[slots] >= self._tail]
        return Inserted(slots, gone, until, live)

    def _batch(
        self,
        value: npt.ArrayLike,
        name: str,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        n: int | None = None,
        *,
        real: bool = False,
    ) -> npt.NDArray[Any]:
        """``value`` checked as ``n`` items of ``shape`` and cast to ``dtype`` (C-contiguous)."""
        array = to_numpy(value, name)
        wrong = array.ndim != len(shape) + 1 or array.shape[1:] != shape
        if wrong or (n is not None and array.shape[0] != n):
            want = ("n" if n is None else str(n), *map(str, shape))
            raise ValueError(f"{name} should have shape ({', '.join(want)}), but got shape {array.shape}")
        if real and array.dtype.kind not in "fiu":
            raise TypeError(f"{name} should hold real numbers, but got dtype {array.dtype}")
        return np.ascontiguousarray(cast(array, dtype, name))

    def _stack_words(self, value: npt.ArrayLike, name: str) -> npt.NDArray[Any]:
        """``value`` checked and viewed as ``(frame_stack, words per frame)`` machine words."""
        array = value if isinstance(value, np.ndarray) else to_numpy(value, name)
        if array.shape != self._stack_shape:
            raise ValueError(f"{name} should have shape {self._stack_shape}, but got shape {array.shape}")
        if array.dtype != self.obs_dtype or self._float_obs:
            array = cast(array, self.obs_dtype, name)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        return self.frame_pool.as_words(array)

    # -- reads ----------------------------------------------------------------------------------
    def valid(self, slots: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each slot holds a live transition (added and not yet evicted)."""
        idx = self._slots(slots)
        return np.asarray(self._generation[idx] >= self._tail)

    def generations(self, slots: npt.ArrayLike) -> IntArray:
        """Number of the transition each slot holds (``-1`` never written): changes on rewrite."""
        return self._generation[self._slots(slots)].copy()

    def live_generations(self, slots: npt.ArrayLike, name: str = "slots") -> IntArray:
        """Number of the live transition each slot holds, ``-1`` where it holds none (never
        written or evicted); errors name the argument ``name``."""
        idx = self._slots(slots, name)
        generation = self._generation[idx]
        return np.where(generation >= self._tail, generation, -1)

    def get(self, slots: npt.ArrayLike, *, weights: npt.ArrayLike | None = None) -> ReplayBatch:
        """Transitions in ``slots`` as a :class:`ReplayBatch`: ``obs``, ``action``, ``reward``
        (float32), ``discount`` (float32), ``next_obs`` and ``generation`` (the transition's number,
        int64), also readable as ``batch["obs"]``.

        ``obs``/``next_obs`` have shape ``(k, frame_stack, *obs_shape)``, or ``(k, *obs_shape)``
        when ``frame_stack = 1``; they may be views of one array holding each frame once, so
        write to copies.  Every slot must hold a live transition.

        With a torch ``device`` every field is a tensor there (same dtypes; may be strided views of
        one gathered tensor).  ``weights`` (importance weights, one per slot) are carried along as
        ``batch.weights`` (float32, moved to the device in the same copy as the slots).
        """
        idx = self._slots(slots)
        dead = self._generation[idx] < self._tail
        if dead.any():
            j = int(np.argmax(dead))
            raise ValueError(f"slots should hold live transitions, but got slots[{j}]={idx[j]} (empty)")
        w = None
        if weights is not None:
            w = cast(to_numpy(weights, "weights"), np.dtype(np.float32), "weights")
            if w.shape != idx.shape:
                raise ValueError(
                    f"weights should have one value per slot ({idx.shape[0]}), but got shape {w.shape}"
                )
        return self._gather(idx, w)

    def _gather(self, idx: IntArray, weights: npt.NDArray[np.float32] | None = None) -> ReplayBatch:
        obs_rows, next_rows = self._obs_rows[idx], self._next_rows[idx]
        stack, pool = self.frame_stack, self.frame_pool
        # next_obs sharing all but its newest frame with obs: gather each frame once and return
        # two overlapping views of the (k, frame_stack + 1, ...) result
        shared = stack > 1 and np.array_equal(obs_rows[:, 1:], next_rows[:, :-1])
        rows = (
            np.concatenate((obs_rows, next_rows[:, -1:]), axis=1) if shared
            else np.stack((obs_rows, next_rows), axis=1)  # (k, 2, stack)
        )  # fmt: skip
        if self._reader is None:
            both = pool.gather(rows)
            columns = {name: array[idx] for name, array in self._columns.host.items()}
        else:
            pool.flush()
            both, columns, weights = self._reader.read(rows, idx, weights, self._head)  # type: ignore[assignment]
        if shared:
            obs, next_obs = both[:, :stack], both[:, 1:]
        else:
            obs, next_obs = both[:, 0], both[:, 1]
            if stack == 1:
                obs, next_obs = obs[:, 0], next_obs[:, 0]
        return ReplayBatch(
            obs, columns["action"], columns["reward"], columns["discount"], next_obs, columns["generation"],
            weights=weights,
        )  # fmt: skip

    def _slots(self, slots: npt.ArrayLike, name: str = "slots") -> IntArray:
        """``slots`` checked in range; errors name the argument as the caller's caller calls it."""
        idx = as_indices(slots, name)
        bad = (idx < 0) | (idx >= self.capacity)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"{name} should lie in [0, {self.capacity}), but got {name}[{j}]={idx[j]}")
        return idx

    # -- checkpointing --------------------------------------------------------------------------
    # The ring's state arrays, each the attribute ``_<name>``, then the frame pool's: their dtypes
    # and shapes are the spec a loaded array must match exactly.  New per-slot arrays join this.
    _RING_ARRAYS = ("obs_rows", "next_rows", "action", "reward", "discount", "generation", "stream_ended")
    _ARRAYS = (*_RING_ARRAYS, *POOL_ARRAYS)
    _COUNTERS = ("nfree", "tail", "head")

    def _state_arrays(self) -> dict[str, npt.NDArray[Any]]:
        arrays = {name: getattr(self, f"_{name}") for name in self._RING_ARRAYS}
        arrays.update(self.frame_pool.state_arrays())
        return arrays

    def _counters(self) -> dict[str, int]:
        return {"nfree": self.frame_pool.num_free, "tail": self._tail, "head": self._head}

    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """Everything needed to continue exactly (numpy arrays and plain values).

        ``copy=False`` returns the live arrays themselves (no second copy of a large frame pool);
        serialise them before the next :meth:`add`.
        """
        arrays = {name: a.copy() if copy else a for name, a in self._state_arrays().items()}
        return {"version": STATE_VERSION, "config": self._config(), **arrays, **self._counters()}

    def _config(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "obs_shape": self.obs_shape,
            "obs_dtype": self.obs_dtype.str,
            "frame_stack": self.frame_stack,
            "action_shape": self.action_shape,
            "action_dtype": self.action_dtype.str,
            "num_streams": self.num_streams,
            "frame_capacity": self.frame_capacity,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output into a memory built with the same arguments.

        The state is checked completely first (:meth:`check_valid`'s invariants, the config, every
        array's dtype and shape): a malformed or inconsistent state raises ``ValueError`` or
        ``TypeError`` naming the key, and the memory is left exactly as it was.
        """
        self.commit_state(self.check_state(state))

    def commit_state(self, checked: CheckedState) -> None:
        """Assign a state that :meth:`check_state` accepted (cannot fail: dtypes and shapes match)."""
        arrays, counters = checked.arrays, checked.counters
        for name in self._RING_ARRAYS:
            getattr(self, f"_{name}")[...] = arrays[name]
        self._columns.invalidate()
        self.frame_pool.commit_state(arrays, counters["nfree"])
        self._tail, self._head = counters["tail"], counters["head"]

    def check_state(self, state: Any) -> CheckedState:
        """The state's arrays and counters, after checking everything :meth:`load_state_dict`
        will assign; raises ``ValueError``/``TypeError`` naming the key, changes nothing."""
        if not isinstance(state, dict):
            raise TypeError(f"state should be a dict from state_dict(), but got {type(state).__name__}")
        version = state.get("version")
        if type(version) is not int or version != STATE_VERSION:
            raise ValueError(f"state_dict version should be {STATE_VERSION}, but got version={version!r}")
        check_keys(state, {"version", "config", *self._ARRAYS, *self._COUNTERS}, "state_dict")
        config = state["config"]
        if not isinstance(config, dict):
            raise TypeError(f"state_dict config should be a dict, but got {type(config).__name__}")
        mine = self._config()
        check_keys(config, set(mine), "state_dict config")
        for key, value in mine.items():
            if not same_config_value(config[key], value):
                raise ValueError(f"state_dict config {key} should be {value!r}, but got {config[key]!r}")
        arrays = {}
        spec = {name: (getattr(self, f"_{name}").dtype, getattr(self, f"_{name}").shape)
                for name in self._RING_ARRAYS}  # fmt: skip
        spec.update(self.frame_pool.state_spec())  # no copy of frames on a device
        for name, (dtype, shape) in spec.items():
            arrays[name] = array = as_state_array(state[name], f"state_dict {name}")
            if array.dtype != dtype or array.shape != shape:
                raise ValueError(
                    f"state_dict {name} should be {dtype}{list(shape)}, "
                    f"but got {array.dtype}{list(array.shape)}"
                )
        counters = {}
        for name in self._COUNTERS:
            value = state[name]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"state_dict {name} should be an integer, but got {name}={value!r}")
            counters[name] = int(value)
        self._check_invariants(arrays, counters, "state_dict ")
        return CheckedState(arrays, counters)

    def check_valid(self) -> None:
        """Raise ``ValueError`` naming the first broken invariant of the memory's bookkeeping.

        The invariants :meth:`load_state_dict` demands of a state: each slot holds the transition
        last written there (its generation follows from the number of adds) and the live ones are
        the most recent ``len(memory)``; every frame row that a live transition or a stream's last
        stack names is in the pool; each row's reference count equals its number of such uses;
        the free list holds exactly the unused rows, once each; live rewards are finite, live
        discounts in ``[0, 1]``, live float actions and used float frames finite.
        """
        self._check_invariants(self._state_arrays(), self._counters(), "")
        self.frame_pool.check_cache()

    def _check_invariants(
        self, a: dict[str, npt.NDArray[Any]], counters: dict[str, int], prefix: str
    ) -> None:
        c, f = self.capacity, self.frame_capacity
        tail, head = counters["tail"], counters["head"]

        def fail(key: str, message: str) -> None:
            raise ValueError(f"{prefix}{key} {message}")

        if not 0 <= head < 2**62:
            fail("head", f"should lie in [0, 2**62), but got head={head}")
        if not max(0, head - c) <= tail <= head:
            fail("tail", f"should lie in [max(0, head - capacity), head] = [{max(0, head - c)}, {head}], "
                         f"but got tail={tail}")  # fmt: skip
        slots = np.arange(c, dtype=np.int64)
        # Slot s last held the largest transition number below head that is s modulo capacity.
        last = np.where(slots < head, slots + c * ((head - 1 - slots) // c), -1)
        generation = a["generation"]
        if not np.array_equal(generation, last):
            j = int(np.argmax(generation != last))
            fail("generation", f"should be {last[j]} in slot {j} after head={head} adds (the transition "
                               f"written there last), but got generation[{j}]={generation[j]}")  # fmt: skip
        live = last >= tail
        for key in ("obs_rows", "next_rows"):
            rows = a[key]
            bad = (rows < 0) | (rows >= f)
            if bad.any():
                where = np.unravel_index(int(np.argmax(bad)), rows.shape)
                index = "".join(f"[{i}]" for i in where)
                fail(key, f"should hold frame rows in [0, {f}), but got {key}{index}={rows[where]}")
        stream_live, stream_ended = a["stream_live"], a["stream_ended"]
        if not (stream_live | stream_ended).all():
            j = int(np.argmin(stream_live | stream_ended))
            fail("stream_ended", f"should be True for a stream without transitions, but got "
                                 f"stream_ended[{j}]=False with stream_live[{j}]=False")  # fmt: skip
        if int(stream_live.sum()) > head:
            fail("stream_live", f"should mark at most head={head} streams, but got {int(stream_live.sum())}")
        self.frame_pool.check_state(a, counters["nfree"], [a["obs_rows"][live], a["next_rows"][live]], prefix)
        reward, discount = a["reward"][live], a["discount"][live]
        if not np.isfinite(reward).all():
            j = int(np.flatnonzero(live)[np.argmin(np.isfinite(reward))])
            fail("reward", f"should be finite in live slots, but got reward[{j}]={a['reward'][j]!r}")
        inside = (discount >= 0.0) & (discount <= 1.0)
        if not inside.all():
            j = int(np.flatnonzero(live)[np.argmin(inside)])
            fail(
                "discount", f"should lie in [0, 1] in live slots, but got discount[{j}]={a['discount'][j]!r}"
            )
        if self.action_dtype.kind in "fc":
            finite = np.isfinite(
                a["action"][live].reshape(int(live.sum()), math.prod(self.action_shape))
            ).all(axis=1)
            if not finite.all():
                j = int(np.flatnonzero(live)[np.argmin(finite)])
                fail("action", f"should be finite in live slots, but got action[{j}]={a['action'][j]!r}")
