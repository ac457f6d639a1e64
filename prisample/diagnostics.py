"""Diagnostics of prioritized replay: replay counts, |δ| snapshots, effective ``P(i)``, weights.

What Schaul et al. (2016) look at to understand prioritization (Sec. 5 and the appendix):

* :class:`ReplayCounter`: per slot, the replay count ``M_i`` of the item it holds (draws since the
  slot was last written), and the counts of the items already overwritten: "some fraction of the
  visited transitions are never replayed before they drop out of the sliding window memory"
  (Sec. 5; ``M_i`` is also the exploration signal of Sec. 6);
* :class:`TDSnapshots`: the last-seen ``|δ_i|`` of the whole memory, sorted and divided by its
  maximum, at several points of training (Fig. 10), kept as a fixed number of quantiles;
* :func:`effective_probability`: ``P(i) = p_i^α / Σ_k p_k^α`` (Eq. 1) of every slot against its
  ``|δ_i|``, compared with the uniform ``1/N`` (Fig. 11);
* :class:`WeightStats`: mean, minimum, maximum and the fraction below 0.1 of the importance
  weights ``w_i = (N · P(i))^-β / max_j w_j`` (Sec. 3.4) over training;
* :class:`WeightMonitor`: the mean weight over the last batches, with one ``RuntimeWarning``
  when it collapses (the adapters in ``prisample.sb3``, ``prisample.torchrl`` and
  ``prisample.lightning`` feed one).

:class:`Diagnostics` owns one of each and is fed from a training loop's prioritization points
(``on_draw``, ``on_update``, ``on_write``, ``snapshot``); it writes JSON and PNGs.  Only numpy is
needed; matplotlib is imported by the plotting functions alone.

>>> from prisample import PrioritizedSampler
>>> s = PrioritizedSampler(8, alpha=1.0, beta=1.0, seed=0)
>>> diag = Diagnostics(8)
>>> diag.attach(s)                      # every slot of s is filled: all are live
>>> draw = s.sample(4)
>>> diag.on_draw(1, draw)
>>> diag.on_update(draw.indices, [0.5, 0.1, 0.2, 0.0])
>>> s.update_priorities(draw.indices, [0.5, 0.1, 0.2, 0.0])
>>> diag.snapshot(1, s)
>>> diag.counter.summary()["never_replayed"]
0.5
"""

from __future__ import annotations

import json
import math
import warnings
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from prisample._validation import (
    as_indices,
    as_priorities,
    check_finite_priorities,
    check_positive_int,
    check_real,
    short_repr,
    to_numpy,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "BinnedProbability",
    "Diagnostics",
    "EffectiveProbability",
    "ReplayCounter",
    "TDSnapshots",
    "WeightMonitor",
    "WeightStats",
    "effective_probability",
    "plot_probability_vs_error",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class SamplerLike(Protocol):
    """What the diagnostics read of a sampler: its public ``priorities`` and ``probabilities``."""

    @property
    def capacity(self) -> int: ...

    @property
    def priorities(self) -> FloatArray: ...

    def probabilities(self, indices: Any) -> Any:
        """``P(i)`` of ``indices``: numpy, or a tensor on a device sampler's device (read to the
        host here)."""
        ...


class DrawLike(Protocol):
    """What the diagnostics read of a :class:`~prisample.Draw`."""

    @property
    def indices(self) -> Any: ...

    @property
    def weights(self) -> Any: ...


def _host(values: Any, dtype: type[np.generic]) -> npt.NDArray[Any]:
    """A 1-d numpy copy of numpy arrays, torch tensors (any device) and lists."""
    if hasattr(values, "detach"):  # a torch tensor, perhaps on a GPU
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=dtype).reshape(-1)


def _indices(values: Any, capacity: int, name: str = "indices") -> IntArray:
    """Slot numbers as the sampler takes them: one-dimensional integers (``TypeError`` for floats
    and bools, ``ValueError`` for several dimensions), each in ``[0, capacity)``."""
    idx = as_indices(values, name)
    if idx.shape[0] and (idx.min() < 0 or idx.max() >= capacity):
        bad = int(idx[(idx < 0) | (idx >= capacity)][0])
        raise ValueError(f"{name} should be slots in [0, {capacity}), but got {name} holding {bad}")
    return idx


def _reals(values: Any, name: str) -> FloatArray:
    """A flat float64 copy of real values (``TypeError`` for bools, complex numbers, strings)."""
    array = to_numpy(values, name)
    if array.dtype.kind not in "fiu":
        raise TypeError(
            f"{name} should hold real numbers, but got dtype {array.dtype} ({name}={short_repr(array)})"
        )
    return np.array(array, dtype=np.float64).reshape(-1)


