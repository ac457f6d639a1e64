"""The item index of a sequence replay: which memory slots form which sequence item.

A *step* is one stored transition of one stream (one slot of a
:class:`~prisample.replay.memory.ReplayMemory`).  An *item* is ``W = burn_in + length +
bootstrap`` consecutive steps of one stream within one episode, starting at the episode steps
``0, period, 2·period, …`` (the grid restarts at every episode start); items overlap when
``period < W``.  An item is named by the slot of its first step and numbered by that step's
generation.  :class:`SequenceItems` keeps, per slot, the link to the same stream's next step in
the same episode, and per item its state (open, complete, gone), its number of steps and its
row of the recurrent-state pool; per stream the items still open.

Items follow the memory's writes (:meth:`SequenceItems.advance`, compiled with numba: per row,
the evictions before it, then the row itself):

* a row at an episode step on the grid opens an item there; every open item of the row's stream
  takes the row as its next step and completes when it has ``W`` steps;
* at an episode end the stream's open items complete with fewer steps when they have at least
  ``min_steps`` of them (``episode_tail="pad"``: ``burn_in + 1``, so that one ``learn`` step
  exists; ``"drop"``: ``W``, Acme's behaviour), else they are dropped: an item without a learn
  step never enters;
* an evicted slot takes its item with it (open or complete); the item's later steps are newer,
  so a live start means a live item;
* an opened item takes a row of the state pool (when a state is declared); with every row taken,
  the oldest item holding one is retired first (counted in :attr:`SequenceItems.retired`).

The window of an item (its steps' slots, padded with the last one) follows the links
(:meth:`SequenceItems.windows`, compiled), so streams may interleave in the ring in any order.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any, NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from prisample._validation import check_positive_int, short_repr, to_numpy
from prisample.replay._checks import as_dtype, as_shape, as_state_array, cast, check_keys
from prisample.replay._rows import last_rows

__all__ = [
    "EPISODE_TAILS",
    "ItemChanges",
    "SequenceItems",
    "StateSpec",
    "default_state_capacity",
    "state_spec",
]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

EPISODE_TAILS = ("pad", "drop")
"""How the last, shorter items of an episode are kept: ``"pad"`` every item with a learn step,
padded and masked; ``"drop"`` only items of ``W`` steps."""

OPEN, COMPLETE = 1, 2
"""An item's status (0: no item starts at the slot, or it left)."""

StateSpec = dict[str, tuple[tuple[int, ...], np.dtype[Any]]]
"""The recurrent state's arrays: name -> (shape, dtype) (one unnamed array under the key ``""``)."""


def state_spec(value: Any) -> tuple[StateSpec | None, bool]:
    """The ``state=`` argument (``None``, a ``(shape, dtype)`` pair or a dict name -> pair) as a
    :data:`StateSpec` and whether it is one array (``True``) or a dict; ``ValueError``/``TypeError``
    naming ``state``."""
    if value is None:
        return None, False
    if isinstance(value, Mapping):
        if not value:
            raise ValueError("state should be None, a (shape, dtype) pair or a non-empty dict, but got {}")
        spec: StateSpec = {}
        for name, pair in value.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"state names should be non-empty strings, but got {name!r}")
            spec[name] = _pair(pair, f"state[{name!r}]")
        return spec, False
    return {"": _pair(value, "state")}, True


def _pair(value: Any, name: str) -> tuple[tuple[int, ...], np.dtype[Any]]:
    if not isinstance(value, tuple) or len(value) != 2:
        raise TypeError(f"{name} should be a (shape, dtype) pair, but got {name}={short_repr(value)}")
    return as_shape(value[0], f"{name} shape"), as_dtype(value[1], f"{name} dtype")


