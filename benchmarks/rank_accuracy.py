"""How far the rank backend's sampling distribution is from the exact rank distribution.

Exact: ``P(i) = rank(i)^-α / Σ_{r=1}^{N} r^-α`` with ``rank`` from a true sort of the raw priorities
(descending, ties to the newest write, the backend's documented rule: its write stamps are read
from the public ``state_dict``).  The workload adds 8 slots per step at the maximum priority, so
ties are many: a reference that ranked them otherwise would measure the tie rule, not the
segmentation.  Sampled: ``sampler.probabilities(valid slots)``, the
piecewise-uniform distribution the backend actually draws from over its exact order.  The distance
is the total variation ``½ Σ_i |P_sampled(i) - P_exact(i)|``: the error of cutting the power law
into at most ``resolution`` segments.

Workload (DQN-like, a full ring of ``N`` valid slots): repeat { sample 32; update those 32 with
``|N(0,1)| · 0.5^(writes/N)`` (errors shrink as training goes on); add 8 new items over the oldest
slots }, i.e. 40 priority writes per step; the TV is read as the workload runs.

For comparison, the paper's own scheme (App. B.2.1: the power law cut into ``k = 32`` segments of
equal probability, uniform inside a segment), evaluated on the exact order (its segmentation error).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from benchmarks.peers import ALPHA, EPS

PAPER_SEGMENTS = 32


@dataclass
class AccuracyResult:
    n: int
    resolution: int | None
    # writes so far (multiple of N) -> TVs
    rows: list[dict[str, float]] = field(default_factory=list)
    error: str | None = None


def exact_rank_probabilities(
    priorities: np.ndarray, stamps: np.ndarray, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(P_exact per slot, 0-based true rank per slot)``: descending priority, equal priorities
    ranked by descending write stamp (the newest write first)."""
    n = priorities.shape[0]
    order = np.lexsort((-stamps, -priorities))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    mass = np.arange(1, n + 1, dtype=np.float64) ** -alpha
    mass /= mass.sum()
    return mass[rank], rank


def segmented_probabilities(positions: np.ndarray, n: int, alpha: float, segments: int) -> np.ndarray:
    """Probability of each slot at 0-based rank ``positions`` under a ``segments``-piece power law."""
    from prisample.rank import power_law_partition

    starts, mass = power_law_partition(n, alpha, segments)
    density = mass / np.diff(starts)
    return density[np.searchsorted(starts, positions, side="right") - 1]


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    return float(0.5 * np.abs(p - q).sum())


def measure_accuracy(
    n: int, multiples: list[float], *, seed: int = 0, log: Callable[[str], None]
) -> AccuracyResult:
    from prisample import PrioritizedSampler

    rng = np.random.default_rng(seed)
    sampler = PrioritizedSampler(n, alpha=ALPHA, eps=EPS, backend="rank", size=0, seed=seed)
    slots = np.arange(n)
    sampler.add(slots)
    sampler.update_priorities(slots, np.abs(rng.standard_normal(n)))
    backend = sampler._backend
    result = AccuracyResult(n=n, resolution=getattr(backend, "resolution", None))

    def snapshot(writes: int) -> None:
        stamps = sampler.state_dict()["backend_state"]["stamps"]
        exact, true_rank = exact_rank_probabilities(sampler.priorities, stamps, ALPHA)
        row = {
            "writes_over_n": writes / n,
            "prisample": total_variation(sampler.probabilities(slots), exact),
            "paper32_exact_order": total_variation(
                segmented_probabilities(true_rank, n, ALPHA, PAPER_SEGMENTS), exact
            ),
        }
        result.rows.append(row)
        log(
            f"  rank TV N=2^{n.bit_length() - 1} after {writes / n:g}·N writes: "
            + ", ".join(f"{key} {value:.4g}" for key, value in row.items() if key != "writes_over_n")
        )

    targets = sorted({round(m * n) for m in multiples})
    if targets and targets[0] == 0:
        snapshot(0)
        targets = targets[1:]
    writes, cursor, step = 0, 0, 0
    chunk = 1024
    for target in targets:
        while writes < target:
            if step % chunk == 0:
                noise = np.abs(rng.standard_normal((chunk, 32)))
            d = sampler.sample(32)
            sampler.update_priorities(d.indices, noise[step % chunk] * 0.5 ** (writes / n))
            sampler.add((cursor + np.arange(8)) % n)
            cursor = (cursor + 8) % n
            writes += 40
            step += 1
        snapshot(writes)
    return result