def _weights(values: Any, name: str = "weights") -> FloatArray:
    """Importance weights: real, finite and ``>= 0`` (``ValueError`` naming the first that is not)."""
    w = _reals(values, name)
    check_finite_priorities(w, name)
    return w


# -- replay counts ------------------------------------------------------------------------------


class ReplayCounter:
    """Replay counts ``M_i``: how often the item in slot ``i`` was drawn since the slot was written.

    :meth:`observe_draw` adds one per occurrence (a slot drawn twice in one batch counts twice);
    :meth:`observe_write` resets the slots written and *retires* the counts of the items they
    held, so :attr:`retired` is the histogram of ``M`` over the items that left the memory (the
    paper's "never replayed before they drop out of the sliding window", Sec. 5).  A slot is live
    once written or marked with :meth:`mark_live` (a dataset whose examples are all there).

    >>> c = ReplayCounter(4)
    >>> c.observe_write([0, 1, 2])
    >>> c.observe_draw([0, 0, 2])
    >>> c.counts.tolist()
    [2, 0, 1, 0]
    >>> c.observe_write([0, 3])              # slot 0's item leaves after 2 replays
    >>> c.counts.tolist(), c.retired.tolist()
    ([0, 0, 1, 0], [0, 0, 1])
    >>> c.summary()["never_replayed"]        # slots 0, 1 and 3 of the 4 live ones
    0.75
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = check_positive_int(capacity, "capacity")
        self.counts: IntArray = np.zeros(capacity, dtype=np.int64)
        """``M_i`` of the item in each slot (0 for slots never written)."""
        self.live: npt.NDArray[np.bool_] = np.zeros(capacity, dtype=bool)
        """Slots that hold an item (written, or marked live)."""
        self.retired: IntArray = np.zeros(1, dtype=np.int64)
        """``retired[m]``: items overwritten after exactly ``m`` replays."""
        self.draws = 0
        """Draws observed (slot occurrences, duplicates included)."""
        self.writes = 0
        """Writes observed (slot occurrences, duplicates included)."""

    def observe_draw(self, indices: npt.ArrayLike) -> None:
        """``M_i ← M_i + 1`` for each drawn slot occurrence.

        ``indices`` (here and in :meth:`observe_write`, :meth:`mark_live`): one-dimensional
        integers in ``[0, capacity)``; floats and bools raise ``TypeError``, several dimensions
        or a slot out of range ``ValueError``, and nothing changes."""
        idx = _indices(indices, self.capacity)
        np.add.at(self.counts, idx, 1)
        self.live[idx] = True  # a drawn slot holds an item, whatever was observed before
        self.draws += int(idx.shape[0])

    def observe_write(self, indices: npt.ArrayLike) -> None:
        """Slots (re)written, in order: each write retires the item the slot held (if any) with
        its ``M``, and the new item starts at ``M = 0``."""
        idx = _indices(indices, self.capacity)
        if not idx.shape[0]:
            return
        slots, occurrences = np.unique(idx, return_counts=True)
        held = self.live[slots]
        retiring = np.concatenate(
            # the first write of a slot retires its item; later ones in the same call, the
            # (never drawn) item the previous write put there
            [self.counts[slots[held]], np.zeros(int((occurrences - 1).sum()), dtype=np.int64)]
        )
        if retiring.shape[0]:
            found = np.bincount(retiring)
            if found.shape[0] > self.retired.shape[0]:
                self.retired = np.concatenate(
                    [self.retired, np.zeros(found.shape[0] - self.retired.shape[0], dtype=np.int64)]
                )
            self.retired[: found.shape[0]] += found
        self.counts[slots] = 0
        self.live[slots] = True
        self.writes += int(idx.shape[0])

    def mark_live(self, indices: npt.ArrayLike) -> None:
        """Slots that hold an item without a write being observed (their counts are kept)."""
        self.live[_indices(indices, self.capacity)] = True

    def histogram(self) -> IntArray:
        """``h[m]``: live slots whose item was replayed exactly ``m`` times."""
        return np.bincount(self.counts[self.live], minlength=1).astype(np.int64)

    def summary(self) -> dict[str, float]:
        """Live slots, their mean and largest ``M``, the fraction with ``M = 0``, and the same for
        the retired items (NaN while none has been retired)."""
        live = self.counts[self.live]
        n = int(live.shape[0])
        gone = int(self.retired.sum())
        levels = np.arange(self.retired.shape[0])
        return {
            "live": float(n),
            "draws": float(self.draws),
            "writes": float(self.writes),
            "mean": float(live.mean()) if n else float("nan"),
            "max": float(live.max()) if n else float("nan"),
            "never_replayed": float(np.mean(live == 0)) if n else float("nan"),
            "retired": float(gone),
            "retired_mean": float((levels * self.retired).sum() / gone) if gone else float("nan"),
            "retired_never_replayed": float(self.retired[0] / gone) if gone else float("nan"),
        }


# -- sorted |δ| over training (Fig. 10) --------------------------------------------------------------


class TDSnapshots:
    """Snapshots of the distribution of the last-seen ``|δ_i|`` of the memory (Fig. 10).

    Each :meth:`record` keeps ``num_quantiles`` quantiles of the filled slots' priorities
    (``np.quantile`` at levels ``0, 1/(q-1), …, 1``), their maximum and their number, so a
    snapshot costs ``O(q)`` memory whatever the memory's size.  :meth:`sorted_normalised` gives
    Fig. 10's curve: ``|δ|`` sorted in decreasing order and divided by its maximum, against the
    fraction of the memory ranked above.

    >>> td = TDSnapshots(num_quantiles=3)
    >>> td.record(10, [0.0, 1.0, 4.0, float("nan")])   # NaN: an empty slot, left out
    >>> td.quantiles[0].tolist(), td.maxima[0], td.sizes[0]
    ([0.0, 1.0, 4.0], 4.0, 3)
    >>> td.sorted_normalised(0)[1].tolist()
    [1.0, 0.25, 0.0]
    """

    def __init__(self, num_quantiles: int = 101) -> None:
        num_quantiles = check_positive_int(num_quantiles, "num_quantiles", minimum=2)
        self.levels: FloatArray = np.linspace(0.0, 1.0, num_quantiles)
        self.steps: list[int] = []
        self.quantiles: list[FloatArray] = []
        self.maxima: list[float] = []
        self.sizes: list[int] = []

    def record(self, step: int, priorities: npt.ArrayLike) -> None:
        """Keep the quantiles of the filled slots' ``priorities`` (NaN marks an empty slot); a
        memory with no filled slot records nothing.  Any other value must be finite and ``>= 0``
        (``ValueError`` naming the first that is not; nothing is recorded then)."""
        values = _reals(priorities, "priorities")
        empty = np.isnan(values)
        bad = np.flatnonzero(~empty & ~((values >= 0.0) & (values < np.inf)))
        if bad.shape[0]:
            j = int(bad[0])
            raise ValueError(
                "priorities should be NaN (an empty slot) or finite and >= 0, but got "
                f"priorities[{j}]={float(values[j])!r}"
            )
        values = values[~empty]
        if not values.shape[0]:
            return
        self.steps.append(int(step))
        self.quantiles.append(np.quantile(np.sort(values), self.levels))
        self.maxima.append(float(values.max()))
        self.sizes.append(int(values.shape[0]))

    def __len__(self) -> int:
        return len(self.steps)

    def sorted_normalised(self, i: int) -> tuple[FloatArray, FloatArray]:
        """``(x, y)`` of snapshot ``i``: ``y`` the sorted ``|δ| / max |δ|`` (decreasing), ``x`` the
        fraction of the memory ranked above it."""
        top = self.maxima[i]
        y = self.quantiles[i][::-1] / top if top > 0.0 else np.zeros_like(self.levels)
        return self.levels.copy(), y

    def to_dict(self) -> dict[str, Any]:
        return {
            "levels": self.levels.tolist(),
            "steps": list(self.steps),
            "quantiles": [q.tolist() for q in self.quantiles],
            "maxima": list(self.maxima),
            "sizes": list(self.sizes),
        }

    def plot(self, path: str | Path, title: str | None = None) -> Path:
        """PNG of every snapshot's sorted ``|δ| / max |δ|``, coloured cold to warm by step (Fig. 10)."""
        fig = _figure()
        ax = fig.add_subplot()
        colours = _time_colours(len(self))
        for i, step in enumerate(self.steps):
            x, y = self.sorted_normalised(i)
            ax.plot(x, y, color=colours[i], lw=1.2, label=f"step {step:,}")
        ax.set_xlabel("fraction of the memory (sorted by |δ|, largest first)")
        ax.set_ylabel("|δ| / max |δ|")
        ax.set_ylim(0.0, 1.05)
        ax.set_xlim(0.0, 1.0)
        ax.set_title(title or "Sorted last-seen |δ| of the memory over training (cf. Fig. 10)")
        _legend(ax, len(self))
        return _save(fig, path)


