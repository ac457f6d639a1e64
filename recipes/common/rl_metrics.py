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
redraws each arm's seeds separately (two strata), and Welch's t-test on the two sets of values;
with a registered margin ``m``, an equivalence test on the same bootstrap (:func:`equivalence`: the
two one-sided tests of Schuirmann 1987 in their interval form).  A family of such tests
(:func:`holm`): the Holm–Bonferroni adjusted Welch p-values, reported beside the per-test verdicts.

Every study draws its intervals here, with ``BOOTSTRAP_REPS`` resamples and the bootstrap generator's
seed 0, so that one protocol's "5,000 resamples" holds for all of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from recipes.common.aggregates import FloatArray, iqm, stratified_bootstrap_ci

__all__ = [
    "BOOTSTRAP_REPS",
    "CONFIDENCE",
    "EQUIVALENCE_CONFIDENCE",
    "EQUIVALENT",
    "FAMILY_ALPHA",
    "NOT_SHOWN_EQUIVALENT",
    "auc",
    "compare",
    "equivalence",
    "equivalence_word",
    "final",
    "holm",
    "holm_by_group",
    "iqm_interval",
    "relative_margin",
    "seed_mean_std",
    "verdict_word",
    "welch",
]

BOOTSTRAP_REPS = 5000
"""Bootstrap resamples of every interval (the registered protocols' 5,000)."""
CONFIDENCE = 0.95
"""Level of the intervals of the IQMs and of the difference test."""
EQUIVALENCE_CONFIDENCE = 0.90
"""Level of the interval of the equivalence test: ``1 − 2α`` for two one-sided tests at α = 0.05."""
FAMILY_ALPHA = 0.05
"""Family-wise error rate of :func:`holm`."""
EQUIVALENT = "equivalent within ±m"
NOT_SHOWN_EQUIVALENT = "not shown equivalent"


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
    over its seeds (``BOOTSTRAP_REPS`` resamples, generator seed ``seed``): the one every study uses."""
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


def equivalence_word(low: float, high: float, margin: float) -> str:
    """:data:`EQUIVALENT` when the interval ``[low, high]`` lies inside ``(−margin, +margin)``, else
    :data:`NOT_SHOWN_EQUIVALENT`."""
    return EQUIVALENT if -margin < low and high < margin else NOT_SHOWN_EQUIVALENT


def _seed_arrays(arm: npt.ArrayLike, baseline: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    a, b = np.asarray(arm, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.size < 2 or b.size < 2:
        raise ValueError(f"each arm needs at least 2 seeds, but got {a.size} and {b.size}")
    return a, b


def _check_margin(margin: float) -> None:
    if not (isinstance(margin, int | float) and math.isfinite(margin) and margin > 0.0):
        raise ValueError(f"margin should be a finite number > 0, but got margin={margin!r}")


def _difference_draws(a: FloatArray, b: FloatArray, seed: int) -> FloatArray:
    """``BOOTSTRAP_REPS`` draws of ``IQM(a*) − IQM(b*)``, each arm's seeds redrawn with replacement
    separately (the arm's, then the baseline's indices, from one generator seeded ``seed``)."""
    rng = np.random.default_rng(seed)
    differences = np.empty(BOOTSTRAP_REPS)
    for r in range(BOOTSTRAP_REPS):
        differences[r] = iqm({"s": a[rng.integers(0, a.size, a.size)]}) - iqm(
            {"s": b[rng.integers(0, b.size, b.size)]}
        )
    return differences


def _percentile_interval(draws: FloatArray, confidence: float) -> tuple[float, float]:
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = (float(v) for v in np.percentile(draws, [tail, 100.0 - tail]))
    return low, high


def _equivalence_entry(point: float, draws: FloatArray, margin: float) -> dict[str, Any]:
    low, high = _percentile_interval(draws, EQUIVALENCE_CONFIDENCE)
    return {
        "margin": float(margin),
        "interval": [point, low, high],
        "verdict": equivalence_word(low, high, margin),
    }


def compare(
    arm: npt.ArrayLike, baseline: npt.ArrayLike, seed: int = 0, margin: float | None = None
) -> dict[str, Any]:
    """The registered test of an arm against its baseline on per-seed values (the AUC): the 95 %
    percentile interval of ``IQM(arm) − IQM(baseline)`` from a bootstrap that redraws each arm's
    seeds separately, its verdict (:func:`verdict_word`), and Welch's t-test on the means:
    ``{"difference": [point, low, high], "welch_t", "welch_p", "verdict"}``.  With a ``margin``, also
    ``"equivalence"``: :func:`equivalence` on the same bootstrap draws."""
    a, b = _seed_arrays(arm, baseline)
    if margin is not None:
        _check_margin(margin)
    draws = _difference_draws(a, b, seed)
    low, high = _percentile_interval(draws, CONFIDENCE)
    t, p = welch(a, b)
    point = iqm({"s": a}) - iqm({"s": b})
    result: dict[str, Any] = {
        "difference": [point, low, high],
        "welch_t": t,
        "welch_p": p,
        "verdict": verdict_word(low, high),
    }
    if margin is not None:
        result["equivalence"] = _equivalence_entry(point, draws, margin)
    return result


def equivalence(arm: npt.ArrayLike, baseline: npt.ArrayLike, margin: float, seed: int = 0) -> dict[str, Any]:
    """Equivalence of an arm and its baseline within a registered margin ``m`` (``margin``), by two
    one-sided tests (TOST; Schuirmann 1987, "A comparison of the two one-sided tests procedure and
    the power approach for assessing the equivalence of average bioavailability"; Lakens 2017,
    "Equivalence tests", Soc. Psychol. Personal. Sci.) in their interval form: H0 ``|Δ| ≥ m`` is
    rejected at α = 0.05, so the arms are :data:`EQUIVALENT`, when the ``1 − 2α`` = 90 % interval
    of ``Δ = IQM(arm) − IQM(baseline)`` lies inside ``(−m, +m)``; otherwise
    :data:`NOT_SHOWN_EQUIVALENT` (which says nothing of a difference: :func:`compare` tests that).
    The interval is the percentile interval of the difference test's bootstrap (``BOOTSTRAP_REPS``
    resamples redrawing each arm's seeds separately, generator seed ``seed``):
    ``{"margin": m, "interval": [Δ, low, high], "verdict"}``."""
    a, b = _seed_arrays(arm, baseline)
    _check_margin(margin)
    result: dict[str, Any] = _equivalence_entry(
        iqm({"s": a}) - iqm({"s": b}), _difference_draws(a, b, seed), margin
    )
    return result


def relative_margin(baseline: npt.ArrayLike, fraction: float) -> float:
    """A margin registered as a fraction of the baseline arm's IQM: ``fraction · |IQM(baseline)|``
    (e.g. 0.1: ±10 % of the uniform arm's AUC IQM)."""
    if not (isinstance(fraction, int | float) and math.isfinite(fraction) and fraction > 0.0):
        raise ValueError(f"fraction should be a finite number > 0, but got fraction={fraction!r}")
    values = np.asarray(baseline, dtype=np.float64)
    if values.size == 0:
        raise ValueError("baseline should hold at least one value, but got none")
    return float(fraction * abs(iqm({"s": values})))


def holm(p_values: Mapping[str, float], alpha: float = FAMILY_ALPHA) -> dict[str, Any]:
    """Holm–Bonferroni over a family of ``k`` tests (Holm 1979, "A simple sequentially rejective
    multiple test procedure", Scand. J. Statist.): with the p-values sorted ``p_(1) ≤ … ≤ p_(k)``,
    the adjusted ``p̃_(i) = min(1, max_{j ≤ i} (k − j + 1) p_(j))``; test ``(i)`` survives when
    ``p̃_(i) ≤ alpha`` (the step-down procedure: reject while ``p_(i) ≤ alpha / (k − i + 1)``).
    ``{"alpha", "tests": k, "adjusted_p": {name: p̃}, "survives": {name: bool}}``, in the given
    order.  It controls the family-wise error rate at ``alpha`` and is reported beside the per-test
    verdicts, which it does not replace."""
    if not (isinstance(alpha, int | float) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha should lie in (0, 1), but got alpha={alpha!r}")
    for name, p in p_values.items():
        if not (isinstance(p, int | float) and 0.0 <= p <= 1.0):
            raise ValueError(f"p-values should lie in [0, 1], but got p_values[{name!r}]={p!r}")
    names = sorted(p_values, key=lambda n: p_values[n])  # stable: ties keep the given order
    k, running, adjusted = len(names), 0.0, {}
    for i, name in enumerate(names):
        running = max(running, min(1.0, (k - i) * float(p_values[name])))
        adjusted[name] = running
    return {
        "alpha": float(alpha),
        "tests": k,
        "adjusted_p": {n: adjusted[n] for n in p_values},
        "survives": {n: adjusted[n] <= alpha for n in p_values},
    }


def holm_by_group(p_values: Mapping[str, Mapping[str, float]], alpha: float = FAMILY_ALPHA) -> dict[str, Any]:
    """:func:`holm` over one family whose tests are named in two levels (an environment and an arm,
    an arm and its baseline): ``{"alpha", "tests", "adjusted_p": {group: {test: p̃}}, "survives":
    {group: {test: bool}}}``."""
    pairs = [(group, test) for group, tests in p_values.items() for test in tests]
    keys = {pair: str(i) for i, pair in enumerate(pairs)}  # names of any text, kept apart
    flat = holm({key: p_values[group][test] for (group, test), key in keys.items()}, alpha)
    nested: dict[str, Any] = {
        "alpha": flat["alpha"],
        "tests": flat["tests"],
        "adjusted_p": {},
        "survives": {},
    }
    for (group, test), key in keys.items():
        for field in ("adjusted_p", "survives"):
            nested[field].setdefault(group, {})[test] = flat[field][key]
    return nested


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
