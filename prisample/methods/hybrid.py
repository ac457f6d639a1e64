"""Hybrid off-policy priorities (Schaul et al. 2016, Sec. 6): ``p = ρ · |δ|``, drawn with
``P(i) ∝ p_i^α`` and weighted by ``ρ_i (N·P(i))^-β`` (``ρ`` as the slots' correction factors of a
:class:`~prisample.methods.offpolicy_corrections.CorrectedSampler`)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from prisample.methods._checks import check_each, reals

__all__ = ["hybrid_priorities"]


def hybrid_priorities(rho_tm1: npt.ArrayLike, td_error: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Hybrid off-policy priorities ``p = ρ · |δ|`` (Sec. 6).

    Drawn with ``P(i) ∝ p_i^α`` and weighted by ``ρ_i (N·P(i))^-β`` (``ρ`` as the slots'
    correction factors), ``β = 1`` gives the ``ρ``-corrected expected update for any ``α``; at
    ``α = 1`` the proposal ``∝ |ρ δ|`` is the minimum-variance importance-sampling proposal for
    the sum ``Σ_i ρ_i δ_i`` of the memory's updates.  ``ρ`` and ``δ`` broadcast together.

    >>> hybrid_priorities([2.0, 0.5, 0.0], [-1.5, 4.0, 3.0]).tolist()
    [3.0, 2.0, 0.0]
    """
    rho = reals(rho_tm1, "rho_tm1")
    delta = reals(td_error, "td_error")
    check_each((rho >= 0.0) & (rho < np.inf), rho, "rho_tm1", "finite and >= 0")
    check_each(np.isfinite(delta), delta, "td_error", "finite")
    try:
        return np.asarray(rho * np.abs(delta), dtype=np.float64)
    except ValueError as error:
        raise ValueError(
            f"rho_tm1 and td_error should broadcast together, but got shapes {rho.shape} and {delta.shape}"
        ) from error