# -- effective probability against |δ| (Fig. 11) -----------------------------------------------------


@dataclass(frozen=True)
class BinnedProbability:
    """Mean ``P(i)`` of the slots in each logarithmic bin of ``|δ|`` (empty bins left out)."""

    error: list[float]
    """Mean ``|δ|`` of the slots in each bin."""
    probability: list[float]
    """Mean ``P(i)`` of the slots in each bin."""
    count: list[int]
    """Slots in each bin."""
    uniform: float
    """``1/N``: every slot's probability under uniform replay."""
    zero_error: int
    """Slots with ``|δ| = 0`` (off a log axis: counted here, in no bin)."""


@dataclass(frozen=True)
class EffectiveProbability:
    """Per filled slot: its last-seen ``|δ_i|`` (the raw priority) and ``P(i)`` (Fig. 11)."""

    slots: IntArray
    errors: FloatArray
    probabilities: FloatArray

    @property
    def uniform(self) -> float:
        """``1/N``."""
        return 1.0 / self.slots.shape[0] if self.slots.shape[0] else float("nan")

    def binned(self, bins: int = 30) -> BinnedProbability:
        """Mean ``|δ|`` and mean ``P`` in ``bins`` logarithmically spaced bins of ``|δ|`` between
        the smallest positive and the largest error."""
        positive = self.errors > 0.0
        err, prob = self.errors[positive], self.probabilities[positive]
        zero = int((~positive).sum())
        if not err.shape[0]:
            return BinnedProbability([], [], [], self.uniform, zero)
        low, high = float(err.min()), float(err.max())
        edges = np.geomspace(low, high, bins + 1) if high > low else np.array([low, high])
        which = np.clip(np.searchsorted(edges, err, side="right") - 1, 0, edges.shape[0] - 2)
        count = np.bincount(which, minlength=edges.shape[0] - 1)
        full = count > 0
        err_mean = np.bincount(which, weights=err, minlength=count.shape[0])[full] / count[full]
        p_mean = np.bincount(which, weights=prob, minlength=count.shape[0])[full] / count[full]
        return BinnedProbability(
            err_mean.tolist(), p_mean.tolist(), count[full].astype(int).tolist(), self.uniform, zero
        )


