"""The one-step write in one compiled call: the common case of a replay memory's write.

A write of ``n`` transitions to a host memory with array observations and ``n_step = 1`` (and,
for a :class:`~prisample.replay.PrioritizedReplay`, FIFO eviction and a proportional host
sampler) does four things, in this order, which :func:`write_rows` does in one call of compiled
code instead of a Python call per piece:

1. every row's stacks go to the frame pool (:func:`~prisample.replay.frames._store_rows`:
   deduplicated against the stream's last stacks, the ring's oldest transitions released as the
   ring or the pool needs room);
2. the ring's bookkeeping: per stream whether its last transition ended the episode, and the rows
   whose ``obs`` broke a stream that went on (warned of by the caller);
3. the per-transition columns (action, reward, discount, generation ``head + i``);
4. the sampler's side: the evicted slots leave the sum tree, the new slots enter at the maximum
   priority of the memory they join (1 if empty), in the order
   :meth:`~prisample.replay.steps.HostSteps.enter` writes them (the first row's evictions,
   then the maximum read, then the rest of the write; row by row when the write evicted one of its
   own rows).  The tree's nodes are recomputed from their children, so the tree after the call is
   the tree of the same raw priorities written in any grouping.

The arguments are checked before the call, per argument rather than per row (:func:`add_arrays`,
:func:`vector_arrays`): a request they do not recognise as the common case (a first write that
sets the dtype, another dtype that would need a cast, lists, ...) returns ``None`` and takes the
general path, which checks and casts everything and names the argument in its errors.  The
per-row value checks (streams in range, rewards finite as float32, discounts in ``[0, 1]``) run
in the kernel before anything is written; a row that fails them leaves everything unchanged and
the general path reports the error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from prisample.replay.frames import _store_rows
from prisample.trees import OK, _tree_write

__all__ = ["CompiledRows", "add_arrays", "vector_arrays", "write_rows"]

IntArray = npt.NDArray[np.int64]

# The kernel's codes: the rows were written, or a row failed its check (nothing written).
WRITTEN, BAD_STREAM, BAD_REWARD, BAD_DISCOUNT = 0, 1, 2, 3

_NO_FLOATS = np.empty(0, dtype=np.float64)
_NO_OFFSETS = np.empty(0, dtype=np.int64)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_INT64 = np.dtype(np.int64)


class CompiledRows(NamedTuple):
    """A write's arguments, checked per argument, as the kernel takes them."""

    obs: npt.NDArray[Any]
    """``(n, *stack_shape)`` of the memory's dtype."""
    next_obs: npt.NDArray[Any]
    action: npt.NDArray[Any]
    """``(n, *action_shape)`` of the action dtype."""
    reward: npt.NDArray[np.floating[Any]]
    """``(n,)`` float32 or float64 (stored as float32; the kernel checks it is finite so)."""
    discount: npt.NDArray[np.floating[Any]]
    """``(n,)`` float32 or float64 (stored as float32; the kernel checks ``[0, 1]``)."""
    episode_end: npt.NDArray[np.bool_]
    streams: IntArray
    """``(n,)`` int64 (the kernel checks the range)."""
    extras: dict[str, npt.NDArray[Any]] | None
    """The declared extras, checked and cast (``None``: none declared)."""


def _floats(value: Any, n: int) -> bool:
    return type(value) is np.ndarray and value.dtype in _FLOATS and value.shape == (n,)


def _finite(obs: npt.NDArray[Any], next_obs: npt.NDArray[Any], action: npt.NDArray[Any]) -> bool:
    """Whether float or complex observations and actions are finite (the general path's check
    of their values; other dtypes hold nothing else)."""
    if obs.dtype.kind in "fc" and not (np.isfinite(obs).all() and np.isfinite(next_obs).all()):
        return False
    return action.dtype.kind not in "fc" or bool(np.isfinite(action).all())


def _extras(spec: Any, values: Mapping[str, Any], n: int | None) -> tuple[bool, Any]:
    """The declared extras checked as the general path checks them; ``(False, None)`` where it
    would raise (it raises then, after the checks of the arguments before them)."""
    if not values and not spec.extras:
        return True, None
    try:
        return True, spec.extra_values(values, n)
    except (TypeError, ValueError):
        return False, None


