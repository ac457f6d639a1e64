"""Asymmetric priorities: positive TD-errors weighed apart from negative ones (Schaul et al. 2016,
App. A): ``p = a₊·δ`` for ``δ > 0``, ``a₋·|δ|`` otherwise."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from prisample.methods._checks import check_each, nonnegative, reals

__all__ = ["asymmetric_priorities"]


def asymmetric_priorities(
    td_error: npt.ArrayLike, positive: float = 1.0, negative: float = 0.5
) -> npt.NDArray[np.float64]:
    """Asymmetric priorities ``p = a₊·δ`` if ``δ > 0`` else ``a₋·|δ|`` (Schaul et al. 2016, App. A).

    The appendix suggests treating positive and negative TD-errors differently, "to introduce an
    asymmetry and prioritize positive TD-errors more than negative ones of equal magnitude"
    (``positive = a₊ > negative = a₋``); its preliminary experiments were inconclusive.
    ``positive = negative = 1`` is plain ``|δ|``.

    >>> asymmetric_priorities([2.0, -2.0, 0.0], positive=1.0, negative=0.25).tolist()
    [2.0, 0.5, 0.0]
    """
    delta = reals(td_error, "td_error")
    a_pos = nonnegative(positive, "positive")
    a_neg = nonnegative(negative, "negative")
    check_each(np.isfinite(delta), delta, "td_error", "finite")
    return np.where(delta > 0.0, a_pos * delta, a_neg * np.abs(delta))
