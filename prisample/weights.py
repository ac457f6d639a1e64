"""Importance-sampling weights and the β schedule (Schaul et al. 2016, Sec. 3.4)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, cast

import numba
import numpy as np
import numpy.typing as npt

from prisample._validation import check_choice, real_scalar, short_repr, to_numpy

__all__ = [
    "WEIGHT_NORMS",
    "LinearSchedule",
    "WeightNorm",
    "as_beta",
    "as_weight_norm",
    "beta_at",
    "beta_from_state",
    "beta_to_state",
    "check_beta",
    "corrected_weights_unchecked",
    "importance_weights",
    "log_memory_max",
    "weights_unchecked",
]


WeightNorm = Literal["memory", "batch", "none"]
WEIGHT_NORMS: tuple[str, ...] = ("memory", "batch", "none")


def as_weight_norm(value: Any, name: str = "weight_norm") -> WeightNorm:
    """``value`` if it is one of ``WEIGHT_NORMS``, else ``ValueError`` naming it."""
    return cast(WeightNorm, check_choice(value, name, WEIGHT_NORMS))


def check_beta(beta: float, name: str = "beta") -> float:
    """``beta`` (a number, or a 0-d tensor or array holding one) as a float in ``[0, 1]``, else
    ``TypeError``/``ValueError`` naming it.  ``β > 1`` is refused, not clamped: the paper anneals
    ``β`` up to 1 (full correction, Sec. 3.4) and gives no meaning to more, and a schedule that
    overshoots is better stopped than silently held at 1."""
    beta = real_scalar(beta)
    if isinstance(beta, bool) or not isinstance(beta, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} should be a float in [0, 1], but got {name}={beta!r}")
    value = float(beta)
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        hint = (
            " (β anneals up to 1 at most: cap the schedule at 1, e.g. TorchRL's max_value=1.0)"
            if value > 1
            else ""
        )
        raise ValueError(f"{name} should be in [0, 1]{hint}, but got {name}={beta!r}")
    return value


def importance_weights(
    probabilities: npt.ArrayLike,
    n: int,
    beta: float,
    normalize: WeightNorm = "memory",
    min_probability: float | None = None,
) -> npt.NDArray[np.float32]:
    """``w_i = (N · P(i))^-β``, scaled so that updates are only ever scaled down (Sec. 3.4).

    ``normalize``:

    * ``"memory"`` — divide by ``max_j w_j`` over the whole memory, ``(N · P_min)^-β``, where
      ``P_min`` (``min_probability``) is the smallest probability of any valid slot.  This is the
      paper's Algorithm 1 (line 10) and App. B.2.1; it gives ``w_i = (P_min / P(i))^β``.
    * ``"batch"`` — divide by the largest weight in this batch (the ``max`` of the given
      probabilities' weights), as several libraries do; a batch-dependent scale.
    * ``"none"`` — the raw ``(N · P(i))^-β`` (clipped to float32's largest value).

    >>> importance_weights([0.5, 0.25], n=4, beta=1.0, normalize="batch").tolist()
    [0.5, 1.0]
    """
    p = to_numpy(probabilities, "probabilities")
    if p.dtype.kind not in "fiu":  # strings, bools, objects: refused, never parsed
        raise TypeError(f"probabilities should hold real numbers, but got dtype {p.dtype}")
    p = p.astype(np.float64, copy=False)
    if p.ndim != 1:
        raise ValueError(f"probabilities should be one-dimensional, but got shape {p.shape}")
    if not np.all((p > 0.0) & (p <= 1.0)):
        raise ValueError(f"probabilities should lie in (0, 1], but got {p[~((p > 0) & (p <= 1))][:5]}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n should be a positive integer, but got n={n!r}")
    beta = check_beta(beta)
    if normalize not in WEIGHT_NORMS:
        raise ValueError(f"normalize should be one of {WEIGHT_NORMS}, but got normalize={normalize!r}")
    if normalize == "memory" and (min_probability is None or not 0.0 < min_probability <= 1.0):
        raise ValueError(
            f"min_probability should lie in (0, 1] with normalize='memory', "
            f"but got min_probability={min_probability!r}"
        )
    return weights_unchecked(p, int(n), beta, normalize, min_probability or 1.0)


# Unnormalised weights of tiny probabilities (a tiny priority with ε = 0) can pass float32's range:
# they are clipped to its largest value rather than becoming inf.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@numba.njit(cache=True)
def _weights(p: np.ndarray, n: int, beta: float, mode: int, min_probability: float, out: np.ndarray) -> None:
    if mode == 1:
        min_probability = math.inf
        for j in range(p.shape[0]):
            if p[j] > 0.0:
                min_probability = min(min_probability, p[j])
    for j in range(p.shape[0]):
        if not p[j] > 0.0:
            out[j] = 0.0  # never drawn (a zero mass with eps=0): no finite weight to give
        elif mode == 2:
            out[j] = min((n * p[j]) ** -beta, _FLOAT32_MAX)
        else:
            # min(...) guards against rounding: every valid slot has P(i) >= P_min.
            out[j] = min(min_probability / p[j], 1.0) ** beta


@numba.njit(cache=True)
def _corrected_weights(
    p: np.ndarray,
    c: np.ndarray,
    n: int,
    beta: float,
    mode: int,
    min_probability: float,
    memory_max: float,
    out: np.ndarray,
) -> None:
    scale = memory_max
    top = 1.0
    if mode == 1:
        min_probability = math.inf
        top = 0.0  # factors relative to the batch's largest: tiny ones cannot underflow the scale
        for j in range(p.shape[0]):
            if p[j] > 0.0:
                min_probability = min(min_probability, p[j])
                top = max(top, c[j])
        scale = 0.0
        if top > 0.0:
            for j in range(p.shape[0]):
                if p[j] > 0.0:
                    scale = max(scale, c[j] / top * min(min_probability / p[j], 1.0) ** beta)
    for j in range(p.shape[0]):
        if not p[j] > 0.0:
            out[j] = 0.0
        elif mode == 2:
            out[j] = min(c[j] * (n * p[j]) ** -beta, _FLOAT32_MAX)
        elif scale > 0.0:
            out[j] = min(c[j] / top * min(min_probability / p[j], 1.0) ** beta / scale, 1.0)
        else:
            out[j] = 0.0  # every correction in the memory (or batch) is 0


_MODES = {"memory": 0, "batch": 1, "none": 2}


def weights_unchecked(
    p: npt.NDArray[np.float64], n: int, beta: float, normalize: str, min_probability: float
) -> npt.NDArray[np.float32]:
    """:func:`importance_weights` without validation, for callers that validated already.

    A probability of 0 (a slot that is never drawn) gets weight 0.
    """
    out = np.empty(p.shape[0], dtype=np.float32)
    _weights(p, n, beta, _MODES[normalize], min_probability, out)
    return out


_LOG_TINY = math.log(5e-324)  # log of the smallest positive float64


@numba.njit(cache=True)
def _log_max(
    log_c: np.ndarray, log_shifted: np.ndarray, slope: float, alpha: float, log_total: float
) -> float:
    best = -math.inf
    for j in range(log_c.shape[0]):
        shifted = log_shifted[j]
        if math.isnan(shifted) or (alpha > 0.0 and alpha * shifted - log_total < _LOG_TINY):
            continue  # an empty slot, or a probability of 0 (a zero priority with ε = 0)
        best = max(best, log_c[j] - slope * shifted)
    return best


def log_memory_max(
    log_c: npt.NDArray[np.float64],
    log_shifted: npt.NDArray[np.float64],
    alpha: float,
    beta: float,
    min_probability: float,
    total: float,
    scale: float = 1.0,
) -> float:
    """``max_j (c_j / scale) (P_min / P(j))^β`` for the proportional ``P(j) = (p_j + ε)^α / total``.

    ``log c_j - αβ log(p_j + ε)`` is maximised in one pass over the kept logs (``NaN`` = empty
    slot), then ``c_j (P_min / P(j))^β = exp(that + β (log P_min + log total))``.
    """
    if not (min_probability > 0.0 and scale > 0.0 and total > 0.0):
        return 0.0
    best = float(_log_max(log_c, log_shifted, alpha * beta, alpha, math.log(total)))
    if best == -math.inf:
        return 0.0
    return math.exp(best - math.log(scale) + beta * (math.log(min_probability) + math.log(total)))


def corrected_weights_unchecked(
    p: npt.NDArray[np.float64],
    c: npt.NDArray[np.float64],
    n: int,
    beta: float,
    normalize: str,
    min_probability: float,
    memory_max: float,
) -> npt.NDArray[np.float32]:
    """``w_i = c_i (N·P(i))^-β`` with a per-slot correction ``c_i >= 0``, normalised as chosen.

    ``"memory"`` divides by ``max_j c_j (N·P(j))^-β`` over the memory, passed in the overflow-free
    form ``memory_max = max_j c_j (P_min / P(j))^β`` (:func:`log_memory_max`); ``"batch"`` by the batch's
    largest; ``"none"`` leaves it raw.  With ``α = 0``, ``β = 1`` and ``c = ρ`` the memory-normalised
    weight is ``ρ_i / max_j ρ_j`` (weighted importance sampling in replay, Sec. 6).
    A probability of 0 gets weight 0; if every correction is 0 all weights are 0.
    """
    out = np.empty(p.shape[0], dtype=np.float32)
    _corrected_weights(p, c, n, beta, _MODES[normalize], min_probability, memory_max, out)
    return out


@dataclass(frozen=True)
class LinearSchedule:
    """``v(t) = start + (end - start) · min(t / steps, 1)``: β annealed linearly (Sec. 3.4).

    >>> LinearSchedule(0.5, 1.0, 100)(50)
    0.75
    """

    start: float
    end: float
    steps: int

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} should be a finite float, but got {name}={value!r}")
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"steps should be a positive integer, but got steps={self.steps!r}")

    def __call__(self, t: int) -> float:
        fraction = min(max(t, 0) / self.steps, 1.0)
        return self.start + (self.end - self.start) * fraction


def as_beta(value: Any) -> float | LinearSchedule:
    """``β`` as the sampler holds it: a float in ``[0, 1]``, or a :class:`LinearSchedule` whose
    ends lie in ``[0, 1]``; ``TypeError``/``ValueError`` naming ``beta`` otherwise."""
    if isinstance(value, LinearSchedule):
        check_beta(value.start, "beta.start")
        check_beta(value.end, "beta.end")
        return value
    return check_beta(value)


def beta_at(beta: float | LinearSchedule, step: int) -> float:
    """``β`` for a draw after ``step`` batches: the schedule's value there, or the constant."""
    return beta(step) if isinstance(beta, LinearSchedule) else beta


def beta_to_state(beta: float | LinearSchedule) -> float | dict[str, Any]:
    """``β`` as a state dict holds it: the float, or a schedule as ``{"start", "end", "steps"}``."""
    if isinstance(beta, LinearSchedule):
        return {"start": beta.start, "end": beta.end, "steps": beta.steps}
    return beta


def beta_from_state(value: Any) -> float | LinearSchedule:
    """:func:`as_beta` of ``β`` as a state dict holds it: a float, or a schedule as
    ``{"start", "end", "steps"}``."""
    if isinstance(value, dict):
        if set(value) != {"start", "end", "steps"}:
            raise ValueError(
                f"state_dict beta should be a float or a dict with keys start, end, steps, but got "
                f"beta={short_repr(value)}"
            )
        return as_beta(LinearSchedule(**value))
    return check_beta(value)
