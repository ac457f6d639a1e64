"""Online batch selection by loss rank (Loshchilov & Hutter 2016) over a ``PrioritizedSampler``.

"Online Batch Selection for Faster Training of Neural Networks" (ICLR 2016 workshop) ranks the
``N`` training items by their latest known loss, largest first (rank ``r = 1..N``), and draws
item of rank ``r`` with probability

``p_r ∝ 1 / exp(log(s_e) / N · r)``,

``s_e >= 1`` the *selection pressure*: ``p_1 / p_N = s_e^((N−1)/N)``, about ``s_e`` for large
``N``; ``s_e = 1`` is uniform.  The distribution is exponential in the rank, whereas the rank
backend's ``P(r) ∝ r^-α`` is a power law: no ``α`` gives the same distribution (``α = log s_e /
log N`` matches the ratio of the extremes only).  The exact distribution comes from the
proportional backend instead: with ``α = 1`` and ``ε = 0`` it draws ``∝ p_i``, so priorities
``p_i = exp(−log(s_e)/N · rank(i))`` (:func:`loshchilov_hutter_priorities`) reproduce ``p_r``
exactly; :class:`OnlineBatchSelection` keeps them current as losses arrive.  The paper applies no
importance weights: build the sampler with ``beta=0.0``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from prisample._validation import as_indices, as_priorities, check_positive_int, check_real
from prisample.methods._checks import check_each, reals
from prisample.sampler import PrioritizedSampler

__all__ = ["OnlineBatchSelection", "loshchilov_hutter_priorities", "loshchilov_hutter_probabilities"]


def _pressure(value: Any) -> float:
    return check_real(value, "selection_pressure", minimum=1.0)


def loshchilov_hutter_probabilities(n: int, selection_pressure: float) -> npt.NDArray[np.float64]:
    """Selection probability of ranks ``1..n``: ``p_r = e^{−c r} / Σ_{k<=n} e^{−c k}``, ``c = log(s_e)/n``.

    Loshchilov & Hutter (2016); rank 1 is the largest loss.

    >>> p = loshchilov_hutter_probabilities(4, 16.0)
    >>> bool(np.allclose(p / p[0], [1.0, 0.5, 0.25, 0.125]))
    True
    """
    count = check_positive_int(n, "n")
    c = math.log(_pressure(selection_pressure)) / count
    mass = np.exp(-c * (np.arange(1, count + 1, dtype=np.float64) - 1.0))  # shifted: same ratios
    return mass / math.fsum(mass)


def _ranks(losses: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    order = np.argsort(-losses, kind="stable")  # ties: the lower slot ranks first
    ranks = np.empty(losses.shape[0], dtype=np.int64)
    ranks[order] = np.arange(1, losses.shape[0] + 1)
    return ranks


def loshchilov_hutter_priorities(losses: npt.ArrayLike, selection_pressure: float) -> npt.NDArray[np.float64]:
    """Priorities ``exp(−log(s_e)/N · rank(i))`` (rank 1 = largest loss, ties to the lower index).

    Written into ``PrioritizedSampler(N, alpha=1.0, eps=0.0, beta=0.0)`` (proportional), the
    sampler draws item ``i`` with exactly :func:`loshchilov_hutter_probabilities`'s ``p_rank(i)``.

    >>> loshchilov_hutter_priorities([0.1, 3.0, 2.0, 0.5], 16.0).round(6).tolist()
    [0.0625, 0.5, 0.25, 0.125]
    """
    values = reals(losses, "losses").reshape(-1)
    if values.shape[0] == 0:
        raise ValueError("losses should hold at least one value, but got none")
    check_each(np.isfinite(values), values, "losses", "finite")
    c = math.log(_pressure(selection_pressure)) / values.shape[0]
    return np.asarray(np.exp(-c * _ranks(values)), dtype=np.float64)


class OnlineBatchSelection:
    """Keeps a proportional sampler's priorities at Loshchilov & Hutter's rank probabilities.

    The sampler must be proportional with ``alpha=1`` and ``eps=0`` (checked at construction and
    at every refresh); build it with ``beta=0.0`` (no importance weights, as in the paper).
    :meth:`update` records the latest losses of the items just trained on and, every
    ``refresh_every`` calls, re-ranks all items with a known loss and rewrites their priorities
    (``O(N log N)``; the paper re-ranks the whole set as often).  Items never given a loss keep
    the sampler's priority: added slots enter at the memory's maximum, i.e. tied with rank 1.

    >>> s = PrioritizedSampler(4, alpha=1.0, eps=0.0, beta=0.0, seed=0)
    >>> sel = OnlineBatchSelection(s, selection_pressure=16.0)
    >>> sel.update([0, 1, 2, 3], [0.1, 3.0, 2.0, 0.5])
    >>> s.probabilities([1, 2, 0]).round(4).tolist()
    [0.5333, 0.2667, 0.0667]
    """

    def __init__(
        self, sampler: PrioritizedSampler, selection_pressure: float, *, refresh_every: int = 1
    ) -> None:
        if not isinstance(sampler, PrioritizedSampler):
            raise TypeError(f"sampler should be a PrioritizedSampler, but got {type(sampler).__name__}")
        _check_sampler(sampler)
        self.sampler = sampler
        self.selection_pressure = _pressure(selection_pressure)
        self.refresh_every = check_positive_int(refresh_every, "refresh_every")
        self._losses = np.full(sampler.capacity, np.nan)
        self._calls = 0

    @property
    def losses(self) -> npt.NDArray[np.float64]:
        """Latest loss per slot (NaN: none recorded); a copy."""
        return self._losses.copy()

    def update(self, indices: npt.ArrayLike, losses: npt.ArrayLike) -> None:
        """Record per-item losses, of shape ``(k,)`` or ``(k, 1)`` (last write wins on duplicates);
        refresh when due."""
        idx = as_indices(indices, "indices")
        values = as_priorities(losses, idx.shape[0], "losses")
        bad = np.flatnonzero((idx < 0) | (idx >= self._losses.shape[0]))
        if bad.shape[0]:
            j = int(bad[0])
            raise ValueError(
                f"indices should lie in [0, {self._losses.shape[0]}), but got indices[{j}]={idx[j]}"
            )
        check_each(np.isfinite(values), values, "losses", "finite")
        _check_sampler(self.sampler)
        self._losses[idx] = values
        self._calls += 1
        if self._calls % self.refresh_every == 0:
            self.refresh()

    def refresh(self) -> None:
        """Re-rank every slot with a known loss and write its priority into the sampler."""
        _check_sampler(self.sampler)
        idx = np.flatnonzero(~np.isnan(self._losses))
        if idx.shape[0]:
            self.sampler.update_priorities(
                idx, loshchilov_hutter_priorities(self._losses[idx], self.selection_pressure)
            )

    def remove(self, indices: npt.ArrayLike) -> None:
        """Forget the losses of slots (call alongside ``sampler.remove``)."""
        idx = as_indices(indices, "indices")
        bad = np.flatnonzero((idx < 0) | (idx >= self._losses.shape[0]))
        if bad.shape[0]:
            j = int(bad[0])
            raise ValueError(
                f"indices should lie in [0, {self._losses.shape[0]}), but got indices[{j}]={idx[j]}"
            )
        self._losses[idx] = np.nan


def _check_sampler(sampler: PrioritizedSampler) -> None:
    if not sampler.backend.priority_masses or sampler.alpha != 1.0 or sampler.eps != 0.0:
        raise ValueError(
            "sampler should be proportional with alpha=1 and eps=0 (priorities are the probabilities), "
            f"but got backend={sampler.backend_name!r}, alpha={sampler.alpha}, eps={sampler.eps}"
        )
