"""The pieces of the stacked engine on CPU environments (:mod:`recipes.dqn.minstack`) that are not
its loop: which configs may train together, their optimiser with one step size per agent, their
loss with one priority rule per agent, and the process's checkpoint.

Every agent ``a`` of one process runs Algorithm 1 (Schaul et al. 2016) with its own arm; the
stacked update is ``A`` independent updates because agent ``a``'s loss reaches only its slice of
the stacked parameters (:class:`~recipes.dqn.stacked.StackedQNetwork`) and both optimisers here
are elementwise with a per-agent step size ``η_a = η / d_a`` and ``ε_a`` paired with it
(:func:`recipes.dqn.networks.optimizer_settings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from recipes.common import checkpoint_file
from recipes.dqn.agent import SQRT_LOSS_FLOOR, TD_ERRORS, td_item_loss, weighted_td_loss
from recipes.dqn.config import DDQNConfig
from recipes.dqn.networks import DQNRMSprop, optimizer_settings
from recipes.dqn.update import LossFn

__all__ = [
    "PER_AGENT",
    "StackedAdam",
    "check_stacked",
    "load_payload",
    "save_payload",
    "stacked_optimizer",
    "stacked_td_loss",
]

PER_AGENT = (
    "arm",
    "replay",
    "alpha",
    "alpha_end",
    "beta0",
    "beta_end",
    "priority_rule",
    "clip_priority",
    "priority_eps",
    "weight_norm",
    "lr_divisor",
    "eval_epsilon",
    "seed",
    "log_dir",
    "run_name",
)
"""Config fields that may differ between the agents of one process: the arm's replay, α, β, ε of
p, priority rule, weight normalisation, step-size divisor, evaluation ε, the seed and where the
agent's run directory is.  Every other field must be the same for all of them."""

_RULES = ("abs_td", "sqrt_loss")
_OPTIMIZERS = ("adam", "dqn_rmsprop")


def check_stacked(cfgs: Sequence[DDQNConfig]) -> None:
    """``ValueError`` naming the field when the agents differ outside :data:`PER_AGENT`, use a rule
    the stacked update lacks (LaBER's sampling, LAP's priorities, an optimiser other than Adam or
    DQN's RMSProp), or two agents share a run directory."""
    if not cfgs:
        raise ValueError("cfgs should hold at least one agent's config, but got none")
    fields = [f for f in cfgs[0].__dataclass_fields__ if f not in PER_AGENT]
    for name in fields:
        values = {repr(getattr(c, name)) for c in cfgs}
        if len(values) > 1:
            raise ValueError(
                f"{name} should be the same for every agent of one process, but got {sorted(values)}"
            )
    for c in cfgs:
        if c.sampling != "replay" or c.priority_rule not in _RULES:
            raise ValueError(
                f"arm should draw from its replay with priority_rule in {_RULES} to train stacked, but got "
                f"arm={c.arm!r} (sampling={c.sampling!r}, priority_rule={c.priority_rule!r})"
            )
    if cfgs[0].optimizer not in _OPTIMIZERS:
        raise ValueError(
            f"optimizer should be one of {_OPTIMIZERS} to train stacked, but got {cfgs[0].optimizer!r}"
        )
    dirs = [(c.log_dir, c.run_name, c.arm, c.seed) for c in cfgs]
    if len(set(dirs)) < len(dirs):
        raise ValueError(f"cfgs should give every agent its own run directory, but got {dirs}")