def add_arrays(spec: Any, dtype: Any, request: Any) -> CompiledRows | None:
    """An ``add``'s or ``add_many``'s arguments (an :class:`~prisample.replay.writes.AddRequest`)
    as :class:`CompiledRows` when they are already what the memory stores (numpy arrays of its
    observation and action dtypes, the right shapes; ``add``: Python scalars), else ``None``.
    ``dtype``: the memory's observation dtype (an allocated frame store's)."""
    obs, action, reward, discount, next_obs, episode_end, streams = request[1:8]
    if type(obs) is not np.ndarray or type(next_obs) is not np.ndarray:
        return None
    if obs.dtype != dtype or next_obs.dtype != dtype:
        return None
    action_dtype = spec.action_dtype
    if request.single:
        if obs.shape != spec.stack_shape or next_obs.shape != spec.stack_shape:
            return None
        if type(action) is int and action_dtype == _INT64 and not spec.action_shape:
            if not -(2**63) <= action < 2**63:
                return None
            action_a = np.full((1,), action, dtype=_INT64)
        elif (
            type(action) is np.ndarray and action.dtype == action_dtype and action.shape == spec.action_shape
        ):
            action_a = action[None]
        else:
            return None
        if type(reward) is not float or type(discount) is not float:
            return None
        if type(episode_end) is not bool or type(streams) is not int:
            return None
        floats = np.array((reward, discount))
        ok, extras = _extras(spec, request.extras, None)
        if not ok or not _finite(obs, next_obs, action_a):
            return None
        return CompiledRows(
            obs[None],
            next_obs[None],
            action_a,
            floats[:1],
            floats[1:],
            np.array((episode_end,)),
            np.array((streams,), dtype=_INT64),
            extras,
        )
    n = obs.shape[0] if obs.ndim else 0
    stack_shape = spec.stack_shape
    if n == 0 or obs.shape[1:] != stack_shape or next_obs.shape != obs.shape:
        return None
    if type(action) is not np.ndarray or action.dtype != action_dtype:
        return None
    if action.shape[1:] != spec.action_shape or action.shape[0] != n:
        return None
    if not _floats(reward, n) or not _floats(discount, n):
        return None
    if episode_end is None:
        ends = np.zeros(n, dtype=np.bool_)
    elif type(episode_end) is np.ndarray and episode_end.dtype == np.bool_ and episode_end.shape == (n,):
        ends = episode_end
    else:
        return None
    if streams is None:
        ids = np.arange(n, dtype=_INT64)
    elif type(streams) is np.ndarray and streams.dtype == _INT64 and streams.shape == (n,):
        ids = streams
    else:
        return None
    ok, extras = _extras(spec, request.extras, n)
    if not ok or not _finite(obs, next_obs, action):
        return None
    return CompiledRows(obs, next_obs, action, reward, discount, ends, ids, extras)


def vector_arrays(spec: Any, dtype: Any, rows: Any, extras: Mapping[str, Any]) -> CompiledRows | None:
    """A vector step's rows (:class:`~prisample.replay.vector_env.VectorTransitions`) as
    :class:`CompiledRows` when they are already what the memory stores, else ``None`` (the
    converter made the discounts, episode ends and streams; the rest is checked here)."""
    obs, next_obs, action = rows.obs, rows.next_obs, rows.action
    n = rows.streams.shape[0]
    if type(obs) is not np.ndarray or type(next_obs) is not np.ndarray or type(action) is not np.ndarray:
        return None
    if n == 0 or obs.dtype != dtype or next_obs.dtype != dtype or action.dtype != spec.action_dtype:
        return None
    shape = (n, *spec.stack_shape)
    if obs.shape != shape or next_obs.shape != shape or action.shape != (n, *spec.action_shape):
        return None
    if not _floats(rows.reward, n):
        return None
    ok, checked = _extras(spec, extras, n)
    if not ok or not _finite(obs, next_obs, action):
        return None
    return CompiledRows(
        obs, next_obs, action, rows.reward, rows.discount, rows.episode_end, rows.streams, checked
    )


