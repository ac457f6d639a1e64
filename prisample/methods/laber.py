"""LaBER: Large Batch Experience Replay (Lahire, Geist, Rachelson, ICML 2022).

Prioritization without stored priorities: draw a *large* batch of ``m·B`` slots uniformly, score
each drawn item with a fresh surrogate of its gradient norm (the caller's ``|δ|``, one forward
pass), and keep ``B`` of them with probability proportional to the score.  Relative to the
uniform large batch, item ``i`` is kept with probability ``q_i = s_i / Σ_j s_j``, so the
importance weight that makes the kept batch an unbiased estimate of the large batch's mean
gradient is ``(1/(m·B)) / q_i = mean_j(s_j) / s_i``: the paper's *LaBER-mean*.  The paper also
runs *LaBER-lazy* (``1/s_i``, no normalisation) and *LaBER-max* (``1/s_i`` divided by the
largest such value, which here we take over the kept batch as PER's batch normalisation does).

The down-sampling is multinomial with replacement (the paper's algorithm draws ``B`` i.i.d.
items from the large batch's categorical distribution); not stratified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from prisample._validation import (
    as_indices,
    check_positive_int,
    check_real,
    check_seed,
    generator_from_state,
    short_repr,
)
from prisample.methods._checks import check_each, reals

__all__ = ["LABER_NORMS", "LaBER", "LargeBatchDraw"]

LABER_NORMS = ("mean", "max", "lazy")


@dataclass(frozen=True)
class LargeBatchDraw:
    """A down-sampled batch: the slots kept, their positions in the large batch (to gather
    outputs already computed on it), weights, and each kept item's probability ``q_i``."""

    indices: npt.NDArray[np.int64]
    positions: npt.NDArray[np.int64]
    weights: npt.NDArray[np.float32]
    probabilities: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.indices.shape[0])


class LaBER:
    """Large Batch Experience Replay: uniform large batch, down-sampled by score (Lahire et al. 2022).

    ``candidates(size)`` draws ``m·B`` slots uniformly (with replacement) from ``[0, size)``;
    ``select(candidates, scores)`` keeps ``B`` of them, position ``j`` with probability
    ``q_j = s_j / Σ_k s_k`` (``s = scores + eps``, multinomial with replacement), and weights
    them by ``weight_norm``:

    * ``"mean"`` (LaBER-mean): ``w_i = mean_k(s_k) / s_i``, ``k`` over the
      large batch — unbiased for the large batch's mean gradient;
    * ``"max"``: ``w_i = (1/s_i) / max_j (1/s_j)``, ``j`` over the kept batch (weights ``<= 1``);
    * ``"lazy"``: ``w_i = 1 / s_i``.

    >>> laber = LaBER(batch_size=2, m=3, seed=0)
    >>> cand = laber.candidates(100)
    >>> cand.shape
    (6,)
    >>> d = laber.select(cand, [1.0, 1.0, 2.0, 0.0, 4.0, 4.0])
    >>> bool(np.allclose(d.weights, 2.0 / np.array([1.0, 1.0, 2.0, 0.0, 4.0, 4.0])[d.positions]))
    True
    """

    def __init__(
        self,
        batch_size: int,
        m: int = 4,
        *,
        weight_norm: str = "mean",
        eps: float = 0.0,
        seed: int | None = None,
    ) -> None:
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.m = check_positive_int(m, "m")
        if weight_norm not in LABER_NORMS:
            raise ValueError(
                f"weight_norm should be one of {LABER_NORMS}, but got weight_norm={weight_norm!r}"
            )
        self.weight_norm = weight_norm
        self.eps = check_real(eps, "eps", minimum=0.0)
        if seed is None:  # as PrioritizedSampler: reproducible under torch.manual_seed
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
        self._rng = np.random.default_rng(check_seed(seed))

    @property
    def large_batch_size(self) -> int:
        """``m·B``."""
        return self.m * self.batch_size

    def candidates(self, size: int) -> npt.NDArray[np.int64]:
        """``m·B`` slots drawn uniformly, with replacement, from ``[0, size)``."""
        n = check_positive_int(size, "size")
        return self._rng.integers(0, n, self.large_batch_size, dtype=np.int64)

    def select(self, candidates: npt.ArrayLike, scores: npt.ArrayLike) -> LargeBatchDraw:
        """Keep ``B`` of the large batch with probability ``∝ scores + eps``, weighted."""
        cand = as_indices(candidates, "candidates")
        s = reals(scores, "scores").reshape(-1)
        if s.shape[0] != cand.shape[0]:
            raise ValueError(
                f"scores should have one value per candidate ({cand.shape[0]}), but got {s.shape[0]}"
            )
        if cand.shape[0] == 0:
            raise ValueError("candidates should hold at least one slot, but got none")
        check_each((s >= 0.0) & (s < np.inf), s, "scores", "finite and >= 0")
        s = s + self.eps
        cdf = np.cumsum(s)
        total = float(cdf[-1])
        if not total > 0.0:
            raise ValueError(
                f"scores should not all be 0 (with eps={self.eps}), but got scores={short_repr(s)}"
            )
        u = self._rng.random(self.batch_size) * total
        last = int(np.flatnonzero(s > 0.0)[-1])  # u may round up to ``total``
        positions = np.minimum(np.searchsorted(cdf, u, side="right"), last).astype(np.int64)
        kept = s[positions]
        probabilities = kept / total
        if self.weight_norm == "mean":
            weights = (total / s.shape[0]) / kept
        elif self.weight_norm == "max":
            weights = kept.min() / kept
        else:
            weights = 1.0 / kept
        return LargeBatchDraw(cand[positions], positions, weights.astype(np.float32), probabilities)

    def state_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "m": self.m,
            "weight_norm": self.weight_norm,
            "eps": self.eps,
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (later draws repeat); bad state raises, changes nothing."""
        keys = {"batch_size", "m", "weight_norm", "eps", "rng"}
        if not isinstance(state, dict) or set(state) != keys:
            raise ValueError(
                f"state should be a LaBER state_dict with keys {sorted(keys)}, but got {short_repr(state)}"
            )
        batch_size = check_positive_int(state["batch_size"], "batch_size")
        m = check_positive_int(state["m"], "m")
        norm = state["weight_norm"]
        if not isinstance(norm, str) or norm not in LABER_NORMS:
            raise ValueError(f"weight_norm should be one of {LABER_NORMS}, but got weight_norm={norm!r}")
        eps = check_real(state["eps"], "eps", minimum=0.0)
        rng = generator_from_state(state["rng"])
        self.batch_size, self.m, self.weight_norm, self.eps, self._rng = batch_size, m, norm, eps, rng
