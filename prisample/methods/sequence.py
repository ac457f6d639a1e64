"""Sequence priorities (Kapturowski et al. 2019, R2D2): ``p = η·max_t|δ_t| + (1 − η)·mean_t|δ_t|``
per replay sequence."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from prisample._validation import to_numpy
from prisample.methods._checks import check_each, reals, unit

__all__ = ["sequence_priority"]


def sequence_priority(
    td_errors: npt.ArrayLike, eta: float = 0.9, mask: npt.ArrayLike | None = None
) -> npt.NDArray[np.float64]:
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
    delta = reals(td_errors, "td_errors")
    if delta.ndim != 2:
        raise ValueError(f"td_errors should be 2-D (sequences, steps), but got shape {delta.shape}")
    weight = unit(eta, "eta")
    if mask is None:
        valid = np.ones(delta.shape, dtype=bool)
    else:
        valid = to_numpy(mask, "mask")
        if valid.dtype != np.bool_ or valid.shape != delta.shape:
            raise ValueError(
                f"mask should be a bool array of shape {delta.shape}, but got {valid.dtype} {valid.shape}"
            )
    check_each(~valid | np.isfinite(delta), delta, "td_errors", "finite where mask is True")
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
