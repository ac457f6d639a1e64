"""Transition ring of a replay memory: per-transition columns, generations, streams, n-step windows.

:class:`ReplayMemory` keeps the last ``capacity`` transitions ``(s_t, a_t, r_t, γ_t, s_{t+1})`` in
preallocated numpy arrays, one slot per transition, written in arrival order and evicted oldest
first.  Array observations go to a :class:`~prisample.replay.frames.FramePool` (each distinct frame
once; the ring keeps each transition's pool rows) through its public methods; dict observations
(gymnasium ``Dict`` spaces) are stored per transition and key.  With ``n_step = n`` an
:class:`~prisample.replay.nstep.NStepAccumulator` forms each transition's n-step window as its stream moves
on.  Every write reports what it evicted and which slots became drawable
(:meth:`ReplayMemory.insert`), which is what :class:`~prisample.replay.PrioritizedReplay` builds on.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping
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
)
from prisample.replay.batch import FIELDS, ReplayBatch
from prisample.replay.device import Columns, DeviceReader, as_device
from prisample.replay.frames import FramePool, reserve_rows
from prisample.replay.nstep import NStepAccumulator
from prisample.replay.stores import ObservationStore, StoreWrite, last_rows, make_store, previous_row
from prisample.replay.vector_env import VectorStepConverter

__all__ = ["STATE_VERSION", "CheckedState", "DTypes", "Inserted", "ReplayMemory"]


# ReplayMemory's state; 2 adds n_step, extras, dict observations, the inferred obs_dtype (None
# until the first add) and the vector-step converter.  Version 1 states still load.
STATE_VERSION = 2
_LOADABLE_VERSIONS = (1, 2)
_V1_CONFIG = (
    "capacity",
    "obs_shape",
    "obs_dtype",
    "frame_stack",
    "action_shape",
    "action_dtype",
    "num_streams",
    "frame_capacity",
)
# Names an extra cannot take: the batch's fields and add's own arguments.
_RESERVED = frozenset(
    {
        *FIELDS,
        "extras",
        "episode_end",
        "stream",
        "streams",
        "terminated",
        "truncated",
        "infos",
        "gamma",
        "autoreset_mode",
    }
)

IntArray = npt.NDArray[np.int64]
DTypes = np.dtype[Any] | dict[str, np.dtype[Any]]


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
    """The slots that became drawable in this call and still are (n-step: their windows
    completed), in order, each once: a sampler over the memory adds exactly these."""


@dataclass(frozen=True)
class CheckedState:
    """A memory state that :meth:`ReplayMemory.check_state` accepted, ready to commit."""

    arrays: dict[str, npt.NDArray[Any]]
    counters: dict[str, int]
    store: ObservationStore
    nstep: NStepAccumulator | None
    vector: tuple[VectorStepConverter, Any] | None

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
        """Per slot, whether a sampler over the memory holds it (live, window complete)."""
        live: npt.NDArray[np.bool_] = self.generation >= self.tail
        if self.nstep is not None:
            live = live & self.nstep.is_complete(np.arange(live.shape[0]))
        return live


def _extras_spec(extras: Any) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
    if extras is None:
        return {}
    if not isinstance(extras, Mapping):
        raise TypeError(f"extras should be a dict name -> (shape, dtype), but got extras={extras!r}")
    spec = {}
    for name, value in extras.items():
        if not isinstance(name, str) or not name.isidentifier() or name in _RESERVED:
            raise ValueError(
                f"extras names should be identifiers other than {sorted(_RESERVED)}, but got {name!r}"
            )
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise TypeError(f"extras[{name!r}] should be a pair (shape, dtype), but got {value!r}")
        shape = as_shape(value[0], f"extras[{name!r}] shape")
        spec[name] = (shape, as_dtype(value[1], f"extras[{name!r}] dtype"))
    return spec


def _same_dtype_config(value: Any, mine: Any) -> bool:
    if isinstance(mine, dict):
        return (
            isinstance(value, dict)
            and value.keys() == mine.keys()
            and all(_same_dtype_config(value[k], mine[k]) for k in mine)
        )
    return same_config_value(value, mine)


def _state_dtype(value: Any, declared: np.dtype[Any] | None, key: str) -> np.dtype[Any]:
    """A state's observation dtype string, checked against the declared one."""
    if type(value) is not str:
        raise ValueError(f"state_dict config {key} should be a dtype string, but got {value!r}")
    try:
        dtype = as_dtype(value, f"state_dict config {key}")
    except TypeError as error:
        raise ValueError(str(error)) from None
    if declared is not None and dtype != declared:
        raise ValueError(f"state_dict config {key} should be {declared.str!r}, but got {value!r}")
    return dtype


