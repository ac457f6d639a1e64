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
from dataclasses import dataclass, field
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
from prisample.replay.batch import FIELDS, ReplayBatch
from prisample.replay.device import Columns, DeviceReader, TorchFrames, as_device
from prisample.replay.frames import FramePool, reserve_rows
from prisample.replay.nstep import NStepAccumulator
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
# Extra frame-pool rows per transition slot beyond one frame each: room for episode starts
# (documented bound in ReplayMemory's docstring).
_FRAME_SLACK_DIVISOR = 64
_SMALL_FRAME_BYTES = 1024
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


@dataclass
class _Storage:
    """Observation storage, allocated once the observation dtype is known."""

    dtype: DTypes
    frame_capacity: int | None
    pool: FramePool | None  # array observations
    columns: dict[str, npt.NDArray[Any]] = field(default_factory=dict)  # dict observations
    mirrors: tuple[Columns, ...] = ()
    """Dict observations: the per-slot ``obs.<key>`` and ``next_obs.<key>`` columns (two
    :class:`~prisample.replay.device.Columns`, mirrored on the memory's device; the entries of
    ``columns`` of those names are their host arrays)."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        mirrored = {name for cols in self.mirrors for name in cols.host}
        state["columns"] = {name: a for name, a in self.columns.items() if name not in mirrored}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for cols in self.mirrors:  # views of the mirrors' host arrays: rebound so they keep sharing
            self.columns.update(cols.host)


@dataclass(frozen=True)
class CheckedState:
    """A memory state that :meth:`ReplayMemory.check_state` accepted, ready to commit."""

    arrays: dict[str, npt.NDArray[Any]]
    counters: dict[str, int]
    storage: _Storage | None
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
            if self.frame_stack != 1:
                raise ValueError(
                    f"frame_stack should be 1 for dict observations (stack inside the space), "
                    f"but got frame_stack={frame_stack}"
                )
            if frame_capacity is not None:
                raise ValueError(
                    "frame_capacity applies to array observations only (dict observations have no pool)"
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
        self._frame_capacity_arg = frame_capacity
        stack, c = self.frame_stack, self.capacity
        self._stack_shape = (
            (stack, *self.obs_shape) if stack > 1 and self.obs_keys is None else self.obs_shape
        )
        self._obs_rows = np.zeros((c, stack if self.obs_keys is None else 0), dtype=np.int32)
        self._next_rows = np.zeros((c, stack if self.obs_keys is None else 0), dtype=np.int32)
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
        self._storage: _Storage | None = None
        self.obs_dtype: Any = None
        """The observation dtype (a dict for dict observations); ``None`` until the first add
        when it is inferred."""
        self.frame_capacity: int | None = None
        """Frame pool rows (``None`` until the pool is allocated; dict observations: ``None``)."""
        self.frame_pool: FramePool | None = None
        """The frames of the stored stacks (each distinct frame once); ``None`` until allocated."""
        declared = self._declared
        if isinstance(declared, np.dtype) or (
            isinstance(declared, dict) and all(d is not None for d in declared.values())
        ):
            self._attach(self._allocate(self._full_dtype(declared)))

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

    def _allocate(self, dtype: DTypes) -> _Storage:
        """New storage for observations of ``dtype`` (warns first when it will not fit)."""
        c, stack = self.capacity, self.frame_stack
        action_nbytes = self.action_dtype.itemsize * math.prod(self.action_shape)
        ring_nbytes = c * (8 * stack + 16 + action_nbytes)
        if isinstance(dtype, dict):
            assert self.obs_keys is not None
            per = sum(dtype[k].itemsize * math.prod(self.obs_shape[k]) for k in self.obs_keys)
            warn_if_too_large(2 * c * per + ring_nbytes)
            # obs at the slot, next_obs at the window's last slot: two mirrors, gathered apart
            mirrors = tuple(
                Columns(c, {f"{part}.{k}": (self.obs_shape[k], dtype[k]) for k in self.obs_keys}, self.device)
                for part in ("obs", "next_obs")
            )
            columns: dict[str, npt.NDArray[Any]] = {**mirrors[0].host, **mirrors[1].host}
            for k in self.obs_keys:
                shape = self.obs_shape[k]
                columns[f"stream_next_obs.{k}"] = np.zeros((self.num_streams, *shape), dtype=dtype[k])
            columns["stream_live"] = np.zeros(self.num_streams, dtype=np.bool_)
            return _Storage(dtype, None, None, columns, mirrors)
        frame_nbytes = dtype.itemsize * math.prod(self.obs_shape)
        f = self._frame_capacity_for(dtype)
        warn_if_too_large(f * frame_nbytes + ring_nbytes)
        pool = FramePool(f, self.obs_shape, dtype, stack, self.num_streams, self.device)
        return _Storage(dtype, f, pool)

    def _frame_capacity_for(self, dtype: np.dtype[Any]) -> int:
        if self._frame_capacity_arg is not None:
            return self._frame_capacity_arg
        frame_nbytes = dtype.itemsize * math.prod(self.obs_shape)
        small = frame_nbytes <= _SMALL_FRAME_BYTES
        extra = self.capacity if small else -(-self.capacity // _FRAME_SLACK_DIVISOR)
        f = self.capacity + extra + reserve_rows(self.frame_stack, self.num_streams)
        if f >= 2**31:
            raise ValueError(
                f"frame_capacity should be below 2**31, but got frame_capacity={f} (from capacity)"
            )
        return f

    def _attach(self, storage: _Storage | None) -> None:
        self._storage = storage
        self.obs_dtype = None if storage is None else storage.dtype
        self.frame_capacity = None if storage is None else storage.frame_capacity
        self.frame_pool = None if storage is None else storage.pool
        self._float_obs = isinstance(self.obs_dtype, np.dtype) and self.obs_dtype.kind in "fc"

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
        arrays = (self._obs_rows, self._next_rows, self._stream_ended, self._evicted)
        total = sum(a.nbytes for a in arrays) + self._columns.nbytes  # a device mirror included
        if self._storage is not None:
            total += sum(a.nbytes for a in self._storage.columns.values())
            total += sum(cols.mirror_nbytes for cols in self._storage.mirrors)
            if self._storage.pool is not None:
                total += self._storage.pool.nbytes
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

    def _store_dict(
        self, obs: dict[str, Any], next_obs: dict[str, Any], stream: int
    ) -> tuple[int, int, bool]:
        """Dict observations: per-key columns; evicts the oldest transition when full."""
        assert self._storage is not None and self.obs_keys is not None
        cols, c, n = self._storage.columns, self.capacity, 0
        if self._head - self._tail >= c:
            self._evicted[0] = self._tail % c
            self._tail += 1
            n = 1
        slot = self._head % c
        live = cols["stream_live"]
        continued = bool(live[stream]) and all(
            np.array_equal(cols[f"stream_next_obs.{k}"][stream], obs[k]) for k in self.obs_keys
        )
        for k in self.obs_keys:
            cols[f"obs.{k}"][slot] = obs[k]
            cols[f"next_obs.{k}"][slot] = next_obs[k]
            cols[f"stream_next_obs.{k}"][stream] = next_obs[k]
        live[stream] = True
        return slot, n, continued

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
        swapped = [self._obs_rows, self._next_rows]
        swapped += [a for name, a in self._columns.host.items() if name != "generation"]
        if self._storage is not None:
            swapped += [
                a for name, a in self._storage.columns.items() if name.startswith(("obs.", "next_obs."))
            ]
        for array in swapped:
            array[both] = array[back]
        self._columns.resend(both)
        if self._storage is not None:
            for cols in self._storage.mirrors:
                cols.resend(both)

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
        sums unrounded) stored in order; returns what changed."""
        n = action_a.shape[0]
        empty = np.empty(0, dtype=np.int64)
        if n == 0:
            return Inserted(empty, empty, empty, empty)
        if self._storage is None:
            self._attach(self._allocate(dtype))
        if self.frame_pool is not None:
            obs_a = self.frame_pool.as_words(obs_a)
            next_a = self.frame_pool.as_words(next_a)
            obs_rows: Any = obs_a
            next_rows: Any = next_a
        else:
            obs_rows = [{k: v[i] for k, v in obs_a.items()} for i in range(n)]
            next_rows = [{k: v[i] for k, v in next_a.items()} for i in range(n)]
        slots = np.empty(n, dtype=np.int64)
        until = np.empty(n, dtype=np.int64)
        evicted: list[IntArray] = []
        completed: list[IntArray] = []
        total, stored, head0 = 0, 0, self._head
        pool, nstep = self.frame_pool, self._nstep
        ended, warn_on_break = self._stream_ended, pool is not None and self.frame_stack > 1
        try:
            # Per row, in order: the frames (deduplicated against the stream's last stack, the
            # pool's reference counts), the ring's evictions and the n-step windows depend on the
            # rows before.  The per-transition columns do not: written once below.
            for i in range(n):
                stream = int(ids[i])
                tail0, head = self._tail, self._head
                if pool is not None:
                    expected = not ended[stream] and pool.stream_live(stream)
                    slot, self._tail, k, continued = pool.store(
                        obs_rows[i],
                        next_rows[i],
                        stream,
                        self._obs_rows,
                        self._next_rows,
                        tail0,
                        head,
                        self._evicted,
                    )
                else:
                    slot, k, continued = self._store_dict(obs_rows[i], next_rows[i], stream)
                    expected = False
                slots[i] = slot
                stored = i + 1
                end = bool(ends[i])
                ended[stream] = end
                self._head = head + 1
                if warn_on_break and expected and not continued:
                    warnings.warn(
                        f"obs does not continue the last transition of stream {stream} and was stored "
                        "in full: pass episode_end=True at the end of an episode, and one stream= per "
                        "environment when several share the memory",
                        RuntimeWarning,
                        stacklevel=4,
                    )
                if k:
                    out = self._evicted[:k].copy()
                    evicted.append(out)
                    total += k
                    if nstep is not None:
                        nstep.evict(out, np.arange(tail0, tail0 + k, dtype=np.int64))
                if nstep is not None:
                    done = nstep.push(
                        slot,
                        head,
                        stream,
                        float(rewards[i]),
                        float(discounts[i]),
                        episode_end=end,
                        continues=bool(continued),
                        out=self._completed,
                    )
                    if done.shape[0]:
                        completed.append(done.copy())
                until[i] = total
        finally:
            self._write_columns(slots[:stored], head0, action_a, rewards, discounts, extra_rows)
        if self.frame_pool is not None:
            self.frame_pool.flush()  # a vector step's new frames in one write on a device
        gone = np.concatenate(evicted) if evicted else empty
        if self._nstep is None:
            # a slot written here and evicted later in the call is not drawable
            ready = slots if total == 0 else slots[self._generation[slots] >= self._tail]
        elif not completed:
            ready = empty
        else:
            ready = np.concatenate(completed)
            if n > 1 and (total or ready.shape[0] > 1):
                ready = ready[self._nstep.is_complete(ready)]
                _, first = np.unique(ready, return_index=True)
                ready = ready[np.sort(first)]
        return Inserted(slots, gone, until, ready)

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
        """Read on the host (numpy), or on the device: the host computes the frame rows (and under
        n-step the windows' last slots, rewards and discounts) and sends them with the slots and
        weights in one copy; the frames and columns are gathered there."""
        nstep = self._nstep
        last = idx if nstep is None else nstep.last[idx]
        pool, stack = self.frame_pool, self.frame_stack
        rows: npt.NDArray[Any] | None = None
        shift = 0
        if pool is not None:
            obs_rows, next_rows = self._obs_rows[idx], self._next_rows[last]
            # next_obs sharing all but its newest `shift` frames with obs (1 for one step, n for
            # n-step windows none of which ended early): gather each frame once and return two
            # overlapping views of the (k, frame_stack + shift, ...) result
            s = 1 if nstep is None else self.n_step
            if 0 < s < stack and np.array_equal(obs_rows[:, s:], next_rows[:, :-s]):
                shift = s
            rows = (
                np.concatenate((obs_rows, next_rows[:, -shift:]), axis=1)
                if shift
                else np.stack((obs_rows, next_rows), axis=1)  # (k, 2, stack)
            )
        storage = self._storage
        assert storage is not None
        obs: Any
        next_obs: Any
        batch_weights: Any = weights
        if self._reader is None:
            columns: dict[str, Any] = {}
            if nstep is not None:
                columns["reward"], columns["discount"] = nstep.reward[idx], nstep.discount[idx]
            for name, array in self._columns.host.items():
                if name not in columns:
                    columns[name] = array[idx]
            if pool is None:
                assert self.obs_keys is not None
                cols = storage.columns
                obs = {k: cols[f"obs.{k}"][idx] for k in self.obs_keys}
                next_obs = {k: cols[f"next_obs.{k}"][last] for k in self.obs_keys}
            else:
                assert rows is not None
                both = pool.gather(rows)
        else:
            head = self._head
            ints: list[npt.NDArray[Any]] = [idx]
            if pool is None and nstep is not None:
                ints.append(last)  # dict next_obs at the windows' last slots
            if rows is not None:
                ints.append(rows)
            floats = [] if nstep is None else [nstep.reward[idx], nstep.discount[idx]]
            if weights is not None:
                floats.append(weights)
            index, values = self._reader.send(ints, floats)
            self._columns.sync(head)
            columns = self._columns.gather(index[0])
            if nstep is not None:
                columns["reward"], columns["discount"] = values[0], values[1]
            if weights is not None:
                batch_weights = values[-1]
            if pool is None:
                assert self.obs_keys is not None
                for mirror in storage.mirrors:
                    mirror.sync(head)
                obs_cols = storage.mirrors[0].gather(index[0])
                next_cols = storage.mirrors[1].gather(index[1] if nstep is not None else index[0])
                obs = {k: obs_cols[f"obs.{k}"] for k in self.obs_keys}
                next_obs = {k: next_cols[f"next_obs.{k}"] for k in self.obs_keys}
            else:
                assert rows is not None and isinstance(pool.storage, TorchFrames)
                pool.flush()
                both = pool.storage.as_frames(pool.storage.gather_bytes(index[-1]), rows.shape)
        if pool is not None:
            if shift:
                obs, next_obs = both[:, :stack], both[:, shift:]
            else:
                obs, next_obs = both[:, 0], both[:, 1]
                if stack == 1:
                    obs, next_obs = obs[:, 0], next_obs[:, 0]
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
    # The ring's state arrays, each the attribute ``_<name>``; then the extras (``extra.<name>``)
    # and the observation storage's arrays (the frame pool's, or ``obs.<key>``, ``next_obs.<key>``,
    # ``stream_next_obs.<key>``, ``stream_live`` for dict observations).  Their dtypes and shapes
    # are the spec a loaded array must match exactly.  New per-slot arrays join this tuple.
    _RING_ARRAYS = ("obs_rows", "next_rows", "action", "reward", "discount", "generation", "stream_ended")

    def _state_arrays(self, *, pool: bool = True) -> dict[str, npt.NDArray[Any]]:
        """The live arrays by state name (the frame pool's, its frames a host copy on a device,
        unless ``pool=False``)."""
        arrays = {name: getattr(self, f"_{name}") for name in self._RING_ARRAYS}
        arrays.update({f"extra.{name}": column for name, column in self._extra.items()})
        storage = self._storage
        if storage is not None:
            if storage.pool is None:
                arrays.update(storage.columns)
            elif pool:
                arrays.update(storage.pool.state_arrays())
        return arrays

    def _state_spec(self, storage: _Storage | None) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """Dtype and shape of each state array with ``storage`` (no copy of frames on a device)."""
        spec = {
            name: (a.dtype, a.shape)
            for name, a in self._state_arrays(pool=False).items()
            if name in self._RING_ARRAYS or name.startswith("extra.")
        }
        if storage is not None:
            if storage.pool is None:
                spec.update({name: (a.dtype, a.shape) for name, a in storage.columns.items()})
            else:
                spec.update(storage.pool.state_spec())
        return spec

    def _counters(self) -> dict[str, int]:
        counters = {"tail": self._tail, "head": self._head}
        if self.frame_pool is not None:
            counters["nfree"] = self.frame_pool.num_free
        return counters

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
        if checked.storage is not self._storage:
            self._attach(checked.storage)
        arrays, counters = checked.arrays, checked.counters
        for name, target in self._state_arrays(pool=False).items():
            target[...] = arrays[name]
        self._columns.invalidate()  # the device mirrors take every row at the next read
        if self._storage is not None:
            for cols in self._storage.mirrors:
                cols.invalidate()
        if self.frame_pool is not None:  # frames (to the device), bookkeeping, dedup cache
            self.frame_pool.commit_state(arrays, counters["nfree"])
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

    def _checked_storage(self, config: dict[str, Any]) -> _Storage | None:
        """The observation storage a state's config asks for: this memory's, a new one (a memory
        built with ``obs_dtype=None`` takes the state's dtype), or none (nothing added yet)."""
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
            return None
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
        if self._storage is not None and self._same_dtype(dtype):
            storage = self._storage
        else:
            capacity = None if self.obs_keys is not None else self._frame_capacity_for(dtype)
            if not same_config_value(config["frame_capacity"], capacity):
                raise ValueError(
                    f"state_dict config frame_capacity should be {capacity!r}, "
                    f"but got {config['frame_capacity']!r}"
                )
            storage = self._allocate(dtype)
        if not same_config_value(config["frame_capacity"], storage.frame_capacity):
            raise ValueError(
                f"state_dict config frame_capacity should be {storage.frame_capacity!r}, "
                f"but got {config['frame_capacity']!r}"
            )
        return storage

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
        storage = self._checked_storage(config)
        targets = self._state_spec(storage)
        counter_names = (
            ("tail", "head", "nfree")
            if storage is not None and storage.pool is not None
            else ("tail", "head")
        )
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
        self._check_invariants(arrays, counters, "state_dict ", storage)
        nstep = self._checked_nstep(state["nstep"], arrays["generation"], counters["tail"])
        vector = self._checked_vector(state["vector"])
        return CheckedState(arrays, counters, storage, nstep, vector)

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
        self._check_invariants(self._state_arrays(), self._counters(), "", self._storage)
        if self.frame_pool is not None:
            self.frame_pool.check_cache()

    def _check_invariants(
        self, a: dict[str, npt.NDArray[Any]], counters: dict[str, int], prefix: str, storage: _Storage | None
    ) -> None:
        c = self.capacity
        tail, head = counters["tail"], counters["head"]

        def fail(key: str, message: str) -> None:
            raise ValueError(f"{prefix}{key} {message}")

        if not 0 <= head < 2**62:
            fail("head", f"should lie in [0, 2**62), but got head={head}")
        if storage is None and head != 0:
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
        pool = None if storage is None else storage.pool
        if pool is not None:
            f = pool.frame_capacity
            for key in ("obs_rows", "next_rows"):
                rows = a[key]
                bad = (rows < 0) | (rows >= f)
                if bad.any():
                    where = np.unravel_index(int(np.argmax(bad)), rows.shape)
                    index = "".join(f"[{i}]" for i in where)
                    fail(key, f"should hold frame rows in [0, {f}), but got {key}{index}={rows[where]}")
        stream_live = a["stream_live"] if storage is not None else np.zeros(self.num_streams, np.bool_)
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
        if pool is not None:
            pool.check_state(a, counters["nfree"], [a["obs_rows"][live], a["next_rows"][live]], prefix)
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
        finite_checked = ["action", *(f"extra.{name}" for name in self._extra)]
        if storage is not None and pool is None:
            finite_checked += [k for k in storage.columns if k.startswith(("obs.", "next_obs."))]
        for key in finite_checked:
            column = a[key]
            if column.dtype.kind not in "fc":
                continue
            finite = np.isfinite(column[live].reshape(int(live.sum()), -1)).all(axis=1)
            if not finite.all():
                j = int(np.flatnonzero(live)[np.argmin(finite)])
                fail(key, f"should be finite in live slots, but got {key}[{j}]={column[j]!r}")
        if storage is not None and pool is None:
            for key in storage.columns:
                floats = key.startswith("stream_next_obs.") and a[key].dtype.kind in "fc"
                if floats and not np.isfinite(a[key][stream_live]).all():
                    fail(key, "should be finite for streams with transitions")