def effective_probability(sampler: SamplerLike) -> EffectiveProbability:
    """``P(i)`` of every filled slot against its raw priority ``p_i`` (``|δ_i|``), read through the
    sampler's public ``priorities`` and ``probabilities`` (Fig. 11).

    For the proportional backend ``P(i) = (p_i + ε)^α / Σ_k (p_k + ε)^α`` (Eq. 1); for rank,
    ``rank(i)^-α / Σ_r r^-α``.

    >>> from prisample import PrioritizedSampler
    >>> s = PrioritizedSampler(3, alpha=1.0, eps=0.0, seed=0)
    >>> s.update_priorities([0, 1, 2], [1.0, 1.0, 2.0])
    >>> effective_probability(s).probabilities.tolist()
    [0.25, 0.25, 0.5]
    """
    raw = _host(sampler.priorities, np.float64)
    slots = np.flatnonzero(~np.isnan(raw)).astype(np.int64)
    probabilities = _host(sampler.probabilities(slots), np.float64) if slots.shape[0] else np.empty(0)
    return EffectiveProbability(slots, raw[slots], probabilities)


def plot_probability_vs_error(
    path: str | Path,
    curves: EffectiveProbability | BinnedProbability | Mapping[str, EffectiveProbability | BinnedProbability],
    *,
    bins: int = 30,
    points: int = 3000,
    title: str | None = None,
    seed: int = 0,
) -> Path:
    """PNG of the effective replay probability ``P(i)`` against ``|δ_i|`` on log axes (Fig. 11):
    binned means per curve (cold to warm in the mapping's order), the slots of the last
    :class:`EffectiveProbability` as faint points (at most ``points`` of them), and the uniform
    ``1/N`` of the last curve dashed."""
    named: Mapping[str, EffectiveProbability | BinnedProbability] = (
        {"": curves} if isinstance(curves, (EffectiveProbability, BinnedProbability)) else curves
    )
    fig = _figure()
    ax = fig.add_subplot()
    colours = _time_colours(len(named))
    scatter: EffectiveProbability | None = None
    uniform = float("nan")
    for i, (label, curve) in enumerate(named.items()):
        if isinstance(curve, EffectiveProbability):
            scatter = curve
            curve = curve.binned(bins)
        uniform = curve.uniform
        if curve.error:
            ax.plot(curve.error, curve.probability, "o-", ms=3, lw=1.2, color=colours[i], label=label or None)
    if scatter is not None and scatter.slots.shape[0]:
        positive = np.flatnonzero(scatter.errors > 0.0)
        rng = np.random.default_rng(seed)
        shown = (
            rng.choice(positive, min(points, positive.shape[0]), replace=False)
            if positive.shape[0]
            else positive
        )
        ax.scatter(
            scatter.errors[shown], scatter.probabilities[shown], s=2, alpha=0.15, color="grey", zorder=0
        )
    if np.isfinite(uniform):
        ax.axhline(uniform, ls="--", color="black", lw=1.0, label="uniform 1/N")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("last-seen |δ|")
    ax.set_ylabel("P(i)")
    ax.set_title(title or "Effective replay probability against |δ| (cf. Fig. 11)")
    _legend(ax, len(named) + 1)
    return _save(fig, path)


