"""Priority rules beyond ``|δ|``: off-policy replay (Schaul et al. 2016, Sec. 6).

With behaviour policy ``μ`` filling the memory and target policy ``π`` being learned about, the
per-decision importance ratio of a transition ``(s, a)`` is ``ρ = π(a|s) / μ(a|s)``.  Sec. 6
maps the two standard off-policy corrections onto the sampler:

* *weighted importance sampling*: uniform draws and ``w = ρ`` — ``CorrectedSampler(alpha=0,
  beta=1)`` with ``ρ`` as the slots' correction factors (:meth:`CorrectedSampler.set_corrections`);
  the memory normalisation then gives ``w_i = ρ_i / max_j ρ_j``;
* *rejection sampling*: ``p = min(1, ρ)`` with ``α = 1``, ``β = 0``, proportional and ``ε = 0``
  (:func:`rejection_priorities`), so a transition ``π`` never takes is never drawn;

and proposes hybrids ``p = ρ · |δ|`` (:func:`hybrid_priorities`), annealed or ranked.  With
``β = 1`` and ``ρ`` as correction factor, a hybrid's weight ``ρ_i (N·P(i))^-1`` undoes the ``ρ``
inside the priority and applies it once, so the expected update is the ``ρ``-corrected one.

>>> import numpy as np
>>> from prisample import CorrectedSampler
>>> rho = importance_ratios([0.9, 0.05], [0.25, 0.25])
>>> rho.round(6).tolist()
[3.6, 0.2]
>>> rejection_priorities(rho).round(6).tolist()
[1.0, 0.2]
>>> hybrid_priorities(rho, [-0.5, 2.0]).round(6).tolist()
[1.8, 0.4]
>>> s = CorrectedSampler(2, alpha=0.0, beta=1.0, seed=0)
>>> s.set_corrections([0, 1], rho)
>>> bool(np.allclose(s.weights([0, 1]), rho / rho.max()))   # weighted IS: ρ_i / max_j ρ_j
True
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from prisample._validation import to_numpy


def _reals(values: npt.ArrayLike, name: str) -> npt.NDArray[np.float64]:
    array = to_numpy(values, name)
    if array.dtype.kind not in "fiu":
        raise TypeError(f"{name} should hold real numbers, but got dtype {array.dtype}")
    return np.asarray(array, dtype=np.float64)


def _check(condition: npt.NDArray[np.bool_], values: npt.NDArray[np.float64], name: str, what: str) -> None:
    bad = np.flatnonzero(~condition.reshape(-1))
    if bad.shape[0]:
        j = int(bad[0])
        raise ValueError(f"{name} should be {what}, but got {name}[{j}]={values.reshape(-1)[j]!r}")


def importance_ratios(pi_tm1: npt.ArrayLike, mu_tm1: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Per-decision importance ratios ``ρ_{t-1} = π(a_{t-1}|s_{t-1}) / μ(a_{t-1}|s_{t-1})``.

    ``pi_tm1`` and ``mu_tm1`` are the probabilities the target and the behaviour policy give the
    action that was taken (same shape).  ``μ > 0`` is required (the action was taken under
    ``μ``); ``π = 0`` gives ``ρ = 0``.  Precup, Sutton and Singh (2000), per-decision importance
    sampling; Schaul et al. (2016), Sec. 6.

    >>> importance_ratios([0.5, 0.0, 1.0], [0.25, 0.5, 0.5]).tolist()
    [2.0, 0.0, 2.0]
    """
    pi = _reals(pi_tm1, "pi_tm1")
    mu = _reals(mu_tm1, "mu_tm1")
    if pi.shape != mu.shape:
        raise ValueError(f"pi_tm1 and mu_tm1 should have the same shape, but got {pi.shape} and {mu.shape}")
    _check((pi >= 0.0) & (pi <= 1.0), pi, "pi_tm1", "probabilities in [0, 1]")
    _check((mu > 0.0) & (mu <= 1.0), mu, "mu_tm1", "probabilities in (0, 1] (the action was taken)")
    return pi / mu


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
    rho = _reals(rho_tm1, "rho_tm1")
    _check((rho >= 0.0) & (rho < np.inf), rho, "rho_tm1", "finite and >= 0")
    if isinstance(bound, bool) or not isinstance(bound, (int, float, np.floating, np.integer)):
        raise TypeError(f"bound should be a positive float, but got bound={bound!r}")
    if not 0.0 < float(bound) < np.inf:
        raise ValueError(f"bound should be a positive finite float, but got bound={bound!r}")
    return np.minimum(1.0, rho / float(bound))


def hybrid_priorities(rho_tm1: npt.ArrayLike, td_error: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Hybrid off-policy priorities ``p = ρ · |δ|`` (Sec. 6).

    Drawn with ``P(i) ∝ p_i^α`` and weighted by ``ρ_i (N·P(i))^-β`` (``ρ`` as the slots'
    correction factors), ``β = 1`` gives the ``ρ``-corrected expected update for any ``α``; at
    ``α = 1`` the proposal ``∝ |ρ δ|`` is the minimum-variance importance-sampling proposal for
    the sum ``Σ_i ρ_i δ_i`` of the memory's updates.  ``ρ`` and ``δ`` broadcast together.

    >>> hybrid_priorities([2.0, 0.5, 0.0], [-1.5, 4.0, 3.0]).tolist()
    [3.0, 2.0, 0.0]
    """
    rho = _reals(rho_tm1, "rho_tm1")
    delta = _reals(td_error, "td_error")
    _check((rho >= 0.0) & (rho < np.inf), rho, "rho_tm1", "finite and >= 0")
    _check(np.isfinite(delta), delta, "td_error", "finite")
    try:
        return np.asarray(rho * np.abs(delta), dtype=np.float64)
    except ValueError as error:
        raise ValueError(
            f"rho_tm1 and td_error should broadcast together, but got shapes {rho.shape} and {delta.shape}"
        ) from error
