"""Priority rules over ``|δ|``: the paper's appendix variants and sequence priorities.

Pure functions (and one small stateful tracker) that turn errors into the raw priorities a
:class:`~prisample.PrioritizedSampler` stores; none of them touches a sampler.

* :func:`asymmetric_priorities`: ``p = a₊·δ`` for ``δ > 0``, ``a₋·|δ|`` otherwise (Schaul et al.
  2016, App. A);
* :class:`StalenessBonus`: ``p_i(t) = p_i + c·(t − t_i)``, growing with the time since slot ``i``
  was last replayed (App. A);
* :func:`predecessor_boost`: a replayed transition raises its predecessor's priority (App. A);
* :func:`sequence_priority`: ``η·max_t|δ_t| + (1 − η)·mean_t|δ_t|`` per sequence (Kapturowski
  et al. 2019, R2D2);
* :func:`pser_priorities`: ``p_{t−k} ← max(p_{t−k}, ρ^k·p_t)`` for ``k = 1..W`` within the
  episode (Brittain et al. 2019, PSER);
* :func:`ring_predecessors`: the predecessor map of a ring-buffer memory, from episode ids.

Rules that write several slots at once return ``(indices, priorities)``, sorted and without
duplicates, ready for ``sampler.update_priorities``.  Where one slot gets several values in one
call (drawn twice in a batch, or both replayed and boosted) they are combined by ``max``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from prisample._validation import as_indices, check_positive_int, check_real, short_repr, to_numpy
from prisample.methods.rejection import _check, _reals

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def _weight(value: Any, name: str) -> float:
    return check_real(value, name, minimum=0.0)


def _unit(value: Any, name: str) -> float:
    number = check_real(value, name, minimum=0.0)
    if number > 1.0:
        raise ValueError(f"{name} should lie in [0, 1], but got {name}={value!r}")
    return number


def _max_combine(indices: IntArray, values: FloatArray) -> tuple[IntArray, FloatArray]:
    """Sorted unique indices, each with the largest of its values."""
    unique, inverse = np.unique(indices, return_inverse=True)
    out = np.full(unique.shape[0], -np.inf)
    np.maximum.at(out, inverse.reshape(-1), values)
    return unique.astype(np.int64), out


def _merge(
    own: tuple[IntArray, FloatArray], targets: tuple[IntArray, FloatArray]
) -> tuple[IntArray, FloatArray]:
    """``own`` overwritten by ``targets`` where both name a slot (targets were built from own)."""
    indices = np.concatenate([own[0], targets[0]])
    values = np.concatenate([own[1], targets[1]])
    unique, last = np.unique(indices[::-1], return_index=True)  # targets come last: keep theirs
    return unique.astype(np.int64), values[::-1][last]


def _slot_update(
    indices: npt.ArrayLike, priorities: npt.ArrayLike, capacity: int
) -> tuple[IntArray, FloatArray]:
    idx = as_indices(indices, "indices")
    values = _reals(priorities, "priorities").reshape(-1)
    if values.shape[0] != idx.shape[0]:
        raise ValueError(
            f"priorities should have one value per index ({idx.shape[0]}), but got {values.shape[0]}"
        )
    bad = np.flatnonzero((idx < 0) | (idx >= capacity))
    if bad.shape[0]:
        j = int(bad[0])
        raise ValueError(f"indices should lie in [0, {capacity}), but got indices[{j}]={idx[j]}")
    _check((values >= 0.0) & (values < np.inf), values, "priorities", "finite and >= 0")
    return idx, values


def _predecessor_map(predecessors: npt.ArrayLike) -> IntArray:
    pred = to_numpy(predecessors, "predecessors")
    if pred.ndim != 1 or pred.shape[0] == 0:
        raise ValueError(f"predecessors should be a non-empty 1-D array, but got shape {pred.shape}")
    pred = as_indices(pred, "predecessors")
    bad = np.flatnonzero((pred < -1) | (pred >= pred.shape[0]))
    if bad.shape[0]:
        j = int(bad[0])
        raise ValueError(
            f"predecessors should hold slots in [0, {pred.shape[0]}) or -1 (none), "
            f"but got predecessors[{j}]={pred[j]}"
        )
    return pred


def _current(current: npt.ArrayLike, capacity: int) -> FloatArray:
    values = _reals(current, "current")
    if values.shape != (capacity,):
        raise ValueError(f"current should have shape ({capacity},) like predecessors, but got {values.shape}")
    filled = ~np.isnan(values)
    _check(
        ~filled | ((values >= 0.0) & (values < np.inf)), values, "current", "NaN (empty) or finite and >= 0"
    )
    return values


def _base(slots: IntArray, own: tuple[IntArray, FloatArray], current: FloatArray) -> FloatArray:
    """A slot's priority before a boost: its new value if written in this call, else ``current``."""
    base = current[slots].copy()
    at = np.searchsorted(own[0], slots)
    written = (at < own[0].shape[0]) & (own[0][np.minimum(at, own[0].shape[0] - 1)] == slots)
    base[written] = own[1][at[written]]
    return base