# -- importance weights over training -----------------------------------------------------------------


class WeightStats:
    """Importance-weight statistics over training: per recorded batch (or group of batches) the
    mean, minimum, maximum and fraction below ``low`` of ``w_i`` (Sec. 3.4).

    Rows are kept exactly until there are ``max_rows`` of them; then neighbouring rows are merged
    in pairs (counts, sums, extremes and counts below ``low`` add up exactly), so the memory stays
    bounded over any run and each row still summarises exactly the weights of its steps.

    >>> ws = WeightStats()
    >>> ws.record(1, [1.0, 0.5, 0.05])
    >>> ws.rows()[0]["mean"], ws.rows()[0]["below"]
    (0.5166666666666667, 0.3333333333333333)
    """

    _FIELDS = ("first_step", "last_step", "count", "sum", "min", "max", "below")

    def __init__(self, low: float = 0.1, max_rows: int = 4096) -> None:
        self.low = check_real(low, "low", minimum=0.0)
        self.max_rows = check_positive_int(max_rows, "max_rows", minimum=2)
        self._rows: list[list[float]] = []
        self._group = 1  # batches per row: doubles at each merge
        self._open = 0  # batches in the last row

    def record(self, step: int, weights: Any) -> None:
        """Add one batch's weights (numpy, list, or a torch tensor on any device), each finite and
        ``>= 0`` (``ValueError`` naming the first that is not; nothing is recorded then)."""
        w = _weights(weights)
        if not w.shape[0]:
            return
        row = [
            float(step),
            float(step),
            float(w.shape[0]),
            float(w.sum()),
            float(w.min()),
            float(w.max()),
            float((w < self.low).sum()),
        ]
        if self._rows and self._open < self._group:
            last = self._rows[-1]
            self._rows[-1] = _merged(last, row)
            self._open += 1
        else:
            self._rows.append(row)
            self._open = 1
        if len(self._rows) > self.max_rows:
            pairs = [self._rows[i : i + 2] for i in range(0, len(self._rows), 2)]
            self._rows = [_merged(*pair) if len(pair) == 2 else pair[0] for pair in pairs]
            self._group *= 2
            self._open = self._group if len(pairs[-1]) == 2 else self._open

    def rows(self) -> list[dict[str, float]]:
        """Per row: first and last step, count, mean, min, max and the fraction below ``low``."""
        out = []
        for first, last, count, total, low, high, below in self._rows:
            out.append(
                {
                    "first_step": first,
                    "last_step": last,
                    "count": count,
                    "mean": total / count,
                    "min": low,
                    "max": high,
                    "below": below / count,
                }
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"low": self.low, "rows": self.rows()}

    def plot(self, path: str | Path, title: str | None = None) -> Path:
        """PNG of the weights' mean, minimum and maximum (left axis) and the fraction below
        ``low`` (right axis) against the step."""
        rows = self.rows()
        steps = [r["last_step"] for r in rows]
        fig = _figure()
        ax = fig.add_subplot()
        ax.plot(steps, [r["mean"] for r in rows], color="C0", label="mean")
        ax.fill_between(
            steps, [r["min"] for r in rows], [r["max"] for r in rows], color="C0", alpha=0.2, label="min-max"
        )
        ax.set_xlabel("step")
        ax.set_ylabel("importance weight w")
        ax.set_ylim(0.0, 1.05)
        right = ax.twinx()
        right.plot(steps, [r["below"] for r in rows], color="C3", lw=1.0, label=f"fraction w < {self.low:g}")
        right.set_ylabel(f"fraction of weights < {self.low:g}", color="C3")
        right.set_ylim(0.0, 1.0)
        lines = ax.get_legend_handles_labels()
        more = right.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="lower right")
        ax.set_title(title or "Importance weights (N·P(i))^-β / max_j w_j over training")
        return _save(fig, path)


def _merged(a: list[float], b: list[float]) -> list[float]:
    return [a[0], b[1], a[2] + b[2], a[3] + b[3], min(a[4], b[4]), max(a[5], b[5]), a[6] + b[6]]