@numba.njit(cache=True)
def _checks(streams: np.ndarray, reward: np.ndarray, discount: np.ndarray, num_streams: int) -> int:
    """The rows' value checks, before anything is written: a code other than ``WRITTEN`` names
    the first kind of bad value."""
    for i in range(streams.shape[0]):
        if streams[i] < 0 or streams[i] >= num_streams:
            return BAD_STREAM
    for i in range(reward.shape[0]):
        if not np.isfinite(np.float32(reward[i])):
            return BAD_REWARD
    for i in range(discount.shape[0]):
        d = np.float32(discount[i])
        if not (d >= 0.0 and d <= 1.0):
            return BAD_DISCOUNT
    return WRITTEN


@numba.njit(cache=True)
def _admit(
    tree: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    eps: float,
    alpha: float,
    limit: float,
    count: int,
    slots: np.ndarray,
    evicted: np.ndarray,
    until: np.ndarray,
    row_by_row: bool,
) -> tuple[int, int]:
    """The sum tree's side of a write: evictions leave (NaN), the rows enter at the maximum raw
    priority of the memory they join (1 while it is empty), in the sampler writes the general
    path makes.  Returns ``(tree code, count)``."""
    raw, masses, sums, mins, maxs, offsets = tree
    n = slots.shape[0]
    if row_by_row:  # a row of this write left again: each row joins what the rows before left
        start = 0
        one = np.empty(1, dtype=np.float64)
        for i in range(n):
            if until[i] > start:
                gone = evicted[start : until[i]]
                code, change = _tree_write(
                    raw, masses, sums, mins, maxs, offsets, eps, alpha, limit, gone,
                    np.full(gone.shape[0], np.nan),
                )  # fmt: skip
                count += change
                if code != OK:
                    return code, count
                start = until[i]
            one[0] = maxs[0] if count > 0 else 1.0
            code, change = _tree_write(
                raw, masses, sums, mins, maxs, offsets, eps, alpha, limit, slots[i : i + 1], one
            )
            count += change
            if code != OK:
                return code, count
        return OK, count
    first = until[0]
    if first:
        gone = evicted[:first]
        code, change = _tree_write(
            raw, masses, sums, mins, maxs, offsets, eps, alpha, limit, gone, np.full(first, np.nan)
        )
        count += change
        if code != OK:
            return code, count
    p = maxs[0] if count > 0 else 1.0
    m = evicted.shape[0] - first
    at = np.empty(n + m, dtype=np.int64)
    values = np.empty(n + m, dtype=np.float64)
    out, e = 0, first
    for i in range(n):  # row i's evictions, then row i: one ordered write
        while e < until[i]:
            at[out], values[out] = evicted[e], np.nan
            out, e = out + 1, e + 1
        at[out], values[out] = slots[i], p
        out += 1
    code, change = _tree_write(raw, masses, sums, mins, maxs, offsets, eps, alpha, limit, at, values)
    return code, count + change


