"""Replay memory for RL loops: ring storage of transitions with shared frames, and prioritized replay.

:class:`ReplayMemory` keeps the last ``capacity`` transitions ``(s_t, a_t, r_t, γ_t, s_{t+1})`` in
preallocated numpy arrays.  Observations that are stacks of ``frame_stack`` frames (Atari: four
84x84 frames) are not stored per transition: every distinct frame is stored once in a frame pool and
each transition keeps the pool rows of its ``s_t`` and ``s_{t+1}`` stacks, so a stack is rebuilt on
read by one fancy-indexing gather.  :class:`PrioritizedReplay` pairs the memory with a
:class:`~prisample.PrioritizedSampler` over its slots (Schaul et al. 2016, Algorithm 1).

Storage layout (``frame_stack = 4``, one stream, slot ``i`` holds transition ``t``)::

    frame pool   rows:  ... | f_{t-3} | f_{t-2} | f_{t-1} | f_t | f_{t+1} | ...   (one copy each)
                               ▲          ▲         ▲       ▲       ▲
    obs_rows[i]  = [row(f_{t-3}), row(f_{t-2}), row(f_{t-1}), row(f_t)]           s_t
    next_rows[i] = [row(f_{t-2}), row(f_{t-1}), row(f_t), row(f_{t+1})]           s_{t+1}

Each frame carries a reference count (transitions and the streams' last stacks that use it) and
returns to a free list when it reaches zero, so a stored transition can never see a frame that was
overwritten: stacks are exact across episode starts, interleaved streams and wrap-around.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from prisample._validation import as_indices, as_priorities, check_positive_int, to_numpy
from prisample.sampler import Draw, PrioritizedSampler
from prisample.weights import LinearSchedule, WeightNorm

STATE_VERSION = 1  # ReplayMemory's state
# PrioritizedReplay's state; 2 adds memory_head and memory_tail (the memory it was saved with).
REPLAY_STATE_VERSION = 2
_LOADABLE_REPLAY_VERSIONS = (1, 2)
# Extra frame-pool rows per transition slot beyond one frame each: room for episode starts
# (documented bound in ReplayMemory's docstring).
_FRAME_SLACK_DIVISOR = 64
_SMALL_FRAME_BYTES = 1024

IntArray = npt.NDArray[np.int64]
Batch = dict[str, npt.NDArray[Any]]


@numba.njit(cache=True)
def _release(refs: np.ndarray, free: np.ndarray, nfree: int, rows: np.ndarray) -> int:
    for j in range(rows.shape[0]):
        row = rows[j]
        refs[row] -= 1
        if refs[row] == 0:
            free[nfree] = row
            nfree += 1
    return nfree


@numba.njit(cache=True)
def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    for i in range(a.shape[0]):  # noqa: SIM110 (numba compiles the loop, not a generator)
        if a[i] != b[i]:
            return False
    return True


@numba.njit(cache=True)
def _shifted(frames: np.ndarray, rows: np.ndarray, stack: np.ndarray) -> bool:
    """Whether frames ``rows[1:]`` equal ``stack[:-1]`` (a stack moved on by one frame)."""
    for j in range(stack.shape[0] - 1):  # noqa: SIM110 (numba compiles the loop, not a generator)
        if not _equal(frames[rows[j + 1]], stack[j]):
            return False
    return True


@numba.njit(cache=True)
def _plan_full(stack: np.ndarray, codes: np.ndarray, sources: np.ndarray, n_new: int, which: int) -> int:
    """Codes for a stack stored anew; repeated frames (a reset stack) share one row."""
    for j in range(stack.shape[0]):
        if j > 0 and _equal(stack[j], stack[j - 1]):
            codes[j] = codes[j - 1]
        else:
            sources[n_new, 0], sources[n_new, 1] = which, j
            n_new += 1
            codes[j] = -n_new
    return n_new


@numba.njit(cache=True)
def _add_kernel(
    frames: np.ndarray,
    refs: np.ndarray,
    free: np.ndarray,
    nfree: int,
    obs_rows: np.ndarray,
    next_rows: np.ndarray,
    generation: np.ndarray,
    stream_obs: np.ndarray,
    stream_next: np.ndarray,
    stream_live: np.ndarray,
    obs: np.ndarray,
    next_obs: np.ndarray,
    stream: int,
    tail: int,
    head: int,
    evicted: np.ndarray,
) -> tuple[int, int, int, int, bool]:
    """Store one transition's stacks (frames as machine words, one row per frame).

    A pool row is shared when its bytes equal the frame: ``obs`` equal to the stream's last
    ``next_obs`` or its last ``obs`` moved on by one frame, ``next_obs`` equal to ``obs`` (or the
    last ``next_obs``) moved on by one frame, repeated frames in a stack.  Codes ``>= 0`` are
    shared rows, ``-i-1`` the ``i``-th new frame.  Evicts the slot being written, then the oldest
    transitions until the new frames fit.  Returns ``(slot, nfree, tail, number evicted,
    obs continued the stream)``.
    """
    stack, capacity = obs.shape[0], obs_rows.shape[0]
    live = stream_live[stream]
    last_obs, last_next = stream_obs[stream], stream_next[stream]
    obs_codes = np.empty(stack, dtype=np.int64)
    next_codes = np.empty(stack, dtype=np.int64)
    sources = np.empty((2 * stack, 2), dtype=np.int64)  # (0: obs / 1: next_obs, frame index)
    n_new = 0
    continued = live
    if live:
        for j in range(stack):
            if not _equal(frames[last_next[j]], obs[j]):
                continued = False
                break
    if continued:
        obs_codes[:] = last_next
    elif live and stack > 1 and _shifted(frames, last_obs, obs):  # n-step: obs moved on by one
        obs_codes[: stack - 1] = last_obs[1:]
        sources[0, 0], sources[0, 1] = 0, stack - 1
        n_new = 1
        obs_codes[stack - 1] = -1
        continued = True
    else:
        n_new = _plan_full(obs, obs_codes, sources, n_new, 0)
    one_new = True  # next_obs = a stack moved on by one frame: only its newest frame is new
    for j in range(stack - 1):
        if not _equal(next_obs[j], obs[j + 1]):
            one_new = False
            break
    if one_new:
        next_codes[: stack - 1] = obs_codes[1:]
    elif live and _shifted(frames, last_next, next_obs):  # n-step: last next_obs moved on by one
        next_codes[: stack - 1] = last_next[1:]
        one_new = True
    else:
        n_new = _plan_full(next_obs, next_codes, sources, n_new, 1)
    if one_new:
        sources[n_new, 0], sources[n_new, 1] = 1, stack - 1
        n_new += 1
        next_codes[stack - 1] = -n_new
    n_evicted = 0
    while tail < head and (head - tail >= capacity or nfree < n_new):
        slot = tail % capacity
        nfree = _release(refs, free, nfree, obs_rows[slot])
        nfree = _release(refs, free, nfree, next_rows[slot])
        evicted[n_evicted] = slot
        n_evicted += 1
        tail += 1
    if nfree < n_new:  # never: the pool reserves two stacks per stream and two for this transition
        raise RuntimeError("frame pool exhausted")
    rows = np.empty(n_new, dtype=np.int64)
    for i in range(n_new):
        nfree -= 1
        rows[i] = free[nfree]
        frames[rows[i]] = obs[sources[i, 1]] if sources[i, 0] == 0 else next_obs[sources[i, 1]]
    slot = head % capacity
    for j in range(stack):
        code = obs_codes[j]
        obs_rows[slot, j] = code if code >= 0 else rows[-code - 1]
        code = next_codes[j]
        next_rows[slot, j] = code if code >= 0 else rows[-code - 1]
        refs[obs_rows[slot, j]] += 2  # the transition's reference and the stream's
        refs[next_rows[slot, j]] += 2
    generation[slot] = head
    if live:
        nfree = _release(refs, free, nfree, last_obs)
        nfree = _release(refs, free, nfree, last_next)
    stream_obs[stream] = obs_rows[slot]
    stream_next[stream] = next_rows[slot]
    stream_live[stream] = True
    return slot, nfree, tail, n_evicted, continued


def _cast(array: npt.NDArray[Any], dtype: np.dtype[Any], name: str) -> npt.NDArray[Any]:
    """``array`` as ``dtype``: same-kind casts, and integers that fit an integer dtype.

    A float or complex result must be finite: a value that overflows the storage dtype (1e300 as
    float32) or was not finite to begin with raises ``ValueError`` naming ``name``.
    """
    if array.dtype != dtype:
        if array.dtype.kind in "biu" and dtype.kind in "iu":
            info = np.iinfo(dtype)
            if array.size and (array.min() < info.min or array.max() > info.max):
                raise ValueError(
                    f"{name} should fit {dtype}, but got values in [{array.min()}, {array.max()}]"
                )
        elif not np.can_cast(array.dtype, dtype, "same_kind"):
            raise TypeError(
                f"{name} should have dtype {dtype} (or cast to it safely), but got dtype {array.dtype}"
            )
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below, by name
            cast = array.astype(dtype)
        _check_finite(cast, name, array)
        return cast
    _check_finite(array, name, array)
    return array


def _check_finite(array: npt.NDArray[Any], name: str, given: npt.NDArray[Any]) -> None:
    """Raise unless a float or complex ``array`` (``given`` cast to storage) is finite."""
    if array.dtype.kind in "fc" and array.size:
        finite = np.isfinite(array)
        if not finite.all():
            where = np.unravel_index(int(np.argmin(finite)), array.shape)
            index = "".join(f"[{i}]" for i in where)
            raise ValueError(
                f"{name} should be finite (as {array.dtype}), but got {name}{index}={given[where].item()!r}"
            )


# |x| at or above this rounds to inf as float32 (float32's largest value plus half an ulp).
_FLOAT32_OVERFLOW = 2.0**128 - 2.0**103


def _real(value: Any, name: str, *, unit: bool = False) -> float:
    """``value`` as a float that float32 holds finite (in ``[0, 1]`` when ``unit``)."""
    if type(value) is float:  # the common case skips the slower ABC checks
        number = value
    else:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            array = to_numpy(value, name)
            if array.size != 1 or array.dtype.kind not in "fiu":
                raise TypeError(f"{name} should be a real number, but got {name}={value!r}")
            value = array.reshape(())
        number = float(value)
    if not abs(number) < _FLOAT32_OVERFLOW:  # NaN too
        raise ValueError(f"{name} should be finite (as float32), but got {name}={number!r}")
    if unit and not 0.0 <= number <= 1.0 and not 0.0 <= np.float32(number) <= 1.0:
        raise ValueError(f"{name} should lie in [0, 1], but got {name}={number!r}")
    return number


def _warn_if_too_large(nbytes: int) -> None:
    """Warn before preallocating more than the memory available (the pages are touched later)."""
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return
    if nbytes > available:
        warnings.warn(
            f"the replay memory needs {nbytes / 2**30:.1f} GiB but only {available / 2**30:.1f} GiB "
            "are available: the process may be killed as it fills up",
            ResourceWarning,
            stacklevel=3,
        )


def _shape(value: Any, name: str) -> tuple[int, ...]:
    try:
        shape = tuple(value)
    except TypeError:
        raise TypeError(f"{name} should be a tuple of integers, but got {name}={value!r}") from None
    for size in shape:
        check_positive_int(size, f"{name}[...]")
    return tuple(int(size) for size in shape)


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
    ) -> None:
        self.capacity = check_positive_int(capacity, "capacity")
        self.obs_shape = _shape(obs_shape, "obs_shape")
        self.obs_dtype = self._dtype(obs_dtype, "obs_dtype")
        self.frame_stack = check_positive_int(frame_stack, "frame_stack")
        self.action_shape = _shape(action_shape, "action_shape")
        self.action_dtype = self._dtype(action_dtype, "action_dtype")
        self.num_streams = check_positive_int(num_streams, "num_streams")
        stack = self.frame_stack
        reserve = 2 * stack * (self.num_streams + 1)  # the streams' last stacks and one new transition
        frame_nbytes = self.obs_dtype.itemsize * math.prod(self.obs_shape)
        if frame_capacity is None:
            extra = self.capacity if frame_nbytes <= _SMALL_FRAME_BYTES else -(-self.capacity // 64)
            frame_capacity = self.capacity + extra + reserve
        self.frame_capacity = check_positive_int(frame_capacity, "frame_capacity", minimum=reserve)
        if self.frame_capacity >= 2**31:
            raise ValueError(f"frame_capacity should be below 2**31, but got frame_capacity={frame_capacity}")
        self._stack_shape = (stack, *self.obs_shape) if stack > 1 else self.obs_shape
        f, c = self.frame_capacity, self.capacity
        action_nbytes = self.action_dtype.itemsize * math.prod(self.action_shape)
        _warn_if_too_large(f * frame_nbytes + c * (8 * stack + 16 + action_nbytes))
        self._frames = np.zeros((f, *self.obs_shape), dtype=self.obs_dtype)
        # Frames are compared and copied as the widest machine words that divide their size.
        words = (np.dtype(np.uint64), np.dtype(np.uint32), np.dtype(np.uint16), np.dtype(np.uint8))
        self._word = next(w for w in words if frame_nbytes % w.itemsize == 0)
        self._float_obs = self.obs_dtype.kind in "fc"  # checked finite on every add
        self._frame_words = self._frames.reshape(f, -1).view(self._word)
        self._refs = np.zeros(f, dtype=np.int32)
        self._free = np.arange(f - 1, -1, -1, dtype=np.int32)  # a stack: rows 0, 1, ... go first
        self._nfree = f
        self._obs_rows = np.zeros((c, stack), dtype=np.int32)
        self._next_rows = np.zeros((c, stack), dtype=np.int32)
        self._action = np.zeros((c, *self.action_shape), dtype=self.action_dtype)
        self._reward = np.zeros(c, dtype=np.float32)
        self._discount = np.zeros(c, dtype=np.float32)
        self._generation = np.full(c, -1, dtype=np.int64)  # number of the transition in the slot
        self._stream_obs = np.zeros((self.num_streams, stack), dtype=np.int32)
        self._stream_next = np.zeros((self.num_streams, stack), dtype=np.int32)
        self._stream_live = np.zeros(self.num_streams, dtype=np.bool_)
        self._stream_ended = np.ones(self.num_streams, dtype=np.bool_)
        self._evicted = np.zeros(c + 1, dtype=np.int64)
        self._tail = 0  # transitions numbered [tail, head) are live
        self._head = 0

    @staticmethod
    def _dtype(value: npt.DTypeLike, name: str) -> np.dtype[Any]:
        try:
            dtype = np.dtype(value)
        except TypeError:
            raise TypeError(f"{name} should be a numpy dtype, but got {name}={value!r}") from None
        if dtype.kind not in "biufc":
            raise TypeError(f"{name} should be a numeric or bool dtype, but got {name}={dtype}")
        return dtype

    # -- properties -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._head - self._tail

    @property
    def num_added(self) -> int:
        """Transitions added since construction (the next one gets this generation number)."""
        return self._head

    @property
    def num_frames(self) -> int:
        """Frames held in the pool (by live transitions and the streams' last stacks)."""
        return self.frame_capacity - self._nfree

    @property
    def nbytes(self) -> int:
        """Bytes held in the memory's arrays (frame pool, rows, actions, rewards, bookkeeping)."""
        arrays = (
            self._frames, self._refs, self._free, self._obs_rows, self._next_rows, self._action,
            self._reward, self._discount, self._generation, self._stream_obs, self._stream_next,
            self._stream_live, self._stream_ended, self._evicted,
        )  # fmt: skip
        return sum(a.nbytes for a in arrays)

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
        return self._add(obs, action, reward, discount, next_obs, episode_end, stream)[0]

    def _add(
        self,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        episode_end: bool,
        stream: int,
    ) -> tuple[int, IntArray]:
        """:meth:`add` returning also the slots evicted to make room (the written slot included
        when it held a live transition)."""
        obs_w = self._stack_words(obs, "obs")
        next_w = self._stack_words(next_obs, "next_obs")
        action_a = _cast(
            np.asarray(action) if type(action) is int else to_numpy(action, "action"),
            self.action_dtype,
            "action",
        )
        if action_a.shape != self.action_shape:
            raise ValueError(f"action should have shape {self.action_shape}, but got shape {action_a.shape}")
        reward_f = _real(reward, "reward")
        discount_f = _real(discount, "discount", unit=True)
        if type(episode_end) is not bool and not isinstance(episode_end, np.bool_):
            raise TypeError(f"episode_end should be a bool, but got episode_end={episode_end!r}")
        if type(stream) is not int and (isinstance(stream, bool) or not isinstance(stream, numbers.Integral)):
            raise TypeError(f"stream should be an integer, but got stream={stream!r}")
        if not 0 <= stream < self.num_streams:
            raise ValueError(f"stream should lie in [0, {self.num_streams}), but got stream={stream}")

        return self._commit(obs_w, next_w, action_a, reward_f, discount_f, bool(episode_end), int(stream))

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
        expected = self._stream_live[stream] and not self._stream_ended[stream]
        slot, self._nfree, self._tail, n, continued = _add_kernel(
            self._frame_words, self._refs, self._free, self._nfree, self._obs_rows, self._next_rows,
            self._generation, self._stream_obs, self._stream_next, self._stream_live,
            obs_w, next_w, stream, self._tail, self._head, self._evicted,
        )  # fmt: skip
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
        return np.array(
            [
                slot
                for slot, _ in self._add_many(obs, action, reward, discount, next_obs, episode_end, streams)
            ],
            dtype=np.int64,
        )

    def _add_many(
        self,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        episode_end: npt.ArrayLike | None,
        streams: npt.ArrayLike | None,
    ) -> list[tuple[int, IntArray]]:
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
        obs_w = obs_a.reshape(n, self.frame_stack, -1).view(self._word)
        next_w = next_a.reshape(n, self.frame_stack, -1).view(self._word)
        return [
            self._commit(obs_w[i], next_w[i], action_a[i], float(rewards[i]), float(discounts[i]),
                         bool(ends[i]), int(ids[i]))
            for i in range(n)
        ]  # fmt: skip

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
        return np.ascontiguousarray(_cast(array, dtype, name))

    def _stack_words(self, value: npt.ArrayLike, name: str) -> npt.NDArray[Any]:
        """``value`` checked and viewed as ``(frame_stack, words per frame)`` machine words."""
        array = value if isinstance(value, np.ndarray) else to_numpy(value, name)
        if array.shape != self._stack_shape:
            raise ValueError(f"{name} should have shape {self._stack_shape}, but got shape {array.shape}")
        if array.dtype != self.obs_dtype or self._float_obs:
            array = _cast(array, self.obs_dtype, name)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        return array.reshape(self.frame_stack, -1).view(self._word)

    # -- reads ----------------------------------------------------------------------------------
    def valid(self, slots: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each slot holds a live transition (added and not yet evicted)."""
        idx = self._slots(slots)
        return np.asarray(self._generation[idx] >= self._tail)

    def generations(self, slots: npt.ArrayLike) -> IntArray:
        """Number of the transition each slot holds (``-1`` never written): changes on rewrite."""
        return self._generation[self._slots(slots)].copy()

    def get(self, slots: npt.ArrayLike) -> Batch:
        """Transitions in ``slots`` as arrays: ``obs``, ``action``, ``reward`` (float32),
        ``discount`` (float32), ``next_obs`` and ``generation`` (the transition's number, int64).

        ``obs``/``next_obs`` have shape ``(k, frame_stack, *obs_shape)``, or ``(k, *obs_shape)``
        when ``frame_stack = 1``; they may be views of one array holding each frame once, so
        write to copies.  Every slot must hold a live transition.
        """
        idx = self._slots(slots)
        dead = self._generation[idx] < self._tail
        if dead.any():
            j = int(np.argmax(dead))
            raise ValueError(f"slots should hold live transitions, but got slots[{j}]={idx[j]} (empty)")
        return self._gather(idx)

    def _gather(self, idx: IntArray) -> Batch:
        obs_rows, next_rows = self._obs_rows[idx], self._next_rows[idx]
        stack = self.frame_stack
        if stack > 1 and np.array_equal(obs_rows[:, 1:], next_rows[:, :-1]):
            # next_obs shares all but its newest frame with obs: gather each frame once and
            # return two overlapping views of the (k, frame_stack + 1, ...) result
            both = self._frames[np.concatenate((obs_rows, next_rows[:, -1:]), axis=1)]
            obs, next_obs = both[:, :stack], both[:, 1:]
        else:
            both = self._frames[np.stack((obs_rows, next_rows), axis=1)]  # (k, 2, stack, ...)
            obs, next_obs = both[:, 0], both[:, 1]
            if stack == 1:
                obs, next_obs = obs[:, 0], next_obs[:, 0]
        return {
            "obs": obs,
            "action": self._action[idx],
            "reward": self._reward[idx],
            "discount": self._discount[idx],
            "next_obs": next_obs,
            "generation": self._generation[idx],
        }

    def _slots(self, slots: npt.ArrayLike, name: str = "slots") -> IntArray:
        """``slots`` checked in range; errors name the argument as the caller's caller calls it."""
        idx = as_indices(slots, name)
        bad = (idx < 0) | (idx >= self.capacity)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"{name} should lie in [0, {self.capacity}), but got {name}[{j}]={idx[j]}")
        return idx

    # -- checkpointing --------------------------------------------------------------------------
    # The state's arrays, each the attribute ``_<name>``: its dtype and shape are the spec a
    # loaded array must match exactly.  New per-slot or per-frame arrays join this tuple.
    _ARRAYS = (
        "frames", "refs", "free", "obs_rows", "next_rows", "action", "reward", "discount",
        "generation", "stream_obs", "stream_next", "stream_live", "stream_ended",
    )  # fmt: skip
    _COUNTERS = ("nfree", "tail", "head")

    def _state_arrays(self) -> dict[str, npt.NDArray[Any]]:
        return {name: getattr(self, f"_{name}") for name in self._ARRAYS}

    def _counters(self) -> dict[str, int]:
        return {"nfree": self._nfree, "tail": self._tail, "head": self._head}

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
        self._commit_state(self._checked_state(state))

    def _commit_state(self, checked: tuple[dict[str, npt.NDArray[Any]], dict[str, int]]) -> None:
        """Assign a state that :meth:`_checked_state` accepted (cannot fail: dtypes and shapes match)."""
        arrays, counters = checked
        for name, array in arrays.items():
            getattr(self, f"_{name}")[...] = array
        self._nfree, self._tail, self._head = counters["nfree"], counters["tail"], counters["head"]

    def _checked_state(self, state: Any) -> tuple[dict[str, npt.NDArray[Any]], dict[str, int]]:
        """The state's arrays and counters, after checking everything :meth:`load_state_dict`
        will assign; raises ``ValueError``/``TypeError`` naming the key."""
        if not isinstance(state, dict):
            raise TypeError(f"state should be a dict from state_dict(), but got {type(state).__name__}")
        version = state.get("version")
        if type(version) is not int or version != STATE_VERSION:
            raise ValueError(f"state_dict version should be {STATE_VERSION}, but got version={version!r}")
        _check_keys(state, {"version", "config", *self._ARRAYS, *self._COUNTERS}, "state_dict")
        config = state["config"]
        if not isinstance(config, dict):
            raise TypeError(f"state_dict config should be a dict, but got {type(config).__name__}")
        mine = self._config()
        _check_keys(config, set(mine), "state_dict config")
        for key, value in mine.items():
            if not _same_config_value(config[key], value):
                raise ValueError(f"state_dict config {key} should be {value!r}, but got {config[key]!r}")
        arrays = {}
        for name, target in self._state_arrays().items():
            arrays[name] = array = _as_state_array(state[name], f"state_dict {name}")
            if array.dtype != target.dtype or array.shape != target.shape:
                raise ValueError(
                    f"state_dict {name} should be {target.dtype}{list(target.shape)}, "
                    f"but got {array.dtype}{list(array.shape)}"
                )
        counters = {}
        for name in self._COUNTERS:
            value = state[name]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"state_dict {name} should be an integer, but got {name}={value!r}")
            counters[name] = int(value)
        self._check_invariants(arrays, counters, "state_dict ")
        return arrays, counters

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

    def _check_invariants(
        self, a: dict[str, npt.NDArray[Any]], counters: dict[str, int], prefix: str
    ) -> None:
        c, f = self.capacity, self.frame_capacity
        nfree, tail, head = counters["nfree"], counters["tail"], counters["head"]

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
        for key in ("obs_rows", "next_rows", "stream_obs", "stream_next", "free"):
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
        uses = np.concatenate([
            a["obs_rows"][live].ravel(), a["next_rows"][live].ravel(),
            a["stream_obs"][stream_live].ravel(), a["stream_next"][stream_live].ravel(),
        ])  # fmt: skip
        count = np.bincount(uses, minlength=f)
        refs = a["refs"]
        if not np.array_equal(refs, count):
            j = int(np.argmax(refs != count))
            fail("refs", f"should count the uses of each frame row by live transitions and streams, "
                         f"but got refs[{j}]={refs[j]} for {count[j]} uses")  # fmt: skip
        unused = np.flatnonzero(count == 0)
        if nfree != unused.shape[0]:
            fail(
                "nfree",
                f"should be the number of unused frame rows ({unused.shape[0]}), but got nfree={nfree}",
            )
        listed = np.sort(a["free"][:nfree])
        if not np.array_equal(listed, unused):
            twice = np.flatnonzero(listed[1:] == listed[:-1])
            if twice.shape[0]:
                fail("free", f"should list each unused row once, but got row {listed[twice[0]]} twice")
            row = int(listed[np.argmax(count[listed] > 0)])
            fail("free", f"should list only unused frame rows, but got row {row}, used {count[row]} times")
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
        if self._float_obs:
            used_rows = np.flatnonzero(count)
            finite = np.isfinite(
                a["frames"][used_rows].reshape(used_rows.shape[0], math.prod(self.obs_shape))
            ).all(axis=1)
            if not finite.all():
                row = int(used_rows[np.argmin(finite)])
                fail("frames", f"should be finite in used rows, but got frames[{row}]={a['frames'][row]!r}")

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_frame_words"]  # a view of _frames: pickling and deepcopy would detach it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._frame_words = self._frames.reshape(self.frame_capacity, -1).view(self._word)


def _check_keys(state: dict[str, Any], expected: set[str], where: str) -> None:
    missing = sorted(expected - state.keys())
    if missing:
        raise ValueError(f"{where} is missing the key {missing[0]!r}")
    unexpected = sorted(map(repr, state.keys() - expected))
    if unexpected:
        raise ValueError(f"{where} has the unexpected key {unexpected[0]}")


def _same_config_value(value: Any, mine: Any) -> bool:
    """Whether a config entry equals this memory's (``True`` is not ``1``; shapes as lists too)."""
    if isinstance(mine, tuple):
        return (
            isinstance(value, (tuple, list)) and all(type(v) is int for v in value) and tuple(value) == mine
        )
    return type(value) is type(mine) and bool(value == mine)


def _as_state_array(value: Any, name: str) -> npt.NDArray[Any]:
    try:
        return to_numpy(value, name)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"{name} should be a numpy array, but got {type(value).__name__}") from error


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
    ``generations=batch["generation"]`` when updates may lag behind later draws.

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
        obs_shape: tuple[int, ...],
        *,
        frame_stack: int = 1,
        obs_dtype: npt.DTypeLike = np.uint8,
        action_shape: tuple[int, ...] = (),
        action_dtype: npt.DTypeLike = np.int64,
        num_streams: int = 1,
        frame_capacity: int | None = None,
        alpha: float = 0.6,
        beta: float | LinearSchedule = 0.4,
        eps: float = 1e-6,
        backend: str = "proportional",
        weight_norm: WeightNorm = "memory",
        seed: int | None = None,
    ) -> None:
        self.sampler = PrioritizedSampler(
            check_positive_int(capacity, "capacity"), alpha=alpha, beta=beta, eps=eps,
            backend=backend, weight_norm=weight_norm, size=0, seed=seed,
        )  # fmt: skip
        self.memory = ReplayMemory(
            capacity, obs_shape, obs_dtype=obs_dtype, frame_stack=frame_stack,
            action_shape=action_shape, action_dtype=action_dtype, num_streams=num_streams,
            frame_capacity=frame_capacity,
        )  # fmt: skip
        self._drawn = np.full(self.memory.capacity, -1, dtype=np.int64)  # generation at last draw
        self.dropped_updates = 0

    def __len__(self) -> int:
        return len(self.memory)

    @property
    def capacity(self) -> int:
        return self.memory.capacity

    @property
    def nbytes(self) -> int:
        """Bytes held by the memory, the sampler and the draw record."""
        return self.memory.nbytes + self.sampler.nbytes + self._drawn.nbytes

    def add(
        self,
        obs: npt.ArrayLike,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        episode_end: bool = False,
        stream: int = 0,
    ) -> int:
        """Store a transition (see :meth:`ReplayMemory.add`); it enters at the maximum priority."""
        slot, evicted = self.memory._add(obs, action, reward, discount, next_obs, episode_end, stream)
        self._admit(slot, evicted)
        return slot

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
        """:meth:`add` for ``n`` transitions at once (see :meth:`ReplayMemory.add_many`)."""
        added = self.memory._add_many(obs, action, reward, discount, next_obs, episode_end, streams)
        for slot, evicted in added:  # in order: each enters at the maximum of the memory it joins
            self._admit(slot, evicted)
        return np.array([slot for slot, _ in added], dtype=np.int64)

    def _admit(self, slot: int, evicted: IntArray) -> None:
        """The sampler's side of a write: evicted transitions leave, the new one enters at the
        maximum priority of what remains."""
        if evicted.shape[0]:
            self.sampler.remove(evicted)
        self.sampler.add(np.array([slot]))

    def sample(self, k: int) -> tuple[Batch, Draw]:
        """Draw ``k`` live transitions: ``(batch, draw)`` with ``batch`` as :meth:`ReplayMemory.get`
        returns it and ``draw`` the slots, importance weights and probabilities."""
        draw = self.sampler.sample(k)
        batch = self.memory._gather(draw.indices)
        self._drawn[draw.indices] = batch["generation"]
        return batch, draw

    def update_priorities(
        self, indices: npt.ArrayLike, priorities: npt.ArrayLike, *, generations: npt.ArrayLike | None = None
    ) -> None:
        """Set raw priorities (``|δ|``) of drawn slots; entries for rewritten slots are dropped.

        Accepts numpy arrays, torch tensors and lists; duplicates: the last entry wins.  The number
        of dropped entries accumulates in :attr:`dropped_updates`.
        """
        idx = self.memory._slots(indices, "indices")
        values = as_priorities(priorities, idx.shape[0])
        bad = ~((values >= 0.0) & (values < np.inf))
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"priorities should be finite and >= 0, but got priorities[{j}]={values[j]!r}")
        if generations is None:
            expected = self._drawn[idx]
        else:
            expected = as_indices(generations, "generations")
            if expected.shape != idx.shape:
                raise ValueError(
                    f"generations should have one value per index ({idx.shape[0]}), "
                    f"but got {expected.shape[0]}"
                )
        current = self.memory._generation[idx]
        keep = (current == expected) & (current >= self.memory._tail)
        if keep.all():
            self.sampler.update_priorities(idx, values)
            return
        self.dropped_updates += int(keep.shape[0] - np.count_nonzero(keep))
        if keep.any():
            self.sampler.update_priorities(idx[keep], values[keep])

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self, include_memory: bool = False, *, copy: bool = True) -> dict[str, Any]:
        """Sampler state, draw record and the memory's counters, plus the memory's state when
        ``include_memory`` (``copy`` as in :meth:`ReplayMemory.state_dict`)."""
        state: dict[str, Any] = {
            "version": REPLAY_STATE_VERSION,
            "sampler": self.sampler.state_dict(),
            "drawn": self._drawn.copy(),
            "dropped_updates": self.dropped_updates,
            "memory_head": self.memory._head,
            "memory_tail": self.memory._tail,
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
        version = state.get("version")
        if type(version) is not int or version not in _LOADABLE_REPLAY_VERSIONS:
            raise ValueError(
                f"state_dict version should be one of {_LOADABLE_REPLAY_VERSIONS}, "
                f"but got version={version!r}"
            )
        keys = {"version", "sampler", "drawn", "dropped_updates"}
        if version >= 2:
            keys |= {"memory_head", "memory_tail"}
        _check_keys(state, keys | ({"memory"} & state.keys()), "state_dict")
        counts = {}
        for key in keys - {"version", "sampler", "drawn"}:
            value = state[key]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"state_dict {key} should be an integer >= 0, but got {key}={value!r}")
            counts[key] = int(value)
        memory = None
        if "memory" in state:
            memory = self.memory._checked_state(state["memory"])
            head, tail = memory[1]["head"], memory[1]["tail"]
        else:
            head, tail = self.memory._head, self.memory._tail
        for key, mine in (("memory_head", head), ("memory_tail", tail)):
            if key in counts and counts[key] != mine:
                raise ValueError(
                    f"state_dict {key} should be {mine} (the memory's), but got {key}={counts[key]}: "
                    "the state was saved with another memory, or at another point of this one"
                )
        generation = memory[0]["generation"] if memory is not None else self.memory._generation
        drawn = _as_state_array(state["drawn"], "state_dict drawn")
        if drawn.shape != self._drawn.shape or drawn.dtype != self._drawn.dtype:
            raise ValueError(
                f"state_dict drawn should be int64{list(self._drawn.shape)}, "
                f"but got {drawn.dtype}{list(drawn.shape)}"
            )
        # A slot's draw record is -1 or a transition it has held: a number of that slot, not newer.
        slots = np.arange(self.capacity)
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
        live = generation >= tail
        if filled.shape != live.shape or not np.array_equal(filled, live):
            raise ValueError(
                "state_dict sampler priorities should be filled exactly in the memory's live slots "
                f"({int(live.sum())} of {live.shape[0]})"
            )
        self.sampler.load_state_dict(sampler_state)
        if memory is not None:
            self.memory._commit_state(memory)
        self._drawn[:] = drawn
        self.dropped_updates = counts["dropped_updates"]
