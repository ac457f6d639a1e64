"""n-step returns for a replay memory: windows accumulated per stream as transitions arrive.

A transition ``t`` added with reward ``r_t`` and per-step discount ``γ_t`` (0 where the episode
terminated) is replayed as the n-step transition (Sutton & Barto 2018, Sec. 7.1; with prioritized
replay as in Hessel et al. 2018, "Rainbow")::

    G_t^(m) = Σ_{k<m} (Π_{j<k} γ_{t+j}) r_{t+k}       reward of the window
    Γ_t^(m) = Π_{k<m} γ_{t+k}                         discount of the window
    s_{t+m}                                           its next_obs: the next_obs of transition t+m-1

so that the target is ``G_t^(m) + Γ_t^(m) · max_a Q(s_{t+m}, a)``.  ``m = n`` unless the window is
cut first: by the end of the episode (``episode_end``), or by a boundary of the stream
(``continues=False``: the new ``obs`` is not the previous ``next_obs``); a window never crosses
either, nor the write head (a window still short of ``n`` transitions and not cut waits).
Priorities belong to the start transition ``t`` (Schaul et al. 2016, Algorithm 1): the memory
offers a slot to its sampler only once its window is complete.

Layout: per stream, a ring of at most ``n`` pending transitions (the stream's newest, oldest
first), each with its partial sums ``G`` and ``Γ`` over the transitions added after it so far;
per slot of the memory, the completed window's results::

    stream s:  pending  [t-2 | t-1 | t]    G, Γ of t-2 cover r_{t-2..t}; of t, r_t alone
               a push of t+1 (n = 4) extends all three and appends t+1: now 4 pending,
               so t-2 completes: reward[slot(t-2)] = G, discount[...] = Γ,
               last[slot(t-2)] = slot(t+1), length[slot(t-2)] = 4
    slot i:    reward[i], discount[i], last[i], length[i]   (valid while complete[i])

Sums are accumulated in float64 and stored as float32 (the memory's reward dtype): one rounding
per stored value, so ``reward`` is within float32's half-ulp of the exact float64 window sum and
``n = 1`` stores exactly ``float32(r_t)`` and ``float32(γ_t)``.
"""

from __future__ import annotations

import numbers
from typing import Any, NoReturn, TypeGuard

import numba
import numpy as np
import numpy.typing as npt

from prisample._validation import as_indices, check_positive_int, to_numpy

STATE_VERSION = 1
_F32_MAX = float(np.finfo(np.float32).max)
_BUSY = -1

IntArray = npt.NDArray[np.int64]


# Columns of the packed arrays (few arrays: each argument of a compiled call costs ~0.1 µs).
_SLOT, _GEN = 0, 1  # queue[stream, j]: pending transition
_SUM_G, _SUM_D = 0, 1  # sums[stream, j]: its partial reward G and discount Γ (float64)
_FIRST, _COUNT = 0, 1  # ring[stream]: where its queue starts, how many are pending
_TRACKED, _DONE, _LAST, _LENGTH = 0, 1, 2, 3  # track[slot]: generation held (-1: none), complete, ...
_REWARD, _DISCOUNT = 0, 1  # result[slot]: the completed window's reward and discount (float32)


@numba.njit(cache=True)
def _finish(
    queue: np.ndarray,
    sums: np.ndarray,
    track: np.ndarray,
    result: np.ndarray,
    stream: int,
    j: int,
    last_slot: int,
    m: int,
    out: np.ndarray,
    count: int,
) -> int:
    """Complete pending entry ``j`` of ``stream`` as a window of ``m`` ending at ``last_slot``."""
    slot = queue[stream, j, _SLOT]
    result[slot, _REWARD] = sums[stream, j, _SUM_G]
    result[slot, _DISCOUNT] = sums[stream, j, _SUM_D]
    track[slot, _DONE], track[slot, _LAST], track[slot, _LENGTH] = 1, last_slot, m
    queue[stream, j, _SLOT], queue[stream, j, _GEN] = -1, -1
    sums[stream, j, _SUM_G], sums[stream, j, _SUM_D] = 0.0, 0.0
    out[count] = slot
    return count + 1


