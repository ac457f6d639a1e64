"""Predecessor boost: a replayed transition raises its predecessor's priority (Schaul et al. 2016,
App. A), and the predecessor map of a ring-buffer memory it (and PSER) follows.

* :func:`predecessor_boost`: ``q_j + scale·p_i`` (or ``max``) for the predecessor ``j`` of each
  replayed slot ``i``, unless ``j`` is terminal or empty;
* :func:`ring_predecessors`: ``pred[i] = (i − 1) mod N`` within an episode, ``-1`` otherwise.

Returns ``(indices, priorities)``, sorted and without duplicates, ready for
``sampler.update_priorities``; a slot given several values in one call takes the largest.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from prisample._validation import as_indices, check_positive_int, to_numpy
from prisample.methods._checks import nonnegative
from prisample.methods._slots import (
    FloatArray,
    IntArray,
    base_priorities,
    current_priorities,
    max_combine,
    merge,
    predecessor_map,
    slot_update,
)

__all__ = ["predecessor_boost", "ring_predecessors"]


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
    pred = predecessor_map(predecessors)
    capacity = pred.shape[0]
    idx, values = slot_update(indices, priorities, capacity)
    now = current_priorities(current, capacity)
    factor = nonnegative(scale, "scale")
    if combine not in ("add", "max"):
        raise ValueError(f"combine should be 'add' or 'max', but got combine={combine!r}")
    ends = None
    if terminal is not None:
        ends = to_numpy(terminal, "terminal")
        if ends.dtype != np.bool_ or ends.shape != (capacity,):
            raise ValueError(
                f"terminal should be a bool array of shape ({capacity},), but got {ends.dtype} {ends.shape}"
            )
    own = max_combine(idx, values)
    targets = pred[idx]
    keep = targets >= 0
    keep[keep] = ~np.isnan(now[targets[keep]])
    if ends is not None:
        keep[keep] = ~ends[targets[keep]]
    if not keep.any():
        return own
    slots, boost = max_combine(targets[keep], factor * values[keep])
    base = base_priorities(slots, own, now)
    boosted = base + boost if combine == "add" else np.maximum(base, boost)
    return merge(own, (slots, boosted))


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