class WeightMonitor:
    """The mean importance weight over the last ``window`` batches, and one warning if it collapses.

    The weights are ``w_i = (N · P(i))^-β / max_j w_j`` (Schaul et al. 2016, Sec. 3.4), where the
    maximum runs over the memory (``weight_norm="memory"``) or over the batch (``"batch"``).
    With the memory's maximum, one slot with a tiny priority ``p_i = |δ_i| + ε`` (``|δ| ≈ 0`` and
    a tiny ``ε``) has a tiny ``P(i)`` and so a huge ``(N · P(i))^-β``, and every other weight
    shrinks towards 0: the loss, and with it the step size, collapses while training seems to run.
    Measured with ``prisample.sb3``'s former defaults (ε = 1e-6, memory maximum) in
    ``recipes/sb3_cartpole.py``: the mean weight fell from 0.043 to 0.0013 within 12k steps.

    :meth:`update` takes one batch's weights (numpy, a list, or a torch tensor on any device;
    one synchronisation for a GPU tensor) and returns their mean.  :attr:`weight_mean` is the
    mean of the last ``window`` batch means.  Once at least ``min_batches`` batches were seen, the
    first time :attr:`weight_mean` is below ``threshold`` one ``RuntimeWarning`` names ``ε`` and
    the normalisation as the likely cause; a monitor warns at most once.

    >>> m = WeightMonitor(window=2, min_batches=1)
    >>> m.update([1.0, 0.5])
    0.75
    >>> m.update([0.25, 0.25]), m.weight_mean, m.batches
    (0.25, 0.5, 2)
    """

    def __init__(self, threshold: float = 0.01, window: int = 100, min_batches: int = 100) -> None:
        self.threshold = check_real(threshold, "threshold", minimum=0.0, strict=True)
        """Warn when the windowed mean weight falls below this."""
        self.window = check_positive_int(window, "window")
        """Batches in :attr:`weight_mean`."""
        self.min_batches = check_positive_int(min_batches, "min_batches")
        """Batches seen before a warning can be issued (the first weights may be small by design)."""
        self.batches = 0
        """Batches seen (empty batches are skipped)."""
        self.last_mean = math.nan
        """The latest batch's mean weight (NaN before the first batch)."""
        self.warned = False
        """Whether this monitor has warned."""
        self._means: deque[float] = deque(maxlen=self.window)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(threshold={self.threshold:g}, window={self.window}, "
            f"min_batches={self.min_batches}; weight_mean={self.weight_mean:.4g} over {self.batches} batches)"
        )

    @property
    def weight_mean(self) -> float:
        """Mean of the last ``window`` batch means (NaN before the first batch)."""
        means = self._means
        return math.fsum(means) / len(means) if means else math.nan

    def update(self, weights: Any) -> float:
        """Record one batch's importance weights, each finite and ``>= 0`` (any shape); returns
        their mean (NaN for an empty batch, which is not recorded).  ``ValueError`` naming the
        first weight that is negative or not finite (or if the mean is not finite), and then
        nothing is recorded."""
        if hasattr(weights, "detach"):  # a torch tensor, perhaps on a GPU: reduce there
            import torch  # the caller's tensor means torch is loaded; only numpy otherwise

            w = weights.detach()
            count = int(w.numel())
            if not count:
                return math.nan
            w = w if w.is_floating_point() else w.double()
            mean, low = (float(v) for v in torch.stack([w.mean(), w.amin()]).tolist())  # one sync
        else:
            values = _weights(weights)
            count = int(values.shape[0])
            if not count:
                return math.nan
            mean, low = float(values.mean()), float(values.min())
        if not (low >= 0.0 and math.isfinite(mean)):
            _weights(weights)  # names the first weight that is negative or not finite
            raise ValueError(f"weights should be finite, but got a batch whose mean is {mean!r}")
        self._means.append(mean)
        self.last_mean = mean
        self.batches += 1
        if not self.warned and self.batches >= self.min_batches:
            windowed = self.weight_mean
            if windowed < self.threshold:
                self.warned = True
                warnings.warn(self._message(windowed), RuntimeWarning, stacklevel=2)
        return mean

    def _message(self, windowed: float) -> str:
        return (
            f"prisample: the mean importance weight over the last {len(self._means)} batches is "
            f"{windowed:.3g}, below {self.threshold:g} (after {self.batches} batches): the weights "
            "w_i = (N·P(i))^-β / max_j w_j have collapsed, so the loss and the step size shrink "
            "towards 0.  The likely cause is a tiny eps (ε of p_i = |δ_i| + ε) with "
            'weight_norm="memory": one slot with |δ| ≈ 0 has a tiny P(i) and a huge weight, and '
            "the memory's maximum divides every other weight by it.  Use eps=0.01 or "
            'weight_norm="batch" (divide by the batch\'s largest weight, as DQN Zoo and Dopamine do).'
        )


# -- the bundle -----------------------------------------------------------------------------------------


