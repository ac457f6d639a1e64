"""The Double DQN recipe's network and optimizer: Q(s, ·; θ) and DQN's RMSProp (Nature 2015)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from prisample.replay.device import concrete_device
from recipes.dqn.config import DDQNConfig, Network
from recipes.dqn.envs import EnvSpec

# -- networks ----------------------------------------------------------------------------------------


class SharedBias(nn.Module):
    """Linear output layer whose action values share one bias (tuned Double DQN, van Hasselt et al.)."""

    def __init__(self, in_features: int, num_actions: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, num_actions, bias=False)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores: torch.Tensor = self.linear(x)
        return scores + self.bias


class QNetwork(nn.Module):
    """``Q(s, ·)`` for every action; observations enter as stored (uint8 frames, bool grids, floats).

    * ``nature_cnn``: 4×84×84 frames / 255 → conv 32×8×8 s4 → conv 64×4×4 s2 → conv 64×3×3 s1 →
      512 → actions, ReLU between (Mnih et al. 2015);
    * ``minatar_cnn``: 10×10×C grid → conv 16×3×3 s1 → 128 → actions (Young & Tian 2019);
    * ``dopamine_minatar``: 10×10×C grid → conv 16×3×3 s1 'same' → actions, Xavier-uniform weights
      and zero biases (Dopamine's ``MinatarDQNNetwork``, ``labs/environments/minatar``);
    * ``mlp``: observation → hidden widths → actions.
    """

    def __init__(self, network: Network, spec: EnvSpec, hidden: tuple[int, ...], shared_bias: bool) -> None:
        super().__init__()
        self.network = network
        if network == "nature_cnn":
            channels = spec.obs_shape[0]
            self.body: nn.Module = nn.Sequential(
                nn.Conv2d(channels, 32, 8, stride=4),
                nn.ReLU(),
                nn.Conv2d(32, 64, 4, stride=2),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=1),
                nn.ReLU(),
                nn.Flatten(),
            )
            width = 64 * 7 * 7
        elif network == "minatar_cnn":
            height, breadth, channels = spec.obs_shape
            self.body = nn.Sequential(nn.Conv2d(channels, 16, 3, stride=1), nn.ReLU(), nn.Flatten())
            width = 16 * (height - 2) * (breadth - 2)
        elif network == "dopamine_minatar":
            height, breadth, channels = spec.obs_shape
            self.body = nn.Sequential(
                nn.Conv2d(channels, 16, 3, stride=1, padding=1), nn.ReLU(), nn.Flatten()
            )
            width = 16 * height * breadth
        elif network == "mlp":
            self.body = nn.Flatten()
            width = int(np.prod(spec.obs_shape))
        else:
            raise ValueError(
                "network should be one of nature_cnn, minatar_cnn, dopamine_minatar, mlp, "
                f"but got {network!r}"
            )
        layers: list[nn.Module] = []
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.head = nn.Sequential(*layers)
        self.out = SharedBias(width, spec.num_actions) if shared_bias else nn.Linear(width, spec.num_actions)
        if network == "dopamine_minatar":  # flax's Conv/Dense with kernel_init=xavier_uniform, zero bias
            for module in self.modules():
                if isinstance(module, (nn.Conv2d, nn.Linear)):
                    nn.init.xavier_uniform_(module.weight)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.network == "nature_cnn":
            x = obs.float() / 255.0
        elif self.network in ("minatar_cnn", "dopamine_minatar"):
            x = obs.permute(0, 3, 1, 2).float()
        else:
            x = obs.float()
        return self.out(self.head(self.body(x)))  # type: ignore[no-any-return]


class DQNRMSprop(torch.optim.Optimizer):
    """DeepMind's DQN RMSProp (Mnih et al. 2015; the ``NeuralQLearner`` of their release).

    ``g ← ρ g + (1−ρ) ∇``, ``n ← ρ n + (1−ρ) ∇²``, ``θ ← θ − η ∇ / sqrt(n − g² + ε)``: centred,
    with ``ε`` (the "min squared gradient", 0.01) inside the root, unlike ``torch.optim.RMSprop``.
    A step is a fixed sequence of tensor operations, so it can be captured in a CUDA graph.
    ``lr`` and ``eps`` may be tensors of one value per agent for parameters stacked along their
    first dimension (:class:`recipes.dqn.stacked.StackedQNetwork`).
    """

    def __init__(
        self, params: Any, lr: float | torch.Tensor, decay: float = 0.95, eps: float | torch.Tensor = 0.01
    ) -> None:
        super().__init__(params, dict(lr=lr, decay=decay, eps=eps))

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["g"] = torch.zeros_like(p)
                    state["n"] = torch.zeros_like(p)
                g, n, rho, lr = state["g"], state["n"], group["decay"], group["lr"]
                g.mul_(rho).add_(p.grad, alpha=1 - rho)
                n.mul_(rho).addcmul_(p.grad, p.grad, value=1 - rho)
                eps = group["eps"]
                if isinstance(eps, torch.Tensor):  # one ε per agent, paired with its η
                    eps = eps.view(-1, *[1] * (p.dim() - 1))
                denominator = (n - g * g + eps).sqrt_()
                if isinstance(lr, torch.Tensor):  # one η per agent along the first dimension
                    p.sub_(lr.view(-1, *[1] * (p.dim() - 1)) * p.grad / denominator)
                else:
                    p.addcdiv_(p.grad, denominator, value=-lr)


def optimizer_settings(config: DDQNConfig) -> tuple[float, float]:
    """``(step size, ε)`` of the optimiser: ``η / d`` and ε paired with it (``d = lr_divisor``).

    The paper steps the prioritized arms at η/4 because their gradients are larger (Sec. 4,
    Table 3).  Its authors' release pairs ``η/4`` with ``ε·(1/4)²`` for an RMSProp whose ε is inside
    the root (DQN Zoo prioritized ``run_atari.py``), so that ``η/d · g/sqrt(v + ε/d²)`` is the
    baseline's step where ε dominates and ``1/d`` of it where the gradient does.  The same meaning
    for an optimiser that adds ε to the root (torch's RMSprop, Adam) is ``ε/d``.  With
    ``eps_follows_lr`` false only η is divided.
    """
    divisor = config.lr_divisor
    eps = config.adam_eps if config.optimizer == "adam" else config.rmsprop_eps
    if config.eps_follows_lr:
        eps /= divisor**2 if config.optimizer == "dqn_rmsprop" else divisor
    return config.lr / divisor, eps


def make_optimizer(config: DDQNConfig, params: Any, capturable: bool = False) -> torch.optim.Optimizer:
    """The optimiser with step size η / lr_divisor and its ε (:func:`optimizer_settings`;
    ``capturable``: one a CUDA graph can replay)."""
    # PER: the prioritized arms step η / 4: they replay high-error transitions more often (Sec. 4).
    lr, eps = optimizer_settings(config)
    if config.optimizer == "dqn_rmsprop":
        return DQNRMSprop(params, lr, config.rmsprop_decay, eps)
    if config.optimizer == "rmsprop":
        return torch.optim.RMSprop(
            params, lr=lr, alpha=config.rmsprop_decay, eps=eps, centered=True, capturable=capturable
        )
    return torch.optim.Adam(params, lr=lr, eps=eps, capturable=capturable)


def resolve_device(device: str) -> torch.device:
    """``--device`` as the device its tensors report (``"auto"``: CUDA when available): ``"cuda"``
    becomes ``cuda:<current index>`` and ``"cpu:0"`` ``cpu``, so that a tensor's ``.device``
    compares equal to it.  (Here, not in :mod:`recipes.dqn.config`, which the command line's
    ``--help`` reads without importing torch.)"""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return concrete_device(device)
