"""The proportional draw and its importance weights in one compiled call, and the checked write
of new priorities in another (the sampler's fast path for its default distribution; Schaul et
al. 2016, App. B.2.1 and Sec. 3.4).

``PrioritizedSampler.sample`` with the proportional backend and the base class's weights would
otherwise cross from Python into compiled code three times per batch (the tree descent, the
smallest probability, the weights), each crossing paying the dispatcher's per-argument cost.
Here one kernel does all three with the same arithmetic as those separate steps (the same
compiled ``_stratified_sample`` and ``_weights``, and ``P_min = (p_min + ε)^α / Σ_k m_k`` with
the same C ``pow`` CPython calls), so a batch is bit-identical to theirs.  Likewise
``update_priorities`` checks its slots and priorities (``check_slots``) and writes them
(``PriorityTree.write``) in one call, :func:`checked_tree_write`: the same checks in the same
order, then the same write.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from prisample._validation import _first_problem
from prisample.trees import PriorityTree, _stratified_sample, _tree_write
from prisample.weights import _MODES, _weights

__all__ = ["WEIGHT_MODES", "checked_tree_write", "proportional_draw"]

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


@numba.njit(cache=True)
def _checked_write(
    raw: np.ndarray,
    masses: np.ndarray,
    sums: np.ndarray,
    mins: np.ndarray,
    maxs: np.ndarray,
    offsets: np.ndarray,
    eps: float,
    alpha: float,
    limit: float,
    slots: np.ndarray,
    values: np.ndarray,
) -> tuple[int, int, int]:
    """``_first_problem(raw, slots, values, True)``, then (only if it found none)
    ``_tree_write``: ``(code, j, Δcount)``, ``code`` the problem's (0 when written, or
    ``BAD_MASS``) and ``j`` the entry it names."""
    code, j = _first_problem(raw, slots, values, True)
    if code != 0:
        return code, j, 0
    code, change = _tree_write(raw, masses, sums, mins, maxs, offsets, eps, alpha, limit, slots, values)
    return code, 0, change


def checked_tree_write(
    tree: PriorityTree, slots: npt.NDArray[np.int64], values: npt.NDArray[np.float64]
) -> tuple[int, int, int]:
    """Check that every slot is in range and filled and every value finite and ``>= 0``
    (:func:`~prisample._validation.check_slots`), then ``tree.write(slots, values)``, in one
    compiled call; nothing is written unless all pass.  Returns ``(code, j, Δcount)``: ``code``
    0 when written, ``check_slots``'s code for ``slots[j]`` / ``values[j]``, or
    ``BAD_MASS`` (``prisample.trees``) (nothing written either)."""
    code, j, change = _checked_write(
        tree.raw,
        tree.masses,
        tree.sums,
        tree.mins,
        tree.maxs,
        tree.offsets,
        tree.eps,
        tree.alpha,
        tree.limit,
        slots,
        values,
    )
    return int(code), int(j), int(change)