@numba.njit(cache=True)
def _flush(
    queue: np.ndarray,
    sums: np.ndarray,
    ring: np.ndarray,
    track: np.ndarray,
    result: np.ndarray,
    stream: int,
    out: np.ndarray,
    count: int,
) -> int:
    """Complete every pending entry of ``stream``: windows ending at its newest transition."""
    n, first, c = queue.shape[1], ring[stream, _FIRST], ring[stream, _COUNT]
    if c == 0:
        return count
    newest = queue[stream, (first + c - 1) % n, _SLOT]
    for i in range(c):
        count = _finish(queue, sums, track, result, stream, (first + i) % n, newest, c - i, out, count)
    ring[stream, _FIRST], ring[stream, _COUNT] = 0, 0
    return count


@numba.njit(cache=True)
def _push(
    queue: np.ndarray,
    sums: np.ndarray,
    ring: np.ndarray,
    track: np.ndarray,
    result: np.ndarray,
    slot: int,
    gen: int,
    stream: int,
    r: float,
    g: float,
    end: bool,
    continues: bool,
    out: np.ndarray,
    count: int,
) -> int:
    """One transition into its stream; returns ``count`` plus the windows it completed (written to
    ``out``), or ``_BUSY`` (nothing changed) when ``slot`` still holds a tracked transition."""
    if track[slot, _TRACKED] != -1:
        return _BUSY
    n = queue.shape[1]
    if not continues:  # a boundary: the pending windows end at the stream's previous transition
        count = _flush(queue, sums, ring, track, result, stream, out, count)
    first, c = ring[stream, _FIRST], ring[stream, _COUNT]
    for i in range(c):  # G += Γ·r_t, Γ *= γ_t for every pending window of the stream
        j = (first + i) % n
        sums[stream, j, _SUM_G] += sums[stream, j, _SUM_D] * r
        sums[stream, j, _SUM_D] *= g
    j = (first + c) % n
    queue[stream, j, _SLOT], queue[stream, j, _GEN] = slot, gen
    sums[stream, j, _SUM_G], sums[stream, j, _SUM_D] = r, g
    ring[stream, _COUNT] = c + 1
    track[slot, _TRACKED] = gen
    if end:
        return _flush(queue, sums, ring, track, result, stream, out, count)
    if c + 1 == n:  # the oldest window now holds n transitions
        count = _finish(queue, sums, track, result, stream, first, slot, n, out, count)
        ring[stream, _FIRST], ring[stream, _COUNT] = (first + 1) % n, c
    return count


@numba.njit(cache=True)
def _push_many(
    queue: np.ndarray,
    sums: np.ndarray,
    ring: np.ndarray,
    track: np.ndarray,
    result: np.ndarray,
    slots: np.ndarray,
    gens: np.ndarray,
    streams: np.ndarray,
    rewards: np.ndarray,
    discounts: np.ndarray,
    ends: np.ndarray,
    continues: np.ndarray,
    out: np.ndarray,
) -> int:
    """:func:`_push` for each transition in order, after checking every slot is free and distinct
    (else, with nothing changed, ``-1 - i`` for a busy ``slots[i]``, ``-1 - k - i`` for a repeat)."""
    k = slots.shape[0]
    for i in range(k):
        if track[slots[i], _TRACKED] != -1:
            duplicate = track[slots[i], _TRACKED] == -2
            for h in range(i):
                track[slots[h], _TRACKED] = -1
            return -1 - k - i if duplicate else -1 - i
        track[slots[i], _TRACKED] = -2  # marks the slots of this call: a repeat is a duplicate
    for i in range(k):
        track[slots[i], _TRACKED] = -1
    count = 0
    for i in range(k):
        count = _push(
            queue,
            sums,
            ring,
            track,
            result,
            slots[i],
            gens[i],
            streams[i],
            rewards[i],
            discounts[i],
            ends[i],
            continues[i],
            out,
            count,
        )
    return count


