"""Writes of several slots at once, shared by the rules that touch more than the replayed slots
(predecessor boost, PSER) and :class:`~prisample.methods.StalenessBonus`.

A rule returns ``(indices, priorities)``, sorted and without duplicates, ready for
``sampler.update_priorities``; where one slot gets several values in one call (drawn twice in a
batch, or both replayed and boosted) they are combined by ``max``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from prisample._validation import as_indices, as_priorities, to_numpy
from prisample.methods._checks import check_each, reals

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def max_combine(indices: IntArray, values: FloatArray) -> tuple[IntArray, FloatArray]:
    """Sorted unique indices, each with the largest of its values."""
    unique, inverse = np.unique(indices, return_inverse=True)
    out = np.full(unique.shape[0], -np.inf)
    np.maximum.at(out, inverse.reshape(-1), values)
    return unique.astype(np.int64), out


def merge(
    own: tuple[IntArray, FloatArray], targets: tuple[IntArray, FloatArray]
) -> tuple[IntArray, FloatArray]:
    """``own`` overwritten by ``targets`` where both name a slot (targets were built from own)."""
    indices = np.concatenate([own[0], targets[0]])
    values = np.concatenate([own[1], targets[1]])
    unique, last = np.unique(indices[::-1], return_index=True)  # targets come last: keep theirs
    return unique.astype(np.int64), values[::-1][last]


def slot_update(
    indices: npt.ArrayLike, priorities: npt.ArrayLike, capacity: int
) -> tuple[IntArray, FloatArray]:
    """Checked ``(indices, priorities)`` of one write: one finite ``p >= 0`` per slot in ``[0, capacity)``
    (``priorities`` of shape ``(k,)`` or ``(k, 1)``, as every ``update_priorities`` takes them)."""
    idx = as_indices(indices, "indices")
    values = as_priorities(priorities, idx.shape[0])
    bad = np.flatnonzero((idx < 0) | (idx >= capacity))
    if bad.shape[0]:
        j = int(bad[0])
        raise ValueError(f"indices should lie in [0, {capacity}), but got indices[{j}]={idx[j]}")
    check_each((values >= 0.0) & (values < np.inf), values, "priorities", "finite and >= 0")
    return idx, values


def predecessor_map(predecessors: npt.ArrayLike) -> IntArray:
    """Checked predecessor map: per slot, the slot before it in its episode, or -1."""
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


def current_priorities(current: npt.ArrayLike, capacity: int) -> FloatArray:
    """Checked sampler priorities, one per slot: NaN (empty) or finite and ``>= 0``."""
    values = reals(current, "current")
    if values.shape != (capacity,):
        raise ValueError(f"current should have shape ({capacity},) like predecessors, but got {values.shape}")
    filled = ~np.isnan(values)
    check_each(
        ~filled | ((values >= 0.0) & (values < np.inf)), values, "current", "NaN (empty) or finite and >= 0"
    )
    return values


def base_priorities(slots: IntArray, own: tuple[IntArray, FloatArray], current: FloatArray) -> FloatArray:
    """A slot's priority before a boost: its new value if written in this call, else ``current``."""
    base = current[slots].copy()
    at = np.searchsorted(own[0], slots)
    written = (at < own[0].shape[0]) & (own[0][np.minimum(at, own[0].shape[0] - 1)] == slots)
    base[written] = own[1][at[written]]
    return base
