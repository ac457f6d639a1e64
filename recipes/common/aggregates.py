"""Aggregates of scores over the runs (seeds) of several tasks, with stratified-bootstrap intervals,
as Agarwal, Schwarzer, Castro, Courville, Bellemare (2021), "Deep Reinforcement Learning at the Edge
of the Statistical Precipice" (NeurIPS 2021), Sec. 4 and its library rliable define them.  For N
runs on each of M tasks (games), with scores ``x[n, m]``:

* ``IQM``, the interquartile mean (:func:`iqm`): the mean of the middle 50 % of all N·M runs pooled
  (a 25 % trimmed mean, as ``scipy.stats.trim_mean(x, 0.25, axis=None)``);
* a stratified bootstrap interval (:func:`stratified_bootstrap_ci`): each bootstrap sample redraws,
  with replacement and separately within each task, that task's N runs; the interval is the
  percentile interval of the statistic over the bootstrap samples.

The recipes' RL comparisons (:mod:`recipes.common.rl_metrics`, one task: the seeds of one arm) and
the Atari 100k aggregates (:mod:`recipes.dqn.stats`, many games) use both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

__all__ = ["FloatArray", "Interval", "Scores", "Statistic", "iqm", "per_game", "stratified_bootstrap_ci"]

FloatArray: TypeAlias = npt.NDArray[np.float64]
Scores: TypeAlias = Mapping[str, npt.ArrayLike] | npt.ArrayLike
"""Scores of several games: a mapping game → that game's runs (any number of runs per game), or
an array of shape ``(runs, games)``; a 1-d array is one run (one value) per game."""
Statistic: TypeAlias = Callable[[Mapping[str, FloatArray]], float]


class Interval(NamedTuple):
    """A point estimate and its bootstrap confidence interval ``[low, high]``."""

    point: float
    low: float
    high: float


def per_game(scores: Scores) -> dict[str, FloatArray]:
    """``scores`` as a dict game → 1-d float array of its runs (non-finite runs rejected).

    Array input of shape ``(runs, games)`` is keyed ``"0", "1", ...`` by column; a 1-d array is one
    run per game.
    """
    if isinstance(scores, Mapping):
        games = {str(k): np.asarray(v, dtype=np.float64).reshape(-1) for k, v in scores.items()}
    else:
        array = np.asarray(scores, dtype=np.float64)
        if array.ndim == 0:
            array = array.reshape(1, 1)
        elif array.ndim == 1:
            array = array.reshape(1, -1)
        if array.ndim != 2:
            raise ValueError(f"scores should be a (runs, games) array, got shape {array.shape}")
        games = {str(m): array[:, m].copy() for m in range(array.shape[1])}
    if not games:
        raise ValueError("scores should hold at least one game")
    for game, runs in games.items():
        if runs.size == 0:
            raise ValueError(f"game {game!r} has no runs")
        if not np.all(np.isfinite(runs)):
            raise ValueError(f"game {game!r} has a non-finite score: {runs.tolist()}")
    return games


def iqm(scores: Scores) -> float:
    """Interquartile mean of all runs of all games pooled: sort the K = Σ_m N_m values, drop
    ``⌊K/4⌋`` from each end and average the rest — ``scipy.stats.trim_mean(x, 0.25, axis=None)``
    (the IQM of Agarwal et al. 2021, rliable's ``aggregate_iqm``).  With K < 4 nothing is dropped.
    """
    pooled = np.sort(np.concatenate(list(per_game(scores).values())))
    cut = int(0.25 * pooled.size)
    return float(np.mean(pooled[cut : pooled.size - cut]))


def stratified_bootstrap_ci(
    scores: Scores,
    statistic: Statistic,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int | np.random.Generator | None = 0,
) -> Interval:
    """``statistic(scores)`` with its stratified-bootstrap percentile interval.

    Each of the ``reps`` bootstrap samples draws, for every game m independently, N_m indices
    uniformly with replacement from that game's N_m runs (runs are resampled within a game, never
    across games; games themselves are not resampled), and evaluates ``statistic`` on the result
    (a dict game → resampled runs).  The interval is the ``(1 − confidence)/2`` and
    ``(1 + confidence)/2`` quantiles of the ``reps`` values (Agarwal et al. 2021, Sec. 4; rliable's
    ``StratifiedBootstrap`` with ``method="percentile"``).  A game with one run contributes the
    same value to every sample, so with one run per game the interval collapses to the point.
    """
    if reps < 1:
        raise ValueError(f"reps should be at least 1, got {reps}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence should be in (0, 1), got {confidence}")
    games = per_game(scores)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    draws = {game: rng.integers(0, runs.size, size=(reps, runs.size)) for game, runs in games.items()}
    values = np.empty(reps, dtype=np.float64)
    for r in range(reps):
        values[r] = statistic({game: runs[draws[game][r]] for game, runs in games.items()})
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return Interval(float(statistic(games)), float(low), float(high))