# ------------------------------------------------------------------------------------------------
# Schaul et al. 2016, App. A
# ------------------------------------------------------------------------------------------------


def asymmetric_priorities(
    td_error: npt.ArrayLike, positive: float = 1.0, negative: float = 0.5
) -> FloatArray:
    """Asymmetric priorities ``p = a₊·δ`` if ``δ > 0`` else ``a₋·|δ|`` (Schaul et al. 2016, App. A).

    The appendix suggests treating positive and negative TD-errors differently, "to introduce an
    asymmetry and prioritize positive TD-errors more than negative ones of equal magnitude"
    (``positive = a₊ > negative = a₋``); its preliminary experiments were inconclusive.
    ``positive = negative = 1`` is plain ``|δ|``.

    >>> asymmetric_priorities([2.0, -2.0, 0.0], positive=1.0, negative=0.25).tolist()
    [2.0, 0.5, 0.0]
    """
    delta = _reals(td_error, "td_error")
    a_pos = _weight(positive, "positive")
    a_neg = _weight(negative, "negative")
    _check(np.isfinite(delta), delta, "td_error", "finite")
    return np.where(delta > 0.0, a_pos * delta, a_neg * np.abs(delta))


class StalenessBonus:
    """Priorities that grow with the time since a slot was last replayed (Schaul et al. 2016, App. A).

    ``p_i(t) = p_i + c · (t − t_i)``: ``p_i`` the priority written when slot ``i`` was last
    replayed (or added), at step ``t_i``; ``t`` the current step; ``c = rate``.  The appendix
    proposes "an explicit staleness bonus that guarantees that every transition is revisited from
    time to time", in "the simple case where this bonus grows linearly with time"; its footnote
    increases the bonus at a target-network update "in proportion to the number of individual
    (low-level) updates that happened in-between" — :meth:`advance` by that number.

    The appendix implements it "at no additional cost by subtracting a quantity proportional to
    the global step-count from the new priority": ``p_i − c·t_i`` orders slots exactly as
    ``p_i(t)`` does at every ``t``, which is all the *rank* distribution needs.  Proportional
    sampling needs the absolute values, and the sampler stores priorities ``>= 0``, so this class
    keeps ``p_i`` and ``t_i`` per slot and :meth:`refresh` returns every tracked slot's current
    ``p_i(t)`` (``O(N)``; call it as often as the bonus should take effect).

    >>> bonus = StalenessBonus(3, rate=0.5)
    >>> bonus.update([0, 1, 2], [1.0, 2.0, 3.0]).tolist()
    [1.0, 2.0, 3.0]
    >>> bonus.advance(4)
    >>> _ = bonus.update([1], [0.5])
    >>> idx, p = bonus.refresh()
    >>> idx.tolist(), p.tolist()
    ([0, 1, 2], [3.0, 0.5, 5.0])
    """

    def __init__(self, capacity: int, rate: float) -> None:
        self.capacity = check_positive_int(capacity, "capacity")
        self.rate = _weight(rate, "rate")
        self._step = 0
        self._base = np.full(self.capacity, np.nan)  # NaN: slot not tracked
        self._last = np.zeros(self.capacity, dtype=np.int64)

    @property
    def step(self) -> int:
        """The global step ``t`` (advanced only by :meth:`advance`)."""
        return self._step

    def advance(self, steps: int = 1) -> None:
        """``t ← t + steps``."""
        self._step += check_positive_int(steps, "steps", minimum=0)

    def update(self, indices: npt.ArrayLike, priorities: npt.ArrayLike) -> FloatArray:
        """Record new priorities of replayed (or added) slots at the current step; returns the
        values to write now (the priorities themselves: the bonus restarts at 0).  Duplicated
        indices: the last value wins, as in ``update_priorities``."""
        idx, values = _slot_update(indices, priorities, self.capacity)
        self._base[idx] = values
        self._last[idx] = self._step
        return values.copy()

    def remove(self, indices: npt.ArrayLike) -> None:
        """Stop tracking slots (emptied in the memory)."""
        idx = as_indices(indices, "indices")
        _slot_update(idx, np.zeros(idx.shape[0]), self.capacity)
        self._base[idx] = np.nan

    def priorities(self, indices: npt.ArrayLike) -> FloatArray:
        """``p_i + c·(t − t_i)`` of tracked slots."""
        idx = as_indices(indices, "indices")
        _slot_update(idx, np.zeros(idx.shape[0]), self.capacity)
        untracked = np.flatnonzero(np.isnan(self._base[idx]))
        if untracked.shape[0]:
            j = int(untracked[0])
            raise ValueError(
                f"indices should be tracked slots, but got indices[{j}]={idx[j]} (never updated)"
            )
        return np.asarray(self._base[idx] + self.rate * (self._step - self._last[idx]), dtype=np.float64)

    def refresh(self) -> tuple[IntArray, FloatArray]:
        """Every tracked slot and its current ``p_i(t)``, for ``sampler.update_priorities``."""
        idx = np.flatnonzero(~np.isnan(self._base)).astype(np.int64)
        return idx, self._base[idx] + self.rate * (self._step - self._last[idx])

    def state_dict(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "rate": self.rate,
            "step": self._step,
            "base": self._base.copy(),
            "last": self._last.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output; a malformed state raises and changes nothing."""
        if not isinstance(state, dict) or set(state) != {"capacity", "rate", "step", "base", "last"}:
            raise ValueError(f"state should be a StalenessBonus state_dict, but got {short_repr(state)}")
        if state["capacity"] != self.capacity:
            raise ValueError(
                f"state capacity should be {self.capacity}, but got capacity={state['capacity']!r}"
            )
        rate = _weight(state["rate"], "rate")
        step = check_positive_int(state["step"], "step", minimum=0)
        base = np.array(state["base"], dtype=np.float64)
        last = np.array(state["last"])
        if base.shape != (self.capacity,) or last.shape != (self.capacity,) or last.dtype.kind not in "iu":
            raise ValueError("state base and last should be arrays of shape (capacity,), last of integers")
        tracked = ~np.isnan(base)
        _check(~tracked | ((base >= 0.0) & (base < np.inf)), base, "base", "NaN or finite and >= 0")
        last = last.astype(np.int64)
        _check(~tracked | ((last >= 0) & (last <= step)), last.astype(np.float64), "last", "in [0, step]")
        self.rate, self._step, self._base, self._last = rate, step, base, last


def predecessor_boost(
    indices: npt.ArrayLike,
    priorities: npt.ArrayLike,
    predecessors: npt.ArrayLike,
    current: npt.ArrayLike,
    *,
    terminal: npt.ArrayLike | None = None,
    scale: float = 1.0,
    combine: str = "add",
) -> tuple[IntArray, FloatArray]:
    """New priorities of replayed slots plus a boost of their predecessors (Schaul et al. 2016, App. A).

    "In practice, we add ``|δ|`` of the current transition to predecessor transition's priority,
    but only if the predecessor transition is not a terminal one": with ``combine="add"`` (the
    paper's rule) the predecessor ``j = predecessors[i]`` of a replayed slot ``i`` gets
    ``q_j + scale·p_i``; with ``combine="max"``, ``max(q_j, scale·p_i)``.  ``q_j`` is ``j``'s new
    priority if ``j`` was replayed in this same call, else ``current[j]`` (the sampler's
    ``priorities``).  ``p_i`` are the replayed slots' new priorities (e.g. ``|δ_i|``).

    ``predecessors[i]`` is the slot holding the transition before ``i`` in its episode, ``-1``
    for none (episode start, overwritten); see :func:`ring_predecessors`.  A predecessor that
    is empty (``current`` NaN) or marked in ``terminal`` is not boosted.  A slot named several
    times (duplicates, or several successors) takes the largest value.

    Returns ``(slots, priorities)`` to write, sorted: the replayed slots and the boosted ones.

    >>> predecessor_boost([2], [0.5], [-1, 0, 1], [1.0, 1.0, 1.0])
    (array([1, 2]), array([1.5, 0.5]))
    """
    pred = _predecessor_map(predecessors)
    capacity = pred.shape[0]
    idx, values = _slot_update(indices, priorities, capacity)
    now = _current(current, capacity)
    factor = _weight(scale, "scale")
    if combine not in ("add", "max"):
        raise ValueError(f"combine should be 'add' or 'max', but got combine={combine!r}")
    ends = None
    if terminal is not None:
        ends = to_numpy(terminal, "terminal")
        if ends.dtype != np.bool_ or ends.shape != (capacity,):
            raise ValueError(
                f"terminal should be a bool array of shape ({capacity},), but got {ends.dtype} {ends.shape}"
            )
    own = _max_combine(idx, values)
    targets = pred[idx]
    keep = targets >= 0
    keep[keep] = ~np.isnan(now[targets[keep]])
    if ends is not None:
        keep[keep] = ~ends[targets[keep]]
    if not keep.any():
        return own
    slots, boost = _max_combine(targets[keep], factor * values[keep])
    base = _base(slots, own, now)
    boosted = base + boost if combine == "add" else np.maximum(base, boost)
    return _merge(own, (slots, boosted))


# ------------------------------------------------------------------------------------------------
# sequences
# ------------------------------------------------------------------------------------------------


def sequence_priority(
    td_errors: npt.ArrayLike, eta: float = 0.9, mask: npt.ArrayLike | None = None
) -> FloatArray:
    """Per-sequence priority ``p = η·max_t|δ_t| + (1 − η)·mean_t|δ_t|`` (Kapturowski et al. 2019).

    R2D2 ("Recurrent Experience Replay in Distributed Reinforcement Learning", ICLR 2019, the
    agent's description) prioritizes whole replay sequences by this mixture of the max and the
    mean absolute n-step TD-error over the sequence, with ``η = 0.9``: averaging alone would
    flatten the priorities of long sequences, so that a few large errors no longer stand out.
    ``td_errors`` has shape ``(sequences, steps)``; ``mask`` (same shape, bool) marks the real
    steps, padded ones excluded from max and mean; every sequence needs one.

    >>> sequence_priority([[1.0, -3.0], [2.0, 0.0]], eta=0.5).tolist()
    [2.5, 1.5]
    >>> sequence_priority([[1.0, -3.0], [2.0, 9.0]], eta=0.5, mask=[[True, True], [True, False]]).tolist()
    [2.5, 2.0]
    """
    delta = _reals(td_errors, "td_errors")
    if delta.ndim != 2:
        raise ValueError(f"td_errors should be 2-D (sequences, steps), but got shape {delta.shape}")
    weight = _unit(eta, "eta")
    if mask is None:
        valid = np.ones(delta.shape, dtype=bool)
    else:
        valid = to_numpy(mask, "mask")
        if valid.dtype != np.bool_ or valid.shape != delta.shape:
            raise ValueError(
                f"mask should be a bool array of shape {delta.shape}, but got {valid.dtype} {valid.shape}"
            )
    _check(~valid | np.isfinite(delta), delta, "td_errors", "finite where mask is True")
    counts = valid.sum(axis=1)
    empty = np.flatnonzero(counts == 0)
    if empty.shape[0]:
        raise ValueError(
            f"mask should keep a step of every sequence, but got mask[{int(empty[0])}] all False"
        )
    magnitude = np.where(valid, np.abs(np.where(valid, delta, 0.0)), 0.0)
    largest = np.where(valid, magnitude, -np.inf).max(axis=1)
    mean = magnitude.sum(axis=1) / counts
    return np.asarray(weight * largest + (1.0 - weight) * mean, dtype=np.float64)


def ring_predecessors(episode_ids: npt.ArrayLike, *, oldest: int = 0) -> IntArray:
    """Predecessor map of a ring-buffer memory: ``pred[i] = (i − 1) mod N`` when that slot holds
    the same episode and ``i`` is not the oldest slot, else ``-1``.

    ``episode_ids[i]`` names the episode of slot ``i`` (``< 0``: empty); ``oldest`` is the slot
    written longest ago (the next one to be overwritten), whose predecessor is gone.

    >>> ring_predecessors([7, 7, 8, 8, -1]).tolist()
    [-1, 0, -1, 2, -1]
    >>> ring_predecessors([5, 5, 5], oldest=1).tolist()
    [2, -1, 1]
    """
    ids = as_indices(episode_ids, "episode_ids")
    n = ids.shape[0]
    if n == 0:
        raise ValueError("episode_ids should be a non-empty 1-D array, but got shape (0,)")
    start = check_positive_int(oldest, "oldest", minimum=0, maximum=n - 1)
    before = np.roll(np.arange(n, dtype=np.int64), 1)
    linked = (ids >= 0) & (ids[before] == ids)
    linked[start] = False
    return np.where(linked, before, -1).astype(np.int64)


def pser_priorities(
    indices: npt.ArrayLike,
    priorities: npt.ArrayLike,
    predecessors: npt.ArrayLike,
    current: npt.ArrayLike,
    *,
    decay: float,
    window: int,
    eta: float = 0.0,
) -> tuple[IntArray, FloatArray]:
    """Prioritized Sequence Experience Replay (Brittain, Bertram, Yang, Wei 2019, Sec. 3).

    A slot ``t`` given priority ``p_t`` passes a decayed copy back along its episode:
    ``p_{t−k} ← max(p_{t−k}, ρ^k · p_t)`` for ``k = 1..W`` (``ρ = decay``, ``W = window``), so the
    transitions that led to a surprising one are replayed sooner.  The chain follows
    ``predecessors`` (see :func:`ring_predecessors`) and stops at the episode's start.

    ``eta`` ``η`` keeps a replayed slot from dropping below ``η`` times its old priority:
    ``p_t = max(p_new, η · p_old)``, PSER's guard against a propagated priority being wiped at the
    slot's next replay ("priority collapse"); ``η = 0`` writes ``p_new`` as is.

    ``p_{t−k}`` is the slot's new priority if it was replayed in this call, else ``current``
    (the sampler's ``priorities``); several contributions to one slot combine by ``max``.
    Returns ``(slots, priorities)`` to write, sorted.

    >>> idx, p = pser_priorities([3], [8.0], [-1, 0, 1, 2], [1.0, 1.0, 3.0, 1.0], decay=0.5, window=2)
    >>> idx.tolist(), p.tolist()
    ([1, 2, 3], [2.0, 4.0, 8.0])
    """
    pred = _predecessor_map(predecessors)
    capacity = pred.shape[0]
    idx, values = _slot_update(indices, priorities, capacity)
    now = _current(current, capacity)
    rho = _unit(decay, "decay")
    width = check_positive_int(window, "window", minimum=0)
    floor = _unit(eta, "eta")
    old = now[idx]
    fresh = np.where(np.isnan(old), values, np.maximum(values, floor * np.nan_to_num(old)))
    own = _max_combine(idx, fresh)
    slots: list[IntArray] = []
    passed: list[FloatArray] = []
    node, amount = idx.copy(), fresh.copy()
    for _ in range(width):
        node = np.where(node >= 0, pred[np.maximum(node, 0)], -1)
        amount = amount * rho
        alive = node >= 0
        alive[alive] = ~np.isnan(now[node[alive]])
        node = np.where(alive, node, -1)
        if not alive.any():
            break
        slots.append(node[alive])
        passed.append(amount[alive])
    if not slots:
        return own
    targets, value = _max_combine(np.concatenate(slots), np.concatenate(passed))
    return _merge(own, (targets, np.maximum(_base(targets, own, now), value)))