@numba.njit(cache=True)
def _write_kernel(
    frames: np.ndarray,
    stage: np.ndarray,
    stage_rows: np.ndarray,
    tables: tuple[np.ndarray, ...],
    nfree: int,
    obs: np.ndarray,
    next_obs: np.ndarray,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    columns: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    stream_ended: np.ndarray,
    tail: int,
    head: int,
    evicted: np.ndarray,
    tree: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    eps: float,
    alpha: float,
    limit: float,
    count: int,
) -> tuple[int, int, int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The whole write (see the module).  Returns ``(code, nfree, tail, count, slots, until,
    evicted slots, completed slots, rows that broke their stream)``; a ``code`` other than
    ``WRITTEN`` wrote nothing (its arrays empty), a tree code other than ``OK`` is returned
    negated after the memory's write."""
    streams, ends, action, reward, discount = rows
    action_col, reward_col, discount_col, generation_col = columns
    n = streams.shape[0]
    none = np.empty(0, dtype=np.int64)
    code = _checks(streams, reward, discount, stream_ended.shape[0])
    if code != WRITTEN:
        return code, nfree, tail, count, none, none, none, none, none
    slots = np.empty(n, dtype=np.int64)
    until = np.empty(n, dtype=np.int64)
    continued = np.empty(n, dtype=np.bool_)
    had_last = np.empty(n, dtype=np.bool_)
    _, nfree, tail, _, total = _store_rows(
        frames, stage, stage_rows, 0, 0, tables, nfree, obs, next_obs, streams, 0, tail, head,
        evicted, 0, slots, until, continued, had_last,
    )  # fmt: skip
    broke = np.empty(n, dtype=np.int64)
    nbroke = 0
    for i in range(n):  # a stack that did not continue a stream that went on (frame stacks only)
        s = streams[i]
        if obs.shape[1] > 1 and had_last[i] and not continued[i] and not stream_ended[s]:
            broke[nbroke] = i
            nbroke += 1
        stream_ended[s] = ends[i]
    for i in range(n):  # in order: a slot written twice keeps its last row
        slot = slots[i]
        for j in range(action.shape[1]):
            action_col[slot, j] = action[i, j]
        reward_col[slot] = np.float32(reward[i])
        discount_col[slot] = np.float32(discount[i])
        generation_col[slot] = head + i
    ready = np.empty(n, dtype=np.int64)  # written and still live: a slot a later row evicted is not
    nready = 0
    for i in range(n):
        if generation_col[slots[i]] >= tail:
            ready[nready] = slots[i]
            nready += 1
    gone = evicted[:total].copy()
    if tree[0].shape[0]:
        tree_code, count = _admit(tree, eps, alpha, limit, count, slots, gone, until, tail > head)
        if tree_code != OK:
            code = -tree_code
    return code, nfree, tail, count, slots, until, gone, ready[:nready], broke[:nbroke]


NO_TREE = (_NO_FLOATS, _NO_FLOATS, _NO_FLOATS, _NO_FLOATS, _NO_FLOATS, _NO_OFFSETS)
"""The kernel's ``tree`` for a write without a sampler (or with one it does not write)."""


def write_rows(
    pool: Any,
    tables: tuple[npt.NDArray[Any], npt.NDArray[Any]],
    rows: CompiledRows,
    columns: tuple[npt.NDArray[Any], ...],
    stream_ended: npt.NDArray[np.bool_],
    tail: int,
    head: int,
    evicted: IntArray,
    tree: Any = None,
    count: int = 0,
) -> tuple[int, int, int, IntArray, IntArray, IntArray, IntArray, IntArray]:
    """One call of the kernel for ``rows`` (transitions ``head .. head + n - 1``): ``pool`` the
    host :class:`~prisample.replay.frames.FramePool`, ``tables`` the store's ``(obs_rows,
    next_rows)``, ``columns`` ``(action, reward, discount, generation)``, ``evicted`` a buffer of
    at least ``capacity + n`` entries; ``tree`` a :class:`~prisample.trees.PriorityTree` holding
    ``count`` slots to admit the rows to (``None``: no sampler).  Updates the pool's free count.
    Returns ``(code, tail, count, slots, until, evicted, completed, broke)``."""
    n, stack, word = rows.streams.shape[0], pool.frame_stack, pool._word
    obs_words = rows.obs.reshape(n, stack, -1).view(word)
    next_words = rows.next_obs.reshape(n, stack, -1).view(word)
    action_col, reward_col, discount_col, generation_col = columns
    if tree is None:
        arrays, eps, alpha, limit = NO_TREE, 0.0, 1.0, 0.0
    else:
        arrays = (tree.raw, tree.masses, tree.sums, tree.mins, tree.maxs, tree.offsets)
        eps, alpha, limit = tree.eps, tree.alpha, tree.limit
    code, pool._nfree, tail, count, slots, until, gone, ready, broke = _write_kernel(
        pool.storage.direct,
        pool._no_frames,
        pool._no_rows,
        (*pool._bookkeeping(), *tables),
        pool._nfree,
        obs_words,
        next_words,
        (rows.streams, rows.episode_end, rows.action.reshape(n, -1), rows.reward, rows.discount),
        (action_col.reshape(action_col.shape[0], -1), reward_col, discount_col, generation_col),
        stream_ended,
        tail,
        head,
        evicted,
        arrays,
        eps,
        alpha,
        limit,
        count,
    )
    return code, tail, count, slots, until, gone, ready, broke