def default_state_capacity(capacity: int, period: int, window: int, num_streams: int) -> int:
    """Rows of the state pool by default: ``⌈capacity / period⌉ + num_streams · ⌈W / period⌉``,
    one per item start of full-length episodes filling the memory, plus the open items."""
    return -(-capacity // period) + num_streams * -(-window // period)


class ItemChanges(NamedTuple):
    """What one write did to the items: the sampler's side."""

    removed: IntArray
    """Items that were drawable before the write and left (evicted or retired), in order."""
    added: IntArray
    """Items that became drawable in the write and still are, in order, each once."""


# -- compiled per-row work --------------------------------------------------------------------------
@numba.njit(cache=True)
def _close(x: int, open_items: np.ndarray, open_count: np.ndarray, stream: int) -> None:
    """Remove item ``x`` from its stream's open list (kept in opening order)."""
    n = open_count[stream]
    k = 0
    for j in range(n):
        if open_items[stream, j] != x:
            open_items[stream, k] = open_items[stream, j]
            k += 1
    for j in range(k, n):
        open_items[stream, j] = -1
    open_count[stream] = k


@numba.njit(cache=True)
def _leave(
    x: int,
    status: np.ndarray,
    state_row: np.ndarray,
    stream_of: np.ndarray,
    open_items: np.ndarray,
    open_count: np.ndarray,
    row_owner: np.ndarray,
    free: np.ndarray,
    nfree: np.ndarray,
    removed: np.ndarray,
    counters: np.ndarray,
) -> None:
    """Item ``x`` leaves: a complete one is recorded as removed, an open one leaves its list; its
    state row returns to the pool."""
    if status[x] == 2:
        removed[counters[0]] = x
        counters[0] += 1
    elif status[x] == 1:
        _close(x, open_items, open_count, stream_of[x])
    status[x] = 0
    r = state_row[x]
    if r >= 0:
        row_owner[r] = -1
        free[nfree[0]] = r
        nfree[0] += 1
        state_row[x] = -1


@numba.njit(cache=True)
def _advance(
    slots: np.ndarray,
    streams: np.ndarray,
    ends: np.ndarray,
    evicted: np.ndarray,
    until: np.ndarray,
    head0: int,
    tail0: int,
    has_state: bool,
    window: int,
    period: int,
    min_steps: int,
    next_slot: np.ndarray,
    status: np.ndarray,
    steps: np.ndarray,
    item_gen: np.ndarray,
    stream_of: np.ndarray,
    state_row: np.ndarray,
    last_gen: np.ndarray,
    episode_step: np.ndarray,
    open_items: np.ndarray,
    open_count: np.ndarray,
    row_owner: np.ndarray,
    free: np.ndarray,
    nfree: np.ndarray,
    removed: np.ndarray,
    completed: np.ndarray,
    opened_row: np.ndarray,
    counters: np.ndarray,
) -> None:
    """The items' side of a write of ``n`` rows (see the module): ``counters`` = [removed,
    completed, retired] counts; ``opened_row[i]`` the state row item opened at row ``i`` took
    (``-1``: none)."""
    capacity = next_slot.shape[0]
    done = 0
    for i in range(slots.shape[0]):
        for e in range(done, until[i]):
            x = evicted[e]
            _leave(
                x,
                status,
                state_row,
                stream_of,
                open_items,
                open_count,
                row_owner,
                free,
                nfree,
                removed,
                counters,
            )
            next_slot[x] = -1
        done = until[i]
        tail = tail0 + until[i]
        x, g, s = slots[i], head0 + i, streams[i]
        next_slot[x] = -1
        stream_of[x] = s
        opened_row[i] = -1
        previous = last_gen[s]
        if previous >= tail:  # the stream's previous step, same episode, still live
            next_slot[previous % capacity] = x
        if episode_step[s] % period == 0:
            status[x], steps[x], item_gen[x], state_row[x] = 1, 0, g, -1
            if has_state:
                if nfree[0] == 0:  # every row held: retire the oldest item holding one
                    for h in range(tail, g):
                        y = h % capacity
                        if status[y] != 0 and item_gen[y] == h and state_row[y] >= 0:
                            _leave(
                                y, status, state_row, stream_of, open_items, open_count,
                                row_owner, free, nfree, removed, counters,
                            )  # fmt: skip
                            counters[2] += 1
                            break
                nfree[0] -= 1
                r = free[nfree[0]]
                row_owner[r], state_row[x], opened_row[i] = x, r, r
            open_items[s, open_count[s]] = x
            open_count[s] += 1
        j = 0
        while j < open_count[s]:
            y = open_items[s, j]
            steps[y] += 1
            if steps[y] == window:
                status[y] = 2
                completed[counters[1]] = y
                counters[1] += 1
                _close(y, open_items, open_count, s)
            else:
                j += 1
        episode_step[s] += 1
        last_gen[s] = g
        if ends[i]:
            while open_count[s] > 0:
                y = open_items[s, 0]
                if steps[y] >= min_steps:
                    status[y] = 2
                    completed[counters[1]] = y
                    counters[1] += 1
                    _close(y, open_items, open_count, s)
                else:
                    _leave(
                        y, status, state_row, stream_of, open_items, open_count,
                        row_owner, free, nfree, removed, counters,
                    )  # fmt: skip
            last_gen[s] = -1
            episode_step[s] = 0


@numba.njit(cache=True)
def _windows(next_slot: np.ndarray, steps: np.ndarray, items: np.ndarray, window: int) -> np.ndarray:
    """``(k, W)`` slots of the items' steps, the last valid one repeated after the item's end."""
    k = items.shape[0]
    out = np.empty((k, window), dtype=np.int64)
    for b in range(k):
        x = items[b]
        n = steps[x]
        for j in range(window):
            out[b, j] = x
            if j + 1 < n:
                x = next_slot[x]
    return out


@numba.njit(cache=True)
def _frame_rows(
    obs_rows: np.ndarray, next_rows: np.ndarray, win: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """``(k, W + 1, frame_stack)`` frame rows of the items' observations: ``s_{t+j}`` for ``j <
    L`` (the item's steps), at ``L`` the last step's ``next_obs``, and past it (padding) that
    stack moved on by one frame per position, its last frame repeated (see :func:`_shifted_rows`)."""
    k, window = win.shape
    stack = obs_rows.shape[1]
    rows = np.empty((k, window + 1, stack), dtype=np.int64)
    for b in range(k):
        n = lengths[b]
        last = win[b, n - 1]
        for j in range(window + 1):
            for f in range(stack):
                if j < n:
                    rows[b, j, f] = obs_rows[win[b, j], f]
                else:
                    rows[b, j, f] = next_rows[last, min(j - n + f, stack - 1)]
    return rows


@numba.njit(cache=True)
def _shifted_rows(
    obs_rows: np.ndarray, next_rows: np.ndarray, win: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, bool]:
    """``(k, W + frame_stack)`` frame rows holding each item's frames once, when its stacks each
    move the previous one on by one frame (an episode's steps, frames shared): the stack of
    ``s_{t+j}`` is rows ``j .. j + frame_stack``, for ``j <= L`` (``L`` the item's steps, ``s_{t+L}``
    the last step's ``next_obs``).  Past ``L + frame_stack`` the rows repeat the last frame, so a
    padded position ``L + d`` reads the last stack moved on by ``d`` frames, as :func:`_frame_rows`
    defines it.  ``False`` when some stack does not continue the one before it."""
    k, window = win.shape
    stack = obs_rows.shape[1]
    rows = np.empty((k, window + stack), dtype=np.int64)
    for b in range(k):
        n = lengths[b]
        first = win[b, 0]
        for f in range(stack):
            rows[b, f] = obs_rows[first, f]
        for j in range(1, n + 1):
            here = next_rows[win[b, n - 1]] if j == n else obs_rows[win[b, j]]
            for f in range(stack - 1):
                if here[f] != rows[b, j + f]:
                    return rows, False
            rows[b, j + stack - 1] = here[stack - 1]
        for m in range(n + stack, window + stack):
            rows[b, m] = rows[b, n + stack - 1]
    return rows, True


_SLOT_ARRAYS = {
    "next_slot": np.int64,
    "status": np.int8,
    "steps": np.int64,
    "item_gen": np.int64,
    "stream_of": np.int64,
    "state_row": np.int64,
    "step_priority": np.float64,
}
"""The per-slot arrays of the index and their dtypes (each of ``capacity`` entries)."""


class SequenceItems:
    """The items over a memory of ``capacity`` slots and ``num_streams`` streams (see the module).

    ``burn_in``, ``length``, ``period``, ``bootstrap`` and ``episode_tail`` as in
    :class:`~prisample.replay.sequence.SequenceReplay`; ``state`` a :data:`StateSpec` (or
    ``None``: no state kept) of a pool of ``state_capacity`` rows.  Masks per item step ``j <
    W``: ``valid[j] = j < L`` (``L`` the item's steps), ``learn[j] = valid[j] and burn_in <= j <
    burn_in + length``.

    >>> items = SequenceItems(8, 1, burn_in=1, length=2, period=2, bootstrap=0, episode_tail="pad")
    >>> changes = items.advance(np.arange(4), np.zeros(4, np.int64), np.array([0, 0, 0, 1], bool),
    ...                         np.empty(0, np.int64), np.zeros(4, np.int64), head=0, tail=0)
    >>> changes.added.tolist(), items.windows(changes.added).tolist()  # item at 2 ends padded
    ([0, 2], [[0, 1, 2], [2, 3, 3]])
    >>> items.masks(changes.added)[2].tolist()  # learn
    [[False, True, True], [False, True, False]]
    """

    def __init__(
        self,
        capacity: int,
        num_streams: int,
        *,
        burn_in: int,
        length: int,
        period: int,
        bootstrap: int,
        episode_tail: str,
        state: StateSpec | None = None,
        state_capacity: int | None = None,
    ) -> None:
        self.capacity = check_positive_int(capacity, "capacity")
        self.num_streams = check_positive_int(num_streams, "num_streams")
        self.burn_in = check_positive_int(burn_in, "burn_in", minimum=0)
        self.length = check_positive_int(length, "length")
        self.period = check_positive_int(period, "period")
        self.bootstrap = check_positive_int(bootstrap, "bootstrap", minimum=0)
        if not isinstance(episode_tail, str) or episode_tail not in EPISODE_TAILS:
            raise ValueError(
                f"episode_tail should be one of {EPISODE_TAILS}, "
                f"but got episode_tail={short_repr(episode_tail)}"
            )
        self.episode_tail = episode_tail
        self.window = self.burn_in + self.length + self.bootstrap
        """``W``: steps per item."""
        if self.capacity < self.num_streams * self.window:
            raise ValueError(
                f"capacity should be at least num_streams · (burn_in + length + bootstrap) = "
                f"{self.num_streams} · {self.window} = {self.num_streams * self.window} (one whole "
                f"item per stream), but got capacity={capacity}"
            )
        self.min_steps = self.burn_in + 1 if episode_tail == "pad" else self.window
        """Fewest steps of a kept item (one learn step under ``"pad"``, ``W`` under ``"drop"``)."""
        self.max_open = -(-self.window // self.period)
        """Items of one stream open at once, at most: ``⌈W / period⌉``."""
        self.state = state
        if state is None:
            if state_capacity is not None:
                raise ValueError(
                    f"state_capacity needs a state (state=...), but got state_capacity={state_capacity!r}"
                )
            rows = 0
        elif state_capacity is None:
            rows = default_state_capacity(self.capacity, self.period, self.window, self.num_streams)
        else:
            rows = check_positive_int(state_capacity, "state_capacity")
        self.state_capacity = rows
        """Rows of the state pool (0 without a state)."""
        self.pool: dict[str, npt.NDArray[Any]] = {
            name: np.zeros((rows, *shape), dtype=dtype) for name, (shape, dtype) in (state or {}).items()
        }
        """The recurrent states at item starts, one row per item holding one."""
        c, s = self.capacity, self.num_streams
        self.slot: dict[str, npt.NDArray[Any]] = {
            name: np.empty(c, dtype=t) for name, t in _SLOT_ARRAYS.items()
        }
        self.last_gen = np.full(s, -1, dtype=np.int64)
        """Per stream, the generation of its last step while its episode goes on (``-1``: none)."""
        self.episode_step = np.zeros(s, dtype=np.int64)
        """Per stream, the steps written in its current episode."""
        self.open_items = np.full((s, self.max_open), -1, dtype=np.int64)
        """Per stream, its open items (oldest first), ``-1`` after the last."""
        self.open_count = np.zeros(s, dtype=np.int64)
        self.row_owner = np.full(rows, -1, dtype=np.int64)
        """Per state row, the item holding it (``-1``: free)."""
        self.free = np.arange(rows, dtype=np.int64)[::-1].copy()
        """The free state rows: the first ``nfree`` entries, the last one taken next."""
        self.nfree = np.array([rows], dtype=np.int64)
        self.retired = 0
        """Items retired because their state row was needed by a newer item (a pool too small)."""
        self._clear_slots()
        self.drawable = np.zeros(c, dtype=np.bool_)
        """Per slot, whether a complete item starts there (what the sampler holds): derived."""

    def _clear_slots(self) -> None:
        slot = self.slot
        slot["next_slot"][:] = -1
        slot["status"][:] = 0
        slot["steps"][:] = 0
        slot["item_gen"][:] = -1
        slot["stream_of"][:] = -1
        slot["state_row"][:] = -1
        slot["step_priority"][:] = np.nan

    # -- views ------------------------------------------------------------------------------------
    @property
    def status(self) -> npt.NDArray[np.int8]:
        """Per slot: 0 no item (or it left), 1 open, 2 complete (drawable)."""
        return self.slot["status"]

    @property
    def steps(self) -> IntArray:
        """Per slot, the steps of the item starting there (``L``)."""
        return self.slot["steps"]

    @property
    def item_gen(self) -> IntArray:
        """Per slot, the generation of the last item opened there (``-1``: never)."""
        return self.slot["item_gen"]

    @property
    def nbytes(self) -> int:
        """Bytes of the index and the state pool."""
        arrays = [*self.slot.values(), *self.pool.values(), self.last_gen, self.episode_step]
        arrays += [self.open_items, self.open_count, self.row_owner, self.free, self.drawable]
        return sum(int(a.nbytes) for a in arrays)

    # -- writes -----------------------------------------------------------------------------------
    def advance(
        self,
        slots: IntArray,
        streams: IntArray,
        ends: BoolArray,
        evicted: IntArray,
        until: IntArray,
        *,
        head: int,
        tail: int,
        states: Mapping[str, npt.NDArray[Any]] | None = None,
        priorities: npt.NDArray[np.float64] | None = None,
    ) -> ItemChanges:
        """The items' side of a memory write of ``n`` rows (checked input: cannot fail): the
        write's ``slots``, their ``streams`` and episode ``ends``, the ``evicted`` slots and per
        row how many left up to it (``until``), ``head``/``tail`` the memory's counters before
        the write.  ``states`` (name -> ``(n, *shape)``) are the rows' recurrent states, stored
        where a row opens an item; ``priorities`` the rows' actor priorities (NaN: none)."""
        n = slots.shape[0]
        empty = np.empty(0, dtype=np.int64)
        if n == 0:
            return ItemChanges(empty, empty)
        slot = self.slot
        if priorities is not None:
            keep = last_rows(slots)
            slot["step_priority"][slots[keep]] = priorities[keep]
        total = int(until[-1]) if n else 0
        removed = np.empty(total + n + 1, dtype=np.int64)
        completed = np.empty(self.num_streams * self.max_open + n, dtype=np.int64)
        opened_row = np.empty(n, dtype=np.int64)
        counters = np.zeros(3, dtype=np.int64)
        _advance(
            slots,
            streams,
            ends,
            evicted[:total],
            until,
            head,
            tail,
            self.state is not None,
            self.window,
            self.period,
            self.min_steps,
            slot["next_slot"],
            slot["status"],
            slot["steps"],
            slot["item_gen"],
            slot["stream_of"],
            slot["state_row"],
            self.last_gen,
            self.episode_step,
            self.open_items,
            self.open_count,
            self.row_owner,
            self.free,
            self.nfree,
            removed,
            completed,
            opened_row,
            counters,
        )
        if priorities is None:
            slot["step_priority"][slots] = np.nan
        self.retired += int(counters[2])
        if states is not None and self.state is not None:
            rows = np.flatnonzero(opened_row >= 0)
            if rows.shape[0]:
                keep = rows[last_rows(opened_row[rows])]  # a row reused in the write: its last item
                for name, pool in self.pool.items():
                    pool[opened_row[keep]] = states[name][keep]
        gone = removed[: counters[0]]
        gone = gone[self.drawable[gone]]  # complete before this write (else never in the sampler)
        self.drawable[gone] = False
        done = completed[: counters[1]]
        done = done[slot["status"][done] == COMPLETE]
        if done.shape[0] > 1:
            done = done[np.sort(np.unique(done, return_index=True)[1])]
        self.drawable[done] = True
        return ItemChanges(gone.copy(), done.copy())

    # -- reads ------------------------------------------------------------------------------------
    def windows(self, items: IntArray) -> IntArray:
        """``(k, W)`` slots of the items' steps, the last valid one repeated (compiled)."""
        return np.asarray(_windows(self.slot["next_slot"], self.slot["steps"], items, self.window))

    def masks(self, items: IntArray) -> tuple[IntArray, BoolArray, BoolArray]:
        """``(lengths, valid, learn)``: the items' steps ``L`` (``(k,)``), ``valid[b, j] = j < L``
        and ``learn[b, j] = valid[b, j] and burn_in <= j < burn_in + length`` (``(k, W)``)."""
        lengths = self.slot["steps"][items]
        j = np.arange(self.window)
        valid = j[None, :] < lengths[:, None]
        learn = valid & ((j >= self.burn_in) & (j < self.burn_in + self.length))[None, :]
        return lengths, valid, learn

    def frame_rows(
        self, obs_rows: npt.NDArray[Any], next_rows: npt.NDArray[Any], win: IntArray, lengths: IntArray
    ) -> IntArray:
        """``(k, W + 1, frame_stack)`` frame-pool rows of the items' observations (compiled): the
        steps' ``obs`` stacks, the last step's ``next_obs`` stack, then past the item's end that
        stack moved on by one frame per position, its last frame repeated."""
        return np.asarray(_frame_rows(obs_rows, next_rows, win, lengths))

    def shifted_rows(
        self, obs_rows: npt.NDArray[Any], next_rows: npt.NDArray[Any], win: IntArray, lengths: IntArray
    ) -> IntArray | None:
        """``(k, W + frame_stack)`` frame rows holding each item's frames once, when its stacks
        move on by one frame each step (compiled; padding as :meth:`frame_rows`); ``None``
        otherwise."""
        rows, ok = _shifted_rows(obs_rows, next_rows, win, lengths)
        return np.asarray(rows) if ok else None

    def states(self, items: IntArray) -> dict[str, npt.NDArray[Any]]:
        """The recurrent state stored at each item's start: name -> ``(k, *shape)``."""
        rows = self.slot["state_row"][items]
        return {name: pool[rows] for name, pool in self.pool.items()}

    def live_generations(self, items: IntArray) -> IntArray:
        """Per item index, the generation of the drawable item there, ``-1`` where none is."""
        return np.where(self.drawable[items], self.slot["item_gen"][items], -1)

    def initial_priorities(self, items: IntArray, eta: float, default: float) -> npt.NDArray[np.float64]:
        """The priority each new item enters at: the R2D2 mix ``η·max + (1−η)·mean`` of the
        actor's per-step priorities over its learn steps when the actor gave one for every learn
        step, else ``default`` (the memory's maximum; Schaul et al. 2016, Algorithm 1, line 6)."""
        out = np.full(items.shape[0], default, dtype=np.float64)
        if not items.shape[0]:
            return out
        win = self.windows(items)
        _, _, learn = self.masks(items)
        given = self.slot["step_priority"][win]
        has = np.where(learn, ~np.isnan(given), True).all(axis=1)
        if has.any():
            p, m = given[has], learn[has]
            magnitude = np.where(m, p, 0.0)
            largest = np.where(m, p, -np.inf).max(axis=1)
            mean = magnitude.sum(axis=1) / m.sum(axis=1)
            out[has] = eta * largest + (1.0 - eta) * mean
        return out

    # -- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Copies of every array of the index and the state pool, and the retired count."""
        return {
            "slots": {name: array.copy() for name, array in self.slot.items()},
            "last_gen": self.last_gen.copy(),
            "episode_step": self.episode_step.copy(),
            "open_items": self.open_items.copy(),
            "free": self.free.copy(),
            "nfree": int(self.nfree[0]),
            "pool": {name: array.copy() for name, array in self.pool.items()},
            "retired": self.retired,
        }

    def check_state(self, state: Any, generation: IntArray, head: int, tail: int) -> dict[str, Any]:
        """The arrays of ``state`` (a :meth:`state_dict`), checked against a memory whose slots
        hold ``generation`` with counters ``head``/``tail``: ``ValueError``/``TypeError`` naming
        the key, nothing changed.  Checks every invariant :meth:`advance` keeps: items start at
        live steps and hold ``1..W`` steps, open items are their streams' listed ones with fewer
        than ``W``, complete ones have at least ``min_steps``, links join live steps of one
        stream, the windows of live items are live steps of their stream, the state rows are
        owned once and the free list holds the rest."""
        where = "state_dict items"
        if not isinstance(state, dict):
            raise TypeError(f"{where} should be a dict, but got {short_repr(state)}")
        check_keys(
            state,
            {"slots", "last_gen", "episode_step", "open_items", "free", "nfree", "pool", "retired"},
            where,
        )
        c, s, rows = self.capacity, self.num_streams, self.state_capacity
        slots_in = state["slots"]
        if not isinstance(slots_in, dict):
            raise TypeError(f"{where} slots should be a dict, but got {short_repr(slots_in)}")
        check_keys(slots_in, set(_SLOT_ARRAYS), f"{where} slots")
        slot = {
            name: _array(slots_in[name], f"{where} slots {name}", np.dtype(t), (c,))
            for name, t in _SLOT_ARRAYS.items()
        }
        last_gen = _array(state["last_gen"], f"{where} last_gen", np.dtype(np.int64), (s,))
        episode_step = _array(state["episode_step"], f"{where} episode_step", np.dtype(np.int64), (s,))
        open_items = _array(
            state["open_items"], f"{where} open_items", np.dtype(np.int64), (s, self.max_open)
        )
        free = _array(state["free"], f"{where} free", np.dtype(np.int64), (rows,))
        nfree, retired = state["nfree"], state["retired"]
        for key, value, top in (("nfree", nfree, rows), ("retired", retired, None)):
            if (
                isinstance(value, bool)
                or not isinstance(value, numbers.Integral)
                or int(value) < 0
                or (top is not None and int(value) > top)
            ):
                raise ValueError(f"{where} {key} should be an integer in [0, {top}], but got {key}={value!r}")
        pool_in = state["pool"]
        if not isinstance(pool_in, dict):
            raise TypeError(f"{where} pool should be a dict, but got {short_repr(pool_in)}")
        check_keys(pool_in, set(self.pool), f"{where} pool")
        pool = {
            name: _array(pool_in[name], f"{where} pool {name!r}", array.dtype, array.shape, finite=True)
            for name, array in self.pool.items()
        }
        self._check_consistent(
            slot, last_gen, episode_step, open_items, free, int(nfree), generation, head, tail
        )
        return {
            "slot": slot,
            "last_gen": last_gen,
            "episode_step": episode_step,
            "open_items": open_items,
            "free": free,
            "nfree": int(nfree),
            "pool": pool,
            "retired": int(retired),
        }

    def _check_consistent(
        self,
        slot: dict[str, npt.NDArray[Any]],
        last_gen: IntArray,
        episode_step: IntArray,
        open_items: IntArray,
        free: IntArray,
        nfree: int,
        generation: IntArray,
        head: int,
        tail: int,
    ) -> None:
        where = "state_dict items"
        c, w = self.capacity, self.window

        def fail(key: str, message: str) -> None:
            raise ValueError(f"{where} {key} {message}")

        live = generation >= tail
        status, steps, item_gen = slot["status"], slot["steps"], slot["item_gen"]
        stream_of, state_row, next_slot = slot["stream_of"], slot["state_row"], slot["next_slot"]
        if not np.isin(status, (0, OPEN, COMPLETE)).all():
            fail("slots status", "should hold 0, 1 or 2")
        has = status != 0
        if (has & ~(live & (item_gen == generation))).any():
            j = int(np.argmax(has & ~(live & (item_gen == generation))))
            fail("slots item_gen", f"should name the live step of each item's slot, but slot {j} does not")
        if ((item_gen < -1) | (item_gen >= head) | ((item_gen >= 0) & (item_gen % c != np.arange(c)))).any():
            fail("slots item_gen", f"should be -1 or a generation of the slot below {head}")
        low = np.where(status == COMPLETE, self.min_steps, 1)
        if (has & ((steps < low) | (steps > w))).any() or ((status == OPEN) & (steps >= w)).any():
            fail(
                "slots steps",
                f"should lie in [1, {w}) for open items and [{self.min_steps}, {w}] for complete ones",
            )
        if (live & ((stream_of < 0) | (stream_of >= self.num_streams))).any():
            fail("slots stream_of", f"should lie in [0, {self.num_streams}) at live steps")
        bad_link = (next_slot < -1) | (next_slot >= c)
        linked = next_slot >= 0
        target = np.where(linked, next_slot, 0)
        bad_link |= linked & ~(
            live & live[target] & (stream_of[target] == stream_of) & (generation[target] > generation)
        )
        if bad_link.any():
            fail(
                "slots next_slot",
                "should link live steps to later live steps of their stream "
                f"(slot {int(np.argmax(bad_link))})",
            )
        prio = slot["step_priority"]
        if not (np.isnan(prio) | ((prio >= 0) & np.isfinite(prio))).all():
            fail("slots step_priority", "should be NaN or finite and >= 0")
        items = np.flatnonzero(has)
        if items.shape[0]:
            win = np.asarray(_windows(next_slot, steps, items, w))
            valid = np.arange(w)[None, :] < steps[items][:, None]
            ok = np.where(valid, live[win] & (stream_of[win] == stream_of[items][:, None]), True)
            gens = generation[win]
            ok[:, 1:] &= np.where(valid[:, 1:], gens[:, 1:] > gens[:, :-1], True)
            if not ok.all():
                fail(
                    "slots next_slot",
                    f"should give each item its {w} steps or fewer "
                    f"(item {int(items[np.argmin(ok.all(axis=1))])})",
                )
        # open lists
        listed = np.zeros(c, dtype=np.int64)
        for stream in range(self.num_streams):
            row = open_items[stream]
            k = int(np.count_nonzero(row >= 0))
            if (row[:k] < 0).any() or (row[k:] != -1).any() or (row[:k] >= c).any():
                fail("open_items", f"of stream {stream} should be slots then -1")
            mine = row[:k]
            if (status[mine] != OPEN).any() or (stream_of[mine] != stream).any():
                fail("open_items", f"of stream {stream} should be its open items")
            if k > 1 and not (item_gen[mine][1:] > item_gen[mine][:-1]).all():
                fail("open_items", f"of stream {stream} should be in opening order")
            listed[mine] += 1
        if not np.array_equal(listed, (status == OPEN).astype(np.int64)):
            fail("open_items", "should list every open item once")
        ok_last = (last_gen == -1) | ((last_gen >= 0) & (last_gen < head))
        if not ok_last.all():
            fail("last_gen", f"should be -1 or a generation below {head}")
        ended = last_gen == -1
        if (ended & ((episode_step != 0) | (open_items[:, 0] >= 0))).any() or (
            ~ended & (episode_step < 1)
        ).any():
            fail("episode_step", "should be 0 with no open item after an episode end, else >= 1")
        # state rows
        rows = self.state_capacity
        held = state_row[has]
        if ((state_row != -1) & ~has).any() or (held < -1).any() or (held >= rows).any():
            fail("slots state_row", f"should be -1, or a row in [0, {rows}) of a live item")
        if self.state is not None and (held < 0).any():
            fail("slots state_row", "should give every live item a row")
        owned = held[held >= 0]
        if np.unique(owned).shape[0] != owned.shape[0]:
            fail("slots state_row", "should give each row to one item")
        free_rows = free[:nfree]
        if (
            (free_rows < 0).any()
            or (free_rows >= max(rows, 1)).any()
            or np.unique(free_rows).shape[0] != nfree
        ):
            fail("free", f"should hold {nfree} distinct rows in [0, {rows})")
        if nfree + owned.shape[0] != rows or np.intersect1d(free_rows, owned).shape[0]:
            fail("free", "should hold exactly the rows no item holds")

    def commit_state(self, checked: dict[str, Any]) -> None:
        """Assign what :meth:`check_state` returned (cannot fail)."""
        for name, array in checked["slot"].items():
            self.slot[name][...] = array
        self.last_gen[...] = checked["last_gen"]
        self.episode_step[...] = checked["episode_step"]
        self.open_items[...] = checked["open_items"]
        self.open_count[...] = (checked["open_items"] >= 0).sum(axis=1)
        self.free[...] = checked["free"]
        self.nfree[0] = checked["nfree"]
        for name, array in checked["pool"].items():
            self.pool[name][...] = array
        self.row_owner[...] = -1
        owners = np.flatnonzero(self.slot["state_row"] >= 0)
        self.row_owner[self.slot["state_row"][owners]] = owners
        self.retired = checked["retired"]
        self.drawable[...] = self.slot["status"] == COMPLETE


def _array(
    value: Any, key: str, dtype: np.dtype[Any], shape: tuple[int, ...], *, finite: bool = False
) -> npt.NDArray[Any]:
    """A copy of the state array ``key`` of ``dtype`` and ``shape``, else ``ValueError``/``TypeError``."""
    array = as_state_array(value, key)
    if array.dtype != dtype or array.shape != shape:
        raise ValueError(f"{key} should be {dtype}{list(shape)}, but got {array.dtype}{list(array.shape)}")
    if finite and array.dtype.kind in "fc" and not np.isfinite(array).all():
        raise ValueError(f"{key} should be finite")
    return array.copy()


def as_state_rows(
    value: Any, spec: StateSpec, single: bool, n: int | None, name: str = "state"
) -> dict[str, npt.NDArray[Any]]:
    """A step's (``n=None``) or ``n`` steps' recurrent state as name -> ``(n, *shape)`` arrays of
    the declared dtypes (torch tensors on any device taken), else ``ValueError``/``TypeError``
    naming ``name``."""
    if single:
        parts = {"": value}
    else:
        if not isinstance(value, Mapping):
            raise TypeError(f"{name} should be a dict with keys {sorted(spec)}, but got {short_repr(value)}")
        if set(value) != set(spec):
            raise ValueError(f"{name} should have the keys {sorted(spec)}, but got {sorted(map(str, value))}")
        parts = dict(value)
    out = {}
    for key, (shape, dtype) in spec.items():
        label = name if single else f"{name}[{key!r}]"
        array = cast(to_numpy(parts[key], label), dtype, label)
        want = shape if n is None else (n, *shape)
        if array.shape != want:
            raise ValueError(f"{label} should have shape {want}, but got shape {array.shape}")
        out[key] = array[None] if n is None else array
    return out