@numba.njit(cache=True)
def _evict(
    queue: np.ndarray,
    sums: np.ndarray,
    ring: np.ndarray,
    track: np.ndarray,
    result: np.ndarray,
    slots: np.ndarray,
    gens: np.ndarray,
) -> int:
    """Forget the transitions ``(slots, gens)``; returns how many pending entries were dropped, or
    ``-1 - e`` (nothing changed) when ``slots[e]`` is out of range."""
    n, dropped = queue.shape[1], 0
    for e in range(slots.shape[0]):
        if slots[e] < 0 or slots[e] >= track.shape[0]:
            return -1 - e
    for e in range(slots.shape[0]):
        slot, gen = slots[e], gens[e]
        if track[slot, _TRACKED] != gen or gen < 0:
            continue  # not tracked (never pushed, already forgotten, or another generation)
        track[slot, _TRACKED] = -1
        if track[slot, _DONE]:
            track[slot, _DONE], track[slot, _LAST], track[slot, _LENGTH] = 0, -1, 0
            result[slot, _REWARD], result[slot, _DISCOUNT] = 0.0, 0.0
            continue
        for s in range(queue.shape[0]):  # pending: drop it and the older entries of its stream
            first, c = ring[s, _FIRST], ring[s, _COUNT]
            for i in range(c):
                j = (first + i) % n
                if queue[s, j, _SLOT] == slot and queue[s, j, _GEN] == gen:
                    for h in range(i + 1):
                        jj = (first + h) % n
                        track[queue[s, jj, _SLOT], _TRACKED] = -1
                        queue[s, jj, _SLOT], queue[s, jj, _GEN] = -1, -1
                        sums[s, jj, _SUM_G], sums[s, jj, _SUM_D] = 0.0, 0.0
                    ring[s, _FIRST] = (first + i + 1) % n if c > i + 1 else 0
                    ring[s, _COUNT] = c - i - 1
                    dropped += i + 1
                    break
    return dropped


def _scalar_int(value: Any, name: str) -> int:
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} should be an integer, but got {name}={value!r}")
    return int(value)


def _scalar_real(value: Any, name: str) -> float:
    if type(value) is float:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} should be a real number, but got {name}={value!r}")
    return float(value)


def _scalar_bool(value: Any, name: str) -> bool:
    if type(value) is bool:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"{name} should be a bool, but got {name}={value!r}")


