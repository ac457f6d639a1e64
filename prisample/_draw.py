"""The proportional draw and its importance weights in one compiled call (the sampler's fast
path for its default distribution; Schaul et al. 2016, App. B.2.1 and Sec. 3.4).

``PrioritizedSampler.sample`` with the proportional backend and the base class's weights would
otherwise cross from Python into compiled code three times per batch (the tree descent, the
smallest probability, the weights), each crossing paying the dispatcher's per-argument cost.
Here one kernel does all three with the same arithmetic as those separate steps (the same
compiled ``_stratified_sample`` and ``_weights``, and ``P_min = (p_min + ε)^α / Σ_k m_k`` with
the same C ``pow`` CPython calls), so a batch is bit-identical to theirs.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from prisample.trees import PriorityTree, _stratified_sample
from prisample.weights import _MODES, _weights

__all__ = ["WEIGHT_MODES", "proportional_draw"]

_INT64, _FLOAT64, _FLOAT32 = np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.float32)
WEIGHT_MODES = _MODES
"""``weight_norm`` as the compiled weights take it."""


@numba.njit(cache=True)
def _draw_weighted(
    masses: np.ndarray,
    sums: np.ndarray,
    offsets: np.ndarray,
    mins: np.ndarray,
    u: np.ndarray,
    eps: float,
    alpha: float,
    n: int,
    beta: float,
    mode: int,
    slots: np.ndarray,
    probabilities: np.ndarray,
    weights: np.ndarray,
) -> bool:
    """Stratified draw of ``u.shape[0]`` slots (``u`` overwritten), then their weights
    ``(N · P(i))^-β`` normalised as ``mode`` says; ``False`` (weights not written) when the
    memory normalisation needs ``P_min`` of the smallest *positive* priority (``ε = 0``), or
    ``P_min`` underflows to 0: the caller's general path handles those corners."""
    _stratified_sample(masses, sums, offsets, u, slots, probabilities)
    min_probability = 1.0
    if mode == 0:
        low = mins[0]
        if not (eps > 0.0 or low > 0.0 or alpha == 0.0):
            return False
        min_probability = (low + eps) ** alpha / sums[0]
        if not min_probability > 0.0:
            return False
    _weights(probabilities, n, beta, mode, min_probability, weights)
    return True


def proportional_draw(
    tree: PriorityTree, u: npt.NDArray[np.float64], n: int, beta: float, mode: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float32] | None]:
    """Slots drawn from ``tree`` by the uniforms ``u`` (overwritten), their probabilities
    ``P(i) = m_i / Σ_k m_k`` and importance weights ``w_i = (N · P(i))^-β`` normalised by
    ``mode`` (:data:`WEIGHT_MODES`), over ``n`` valid slots; ``None`` for the weights where the
    general path must compute them (see :func:`_draw_weighted`).  ``tree.total()`` must be > 0."""
    k = u.shape[0]
    slots = np.empty(k, dtype=_INT64)
    probabilities = np.empty(k, dtype=_FLOAT64)
    weights = np.empty(k, dtype=_FLOAT32)
    done = _draw_weighted(
        tree.masses,
        tree.sums,
        tree.offsets,
        tree.mins,
        u,
        tree.eps,
        tree.alpha,
        n,
        beta,
        mode,
        slots,
        probabilities,
        weights,
    )
    return slots, probabilities, weights if done else None
