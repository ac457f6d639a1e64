"""R2D2: recurrent Double DQN learning from replayed sequences (Kapturowski et al. 2019).

The algorithm, as the paper's Sec. 2-3 and Acme's ``agents/jax/r2d2`` run it:

1. Actors act ε-greedily with ``Q(o_t, h_t)``, an LSTM over a small torso, carrying ``h_t``
   across an episode (zero at its start).  Each step is stored with the state ``h_t`` the actor had
   *before* reading ``o_t``; the replay keeps it at the start of every sequence item
   (``burn_in + length`` steps on a period grid, :class:`prisample.SequenceReplay`).
2. The learner draws ``B`` items with ``P(i) ∝ p_i^α`` and weights ``w_i = (N·P(i))^-β / max w``.
3. **Stored state + burn-in**: the online and target LSTMs start from the item's stored state and
   run over the first ``burn_in`` steps without gradient; the loss uses the ``length`` steps after.
   (The *zero-state* ablation starts from ``h = 0`` with no burn-in.)
4. **n-step Double-Q targets with value rescaling** ``h(x) = sign(x)(√(|x|+1) − 1) + εx``
   (Pohlen et al. 2018): for each learn step ``j``, with ``b_j`` the step ``n`` ahead (or the
   item's end), ``a* = argmax_a Q(s_{b_j}, a; θ)``::

       Y_j = h( Σ_{k<n} (Π_{i<k} γ_{j+i}) r_{j+k}  +  (Π_{i<n} γ_{j+i}) h⁻¹(Q(s_{b_j}, a*; θ⁻)) )

5. Loss ``mean_i w_i Σ_j learn_ij ½ (Y_j − Q(s_j, a_j; θ))²`` (Acme sums over time); Adam.
6. Priorities ``p_i = η max_j |δ_ij| + (1 − η) mean_j |δ_ij|`` over the learn steps, η = 0.9,
   written back with the item's generation (a write-back to an overwritten item is dropped).
7. Every ``target_period`` updates ``θ⁻ ← θ``.

This module holds steps 3-6 (the parts the tests pin down); ``recipes/r2d2/train.py`` the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "RecurrentQNetwork",
    "SequenceLoss",
    "double_q_bootstrap",
    "epsilons",
    "n_step_targets",
    "sequence_loss",
    "value_rescale",
    "value_rescale_inverse",
]

State = tuple[torch.Tensor, torch.Tensor]


# -- 4. value rescaling (Pohlen et al. 2018, Prop. A.2; R2D2 Sec. 2) ---------------------------------


def value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """``h(x) = sign(x)(√(|x| + 1) − 1) + εx`` (R2D2's ε = 10⁻³)."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def value_rescale_inverse(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """``h⁻¹(x) = sign(x)(((√(1 + 4ε(|x| + 1 + ε)) − 1) / (2ε))² − 1)`` (Pohlen et al. 2018, Prop.
    A.2), the exact inverse of :func:`value_rescale` for ``ε > 0``."""
    root = torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps))
    return torch.sign(x) * (((root - 1.0) / (2.0 * eps)) ** 2 - 1.0)


# -- the network: torso → LSTM → dueling head ---------------------------------------------------------


class RecurrentQNetwork(nn.Module):
    """``Q(o_t, h_t)``: a torso (``mlp``: one ReLU layer; ``nature_cnn``: the Double DQN recipe's
    Nature torso, ``recipes.dqn.networks.QNetwork``), an LSTM, and R2D2's dueling head
    ``V + A − mean A`` (Wang et al. 2016).  Inputs ``(B, T, *obs_shape)``; the state ``(h, c)``,
    each ``(B, lstm_size)``."""

    def __init__(
        self, obs_shape: tuple[int, ...], num_actions: int, torso: str, torso_size: int, lstm_size: int
    ) -> None:
        super().__init__()
        self.obs_shape, self.lstm_size, self.cnn = obs_shape, lstm_size, torso == "nature_cnn"
        if self.cnn:
            from recipes.dqn.envs import EnvSpec
            from recipes.dqn.networks import QNetwork

            shared = QNetwork(
                "nature_cnn", EnvSpec(obs_shape, obs_shape[0], np.uint8, num_actions), (), False
            )
            self.torso: nn.Module = nn.Sequential(shared.body, nn.Linear(64 * 7 * 7, torso_size), nn.ReLU())
        elif torso == "mlp":
            self.torso = nn.Sequential(nn.Linear(int(np.prod(obs_shape)), torso_size), nn.ReLU())
        else:
            raise ValueError(f"torso should be one of mlp, nature_cnn, but got torso={torso!r}")
        self.lstm = nn.LSTM(torso_size, lstm_size, batch_first=True)
        self.value = nn.Linear(lstm_size, 1)
        self.advantage = nn.Linear(lstm_size, num_actions)

    def initial_state(self, batch: int, device: torch.device | None = None) -> State:
        """``(h, c)`` zeros: the state at an episode's start."""
        zeros = torch.zeros(batch, self.lstm_size, device=device)
        return zeros, zeros.clone()

    def forward(self, obs: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        batch, steps = obs.shape[:2]
        x = obs.reshape(batch * steps, *self.obs_shape).float()
        x = self.torso(x / 255.0 if self.cnn else x).reshape(batch, steps, -1)
        out, (h, c) = self.lstm(x, (state[0].unsqueeze(0), state[1].unsqueeze(0)))
        advantage = self.advantage(out)
        q = self.value(out) + advantage - advantage.mean(dim=-1, keepdim=True)
        return q, (h.squeeze(0), c.squeeze(0))


def epsilons(num_actors: int, base: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """Ape-X/R2D2's fixed per-actor exploration ``ε_i = base^(1 + α i / (N − 1))`` (Horgan et al.
    2018, Sec. 4.1; R2D2 Sec. 2.3), ``base`` alone for one actor."""
    if num_actors == 1:
        return np.array([base])
    return np.asarray(base ** (1.0 + alpha * np.arange(num_actors) / (num_actors - 1)))


# -- 4. n-step targets ----------------------------------------------------------------------------------


def n_step_targets(
    reward: torch.Tensor,
    discount: torch.Tensor,
    valid: torch.Tensor,
    bootstrap: torch.Tensor,
    n: int,
    eps: float | None = 1e-3,
) -> torch.Tensor:
    """``(B, W)`` targets ``Y_j = h(G_j + D_j h⁻¹(v_{b_j}))`` (``h`` the identity when ``eps`` is
    None) for every step ``j``: ``G_j = Σ_{k<K} (Π_{i<k} γ_{j+i}) r_{j+k}`` and ``D_j = Π_{i<K}
    γ_{j+i}`` over the ``K = min(n, W − j, L − j)`` steps left in the item (``L`` its valid steps;
    ``valid`` is a prefix), and ``b_j = j + K``.  ``bootstrap``: ``(B, W + 1)`` values ``v_t`` of
    ``s_t`` (index ``W`` the last step's next observation), in the rescaled space.  Terminations
    enter through ``γ = 0``; a valid item that ends by truncation bootstraps from its last
    ``next_obs``."""
    batch, window = reward.shape
    ret = torch.zeros_like(reward)
    scale = torch.ones_like(reward)
    ahead = torch.arange(window, device=reward.device).expand(batch, window).clone()
    for _k in range(n):
        index = ahead.clamp(max=window - 1)
        active = (ahead < window) & valid.gather(1, index)
        ret = ret + torch.where(active, scale * reward.gather(1, index), 0.0)
        scale = torch.where(active, scale * discount.gather(1, index), scale)
        ahead = ahead + active.long()
    value = bootstrap.gather(1, ahead)
    if eps is None:
        return ret + scale * value
    return value_rescale(ret + scale * value_rescale_inverse(value, eps), eps)


def double_q_bootstrap(q_online: torch.Tensor, q_target: torch.Tensor) -> torch.Tensor:
    """``Q(s_t, argmax_a Q(s_t, a; θ); θ⁻)`` per step: ``(B, T, A)`` each → ``(B, T)``."""
    best = q_online.argmax(dim=-1, keepdim=True)
    return q_target.gather(-1, best).squeeze(-1)


# -- 3, 5, 6. the learner's loss ---------------------------------------------------------------------------


@dataclass
class SequenceLoss:
    """One update's loss, its TD errors ``(B, W)`` (0 off the learn steps) for the priorities, and
    the mean |δ| over learn steps (a metric)."""

    loss: torch.Tensor
    td: torch.Tensor
    mean_abs_td: float


def start_state(batch: Any, net: RecurrentQNetwork, stored_state: bool, device: torch.device) -> State:
    """The LSTM state the learner starts each item from: the batch's stored ``(h, c)`` (step 3), or
    zeros for the zero-state ablation (the batch's state is then ignored)."""
    size = int(batch.reward.shape[0])
    if not stored_state or batch.state is None:
        return net.initial_state(size, device)
    return (
        torch.as_tensor(batch.state["h"], device=device, dtype=torch.float32),
        torch.as_tensor(batch.state["c"], device=device, dtype=torch.float32),
    )


def sequence_loss(
    q: RecurrentQNetwork,
    q_target: RecurrentQNetwork,
    batch: Any,
    *,
    burn_in: int,
    n: int,
    gamma_eps: float | None,
    stored_state: bool,
    device: torch.device,
) -> SequenceLoss:
    """Steps 3-5 on one :class:`prisample.SequenceBatch` (numpy or torch fields): unroll both
    networks from the start state (burn-in without gradient), the targets of
    :func:`n_step_targets` with Double-Q bootstraps, the weighted loss over the learn steps."""

    def tensor(x: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.as_tensor(x, device=device, dtype=dtype)

    obs = tensor(batch.obs)
    action = tensor(batch.action, torch.long)
    reward, discount = tensor(batch.reward, torch.float32), tensor(batch.discount, torch.float32)
    valid, learn = tensor(batch.valid, torch.bool), tensor(batch.learn, torch.bool)
    weights = tensor(batch.weights, torch.float32) if batch.weights is not None else torch.ones(len(reward))
    state = start_state(batch, q, stored_state, device)
    with torch.no_grad():
        q_next_target, _ = q_target(obs, state)
        warm = q(obs[:, :burn_in], state)[1] if burn_in > 0 else state
    q_after, _ = q(obs[:, burn_in:], (warm[0].detach(), warm[1].detach()))  # (B, W + 1 − burn_in, A)
    with torch.no_grad():
        online = torch.cat([q_after.new_zeros(len(obs), burn_in, q_after.shape[-1]), q_after], dim=1)
        targets = n_step_targets(
            reward, discount, valid, double_q_bootstrap(online, q_next_target), n, gamma_eps
        )
    taken = q_after[:, :-1].gather(-1, action[:, burn_in:].unsqueeze(-1)).squeeze(-1)
    td = torch.where(learn[:, burn_in:], targets[:, burn_in:] - taken, 0.0)
    loss = (weights * (0.5 * td**2).sum(dim=1)).mean()
    full = torch.cat([td.new_zeros(len(td), burn_in), td.detach()], dim=1)
    mean_abs = float(full.abs().sum() / learn.sum().clamp(min=1))
    return SequenceLoss(loss, full, mean_abs)