class NStepAccumulator:
    """n-step windows of a replay memory's transitions, completed as the streams move on.

    For each transition ``t`` pushed in its ``stream``, the window ``t, t+1, ..., t+m-1`` of the
    same stream gives (Sutton & Barto 2018, Sec. 7.1; Hessel et al. 2018)::

        reward[slot(t)]   = Σ_{k<m} (Π_{j<k} γ_{t+j}) r_{t+k}
        discount[slot(t)] = Π_{k<m} γ_{t+k}
        last[slot(t)]     = slot(t+m-1)          (its next_obs is s_{t+m})
        length[slot(t)]   = m

    with ``m = n``, or fewer when ``episode_end`` or a ``continues=False`` boundary cuts the
    window.  :meth:`push` returns the slots whose windows it completed, in completion order (by
    push, then oldest first); only those should enter the sampler, at the memory's maximum
    priority (Schaul et al. 2016, Algorithm 1, line 6).  A stream holds at most ``n - 1`` pending
    transitions between pushes.

    Eviction (:meth:`evict`) must be told every transition the memory drops, *before* the push
    of the transition that replaces it.  The memory evicts oldest-first, which gives:

    * a completed window whose start is live has all its transitions live (they are newer), so
      ``last[slot]`` always points at a live transition;
    * when a pending transition is evicted, every older transition of every stream is evicted in
      the same call or was before; in its own stream those are exactly the pending entries ahead
      of it, so eviction drops a prefix of the stream's queue (the older entries too, whichever
      order the call lists them in).  The pending entries after it stay: their windows start at
      themselves and hold only newer transitions, which are live.  The dropped windows can never
      complete: they are not returned and not drawn.  This happens when ``capacity < n`` or when
      the memory evicts early (frame-pool pressure), and in neither case is a sample lost that a
      full window could have given.

    Slots and generations are the memory's (a generation numbers the transition held by a slot;
    a slot is reused only with a new generation after its transition was evicted).

    >>> acc = NStepAccumulator(n=3, num_streams=1, capacity=8)
    >>> acc.push(0, 0, 0, 1.0, 0.5).tolist()
    []
    >>> acc.push(1, 1, 0, 2.0, 0.5).tolist()
    []
    >>> acc.push(2, 2, 0, 4.0, 0.5).tolist()   # 1 + 0.5·2 + 0.25·4
    [0]
    >>> float(acc.reward[0]), float(acc.discount[0]), int(acc.last[0]), int(acc.length[0])
    (3.0, 0.125, 2, 3)
    >>> acc.push(3, 3, 0, 1.0, 0.0, episode_end=True).tolist()
    [1, 2, 3]
    >>> float(acc.reward[2]), float(acc.discount[2]), int(acc.length[2])   # 4 + 0.5·1, Γ = 0
    (4.5, 0.0, 2)
    """

    def __init__(self, n: int, num_streams: int, capacity: int) -> None:
        self.n = check_positive_int(n, "n")
        self.num_streams = check_positive_int(num_streams, "num_streams")
        self.capacity = check_positive_int(capacity, "capacity")
        s, c = self.num_streams, self.capacity
        self._queue = np.full((s, self.n, 2), -1, dtype=np.int64)  # free entries: slot -1, gen -1
        self._sums = np.zeros((s, self.n, 2), dtype=np.float64)  # free entries: 0, 0
        self._ring = np.zeros((s, 2), dtype=np.int64)
        self._track = np.zeros((c, 4), dtype=np.int64)
        self._track[:, _TRACKED] = self._track[:, _LAST] = -1
        self._result = np.zeros((c, 2), dtype=np.float32)
        self._arrays = (self._queue, self._sums, self._ring, self._track, self._result)
        self._out = np.empty(self.n, dtype=np.int64)
        self._bind_views()

    _VIEWS = ("reward", "discount", "last", "length")

    def _bind_views(self) -> None:
        self.reward: npt.NDArray[np.float32] = _read_only(self._result[:, _REWARD])
        """Per slot: the completed window's ``Σ_{k<m} (Π_{j<k} γ_{t+j}) r_{t+k}`` (float32)."""
        self.discount: npt.NDArray[np.float32] = _read_only(self._result[:, _DISCOUNT])
        """Per slot: the completed window's ``Π_{k<m} γ_{t+k}`` (float32)."""
        self.last: IntArray = _read_only(self._track[:, _LAST])
        """Per slot: the slot whose ``next_obs`` is ``s_{t+m}`` (-1 while not complete)."""
        self.length: IntArray = _read_only(self._track[:, _LENGTH])
        """Per slot: the window's length ``m`` (0 while not complete)."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in self._VIEWS:  # views of _result/_track: a pickle or deepcopy would detach them
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind_views()

    # -- reads ----------------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes held in the accumulator's arrays (the pending queues and the per-slot results)."""
        return sum(a.nbytes for a in self._arrays) + self._out.nbytes

    @property
    def num_pending(self) -> int:
        """Transitions whose window is not complete yet (all streams)."""
        return int(self._ring[:, _COUNT].sum())

    def is_complete(self, slots: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each slot holds a transition whose window is complete (and not evicted)."""
        done: npt.NDArray[np.bool_] = self._track[self._slots(slots, "slots"), _DONE] == 1
        return done

    def completed_slots(self) -> IntArray:
        """The slots whose windows are complete, ascending."""
        return np.flatnonzero(self._track[:, _DONE]).astype(np.int64)

    def pending_slots(self, stream: int) -> IntArray:
        """The pending slots of ``stream``, oldest first."""
        s = self._stream(stream)
        j = (self._ring[s, _FIRST] + np.arange(self._ring[s, _COUNT])) % self.n
        pending: IntArray = self._queue[s, j, _SLOT].copy()
        return pending

    # -- writes ---------------------------------------------------------------------------------
    def push(
        self,
        slot: int,
        generation: int,
        stream: int,
        reward: float,
        discount: float,
        *,
        episode_end: bool = False,
        continues: bool = True,
        out: npt.NDArray[np.int64] | None = None,
    ) -> IntArray:
        """Add transition ``generation`` held in ``slot``; returns the slots it completed.

        ``reward`` is ``r_t`` (finite, within float32's range) and ``discount`` ``γ_t`` in
        ``[0, 1]``.  ``episode_end`` completes every pending window of the stream, this
        transition's included.  ``continues=False`` says this transition's ``obs`` is not the
        stream's previous ``next_obs`` (a reset the memory detected): the pending windows first
        complete, ending at the previous transition, then the stream starts afresh.  ``slot``
        must be free (never pushed, or evicted).  With ``out`` (int64, at least ``n`` long) the
        result is a view of it and nothing is allocated.
        """
        # fast paths for plain Python values: this runs once per environment step
        if type(slot) is not int:
            slot = _scalar_int(slot, "slot")
        if type(generation) is not int:
            generation = _scalar_int(generation, "generation")
        if type(stream) is not int:
            stream = _scalar_int(stream, "stream")
        if type(reward) is not float:
            reward = _scalar_real(reward, "reward")
        if type(discount) is not float:
            discount = _scalar_real(discount, "discount")
        if type(episode_end) is not bool:
            episode_end = _scalar_bool(episode_end, "episode_end")
        if type(continues) is not bool:
            continues = _scalar_bool(continues, "continues")
        if not 0 <= slot < self.capacity:
            raise ValueError(f"slot should lie in [0, {self.capacity}), but got slot={slot}")
        if generation < 0:
            raise ValueError(f"generation should be >= 0, but got generation={generation}")
        if not 0 <= stream < self.num_streams:
            raise ValueError(f"stream should lie in [0, {self.num_streams}), but got stream={stream}")
        if not -_F32_MAX <= reward <= _F32_MAX:  # also refuses NaN
            raise ValueError(f"reward should be finite (as float32), but got reward={reward!r}")
        if not 0.0 <= discount <= 1.0:
            raise ValueError(f"discount should lie in [0, 1], but got discount={discount!r}")
        buffer = self._out if out is None else self._buffer(out, self.n)
        queue, sums, ring, track, result = self._arrays
        count = _push(
            queue,
            sums,
            ring,
            track,
            result,
            slot,
            generation,
            stream,
            reward,
            discount,
            episode_end,
            continues,
            buffer,
            0,
        )
        if count == _BUSY:
            raise ValueError(
                f"slot should be free (evict its transition first), but got slot={slot} holding "
                f"generation {track[slot, _TRACKED]}"
            )
        return buffer[:count].copy() if out is None else buffer[:count]

    def push_many(
        self,
        slots: npt.ArrayLike,
        generations: npt.ArrayLike,
        streams: npt.ArrayLike,
        rewards: npt.ArrayLike,
        discounts: npt.ArrayLike,
        *,
        episode_end: npt.ArrayLike | None = None,
        continues: npt.ArrayLike | None = None,
        out: npt.NDArray[np.int64] | None = None,
    ) -> IntArray:
        """:meth:`push` for ``k`` transitions in order (one vector step); returns the completed
        slots in completion order.  Everything is checked before anything changes; ``slots``
        must be free and distinct.  ``out`` needs at least ``k·n`` entries."""
        slot_a = self._slots(slots, "slots")
        k = slot_a.shape[0]
        gen_a = self._ints(generations, "generations", k)
        stream_a = self._ints(streams, "streams", k)
        reward_a = self._reals(rewards, "rewards", k)
        discount_a = self._reals(discounts, "discounts", k)
        ends = self._bools(episode_end, "episode_end", k, False)
        conts = self._bools(continues, "continues", k, True)
        if (gen_a < 0).any():
            j = int(np.argmax(gen_a < 0))
            raise ValueError(f"generations should be >= 0, but got generations[{j}]={gen_a[j]}")
        bad = (stream_a < 0) | (stream_a >= self.num_streams)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(
                f"streams should lie in [0, {self.num_streams}), but got streams[{j}]={stream_a[j]}"
            )
        bad = ~((reward_a >= -_F32_MAX) & (reward_a <= _F32_MAX))
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"rewards should be finite (as float32), but got rewards[{j}]={reward_a[j]!r}")
        bad = ~((discount_a >= 0.0) & (discount_a <= 1.0))
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"discounts should lie in [0, 1], but got discounts[{j}]={discount_a[j]!r}")
        buffer = np.empty(k * self.n, dtype=np.int64) if out is None else self._buffer(out, k * self.n)
        count = _push_many(*self._arrays, slot_a, gen_a, stream_a, reward_a, discount_a, ends, conts, buffer)
        if count < 0:
            i = -1 - count
            if i >= k:
                raise ValueError(f"slots should be distinct, but got slots[{i - k}]={slot_a[i - k]} twice")
            raise ValueError(
                f"slots should be free (evict their transitions first), but got slots[{i}]={slot_a[i]} "
                f"holding generation {self._track[slot_a[i], _TRACKED]}"
            )
        return buffer[:count]

    def push_write(
        self,
        written: Any,
        evicted: IntArray,
        tail: int,
        head: int,
        rewards: npt.NDArray[np.float64],
        discounts: npt.NDArray[np.float64],
        ends: npt.NDArray[np.bool_],
        streams: IntArray,
    ) -> IntArray:
        """A memory write's rows, row by row: row ``i`` (transition ``head + i`` in slot
        ``written.slots[i]``) pushed after the write's evictions up to it (``evicted``, the
        transitions numbered from ``tail``; ``written.until[i]`` of them by row ``i``), since each
        row's window depends on the evictions and rows before it.  ``written`` is the store's
        :class:`~prisample.replay.stores.StoreWrite`.  Returns the slots whose windows completed
        in the write and still are, in order, each once."""
        completed: list[IntArray] = []
        start = 0
        for i in range(streams.shape[0]):
            k = int(written.until[i])
            if k > start:
                self.evict(evicted[start:k], np.arange(tail + start, tail + k, dtype=np.int64))
                start = k
            done = self.push(
                int(written.slots[i]),
                head + i,
                int(streams[i]),
                float(rewards[i]),
                float(discounts[i]),
                episode_end=bool(ends[i]),
                continues=bool(written.continued[i]),
                out=self._out,
            )
            if done.shape[0]:
                completed.append(done.copy())
        if not completed:
            return np.empty(0, dtype=np.int64)
        ready = np.concatenate(completed)
        if streams.shape[0] > 1 and (start or ready.shape[0] > 1):
            ready = ready[self.is_complete(ready)]
            _, first = np.unique(ready, return_index=True)
            ready = ready[np.sort(first)]
        return ready

    def evict(self, slots: npt.ArrayLike, generations: npt.ArrayLike) -> int:
        """Forget the transitions ``generations`` held in ``slots`` (the memory evicted them).

        A completed window is forgotten; a pending one is dropped with the older pending entries
        of its stream (see the class docstring: under oldest-first eviction those are evicted
        too).  Pairs the accumulator does not hold (another generation, never pushed) are
        ignored.  Returns the number of pending entries dropped.
        """
        if _is_index_vector(slots) and _is_index_vector(generations):  # the memory's own arrays
            slot_a, gen_a = slots, generations
        else:
            slot_a = self._ints(slots, "slots", None)
            gen_a = self._ints(generations, "generations", slot_a.shape[0])
        if gen_a.shape[0] != slot_a.shape[0]:
            raise ValueError(
                f"generations should have one value per slot ({slot_a.shape[0]}), but got shape {gen_a.shape}"
            )
        dropped = int(_evict(*self._arrays, slot_a, gen_a))
        if dropped < 0:
            j = -1 - dropped
            raise ValueError(f"slots should lie in [0, {self.capacity}), but got slots[{j}]={slot_a[j]}")
        return dropped

    # -- input helpers --------------------------------------------------------------------------
    def _stream(self, stream: Any) -> int:
        s = _scalar_int(stream, "stream")
        if not 0 <= s < self.num_streams:
            raise ValueError(f"stream should lie in [0, {self.num_streams}), but got stream={s}")
        return s

    def _slots(self, slots: npt.ArrayLike, name: str) -> IntArray:
        idx = as_indices(slots, name)
        bad = (idx < 0) | (idx >= self.capacity)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"{name} should lie in [0, {self.capacity}), but got {name}[{j}]={idx[j]}")
        return np.ascontiguousarray(idx)

    @staticmethod
    def _ints(values: npt.ArrayLike, name: str, k: int | None) -> IntArray:
        array = np.ascontiguousarray(as_indices(values, name))
        if k is not None and array.shape != (k,):
            raise ValueError(f"{name} should have one value per slot ({k}), but got shape {array.shape}")
        return array

    @staticmethod
    def _reals(values: npt.ArrayLike, name: str, k: int) -> npt.NDArray[np.float64]:
        array = to_numpy(values, name)
        if array.dtype.kind not in "fiu":
            raise TypeError(f"{name} should hold real numbers, but got dtype {array.dtype}")
        if array.ndim == 0:
            array = array.reshape(1)
        if array.shape != (k,):
            raise ValueError(f"{name} should have one value per slot ({k}), but got shape {array.shape}")
        return np.ascontiguousarray(array, dtype=np.float64)

    @staticmethod
    def _bools(values: npt.ArrayLike | None, name: str, k: int, default: bool) -> npt.NDArray[np.bool_]:
        if values is None:
            return np.full(k, default, dtype=np.bool_)
        array = to_numpy(values, name)
        if array.ndim == 0:
            array = array.reshape(1)
        if array.dtype != np.bool_:
            raise TypeError(f"{name} should hold bools, but got dtype {array.dtype}")
        if array.shape != (k,):
            raise ValueError(f"{name} should have one value per slot ({k}), but got shape {array.shape}")
        return np.ascontiguousarray(array)

    @staticmethod
    def _buffer(out: Any, size: int) -> IntArray:
        if not isinstance(out, np.ndarray) or out.dtype != np.int64 or out.ndim != 1:
            raise TypeError(f"out should be a one-dimensional int64 numpy array, but got out={out!r}")
        if out.shape[0] < size or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError(
                f"out should be a writeable contiguous array of at least {size} entries, "
                f"but got shape {out.shape}"
            )
        return out

    # -- checkpointing --------------------------------------------------------------------------
    def _columns(self) -> dict[str, npt.NDArray[Any]]:
        """The state's named arrays as views of the packed arrays (``complete`` is int64 here)."""
        q, sums, ring, track, result = self._arrays
        return {
            "q_slot": q[:, :, _SLOT],
            "q_gen": q[:, :, _GEN],
            "q_reward": sums[:, :, _SUM_G],
            "q_discount": sums[:, :, _SUM_D],
            "q_first": ring[:, _FIRST],
            "q_count": ring[:, _COUNT],
            "generation": track[:, _TRACKED],
            "complete": track[:, _DONE],
            "last": track[:, _LAST],
            "length": track[:, _LENGTH],
            "reward": result[:, _REWARD],
            "discount": result[:, _DISCOUNT],
        }

    def _config(self) -> dict[str, int]:
        return {"n": self.n, "num_streams": self.num_streams, "capacity": self.capacity}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: the config, the pending queues (``q_*``, rings
        starting at ``q_first``; free entries hold -1, -1, 0, 0) and per slot the generation held
        (-1: none), whether its window is complete, and the window's results."""
        state: dict[str, Any] = {"version": STATE_VERSION, "config": self._config()}
        for name, column in self._columns().items():
            state[name] = column == 1 if name == "complete" else column.copy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output into an accumulator built with the same arguments.

        Everything is checked first (types, shapes, dtypes, ranges, and that the pending rings,
        the tracked generations and the completed windows agree); a rejected state raises
        ``ValueError``/``TypeError`` and changes nothing.
        """
        arrays = self._checked_state(state)
        for name, column in self._columns().items():
            column[...] = arrays[name]

    def _checked_state(self, state: Any) -> dict[str, npt.NDArray[Any]]:
        if not isinstance(state, dict):
            raise TypeError(f"state should be a dict from state_dict(), but got {type(state).__name__}")
        columns = self._columns()
        expected_keys = {"version", "config", *columns}
        if set(state) != expected_keys:
            missing, extra = expected_keys - set(state), set(state) - expected_keys
            raise ValueError(f"state_dict keys differ: missing {sorted(missing)}, unexpected {sorted(extra)}")
        version = state["version"]
        if type(version) is not int or version != STATE_VERSION:
            raise ValueError(f"state_dict version should be {STATE_VERSION}, but got version={version!r}")
        config = state["config"]
        if not isinstance(config, dict) or config.keys() != self._config().keys():
            raise ValueError(f"state_dict config should be a dict like {self._config()}, but got {config!r}")
        for key, mine in self._config().items():
            if type(config[key]) is not int or config[key] != mine:
                raise ValueError(f"state_dict config {key} should be {mine}, but got {config[key]!r}")
        arrays: dict[str, npt.NDArray[Any]] = {}
        for name, column in columns.items():
            array, dtype = state[name], np.dtype(np.bool_) if name == "complete" else column.dtype
            if not isinstance(array, np.ndarray):
                raise TypeError(f"state_dict {name} should be a numpy array, but got {type(array).__name__}")
            if array.shape != column.shape or array.dtype != dtype:
                raise ValueError(
                    f"state_dict {name} should be {dtype}{list(column.shape)}, "
                    f"but got {array.dtype}{list(array.shape)}"
                )
            arrays[name] = array
        _check_consistent(arrays, self.n, self.capacity)
        return arrays


def _check_consistent(a: dict[str, npt.NDArray[Any]], n: int, capacity: int) -> None:
    """Raise ``ValueError`` unless the arrays form a state :class:`NStepAccumulator` can reach."""

    def fail(what: str) -> NoReturn:
        raise ValueError(f"state_dict is inconsistent: {what}")

    first, count = a["q_first"], a["q_count"]
    if ((first < 0) | (first >= n)).any() or ((count < 0) | (count > n - 1)).any():
        fail(f"q_first should lie in [0, {n}) and q_count in [0, {n - 1}]")
    active = (np.arange(n)[None, :] - first[:, None]) % n < count[:, None]
    q_slot, q_gen = a["q_slot"], a["q_gen"]
    q_reward, q_discount = a["q_reward"], a["q_discount"]
    free = ~active
    if (q_slot[free] != -1).any() or (q_gen[free] != -1).any():
        fail("free pending entries should hold slot and generation -1")
    if (q_reward[free] != 0.0).any() or (q_discount[free] != 0.0).any():
        fail("free pending entries should hold reward and discount 0")
    slots, gens = q_slot[active], q_gen[active]
    if ((slots < 0) | (slots >= capacity)).any() or (gens < 0).any():
        fail(f"pending slots should lie in [0, {capacity}) with generations >= 0")
    if np.unique(slots).shape[0] != slots.shape[0]:
        fail("pending slots should be distinct")
    r, g = q_reward[active], q_discount[active]
    if not (np.isfinite(r).all() and ((g >= 0.0) & (g <= 1.0)).all()):
        fail("pending rewards should be finite and pending discounts in [0, 1]")
    generation, complete = a["generation"], a["complete"]
    if (generation < -1).any():
        fail("generation should be >= -1")
    if (generation[slots] != gens).any() or complete[slots].any():
        fail("pending slots should hold their generation and not be complete")
    tracked = generation >= 0
    if (complete & ~tracked).any():
        fail("complete slots should hold a generation")
    if np.count_nonzero(tracked & ~complete) != slots.shape[0]:
        fail("every tracked slot that is not complete should be pending")
    reward, discount, last, length = a["reward"], a["discount"], a["last"], a["length"]
    idle = ~complete
    if (
        (reward[idle] != 0).any()
        or (discount[idle] != 0).any()
        or (last[idle] != -1).any()
        or (length[idle] != 0).any()
    ):
        fail("slots without a complete window should hold reward 0, discount 0, last -1, length 0")
    done = np.flatnonzero(complete)
    rd, gd, ld, md = reward[done], discount[done], last[done], length[done]
    if np.isnan(rd).any() or not ((gd >= 0.0) & (gd <= 1.0)).all():
        fail("complete windows should have a reward that is not NaN and a discount in [0, 1]")
    if ((ld < 0) | (ld >= capacity)).any() or ((md < 1) | (md > n)).any():
        fail(f"complete windows should have last in [0, {capacity}) and length in [1, {n}]")
    if ((md == 1) & (ld != done)).any():
        fail("a window of length 1 should end at its own slot")


def _is_index_vector(value: Any) -> TypeGuard[IntArray]:
    return (
        type(value) is np.ndarray and value.dtype == np.int64 and value.ndim == 1 and value.flags.c_contiguous
    )


def _read_only(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    view = array.view()
    view.flags.writeable = False
    return view


__all__ = ["NStepAccumulator"]
