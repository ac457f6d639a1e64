"""Which rows of a batch write count, when a batch names the same slot or stream more than once."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["last_rows", "previous_row"]

IntArray = npt.NDArray[np.int64]


def previous_row(streams: IntArray) -> IntArray:
    """Per row, the row before it in the same write on the same stream (``-1``: none)."""
    order = np.argsort(streams, kind="stable")
    previous = np.full(streams.shape[0], -1, dtype=np.int64)
    same = streams[order[1:]] == streams[order[:-1]]
    previous[order[1:][same]] = order[:-1][same]
    return previous


def last_rows(slots: IntArray) -> Any:
    """Rows of a write that its slots keep (a slot written twice keeps its last row)."""
    n = slots.shape[0]
    if n <= 1 or (n <= 64 and len(set(slots.tolist())) == n):  # distinct: every row (no sort)
        return slice(None)
    keep = n - 1 - np.unique(slots[::-1], return_index=True)[1]
    return slice(None) if keep.shape[0] == n else keep
