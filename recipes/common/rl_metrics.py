"""What every RL comparison of the recipes reports: per seed the area under the evaluation curve and
the final score; across seeds the IQM with a stratified-bootstrap interval; arm against baseline.

A run's evaluation curve is its scores ``s_1 … s_E`` at the evaluation steps ``t_1 < … < t_E``.

* **AUC**, the area under the evaluation curve, as the mean over the evaluations
  ``(1/E) Σ_e s_e`` (evaluations are evenly spaced, so this is the area divided by the run's
  length): it scores how fast *and* how well an agent learns, and a task whose score oscillates
  does not hinge on where the run stopped;
* **final**: ``s_E``, the score of the last evaluation.

Across the seeds of one arm: the interquartile mean (IQM, the 25 % trimmed mean of Agarwal et al.
2021, :func:`recipes.common.aggregates.iqm`) with a percentile interval from a bootstrap that
redraws the arm's seeds with replacement (:func:`~recipes.common.aggregates.stratified_bootstrap_ci`,
one stratum).
Arm against baseline (:func:`compare`): the difference of their IQMs with a bootstrap interval that
redraws each arm's seeds separately (two strata), and Welch's t-test on the two sets of values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from recipes.common.aggregates import iqm, stratified_bootstrap_ci

__all__ = ["auc", "compare", "final", "iqm_interval", "seed_mean_std", "verdict_word", "welch"]

BOOTSTRAP_REPS = 5000
CONFIDENCE = 0.95


def _scores(curve: Sequence[float | None]) -> list[float]:
    return [float(s) for s in curve if s is not None and math.isfinite(s)]


def auc(curve: Sequence[float | None]) -> float:
    """``(1/E) Σ_e s_e``: the mean over a run's evaluations (NaN without one)."""
    scores = _scores(curve)
    return float(np.mean(scores)) if scores else math.nan


def final(curve: Sequence[float | None]) -> float:
    """``s_E``: the last evaluation's score (NaN without one)."""
    scores = _scores(curve)
    return scores[-1] if scores else math.nan


def iqm_interval(values: Sequence[float], seed: int = 0) -> list[float]:
    """``[IQM, low, high]`` of one arm's per-seed values, the interval a 95 % percentile bootstrap
    over its seeds."""
    point, low, high = stratified_bootstrap_ci(
        {"arm": np.asarray(values, dtype=np.float64)},
        iqm,
        reps=BOOTSTRAP_REPS,
        confidence=CONFIDENCE,
        seed=seed,
    )
    return [point, low, high]


def welch(a: npt.ArrayLike, b: npt.ArrayLike) -> tuple[float, float]:
    """Welch's t statistic of ``mean(a) − mean(b)`` and its two-sided p-value (Welch–Satterthwaite
    degrees of freedom; the t distribution's tail by ``math``'s regularised incomplete beta via
    numerical integration, so that no SciPy is needed)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    if vx + vy == 0.0:
        return (0.0, 1.0) if x.mean() == y.mean() else (math.copysign(math.inf, x.mean() - y.mean()), 0.0)
    t = float((x.mean() - y.mean()) / math.sqrt(vx + vy))
    df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    return t, _t_two_sided(abs(t), float(df))


def _t_two_sided(t: float, df: float) -> float:
    """``P(|T| >= t)`` for Student's t with ``df`` degrees of freedom: ``I_{df/(df+t²)}(df/2, 1/2)``."""
    return _regularized_beta(df / (df + t * t), df / 2.0, 0.5)


def _regularized_beta(x: float, a: float, b: float) -> float:
    """``I_x(a, b)`` by the continued fraction of Numerical Recipes (Lentz's method)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _regularized_beta(1.0 - x, b, a)
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return math.exp(log_front) * result / a


def verdict_word(low: float, high: float) -> str:
    """``"better"`` when the interval of the difference lies above 0, ``"worse"`` below, else
    ``"no difference detected"``."""
    if low > 0.0:
        return "better"
    if high < 0.0:
        return "worse"
    return "no difference detected"


def compare(arm: Sequence[float], baseline: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """The registered test of an arm against its baseline on per-seed values (the AUC): the 95 %
    percentile interval of ``IQM(arm) − IQM(baseline)`` from a bootstrap that redraws each arm's
    seeds separately, its verdict (:func:`verdict_word`), and Welch's t-test on the means:
    ``{"difference": [point, low, high], "welch_t", "welch_p", "verdict"}``."""
    a, b = np.asarray(arm, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.size < 2 or b.size < 2:
        raise ValueError(f"each arm needs at least 2 seeds, but got {a.size} and {b.size}")
    rng = np.random.default_rng(seed)
    differences = np.empty(BOOTSTRAP_REPS)
    for r in range(BOOTSTRAP_REPS):
        differences[r] = iqm({"s": a[rng.integers(0, a.size, a.size)]}) - iqm(
            {"s": b[rng.integers(0, b.size, b.size)]}
        )
    tail = 100.0 * (1.0 - CONFIDENCE) / 2.0
    low, high = (float(v) for v in np.percentile(differences, [tail, 100.0 - tail]))
    t, p = welch(a, b)
    return {
        "difference": [iqm({"s": a}) - iqm({"s": b}), low, high],
        "welch_t": t,
        "welch_p": p,
        "verdict": verdict_word(low, high),
    }


def seed_mean_std(curves: npt.ArrayLike) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per point of the curves (a column of ``[seed][point]``): the mean and the standard deviation
    over the seeds with a value there (not NaN); NaN where none has one (a run too short to reach
    the point), where ``np.nanmean`` would warn "Mean of empty slice"."""
    x = np.asarray(curves, dtype=np.float64)
    finite = np.isfinite(x)
    count = finite.sum(axis=0)
    reached = count > 0
    mean, std = np.full(count.shape, np.nan), np.full(count.shape, np.nan)
    mean[reached] = np.where(finite, x, 0.0).sum(axis=0)[reached] / count[reached]
    squares = np.where(finite, (x - np.where(reached, mean, 0.0)) ** 2, 0.0).sum(axis=0)
    std[reached] = np.sqrt(squares[reached] / count[reached])
    return mean, std
