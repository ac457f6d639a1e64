"""Rejection-sampling priorities for off-policy replay (Schaul et al. 2016, Sec. 6):
``p = min(1, ρ / c)`` drawn proportionally with ``α = 1``, ``β = 0``, ``ε = 0``, so a transition the
target policy never takes is never drawn (``ρ`` from
:func:`~prisample.methods.offpolicy_corrections.importance_ratios`)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from prisample.methods._checks import check_each, reals

__all__ = ["rejection_priorities"]


def rejection_priorities(rho_tm1: npt.ArrayLike, bound: float = 1.0) -> npt.NDArray[np.float64]:
    """Rejection-sampling priorities ``p = min(1, ρ / c)`` (Sec. 6; the paper's rule is ``c = 1``).

    Drawn proportionally with ``α = 1``, ``β = 0`` and ``ε = 0``, a transition is replayed with
    probability ``∝ μ(a|s) · min(1, ρ/c) = min(μ(a|s), π(a|s)/c)``.  With ``c >= max ρ`` this is
    ``∝ π(a|s)``: exactly the target policy's action distribution, within the behaviour data's
    state distribution.  With ``c = 1`` it is exact only where ``π <= μ``; actions that ``π``
    prefers more than ``μ`` are under-replayed.  ``ρ = 0`` gives ``p = 0``: never drawn.

    >>> rejection_priorities([0.0, 0.5, 3.0]).tolist()
    [0.0, 0.5, 1.0]
    >>> rejection_priorities([0.0, 0.5, 3.0], bound=4.0).tolist()
    [0.0, 0.125, 0.75]
    """
    rho = reals(rho_tm1, "rho_tm1")
    check_each((rho >= 0.0) & (rho < np.inf), rho, "rho_tm1", "finite and >= 0")
    if isinstance(bound, bool) or not isinstance(bound, (int, float, np.floating, np.integer)):
        raise TypeError(f"bound should be a positive float, but got bound={bound!r}")
    if not 0.0 < float(bound) < np.inf:
        raise ValueError(f"bound should be a positive finite float, but got bound={bound!r}")
    return np.minimum(1.0, rho / float(bound))