class Diagnostics:
    """A :class:`ReplayCounter`, :class:`TDSnapshots`, :class:`WeightStats` and binned effective
    probabilities, fed from a training loop:

    * ``on_draw(step, draw)`` after each ``sample``: replay counts and weight statistics;
    * ``on_update(indices, errors)`` with each priority update: last-seen ``|δ|`` per slot;
    * ``on_write(indices)`` when slots are (re)written with new items: counts reset;
    * ``snapshot(step, sampler)`` now and then (a recipe's logging points): the sorted-``|δ|``
      quantiles, the binned ``P(i)`` against ``|δ|`` and the replay-count summary.

    ``capacity`` may be left out and taken from the first sampler given to :meth:`attach` or
    :meth:`snapshot`.  :meth:`save_json` and :meth:`plot` write the results.
    """

    def __init__(
        self,
        capacity: int | None = None,
        *,
        num_quantiles: int = 101,
        bins: int = 30,
        weight_rows: int = 4096,
    ) -> None:
        self.counter: ReplayCounter | None = None if capacity is None else ReplayCounter(capacity)
        self.td = TDSnapshots(num_quantiles)
        self.weights = WeightStats(max_rows=check_positive_int(weight_rows, "weight_rows", minimum=2))
        self.bins = check_positive_int(bins, "bins")
        self.probability: list[tuple[int, BinnedProbability]] = []
        self.counts_over_time: list[dict[str, float]] = []
        self.last_effective: EffectiveProbability | None = None
        self.updates = 0
        self._last_error: FloatArray | None = None
        self._snapshot_step: int | None = None

    def _counter(self, capacity: int) -> ReplayCounter:
        if self.counter is None:
            self.counter = ReplayCounter(capacity)
        return self.counter

    def attach(self, sampler: SamplerLike) -> None:
        """Size the counter from ``sampler`` if needed and mark its filled slots live (a dataset's
        examples are all there from the start, with no write to observe)."""
        counter = self._counter(int(sampler.capacity))
        counter.mark_live(np.flatnonzero(~np.isnan(_host(sampler.priorities, np.float64))))

    def on_draw(self, step: int, draw: DrawLike) -> None:
        """A batch drawn at ``step``: ``M_i += 1`` for its slots, its weights recorded.

        ``draw.indices`` are checked as :meth:`ReplayCounter.observe_draw` checks them and
        ``draw.weights`` as :meth:`WeightStats.record` does, both before anything is recorded."""
        if self.counter is None:
            raise ValueError("Diagnostics needs a capacity: pass capacity= or call attach(sampler) first")
        idx = _indices(draw.indices, self.counter.capacity, "draw.indices")
        weights = _weights(draw.weights, "draw.weights")
        self.counter.observe_draw(idx)
        self.weights.record(step, weights)

    def on_update(self, indices: Any, errors: Any) -> None:
        """New priorities ``|δ_i|`` of ``indices`` (kept as each slot's last-seen error).

        As ``sampler.update_priorities`` takes them: ``indices`` one-dimensional integers in
        ``[0, capacity)`` (``TypeError`` for floats and bools), ``errors`` one real value per
        index, each finite and ``>= 0``; on any error nothing is recorded."""
        if self.counter is None:
            raise ValueError("Diagnostics needs a capacity: pass capacity= or call attach(sampler) first")
        idx = _indices(indices, self.counter.capacity)
        err = as_priorities(errors, idx.shape[0], "errors")
        check_finite_priorities(err, "errors")
        if self._last_error is None:
            self._last_error = np.full(self.counter.capacity, np.nan)
        self._last_error[idx] = err
        self.updates += int(idx.shape[0])

    def on_write(self, indices: Any) -> None:
        """Slots (re)written with new items: their replay counts restart at 0."""
        if self.counter is None:
            raise ValueError("Diagnostics needs a capacity: pass capacity= or call attach(sampler) first")
        idx = _indices(indices, self.counter.capacity)
        self.counter.observe_write(idx)
        if self._last_error is not None:
            self._last_error[idx] = np.nan

    def snapshot(self, step: int, sampler: SamplerLike | None = None) -> None:
        """Record the memory's sorted ``|δ|`` (the sampler's priorities, or else the last-seen
        errors given to :meth:`on_update`), its ``P(i)`` against ``|δ|`` (with a sampler) and the
        replay-count summary.  A second snapshot at the step of the last one records nothing."""
        if self._snapshot_step == step:
            return
        self._snapshot_step = step
        if sampler is not None:
            self._counter(int(sampler.capacity))
            effective = effective_probability(sampler)
            self.td.record(step, sampler.priorities)
            if effective.slots.shape[0]:
                self.last_effective = effective
                self.probability.append((int(step), effective.binned(self.bins)))
        elif self._last_error is not None:
            self.td.record(step, self._last_error)
        if self.counter is not None:
            self.counts_over_time.append({"step": float(step), **self.counter.summary()})

    def to_dict(self) -> dict[str, Any]:
        """Everything recorded, as JSON-ready values."""
        counter = self.counter
        return {
            "replay_counts": None
            if counter is None
            else {
                "summary": counter.summary(),
                "histogram": counter.histogram().tolist(),
                "retired_histogram": counter.retired.tolist(),
                "over_time": self.counts_over_time,
            },
            "td_snapshots": self.td.to_dict(),
            "effective_probability": [{"step": step, **asdict(b)} for step, b in self.probability],
            "weights": self.weights.to_dict(),
            "updates": self.updates,
        }

    def save_json(self, path: str | Path) -> Path:
        """Write :meth:`to_dict` (NaN as ``null``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_no_nan(self.to_dict()), indent=1) + "\n")
        return path

    def plot(self, out_prefix: str | Path, title: str = "") -> list[Path]:
        """PNGs ``<out_prefix>_{td_sorted,probability_vs_error,weights,replay_counts}.png`` of what
        was recorded (a figure with nothing to show is skipped); the paths written."""
        prefix = str(out_prefix)
        lead = f"{title}: " if title else ""
        written: list[Path] = []
        if len(self.td):
            written.append(
                self.td.plot(f"{prefix}_td_sorted.png", lead + "sorted |δ| / max |δ| (cf. Fig. 10)")
            )
        if self.probability:
            picks = _spread(len(self.probability), 6)
            curves: dict[str, EffectiveProbability | BinnedProbability] = {
                f"step {self.probability[i][0]:,}": self.probability[i][1] for i in picks
            }
            if self.last_effective is not None:  # the last snapshot, with its points
                curves[f"step {self.probability[-1][0]:,}"] = self.last_effective
            written.append(
                plot_probability_vs_error(
                    f"{prefix}_probability_vs_error.png",
                    curves,
                    bins=self.bins,
                    title=lead + "effective P(i) against |δ| (cf. Fig. 11)",
                )
            )
        if self.weights.rows():
            written.append(self.weights.plot(f"{prefix}_weights.png", lead + "importance weights"))
        if self.counter is not None and self.counter.draws:
            written.append(self._plot_counts(f"{prefix}_replay_counts.png", lead + "replay counts M_i"))
        return written

    def _plot_counts(self, path: str, title: str) -> Path:
        assert self.counter is not None
        summary = self.counter.summary()
        fig = _figure(width=9.0)
        left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        live = self.counter.histogram()
        left.bar(
            np.arange(live.shape[0]),
            live / max(live.sum(), 1),
            width=1.0,
            alpha=0.6,
            label=f"in memory ({summary['never_replayed']:.1%} at M = 0)",
        )
        if self.counter.retired.sum():
            gone = self.counter.retired
            share = summary["retired_never_replayed"]
            label = f"overwritten ({share:.1%} never replayed)"
            left.step(np.arange(gone.shape[0]), gone / gone.sum(), where="mid", color="C3", label=label)
        left.set_yscale("log")
        left.set_xlabel("replay count M")
        left.set_ylabel("fraction of items")
        left.legend(fontsize=8)
        rows = self.counts_over_time
        if rows:
            steps = [r["step"] for r in rows]
            right.plot(steps, [r["never_replayed"] for r in rows], label="in memory, M = 0")
            right.plot(steps, [r["retired_never_replayed"] for r in rows], label="overwritten with M = 0")
            right.set_xlabel("step")
            right.set_ylabel("fraction never replayed")
            right.set_ylim(0.0, 1.0)
            right.legend(fontsize=8)
        fig.suptitle(title)
        return _save(fig, path)


# -- plotting helpers (matplotlib imported here only) ------------------------------------------------


def _figure(width: float = 6.4, height: float = 4.2) -> Figure:
    """A figure on the Agg canvas, without pyplot (no global state, no backend switch)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _time_colours(n: int) -> list[Any]:
    """Cold to warm, as the paper colours time (Fig. 10)."""
    from matplotlib import colormaps

    cmap = colormaps["coolwarm"]
    return [cmap(i / max(n - 1, 1)) for i in range(n)]


def _legend(ax: Any, n: int) -> None:
    if n <= 12:
        ax.legend(fontsize=7)


def _spread(n: int, k: int) -> list[int]:
    """Up to ``k`` indices spread evenly over ``range(n)``, the last included."""
    return sorted({round(i * (n - 1) / max(k - 1, 1)) for i in range(min(k, n))})


def _no_nan(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: _no_nan(v) for k, v in obj.items()}
    if isinstance(obj, Sequence) and not isinstance(obj, str):
        return [_no_nan(v) for v in obj]
    return obj