class StackedAdam(torch.optim.Optimizer):
    """Adam (Kingma & Ba 2015) with one step size and one ε per agent along the first dimension.

    ``m ← β₁ m + (1−β₁) ∇``, ``v ← β₂ v + (1−β₂) ∇²``, then
    ``θ_a ← θ_a − (η_a / (1−β₁ᵗ)) · m_a / (sqrt(v_a) / sqrt(1−β₂ᵗ) + ε_a)``: the arithmetic of
    ``torch.optim.Adam``'s single-tensor step, with ``lr`` and ``eps`` tensors of shape ``(A,)``.
    """

    def __init__(
        self, params: Any, lr: torch.Tensor, eps: torch.Tensor, betas: tuple[float, float] = (0.9, 0.999)
    ) -> None:
        if lr.dim() != 1 or eps.shape != lr.shape:
            raise ValueError(
                f"lr and eps should be 1-d of one value per agent, but got {tuple(lr.shape)} and "
                f"{tuple(eps.shape)}"
            )
        super().__init__(params, dict(lr=lr, eps=eps, betas=betas))

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
                m.lerp_(p.grad, 1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                shape = (-1, *[1] * (p.dim() - 1))
                step_size = (group["lr"] / (1 - beta1**t)).view(shape)
                denominator = (v.sqrt() / (1 - beta2**t) ** 0.5).add_(group["eps"].view(shape))
                p.sub_(step_size * m / denominator)


def stacked_optimizer(cfgs: Sequence[DDQNConfig], params: Any, device: torch.device) -> torch.optim.Optimizer:
    """The agents' optimiser: ``η / d_a`` and the ε paired with it per agent (PER: the prioritized
    arms of Table 3 step η/4), Adam or DQN's RMSProp as the shared config says."""
    settings = [optimizer_settings(c) for c in cfgs]  # PER: η / lr_divisor, ε paired with it
    lr = torch.tensor([s[0] for s in settings], device=device)
    eps = torch.tensor([s[1] for s in settings], device=device)
    if cfgs[0].optimizer == "adam":
        return StackedAdam(params, lr, eps)
    return DQNRMSprop(params, lr, cfgs[0].rmsprop_decay, eps)


def stacked_td_loss(q: nn.Module, q_target: nn.Module, cfgs: Sequence[DDQNConfig]) -> LossFn:
    """``batch -> (Σ_a loss_a, p, loss_a)`` for batches of shape ``(A, k, ...)``: the sum of the agents'
    losses of :func:`recipes.dqn.agent.td_loss` (each reaching only its own parameters), the new
    priorities of each agent by its own rule (``|δ|``, ``|clip(δ)|`` with clip_priority, or
    Dopamine's ``sqrt(ℓ(δ) + 1e-10)``) and each agent's loss."""
    cfg = cfgs[0]
    td_error = TD_ERRORS[cfg.algorithm]
    device = next(q.parameters()).device
    sqrt_rows = torch.tensor([[c.priority_rule == "sqrt_loss"] for c in cfgs], device=device)
    clip_rows = torch.tensor([[c.clip_priority] for c in cfgs], device=device)

    def loss_and_priorities(batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        obs, action, reward, discount, next_obs, weights = batch
        delta = td_error(q, q_target, obs, action, reward, discount, next_obs)
        per_agent = torch.stack(
            [
                weighted_td_loss(d, w, cfg.clip_td, cfg.loss_reduction)
                for d, w in zip(delta, weights, strict=True)
            ]
        )
        delta = delta.detach()
        absolute = torch.where(clip_rows, delta.clamp(-1.0, 1.0), delta).abs()  # PER: p = |δ|
        rooted = torch.sqrt(td_item_loss(delta, cfg.clip_td) + SQRT_LOSS_FLOOR)  # PER: Dopamine's p
        return per_agent.sum(), torch.where(sqrt_rows, rooted, absolute), per_agent.detach()

    return loss_and_priorities


def save_payload(path: Path, payload: dict[str, Any]) -> None:
    """Write the process's checkpoint atomically, its arrays from their own memory
    (:mod:`recipes.common.checkpoint_file`): a process killed while writing keeps its previous one."""
    checkpoint_file.save(path, payload)


def load_payload(path: Path) -> dict[str, Any] | None:
    """The checkpoint at ``path``, or None when there is none."""
    if not path.exists():
        return None
    ck: dict[str, Any] = checkpoint_file.load(path)
    return ck