class ReplayMemory:
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

    # Per-transition columns: views of ``_columns.host`` (see :meth:`_column_spec`).
    _action: npt.NDArray[Any]
    _reward: npt.NDArray[np.float32]
    _discount: npt.NDArray[np.float32]
    _generation: IntArray
    _extra: dict[str, npt.NDArray[Any]]

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
    ) -> None:
        self.capacity = check_positive_int(capacity, "capacity")
        self.device = as_device(device)
        """``None``: numpy batches; a ``torch.device``: batches of tensors there (see
        :mod:`prisample.replay.device` for what lives where)."""
        self.frame_stack = check_positive_int(frame_stack, "frame_stack")
        self.action_shape = as_shape(action_shape, "action_shape")
        self.action_dtype = as_dtype(action_dtype, "action_dtype")
        self.num_streams = check_positive_int(num_streams, "num_streams")
        self.n_step = check_positive_int(n_step, "n_step")
        self.extras = _extras_spec(extras)
        """Declared extras: name -> (shape, dtype)."""
        self.obs_keys: tuple[str, ...] | None = None
        """The keys of dict observations (``None``: array observations)."""
        self._declared: np.dtype[Any] | dict[str, np.dtype[Any] | None] | None
        if isinstance(obs_shape, Mapping):
            keys = tuple(obs_shape)
            if not keys or not all(isinstance(k, str) for k in keys):
                raise ValueError(
                    f"obs_shape should be a shape or a non-empty dict str -> shape, got {obs_shape!r}"
                )
            self.obs_keys = keys
            self.obs_shape: Any = {k: as_shape(obs_shape[k], f"obs_shape[{k!r}]") for k in keys}
            if isinstance(obs_dtype, Mapping) and not isinstance(obs_dtype, np.dtype):
                dtypes: Mapping[str, Any] = obs_dtype
                if set(dtypes) != set(keys):
                    raise ValueError(
                        f"obs_dtype should have the keys of obs_shape {list(keys)}, but got {list(dtypes)}"
                    )
                self._declared = {
                    k: None if dtypes[k] is None else as_dtype(dtypes[k], f"obs_dtype[{k!r}]") for k in keys
                }
            else:
                one = None if obs_dtype is None else as_dtype(obs_dtype, "obs_dtype")
                self._declared = dict.fromkeys(keys, one)
        else:
            self.obs_shape = as_shape(obs_shape, "obs_shape")
            if isinstance(obs_dtype, Mapping):
                raise TypeError("obs_dtype should be a dtype or None for array observations, but got a dict")
            self._declared = None if obs_dtype is None else as_dtype(obs_dtype, "obs_dtype")
        reserve = reserve_rows(self.frame_stack, self.num_streams)
        if frame_capacity is not None:
            frame_capacity = check_positive_int(frame_capacity, "frame_capacity", minimum=reserve)
            if frame_capacity >= 2**31:
                raise ValueError(
                    f"frame_capacity should be below 2**31, but got frame_capacity={frame_capacity}"
                )
        stack, c = self.frame_stack, self.capacity
        self._stack_shape = (
            (stack, *self.obs_shape) if stack > 1 and self.obs_keys is None else self.obs_shape
        )
        self._store = make_store(
            c,
            self.obs_shape,
            frame_stack=stack,
            num_streams=self.num_streams,
            frame_capacity=frame_capacity,
            device=self.device,
        )
        # where the observations live: a frame pool or per-key columns (prisample.replay.stores)
        self._columns = Columns(c, self._column_spec(), self.device)  # mirrored on a device
        self._bind_columns()
        self._generation[...] = -1  # number of the transition in the slot
        self._reader = None if self.device is None else DeviceReader(self.device)
        self._stream_ended = np.ones(self.num_streams, dtype=np.bool_)
        self._evicted = np.zeros(c + 1, dtype=np.int64)
        self._tail = 0  # transitions numbered [tail, head) are live
        self._head = 0
        self._nstep = NStepAccumulator(self.n_step, self.num_streams, c) if self.n_step > 1 else None
        self._completed = np.empty(self.n_step, dtype=np.int64)
        self.vector_converter: VectorStepConverter | None = None
        """The converter of :meth:`add_vector_step` (made at its first call)."""
        self._vector_configured: Any = None
        declared = self._declared
        if isinstance(declared, np.dtype) or (
            isinstance(declared, dict) and all(d is not None for d in declared.values())
        ):
            self._store.allocate(self._full_dtype(declared), self._ring_nbytes())

    def _column_spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
        """The per-transition columns (host arrays ``_action``, ..., ``_extra[name]``; on a device
        mirrored there and gathered there)."""
        spec = {
            "action": (self.action_shape, self.action_dtype),
            "reward": ((), np.dtype(np.float32)),
            "discount": ((), np.dtype(np.float32)),
            "generation": ((), np.dtype(np.int64)),
        }
        spec.update({f"extra.{name}": (shape, dtype) for name, (shape, dtype) in self.extras.items()})
        return spec

    def _bind_columns(self) -> None:
        host = self._columns.host
        self._action, self._reward = host["action"], host["reward"]
        self._discount, self._generation = host["discount"], host["generation"]
        self._extra = {name: host[f"extra.{name}"] for name in self.extras}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_action", "_reward", "_discount", "_generation", "_extra"):
            del state[name]  # views of the columns' arrays: rebound on load
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind_columns()

    # -- observation storage ---------------------------------------------------------------------
    @staticmethod
    def _full_dtype(declared: Any) -> DTypes:
        full: DTypes = dict(declared) if isinstance(declared, dict) else declared
        return full

    def _ring_nbytes(self) -> int:
        """Bytes of the ring's per-slot arrays (frame rows, columns): what a new store adds to."""
        action_nbytes = self.action_dtype.itemsize * math.prod(self.action_shape)
        return self.capacity * (8 * self.frame_stack + 16 + action_nbytes)

    @property
    def store(self) -> ObservationStore:
        """Where the observations live (:mod:`~prisample.replay.stores`): a frame pool or
        per-key columns, chosen by ``obs_shape``."""
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

    def _infer_dtype(self, obs: Any) -> DTypes:
        """The observation dtype: the one known, else the declared one completed by ``obs``'s."""
        if self.obs_dtype is not None:
            return self.obs_dtype  # type: ignore[no-any-return]
        if self.obs_keys is None:
            return as_dtype(to_numpy(obs, "obs").dtype, "obs dtype")
        if not isinstance(obs, Mapping):
            raise TypeError(
                f"obs should be a dict with keys {list(self.obs_keys)}, but got {type(obs).__name__}"
            )
        declared = self._declared
        assert isinstance(declared, dict)
        dtypes = {}
        for k in self.obs_keys:
            if declared[k] is not None:
                dtypes[k] = declared[k]
            elif k not in obs:
                raise ValueError(f"obs should have the keys {list(self.obs_keys)}, but lacks {k!r}")
            else:
                dtypes[k] = as_dtype(to_numpy(obs[k], f"obs[{k!r}]").dtype, f"obs[{k!r}] dtype")
        return dtypes  # type: ignore[return-value]

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
        return 0 if self.frame_pool is None else self.frame_pool.num_used

    @property
    def nbytes(self) -> int:
        """Bytes held in the memory's arrays (frame pool, rows, actions, rewards, bookkeeping)."""
        total = self._stream_ended.nbytes + self._evicted.nbytes + self._store.nbytes
        total += self._columns.nbytes  # a device mirror included
        if self._nstep is not None:
            total += self._nstep.nbytes
        return total

    # -- writes ---------------------------------------------------------------------------------
    def add(
        self,
        obs: Any,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: Any,
        *,
        episode_end: bool = False,
        stream: int = 0,
        **extras: npt.ArrayLike,
    ) -> int:
        """Store one transition and return its slot; the oldest transition makes room.

        ``discount`` is the per-step ``γ_t`` (0 at termination, ``γ`` otherwise).
        ``episode_end=True`` marks that the episode ended at ``next_obs`` (terminated or
        truncated): the next add on ``stream`` starts a new episode (and the stream's n-step
        windows end here).  Without it, an ``obs`` that does not continue the stream's last
        transition is stored in full with a ``RuntimeWarning`` (usually a missing ``stream=`` for
        interleaved environments, which costs ``frame_stack`` frames per transition).  Declared
        extras are keywords: ``add(..., log_prob=lp)``.

        Raises ``ValueError``/``TypeError`` naming the argument, and stores nothing, for a wrong
        shape, a dtype that does not cast safely, an integer outside its dtype's range, a float or
        complex ``obs``/``next_obs``/``action``/extra that is not finite once cast to its dtype, a
        ``reward`` that is not finite as float32, a ``discount`` outside ``[0, 1]``, an extra
        missing or not declared.
        """
        return int(
            self.insert(
                obs, action, reward, discount, next_obs, episode_end=episode_end, stream=stream, **extras
            ).slots[0]
        )

    def insert(
        self,
        obs: Any,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: Any,
        *,
        episode_end: bool = False,
        stream: int = 0,
        **extras: npt.ArrayLike,
    ) -> Inserted:
        """:meth:`add`, returning what changed: the slot, the evicted slots, the completed ones."""
        dtype = self._infer_dtype(obs)
        obs_a = self._one_obs(obs, "obs", dtype)
        next_a = self._one_obs(next_obs, "next_obs", dtype)
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
        extra_rows = self._extra_values(extras, None) if (extras or self.extras) else None
        # a batch of one: the checked values given a leading axis
        if isinstance(obs_a, dict):
            obs_a = {k: v[None] for k, v in obs_a.items()}
            next_a = {k: v[None] for k, v in next_a.items()}
        else:
            obs_a, next_a = obs_a[None], next_a[None]
        return self._write(
            dtype,
            obs_a,
            next_a,
            action_a[None],
            np.array([reward_f], dtype=np.float64),
            np.array([discount_f], dtype=np.float64),
            np.array([bool(episode_end)]),
            np.array([int(stream)], dtype=np.int64),
            extra_rows,
        )

    def _write_columns(
        self,
        slots: IntArray,
        head0: int,
        action: npt.NDArray[Any],
        rewards: npt.NDArray[np.float64],
        discounts: npt.NDArray[np.float64],
        extras: dict[str, npt.NDArray[Any]] | None,
    ) -> None:
        """The per-transition columns of the first ``len(slots)`` rows of a write, one assignment
        each; a slot written twice in the call (more rows than ``capacity``) keeps its last row."""
        m = slots.shape[0]
        if m == 0:
            return
        rows: Any = slice(0, m)
        if m > self.capacity:
            rows = m - 1 - np.unique(slots[::-1], return_index=True)[1]
            slots = slots[rows]
        self._generation[slots] = head0 + (np.arange(m, dtype=np.int64)[rows])
        self._action[slots] = action[rows]
        self._reward[slots] = rewards[rows]
        self._discount[slots] = discounts[rows]
        if extras is not None:
            for name, column in self._extra.items():
                column[slots] = extras[name][rows]

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
        dead = self._generation[idx] < self._tail
        if dead.any():
            j = int(np.argmax(dead))
            raise ValueError(f"swap_slots should name live slots, but got slot {idx[j]} (empty)")
        if idx[0] == idx[1]:
            return
        both, back = idx, idx[::-1]
        for name, array in self._columns.host.items():
            if name != "generation":
                array[both] = array[back]
        self._columns.resend(both)
        self._store.swap(both, back)

    def _one_obs(self, value: Any, name: str, dtype: DTypes) -> Any:
        """One observation checked and cast (C-contiguous), a dict of arrays for dict observations."""
        if isinstance(dtype, dict):
            assert self.obs_keys is not None
            if not isinstance(value, Mapping) or set(value) != set(self.obs_keys):
                got = sorted(value) if isinstance(value, Mapping) else type(value).__name__
                raise ValueError(f"{name} should be a dict with keys {sorted(self.obs_keys)}, but got {got}")
            out = {}
            for k in self.obs_keys:
                array = to_numpy(value[k], f"{name}[{k!r}]")
                if array.shape != self.obs_shape[k]:
                    raise ValueError(
                        f"{name}[{k!r}] should have shape {self.obs_shape[k]}, but got shape {array.shape}"
                    )
                out[k] = cast(array, dtype[k], f"{name}[{k!r}]")
            return out
        array = value if isinstance(value, np.ndarray) else to_numpy(value, name)
        if array.shape != self._stack_shape:
            raise ValueError(f"{name} should have shape {self._stack_shape}, but got shape {array.shape}")
        if array.dtype != dtype or dtype.kind in "fc":
            array = cast(array, dtype, name)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        return array

    def _extra_values(self, values: Mapping[str, Any], n: int | None) -> dict[str, npt.NDArray[Any]]:
        """The declared extras checked and cast (``n`` rows each, or one value when ``n`` is None)."""
        unknown = sorted(set(values) - set(self.extras))
        if unknown:
            raise TypeError(
                f"got an unexpected extra {unknown[0]!r}: declared extras are {sorted(self.extras)}"
            )
        out = {}
        for name, (shape, dtype) in self.extras.items():
            if name not in values:
                raise TypeError(f"the extra {name!r} is missing: pass it as a keyword ({name}=...)")
            if n is None:
                array = to_numpy(values[name], name)
                if array.shape != shape:
                    raise ValueError(f"{name} should have shape {shape}, but got shape {array.shape}")
                out[name] = cast(array, dtype, name)[None]
            else:
                out[name] = self._batch(values[name], name, shape, dtype, n)
        return out

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
        **extras: npt.ArrayLike,
    ) -> IntArray:
        """:meth:`add` for ``n`` transitions at once (a vectorised environment's step), in order.

        Arguments (extras too) carry a leading axis of length ``n`` (dict observations: each key's
        array); ``n = 0`` stores nothing.  ``streams`` defaults to ``0 .. n-1`` (one stream per
        environment) and ``episode_end`` to all ``False``.  Everything is checked before anything
        is stored.  Returns the slots.
        """
        return self.insert_many(
            obs, action, reward, discount, next_obs, episode_end=episode_end, streams=streams, **extras
        ).slots

    def insert_many(
        self,
        obs: Any,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: Any,
        *,
        episode_end: npt.ArrayLike | None = None,
        streams: npt.ArrayLike | None = None,
        **extras: npt.ArrayLike,
    ) -> Inserted:
        """:meth:`add_many`, returning what changed (see :class:`Inserted`)."""
        dtype = self._infer_dtype(obs)
        obs_a = self._many_obs(obs, "obs", dtype, None)
        n = next(iter(obs_a.values())).shape[0] if isinstance(obs_a, dict) else obs_a.shape[0]
        next_a = self._many_obs(next_obs, "next_obs", dtype, n)
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
        extra_rows = self._extra_values(extras, n) if (extras or self.extras) else None
        return self._write(
            dtype,
            obs_a,
            next_a,
            action_a,
            rewards.astype(np.float64),
            discounts.astype(np.float64),
            ends,
            ids,
            extra_rows,
        )

    def _write(
        self,
        dtype: DTypes,
        obs_a: Any,
        next_a: Any,
        action_a: npt.NDArray[Any],
        rewards: npt.NDArray[np.float64],
        discounts: npt.NDArray[np.float64],
        ends: npt.NDArray[np.bool_],
        ids: IntArray,
        extra_rows: dict[str, npt.NDArray[Any]] | None,
    ) -> Inserted:
        """The one write: ``n`` checked transitions (leading axis ``n``, observations cast to
        ``dtype``, rewards and discounts as float64 so that a single add's reward reaches the n-step
        sums unrounded) stored in order; returns what changed.

        The store puts every row's observations in place with the ring's evictions (one call);
        the per-transition columns take the rows in one assignment each; only the n-step windows
        go row by row, since each row's window depends on the evictions and rows before it."""
        n = action_a.shape[0]
        empty = np.empty(0, dtype=np.int64)
        if n == 0:
            return Inserted(empty, empty, empty, empty)
        store, c = self._store, self.capacity
        if not store.allocated:
            store.allocate(dtype, self._ring_nbytes())
        if self._evicted.shape[0] < c + n:  # a write evicts at most the live transitions and its rows
            self._evicted = np.empty(c + n, dtype=np.int64)
        head0, tail0 = self._head, self._tail
        written = store.write(obs_a, next_a, ids, tail0, head0, self._evicted)
        slots, until = written.slots, written.until
        breaks = self._breaks(written, ends, ids)
        final = last_rows(ids)
        self._stream_ended[ids[final]] = ends[final]
        self._tail, self._head = written.tail, head0 + n
        self._write_columns(slots, head0, action_a, rewards, discounts, extra_rows)
        total = int(until[-1])
        gone = self._evicted[:total].copy()
        if self._nstep is None:
            # a slot written here and evicted later in the call is not drawable
            ready = slots if total == 0 else slots[self._generation[slots] >= self._tail]
        else:
            ready = self._push_windows(written, gone, tail0, head0, rewards, discounts, ends, ids)
        for i in breaks:
            warnings.warn(
                f"obs does not continue the last transition of stream {ids[i]} and was stored "
                "in full: pass episode_end=True at the end of an episode, and one stream= per "
                "environment when several share the memory",
                RuntimeWarning,
                stacklevel=4,
            )
        return Inserted(slots, gone, until, ready)

    def _breaks(self, written: StoreWrite, ends: npt.NDArray[np.bool_], ids: IntArray) -> list[int]:
        """Rows of a frame-stack write whose ``obs`` broke their stream: the stream went on (its
        last transition did not end the episode) but ``obs`` did not continue it."""
        broke = written.had_last & ~written.continued
        if self.frame_pool is None or self.frame_stack == 1 or not broke.any():
            return []
        previous = previous_row(ids)
        ended_before = self._stream_ended[ids]
        earlier = previous >= 0
        ended_before[earlier] = ends[previous[earlier]]
        return [int(i) for i in np.flatnonzero(broke & ~ended_before)]

    def _push_windows(
        self,
        written: StoreWrite,
        gone: IntArray,
        tail0: int,
        head0: int,
        rewards: npt.NDArray[np.float64],
        discounts: npt.NDArray[np.float64],
        ends: npt.NDArray[np.bool_],
        ids: IntArray,
    ) -> IntArray:
        """The n-step windows of a write's rows, row by row (each row's evictions leave first);
        returns the slots whose windows completed and still are, in order, each once."""
        nstep = self._nstep
        assert nstep is not None
        completed: list[IntArray] = []
        start = 0
        for i in range(ids.shape[0]):
            k = int(written.until[i])
            if k > start:
                nstep.evict(gone[start:k], np.arange(tail0 + start, tail0 + k, dtype=np.int64))
                start = k
            done = nstep.push(
                int(written.slots[i]),
                head0 + i,
                int(ids[i]),
                float(rewards[i]),
                float(discounts[i]),
                episode_end=bool(ends[i]),
                continues=bool(written.continued[i]),
                out=self._completed,
            )
            if done.shape[0]:
                completed.append(done.copy())
        if not completed:
            return np.empty(0, dtype=np.int64)
        ready = np.concatenate(completed)
        if ids.shape[0] > 1 and (start or ready.shape[0] > 1):
            ready = ready[nstep.is_complete(ready)]
            _, first = np.unique(ready, return_index=True)
            ready = ready[np.sort(first)]
        return ready

    def _many_obs(self, value: Any, name: str, dtype: DTypes, n: int | None) -> Any:
        if isinstance(dtype, dict):
            assert self.obs_keys is not None
            if not isinstance(value, Mapping) or set(value) != set(self.obs_keys):
                got = sorted(value) if isinstance(value, Mapping) else type(value).__name__
                raise ValueError(f"{name} should be a dict with keys {sorted(self.obs_keys)}, but got {got}")
            out = {}
            for k in self.obs_keys:
                out[k] = self._batch(value[k], f"{name}[{k!r}]", self.obs_shape[k], dtype[k], n)
                n = out[k].shape[0]
            return out
        return self._batch(value, name, self._stack_shape, dtype, n)

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
        """Store one step of a gymnasium vector env (see :mod:`prisample.replay.vector_env`); returns
        the slots (one per env that really stepped, env ``i`` on stream ``i``).

        Arguments are what ``envs.step`` took and returned (``obs`` from the step before);
        ``discount = gamma · (1 − terminated)``, ``episode_end = terminated | truncated``, reset
        steps of next-step autoreset skipped, same-step autoreset's ``infos["final_obs"]`` used as
        ``next_obs``.  The :class:`~prisample.replay.vector_env.VectorStepConverter` is made at the first
        call with ``num_envs`` (at most ``num_streams``) and ``autoreset_mode``; its state is part
        of :meth:`state_dict`.  Extras carry a leading ``num_envs`` axis.  A rejected call changes
        nothing (the converter included).
        """
        return self.insert_vector_step(
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
        ).slots

    def insert_vector_step(
        self,
        obs: Any,
        action: Any,
        reward: npt.ArrayLike,
        terminated: npt.ArrayLike,
        truncated: npt.ArrayLike,
        next_obs: Any,
        infos: Mapping[str, Any],
        *,
        gamma: float,
        autoreset_mode: Any = None,
        **extras: npt.ArrayLike,
    ) -> Inserted:
        """:meth:`add_vector_step`, returning what changed (see :class:`Inserted`)."""
        converter, made = self.vector_converter, False
        if converter is None:
            num_envs = to_numpy(reward, "reward").reshape(-1).shape[0]
            if num_envs > self.num_streams:
                raise ValueError(
                    f"num_envs should be at most num_streams={self.num_streams} (one stream per env), "
                    f"but got {num_envs} envs"
                )
            converter, made = VectorStepConverter(num_envs, autoreset_mode=autoreset_mode), True
        elif autoreset_mode is not None and (
            getattr(autoreset_mode, "value", autoreset_mode) != converter.autoreset_mode
        ):
            raise ValueError(
                f"autoreset_mode should be the converter's {converter.autoreset_mode!r} (set at the first "
                f"add_vector_step), but got autoreset_mode={autoreset_mode!r}"
            )
        saved = converter.state_dict()
        rows = converter.step(obs, action, reward, terminated, truncated, next_obs, infos, gamma=gamma)
        try:
            picked = {}
            for name, value in extras.items():
                array = to_numpy(value, name)
                if array.ndim == 0 or array.shape[0] != converter.num_envs:
                    raise ValueError(
                        f"{name} should have a leading axis of length num_envs={converter.num_envs}, "
                        f"but got shape {array.shape}"
                    )
                picked[name] = array[rows.streams]
            done = self._insert_converted(rows, picked)
        except BaseException:
            converter.load_state_dict(saved)
            raise
        if made:
            self.vector_converter, self._vector_configured = converter, autoreset_mode
            self._vector_configured = getattr(autoreset_mode, "value", autoreset_mode)
        return done

    def _insert_converted(self, rows: Any, extras: dict[str, Any]) -> Inserted:
        """The converter's rows written: what the memory's spec decides is checked (observations,
        actions, rewards as float32, extras), not what the converter made (discounts ``0`` or
        ``gamma``, episode ends as bools, streams one per env)."""
        dtype = self._infer_dtype(rows.obs)
        obs_a = self._many_obs(rows.obs, "obs", dtype, None)
        n = rows.streams.shape[0]
        next_a = self._many_obs(rows.next_obs, "next_obs", dtype, n)
        action_a = self._batch(rows.action, "action", self.action_shape, self.action_dtype, n)
        rewards = self._batch(rows.reward, "reward", (), np.dtype(np.float32), n, real=True)
        extra_rows = self._extra_values(extras, n) if (extras or self.extras) else None
        return self._write(
            dtype,
            obs_a,
            next_a,
            action_a,
            rewards.astype(np.float64),
            rows.discount.astype(np.float32).astype(np.float64),  # as insert_many rounds them
            rows.episode_end,
            rows.streams,
            extra_rows,
        )

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

    # -- reads ----------------------------------------------------------------------------------
    def valid(self, slots: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each slot holds a live transition (added and not yet evicted)."""
        idx = self._slots(slots)
        return np.asarray(self._generation[idx] >= self._tail)

    def drawable(self, slots: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each slot holds a live transition whose n-step window is complete (``n_step =
        1``: live): the slots :meth:`get` reads and a sampler over the memory holds."""
        idx = self._slots(slots)
        live = self._generation[idx] >= self._tail
        if self._nstep is not None:
            live &= self._nstep.is_complete(idx)
        return np.asarray(live)

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
        dead = self._generation[idx] < self._tail
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
        columns: dict[str, Any] = {}
        if self._reader is None:
            columns.update((name, array[idx]) for name, array in self._columns.host.items())
        else:
            head = self._head
            sent, floats = self._reader.send([idx, *index], floats + ([] if weights is None else [weights]))
            self._columns.sync(head)
            columns.update(self._columns.gather(sent[0]))
            index = sent[1:]
            if weights is not None:
                batch_weights = floats.pop()
        if nstep is not None:
            columns["reward"], columns["discount"] = floats[0], floats[1]
        obs, next_obs = self._store.take(index, plan, self._head)
        extras = {name: columns[f"extra.{name}"] for name in self.extras}
        return ReplayBatch(
            obs,
            columns["action"],
            columns["reward"],
            columns["discount"],
            next_obs,
            columns["generation"],
            extras,
            weights=batch_weights,
        )

    def _slots(self, slots: npt.ArrayLike, name: str = "slots") -> IntArray:
        """``slots`` checked in range; errors name the argument as the caller's caller calls it."""
        idx = as_indices(slots, name)
        bad = (idx < 0) | (idx >= self.capacity)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"{name} should lie in [0, {self.capacity}), but got {name}[{j}]={idx[j]}")
        return idx

    # -- checkpointing --------------------------------------------------------------------------
    # The ring's state arrays, each the attribute ``_<name>``, after the store's row tables
    # (``obs_rows``, ``next_rows``); then the extras (``extra.<name>``) and the store's arrays
    # (the frame pool's, or ``obs.<key>``, ``next_obs.<key>``, ``stream_next_obs.<key>``,
    # ``stream_live`` for dict observations).  Their dtypes and shapes are the spec a loaded array
    # must match exactly.  New per-slot arrays join this tuple.
    _RING_ARRAYS = ("action", "reward", "discount", "generation", "stream_ended")

    def _ring_arrays(self, store: ObservationStore) -> dict[str, npt.NDArray[Any]]:
        """The ring's state arrays (the store's row tables first, as states have them)."""
        arrays = {**store.table_arrays(), **{name: getattr(self, f"_{name}") for name in self._RING_ARRAYS}}
        arrays.update({f"extra.{name}": column for name, column in self._extra.items()})
        return arrays

    def _state_arrays(self, *, frames: bool = True) -> dict[str, npt.NDArray[Any]]:
        """The live arrays by state name (the frame pool's frames a host copy on a device, left
        out when ``frames=False``)."""
        store = self._store
        arrays = self._ring_arrays(store)
        if store.allocated:
            arrays.update(store.state_arrays(frames=frames))
        return arrays

    def _state_spec(self, store: ObservationStore) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """Dtype and shape of each state array with ``store`` (no copy of frames on a device)."""
        spec = {name: (a.dtype, a.shape) for name, a in self._ring_arrays(store).items()}
        if store.allocated:
            spec.update(store.state_spec())
        return spec

    def _counters(self) -> dict[str, int]:
        return {"tail": self._tail, "head": self._head, **self._store.counters()}

    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """Everything needed to continue exactly (numpy arrays and plain values): the config, the
        arrays, the counters, the n-step accumulator's state (``"nstep"``, ``None`` for ``n_step =
        1``) and the vector-step converter's (``"vector"``, ``None`` before the first
        :meth:`add_vector_step`).

        ``copy=False`` returns the live arrays themselves (no second copy of a large frame pool);
        serialise them before the next :meth:`add`.
        """
        arrays = {name: a.copy() if copy else a for name, a in self._state_arrays().items()}
        vector = None
        if self.vector_converter is not None:
            vector = {"configured": self._vector_configured, "converter": self.vector_converter.state_dict()}
        return {
            "version": STATE_VERSION,
            "config": self._config(),
            **arrays,
            **self._counters(),
            "nstep": None if self._nstep is None else self._nstep.state_dict(),
            "vector": vector,
        }

    def _config(self) -> dict[str, Any]:
        dtype = self.obs_dtype
        return {
            "capacity": self.capacity,
            "obs_shape": self.obs_shape,
            "obs_dtype": None
            if dtype is None
            else {k: d.str for k, d in dtype.items()}
            if isinstance(dtype, dict)
            else dtype.str,
            "frame_stack": self.frame_stack,
            "action_shape": self.action_shape,
            "action_dtype": self.action_dtype.str,
            "num_streams": self.num_streams,
            "frame_capacity": self.frame_capacity,
            "n_step": self.n_step,
            "extras": {name: (shape, dtype.str) for name, (shape, dtype) in self.extras.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output into a memory built with the same arguments.

        The state is checked completely first (:meth:`check_valid`'s invariants, the config, every
        array's dtype and shape, the n-step windows against the live transitions, the converter):
        a malformed or inconsistent state raises ``ValueError`` or ``TypeError`` naming the key,
        and the memory is left exactly as it was.  A memory built with ``obs_dtype=None`` takes
        the state's dtype.  Version 1 states (before n-step and extras) load into a memory with
        ``n_step=1`` and no extras.
        """
        self.commit_state(self.check_state(state))

    def commit_state(self, checked: CheckedState) -> None:
        """Assign a state that :meth:`check_state` accepted (cannot fail: dtypes and shapes match)."""
        self._store = store = checked.store
        arrays, counters = checked.arrays, checked.counters
        for name, target in self._ring_arrays(store).items():
            target[...] = arrays[name]
        self._columns.invalidate()  # the device mirrors take every row at the next read
        if store.allocated:
            store.commit_state(arrays, counters)
        self._tail, self._head = counters["tail"], counters["head"]
        self._nstep = checked.nstep
        if checked.vector is None:
            self.vector_converter, self._vector_configured = None, None
        else:
            self.vector_converter, self._vector_configured = checked.vector

    def _upgraded(self, state: dict[str, Any]) -> dict[str, Any]:
        """A version 1 state (array observations, no n-step, no extras) in version 2's form."""
        config = state.get("config")
        if not isinstance(config, dict):
            raise TypeError(f"state_dict config should be a dict, but got {type(config).__name__}")
        check_keys(config, set(_V1_CONFIG), "state_dict config")
        config = {**config, "n_step": 1, "extras": {}}
        for key in ("nstep", "vector"):
            if key in state:
                raise ValueError(f"state_dict has the unexpected key {key!r}")
        return {**state, "version": STATE_VERSION, "config": config, "nstep": None, "vector": None}

    def _checked_store(self, config: dict[str, Any]) -> ObservationStore:
        """The observation store a state's config asks for: this memory's, a new one (a memory
        built with ``obs_dtype=None`` takes the state's dtype), or a new unallocated one (nothing
        added yet)."""
        value, declared = config["obs_dtype"], self._declared
        if value is None:
            if config["frame_capacity"] is not None:
                raise ValueError("state_dict config frame_capacity should be None while obs_dtype is None")
            if isinstance(declared, np.dtype) or (
                isinstance(declared, dict) and None not in declared.values()
            ):
                raise ValueError(
                    f"state_dict config obs_dtype should be {self._config()['obs_dtype']!r}, but got None"
                )
            return self._store.fresh(None, 0)
        dtype: Any
        if self.obs_keys is None:
            dtype = _state_dtype(value, declared if isinstance(declared, np.dtype) else None, "obs_dtype")
        else:
            assert isinstance(declared, dict)
            if not isinstance(value, dict) or set(value) != set(self.obs_keys):
                raise ValueError(
                    f"state_dict config obs_dtype should be a dict with keys {list(self.obs_keys)}, "
                    f"but got {value!r}"
                )
            dtype = {k: _state_dtype(value[k], declared[k], f"obs_dtype[{k!r}]") for k in self.obs_keys}
        if self._store.allocated and self._same_dtype(dtype):
            store = self._store
        else:
            capacity = self._store.frame_capacity_for(dtype)
            if not same_config_value(config["frame_capacity"], capacity):
                raise ValueError(
                    f"state_dict config frame_capacity should be {capacity!r}, "
                    f"but got {config['frame_capacity']!r}"
                )
            store = self._store.fresh(dtype, self._ring_nbytes())
        if not same_config_value(config["frame_capacity"], store.frame_capacity):
            raise ValueError(
                f"state_dict config frame_capacity should be {store.frame_capacity!r}, "
                f"but got {config['frame_capacity']!r}"
            )
        return store

    def _same_dtype(self, dtype: Any) -> bool:
        mine = self.obs_dtype
        if isinstance(mine, dict):
            return isinstance(dtype, dict) and all(mine[k] == dtype[k] for k in mine)
        return bool(mine == dtype)

    def check_state(self, state: Any) -> CheckedState:
        """The state's arrays and counters, after checking everything :meth:`load_state_dict`
        will assign; raises ``ValueError``/``TypeError`` naming the key, changes nothing."""
        if not isinstance(state, dict):
            raise TypeError(f"state should be a dict from state_dict(), but got {type(state).__name__}")
        version = state.get("version")
        if type(version) is not int or version not in _LOADABLE_VERSIONS:
            raise ValueError(
                f"state_dict version should be one of {_LOADABLE_VERSIONS}, but got version={version!r}"
            )
        if version == 1:
            state = self._upgraded(state)
        config = state.get("config")
        if not isinstance(config, dict):
            raise TypeError(f"state_dict config should be a dict, but got {type(config).__name__}")
        mine = self._config()
        check_keys(config, set(mine), "state_dict config")
        for key, value in mine.items():
            if key in ("obs_dtype", "frame_capacity"):
                continue
            if key == "extras":
                same = (
                    isinstance(config[key], dict)
                    and config[key].keys() == value.keys()
                    and all(
                        isinstance(config[key][n], (tuple, list))
                        and len(config[key][n]) == 2
                        and same_config_value(config[key][n][0], value[n][0])
                        and config[key][n][1] == value[n][1]
                        for n in value
                    )
                )
            elif isinstance(value, dict):
                same = (
                    isinstance(config[key], dict)
                    and config[key].keys() == value.keys()
                    and all(same_config_value(config[key][k], value[k]) for k in value)
                )
            else:
                same = same_config_value(config[key], value)
            if not same:
                raise ValueError(f"state_dict config {key} should be {value!r}, but got {config[key]!r}")
        store = self._checked_store(config)
        targets = self._state_spec(store)
        counter_names = ("tail", "head", *store.counters())
        check_keys(state, {"version", "config", *targets, *counter_names, "nstep", "vector"}, "state_dict")
        arrays = {}
        for name, (dtype, shape) in targets.items():
            arrays[name] = array = as_state_array(state[name], f"state_dict {name}")
            if array.dtype != dtype or array.shape != shape:
                raise ValueError(
                    f"state_dict {name} should be {dtype}{list(shape)}, "
                    f"but got {array.dtype}{list(array.shape)}"
                )
        counters = {}
        for name in counter_names:
            value = state[name]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"state_dict {name} should be an integer, but got {name}={value!r}")
            counters[name] = int(value)
        self._check_invariants(arrays, counters, "state_dict ", store)
        nstep = self._checked_nstep(state["nstep"], arrays["generation"], counters["tail"])
        vector = self._checked_vector(state["vector"])
        return CheckedState(arrays, counters, store, nstep, vector)

    def _checked_nstep(self, value: Any, generation: IntArray, tail: int) -> NStepAccumulator | None:
        if self.n_step == 1:
            if value is not None:
                raise ValueError(
                    f"state_dict nstep should be None for n_step=1, but got {type(value).__name__}"
                )
            return None
        if not isinstance(value, dict):
            raise TypeError(
                f"state_dict nstep should be an NStepAccumulator state, but got {type(value).__name__}"
            )
        acc = NStepAccumulator(self.n_step, self.num_streams, self.capacity)
        try:
            acc.load_state_dict(value)
        except (ValueError, TypeError) as error:
            raise type(error)(f"state_dict nstep: {error}") from None
        tracked = value["generation"]
        live = generation >= tail
        expected = np.where(live, generation, -1)
        if not np.array_equal(tracked, expected):
            j = int(np.argmax(tracked != expected))
            raise ValueError(
                f"state_dict nstep generation should be the live transitions' ({expected[j]} in slot {j}), "
                f"but got {tracked[j]}"
            )
        done = np.flatnonzero(value["complete"])
        last = value["last"][done]
        ok = (generation[last] >= tail) & (generation[last] >= generation[done])
        ok &= generation[last] - generation[done] >= value["length"][done] - 1
        if not ok.all():
            j = int(done[np.argmin(ok)])
            raise ValueError(
                f"state_dict nstep last should name a live transition of the window after slot {j}, "
                f"but got last[{j}]={value['last'][j]}"
            )
        return acc

    def _checked_vector(self, value: Any) -> tuple[VectorStepConverter, Any] | None:
        if value is None:
            return None
        if not isinstance(value, dict) or set(value) != {"configured", "converter"}:
            raise ValueError(
                "state_dict vector should be None or a dict with keys 'configured' and 'converter'"
            )
        configured, converter = value["configured"], value["converter"]
        num_envs = converter.get("num_envs") if isinstance(converter, dict) else None
        if type(num_envs) is not int or not 1 <= num_envs <= self.num_streams:
            raise ValueError(
                f"state_dict vector converter num_envs should lie in [1, {self.num_streams}], "
                f"but got {num_envs!r}"
            )
        try:
            made = VectorStepConverter(num_envs, autoreset_mode=configured)
            made.load_state_dict(converter)
        except (ValueError, TypeError) as error:
            raise type(error)(f"state_dict vector: {error}") from None
        return made, configured

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
        self._check_invariants(self._state_arrays(), self._counters(), "", self._store)
        self._store.check_cache()

    def _check_invariants(
        self, a: dict[str, npt.NDArray[Any]], counters: dict[str, int], prefix: str, store: ObservationStore
    ) -> None:
        c = self.capacity
        tail, head = counters["tail"], counters["head"]

        def fail(key: str, message: str) -> None:
            raise ValueError(f"{prefix}{key} {message}")

        if not 0 <= head < 2**62:
            fail("head", f"should lie in [0, 2**62), but got head={head}")
        if not store.allocated and head != 0:
            fail("head", f"should be 0 while obs_dtype is None (nothing added), but got head={head}")
        if not max(0, head - c) <= tail <= head:
            fail(
                "tail",
                f"should lie in [max(0, head - capacity), head] = [{max(0, head - c)}, {head}], "
                f"but got tail={tail}",
            )
        slots = np.arange(c, dtype=np.int64)
        # Slot s last held the largest transition number below head that is s modulo capacity.
        last = np.where(slots < head, slots + c * ((head - 1 - slots) // c), -1)
        generation = a["generation"]
        if not np.array_equal(generation, last):
            j = int(np.argmax(generation != last))
            fail(
                "generation",
                f"should be {last[j]} in slot {j} after head={head} adds (the transition "
                f"written there last), but got generation[{j}]={generation[j]}",
            )
        live = last >= tail
        stream_live = a["stream_live"] if store.allocated else np.zeros(self.num_streams, np.bool_)
        stream_ended = a["stream_ended"]
        if not (stream_live | stream_ended).all():
            j = int(np.argmin(stream_live | stream_ended))
            fail(
                "stream_ended",
                f"should be True for a stream without transitions, but got "
                f"stream_ended[{j}]=False with stream_live[{j}]=False",
            )
        if int(stream_live.sum()) > head:
            fail("stream_live", f"should mark at most head={head} streams, but got {int(stream_live.sum())}")
        if store.allocated:
            store.check_state(a, counters, live, prefix)
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
        for key in ("action", *(f"extra.{name}" for name in self._extra)):
            column = a[key]
            if column.dtype.kind not in "fc":
                continue
            finite = np.isfinite(column[live].reshape(int(live.sum()), -1)).all(axis=1)
            if not finite.all():
                j = int(np.flatnonzero(live)[np.argmin(finite)])
                fail(key, f"should be finite in live slots, but got {key}[{j}]={column[j]!r}")
