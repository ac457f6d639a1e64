"""LAP and PAL (Fujimoto, Meger, Precup 2020): prioritized sampling and its equivalent loss.

"An Equivalence between Loss Functions and Non-Uniform Sampling in Experience Replay" (NeurIPS
2020) shows that a loss ``L`` minimised on non-uniformly drawn transitions has the same expected
gradient as a *different* loss minimised on uniform draws, and derives:

* **LAP** (Loss-Adjusted Prioritized replay): priorities ``p = max(|δ|, κ)``, drawn with
  ``P(i) = p_i^α / Σ_j p_j^α``, no importance-sampling weights, Huber loss with threshold ``κ``
  (:func:`lap_priorities`, :func:`lap_loss`; use ``PrioritizedSampler(alpha=α, beta=0.0,
  eps=0.0)``).  The floor ``κ`` keeps every transition at least ``κ^α / max`` as likely as the
  most likely one; with ``|δ| <= κ`` the Huber loss is the square loss, whose uniform gradient
  the (constant) priority ``κ^α`` leaves unbiased.
* **PAL** (Prioritized Approximation Loss): uniform draws and the loss whose expected gradient
  equals LAP's (:func:`pal_loss`).

Their paper states both with ``κ = 1``; written for a general ``κ`` (our derivation: match
``P(i)·∇Huber_κ(δ_i)`` with ``(1/N)·∇L_PAL(δ_i)`` term by term) the PAL loss is

``L_PAL(δ) = (1/λ) · {κ^α · δ²/2  if |δ| <= κ;  κ · |δ|^(1+α) / (1+α)  otherwise}``,
``λ = mean_j max(|δ_j|, κ)^α`` (held constant: no gradient through it),

which at ``κ = 1`` is the paper's.  Over the whole memory ``λ = Σ_j p_j^α / N`` and the
equivalence is exact; the paper (and :func:`pal_loss` by default) estimate ``λ`` on the batch.

Checked inputs (``TypeError``/``ValueError`` naming the argument): ``td_error`` a non-empty
floating-point tensor whose values are all finite, ``kappa > 0``, ``alpha >= 0``, and a
``normalizer`` finite and ``> 0`` whether a float or a one-element tensor.  The finiteness of
``td_error`` and a tensor ``normalizer``'s value are read back from the tensor's device (one
synchronisation on a GPU), except while a CUDA graph is being captured, when nothing can be read
back and these two checks are skipped.
"""

from __future__ import annotations

import torch

from prisample._capture import capturing
from prisample._validation import check_real, short_repr

__all__ = ["lap_loss", "lap_priorities", "pal_loss"]


def _errors(td_error: torch.Tensor) -> torch.Tensor:
    if not isinstance(td_error, torch.Tensor):
        raise TypeError(f"td_error should be a torch.Tensor, but got td_error={short_repr(td_error)}")
    if not td_error.is_floating_point():
        raise TypeError(f"td_error should be a floating-point tensor, but got dtype {td_error.dtype}")
    if td_error.numel() == 0:
        raise ValueError(f"td_error should hold at least one value, but got shape {tuple(td_error.shape)}")
    # One value read back (a synchronisation on a GPU); none can be while a CUDA graph is captured.
    if not capturing() and not bool(torch.isfinite(td_error).all()):
        flat = td_error.detach().reshape(-1)
        j = int(torch.nonzero(~torch.isfinite(flat))[0, 0])
        raise ValueError(f"td_error should be finite, but got td_error[{j}]={float(flat[j])!r}")
    return td_error


def _kappa(kappa: float) -> float:
    return check_real(kappa, "kappa", minimum=0.0, strict=True)


def lap_priorities(td_error: torch.Tensor, kappa: float = 1.0) -> torch.Tensor:
    """LAP priorities ``p = max(|δ|, κ)`` (Fujimoto et al. 2020, LAP; their ``κ = 1``).

    Detached, same shape and device as ``td_error`` (finite: NaN or infinite values raise
    ``ValueError``, see the module docstring); write them with
    ``sampler.update_priorities(indices, p)`` into a sampler built with ``beta=0.0`` and
    ``eps=0.0``: the sampler's ``α`` gives ``P(i) ∝ max(|δ_i|, κ)^α``.

    >>> lap_priorities(torch.tensor([-3.0, 0.5, 1.5])).tolist()
    [3.0, 1.0, 1.5]
    """
    return _errors(td_error).detach().abs().clamp(min=_kappa(kappa))


def lap_loss(td_error: torch.Tensor, kappa: float = 1.0) -> torch.Tensor:
    """Mean Huber loss ``δ²/2`` if ``|δ| <= κ`` else ``κ(|δ| − κ/2)`` (Fujimoto et al. 2020, LAP).

    The loss LAP pairs with its priorities, on draws without importance weights.  The paper
    writes the linear branch as ``κ|δ|``; the constant ``κ²/2`` between the two forms changes no
    gradient.  NaN or infinite ``td_error`` values raise ``ValueError`` (module docstring).

    >>> round(float(lap_loss(torch.tensor([0.5, -3.0]))), 6)   # (0.125 + 2.5) / 2
    1.3125
    """
    delta = _errors(td_error)
    k = _kappa(kappa)
    size = delta.abs()
    return torch.where(size <= k, 0.5 * delta * delta, k * (size - 0.5 * k)).mean()


def pal_loss(
    td_error: torch.Tensor,
    alpha: float = 0.4,
    kappa: float = 1.0,
    *,
    normalizer: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Prioritized Approximation Loss on a uniformly drawn batch (Fujimoto et al. 2020, PAL).

    ``mean_i (1/λ)·{κ^α δ_i²/2 if |δ_i| <= κ else κ|δ_i|^(1+α)/(1+α)}`` with
    ``λ = mean_i max(|δ_i|, κ)^α`` over the batch, detached; its expected gradient under uniform
    draws equals :func:`lap_loss`'s under LAP's prioritized draws (exactly when ``λ`` is the
    memory's mean: pass it as ``normalizer``, a float or a one-element floating tensor, finite
    and ``> 0`` either way).  Default ``α = 0.4`` as in the paper.  NaN or infinite ``td_error``
    values raise ``ValueError`` (module docstring).

    >>> d = torch.tensor([0.5, -3.0])
    >>> lam = (1.0 + 3.0 ** 0.4) / 2
    >>> bool(torch.isclose(pal_loss(d), (0.125 + 3.0 ** 1.4 / 1.4) / 2 / torch.tensor(lam)))
    True
    """
    delta = _errors(td_error)
    a = check_real(alpha, "alpha", minimum=0.0)
    k = _kappa(kappa)
    size = delta.abs()
    if normalizer is None:
        lam = size.detach().clamp(min=k).pow(a).mean()
    elif isinstance(normalizer, torch.Tensor):
        if normalizer.numel() != 1 or not normalizer.is_floating_point():
            raise ValueError(
                f"normalizer should be one positive float, but got normalizer={short_repr(normalizer)}"
            )
        lam = normalizer.detach().reshape(())
        if not capturing():  # the value read back, as a float normalizer is checked
            check_real(float(lam), "normalizer", minimum=0.0, strict=True)
    else:
        lam = torch.tensor(check_real(normalizer, "normalizer", minimum=0.0, strict=True), dtype=delta.dtype)
    per_item = torch.where(size <= k, (k**a) * 0.5 * delta * delta, k * size.pow(1.0 + a) / (1.0 + a))
    return per_item.mean() / lam.to(delta.device)
