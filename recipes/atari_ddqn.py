"""Double DQN with uniform, proportional and rank-based prioritized replay (Schaul et al. 2016, Algorithm 1).

The agent is the tuned Double DQN of van Hasselt, Guez & Silver (2016) with its replay memory
replaced by :class:`prisample.replay.PrioritizedReplay`.  Every ``K`` agent steps it draws a
minibatch of ``k`` transitions ``j`` with probability ``P(j) = p_j^α / Σ_i p_i^α`` and updates

    w_j = (N · P(j))^-β / max_i w_i
    δ_j = R_j + γ_j Q_target(S_j, argmax_a Q(S_j, a)) − Q(S_{j−1}, A_{j−1})      (clipped to [−1, 1])
    p_j ← |δ_j|
    θ ← θ + η Σ_j w_j δ_j ∇_θ Q(S_{j−1}, A_{j−1})

(Algorithm 1, Sec. 3.3-4, App. B.2).  ``arm`` picks the distribution: ``uniform`` (α = 0, β = 0:
the Double DQN baseline), ``proportional`` (``p = |δ| + ε``, α = 0.6, β 0.4 → 1) or ``rank``
(``p = 1/rank``, α = 0.7, β 0.5 → 1), the prioritized arms with step size η/4 (Sec. 4).
Lines marked ``# PER:`` are where prioritization touches the loop.

Commands (``PYTHONPATH=.`` is enough, nothing needs installing)::

    python -m recipes.atari_ddqn train --env ALE/Pong-v5 --arm proportional --device cuda
    python -m recipes.atari_ddqn train --env CartPole-v1 --arm rank
    python -m recipes.atari_ddqn sweep --env CartPole-v1 --seeds 5 --jobs 14 --out docs/results/cartpole
    python -m recipes.atari_ddqn plot --json docs/results/cartpole.json

Defaults not given on the command line come from the environment's preset (``PRESETS``: Atari as
in the paper, MinAtar from Young & Tian 2019, CartPole from RL Baselines3 Zoo); each value and its source
is listed in ``docs/recipes/atari_ddqn.md``.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import os
import pickle
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

import cloudpickle  # type: ignore[import-untyped]
import numpy as np
import torch
from torch import nn
from tqdm import tqdm  # type: ignore[import-untyped]

from prisample import LinearSchedule
from recipes import cli
from recipes.dqn_envs import (
    EnvBackend,
    EnvSpec,
    Evaluation,
    atari_rom,
    check_env,
    env_family,
    evaluate,
    lives,
    load_atari_scores,
    make_env,
    normalized_score,
    seed_envs,
)

Arm = Literal["uniform", "proportional", "rank"]
ARMS: tuple[Arm, ...] = ("uniform", "proportional", "rank")
Network = Literal["nature_cnn", "minatar_cnn", "mlp"]
Optimizer = Literal["dqn_rmsprop", "rmsprop", "adam"]

PAPER_PRIORITY: dict[str, tuple[float, float]] = {
    "uniform": (0.0, 0.0),
    "proportional": (0.6, 0.4),
    "rank": (0.7, 0.5),
}
"""(α, β0) per arm: the paper's tuned Atari values (Sec. 4, Table 3); β is annealed to 1."""


@dataclass(frozen=True)
class DDQNConfig:
    """One Double DQN run.  ``None`` means: the value of the environment's preset (``PRESETS``)."""

    env: str = "ALE/Pong-v5"
    """Gymnasium id: ``ALE/<Game>-v5`` (Atari), ``MinAtar/<Game>-v1`` or e.g. ``CartPole-v1``."""
    arm: Arm = "proportional"
    """Replay distribution: 'uniform' (Double DQN), 'proportional' or 'rank' (Schaul et al. 2016)."""
    total_steps: int | None = None
    """Agent steps of training T; β reaches 1 here (Atari: 50M steps = 200M frames, the paper)."""
    seed: int = 0
    """Seeds the network, the environments, exploration and the sampler."""
    device: str = "cpu"
    """Torch device of the networks: 'cpu', 'cuda', 'cuda:1', or 'auto' (cuda when available)."""
    num_envs: int | None = None
    """Environments stepped together; each step of all of them counts num_envs agent steps."""
    env_backend: EnvBackend = "auto"
    """Atari only: 'vector' (ale-py AtariVectorEnv, the default) or 'gymnasium' (wrapper stack)."""
    env_threads: int = 1
    """Atari 'vector' backend: emulator threads per vector environment."""
    memory_size: int | None = None
    """Replay capacity N in transitions, a sliding window (Atari: 10^6, Sec. 4)."""
    batch_size: int = 32
    """Minibatch k (Sec. 4: 32)."""
    replay_period: int | None = None
    """K: one minibatch update per K agent steps (Atari: 4, Sec. 4)."""
    learning_starts: int | None = None
    """Agent steps of ε = 1 play before the first update (Atari: 50,000, Mnih et al. 2015)."""
    alpha: float | None = None
    """Priority exponent α; default the paper's for the arm (proportional 0.6, rank 0.7, uniform 0)."""
    beta0: float | None = None
    """Initial IS exponent β0, annealed linearly to beta_end over training (0.4 / 0.5; uniform 0)."""
    beta_end: float | None = None
    """β at the end of training (prioritized arms 1, Table 3; uniform 0)."""
    priority_eps: float = 1e-6
    """ε of p = |δ| + ε (proportional; any small positive constant, Sec. 3.3)."""
    network: Network | None = None
    """'nature_cnn' (Mnih et al. 2015), 'minatar_cnn' (Young & Tian 2019) or 'mlp'."""
    hidden: tuple[int, ...] | None = None
    """Hidden widths of the 'mlp' network."""
    shared_bias: bool | None = None
    """One bias shared by all action values in the output layer (tuned Double DQN, van Hasselt et al.)."""
    optimizer: Optimizer | None = None
    """'dqn_rmsprop' (DeepMind's centred RMSProp, ε inside the root), 'rmsprop' (torch centred) or 'adam'."""
    lr: float | None = None
    """η of the uniform arm (Atari: 0.00025)."""
    prioritized_lr_divisor: float = 4.0
    """The prioritized arms use η / this (Sec. 4: 4)."""
    rmsprop_decay: float = 0.95
    """RMSProp gradient and squared-gradient momentum (Mnih et al. 2015: 0.95)."""
    rmsprop_eps: float = 0.01
    """RMSProp min squared gradient (Mnih et al. 2015: 0.01)."""
    loss_reduction: Literal["sum", "mean"] | None = None
    """'sum': Δ = Σ_j w_j δ_j ∇Q as in Algorithm 1; 'mean': divided by k."""
    gamma: float = 0.99
    """Discount γ (Mnih et al. 2015)."""
    n_step: int = 1
    """Steps per return (the paper: 1).  n > 1 learns from ``Σ_{k<m} γ^k R_{t+k} + γ^m Q(S_{t+m})``,
    ``m = n`` unless the episode ends first (multi-step returns with PER: Hessel et al. 2018)."""
    target_update_period: int | None = None
    """Agent steps between copies θ_target ← θ (tuned Double DQN: 30,000)."""
    clip_reward: bool | None = None
    """Clip rewards to [−1, 1] for learning (Atari, Sec. 4); scores stay unclipped."""
    clip_td: bool = True
    """Clip δ to [−1, 1] (Sec. 4): Huber loss, and priorities |clip(δ)|."""
    eps_start: float = 1.0
    """Initial exploration ε."""
    eps_end: float | None = None
    """Final exploration ε (tuned Double DQN: 0.01)."""
    eps_decay_steps: int | None = None
    """Agent steps of the linear ε decay after learning_starts (Atari: 250,000 = 1M frames)."""
    terminal_on_life_loss: bool | None = None
    """Atari: a lost life ends the bootstrapped return (γ_t = 0) though the game goes on (DQN)."""
    eval_every: int | None = None
    """Agent steps between evaluations (Atari: 250,000 = 1M frames)."""
    eval_steps: int | None = None
    """Agent-step budget of one evaluation (the paper's test protocol: 125,000 = 500k frames)."""
    eval_episodes: int | None = None
    """Stop an evaluation after this many completed episodes."""
    eval_epsilon: float = 0.01
    """ε of the evaluation policy (Double DQN test protocol: 0.01, Table 6)."""
    eval_envs: int | None = None
    """Environments played in parallel during evaluation."""
    noop_max: int = 30
    """Atari: up to this many no-op actions start each episode (train and test, Mnih et al. 2015)."""
    log_dir: str = "runs/atari_ddqn"
    """Root of run directories (metrics.csv, TensorBoard events, checkpoints)."""
    run_name: str | None = None
    """Run directory under log_dir; default '<env>/<arm>/seed<seed>'."""
    log_every: int | None = None
    """Agent steps between metric rows."""
    tensorboard: bool = True
    """Also write TensorBoard events (needs the tensorboard package)."""
    checkpoint_every: int | None = None
    """Agent steps between checkpoints (None: only at the end of the run)."""
    checkpoint_memory: bool = False
    """Store the replay memory in checkpoints (needed for an exactly identical continuation)."""
    resume: bool = False
    """Continue from the run directory's checkpoint.pt when it exists (without a saved memory, the
    memory is refilled for learning_starts steps before updates resume)."""
    stop_after: int | None = None
    """Stop this invocation (with a checkpoint) once the step counter reaches this value."""
    time_budget_s: float | None = None
    """Stop cleanly (with a checkpoint and the curve so far) after this many seconds."""
    progress: bool = True
    """Show a progress bar with steps/s."""
    threads: int = 1
    """torch CPU threads."""

    def __post_init__(self) -> None:
        cli.one_of(self, "arm", ARMS)
        check_env(self.env)  # Pendulum-v1 used to get as far as an AttributeError on its action space
        cli.at_least(
            self,
            1,
            "batch_size",
            "threads",
            "env_threads",
            "total_steps",
            "num_envs",
            "memory_size",
            "n_step",
            "replay_period",
            "target_update_period",
            "eval_every",
            "eval_steps",
            "eval_episodes",
            "eval_envs",
            "log_every",
            "checkpoint_every",
            "eps_decay_steps",
        )
        cli.at_least(self, 0, "learning_starts", "noop_max", "alpha", "seed")
        cli.positive(self, "prioritized_lr_divisor", "priority_eps", "rmsprop_eps")
        for name in ("gamma", "beta0", "beta_end", "eps_start", "eps_end", "eval_epsilon", "rmsprop_decay"):
            cli.in_range(self, name, 0.0, 1.0)
        if self.lr is not None:
            cli.positive(self, "lr")
        if self.time_budget_s is not None:
            cli.at_least(self, 0.0, "time_budget_s")
        if self.hidden is not None:
            cli.require(
                bool(self.hidden) and min(self.hidden) >= 1,
                "hidden",
                "be a comma list of widths >= 1",
                self.hidden,
            )


PRESETS: dict[str, dict[str, Any]] = {
    # The paper (Sec. 4, App. B.2) on the tuned Double DQN of van Hasselt et al. (2016), itself on
    # the Nature DQN (Mnih et al. 2015).  Counts are in agent steps (one step = 4 frames).
    "atari": dict(
        total_steps=50_000_000, num_envs=4, memory_size=1_000_000, replay_period=4,
        learning_starts=50_000, network="nature_cnn", hidden=(512,), shared_bias=True,
        optimizer="dqn_rmsprop", lr=0.00025, loss_reduction="sum", target_update_period=30_000,
        clip_reward=True, eps_end=0.01, eps_decay_steps=250_000, terminal_on_life_loss=True,
        eval_every=250_000, eval_steps=125_000, eval_episodes=1_000, eval_envs=4, log_every=10_000,
    ),
    # Young & Tian (2019), MinAtar's DQN: conv 16×3×3 + 128 units, centred RMSProp (torch), one
    # update per step, memory 100,000, target copy every 1,000 steps, ε 1 → 0.1 over 100,000 steps.
    "minatar": dict(
        total_steps=5_000_000, num_envs=1, memory_size=100_000, replay_period=1,
        learning_starts=5_000, network="minatar_cnn", hidden=(128,), shared_bias=False,
        optimizer="rmsprop", lr=0.00025, loss_reduction="mean", target_update_period=1_000,
        clip_reward=False, eps_end=0.1, eps_decay_steps=100_000, terminal_on_life_loss=False,
        eval_every=10_000, eval_steps=20_000, eval_episodes=20, eval_envs=4, log_every=2_000,
    ),
    # CartPole: RL Baselines3 Zoo's tuned DQN (MLP 256-256, Adam 2.3e-3, batch 64, memory 10^5, 1,000
    # steps before learning, ε 1 → 0.04 over 8,000 steps, one update per 2 steps, target copy
    # every 256 steps), with the updates spread evenly instead of in bursts.
    "classic": dict(
        total_steps=100_000, num_envs=1, memory_size=100_000, replay_period=2,
        learning_starts=1_000, network="mlp", hidden=(256, 256), shared_bias=False,
        optimizer="adam", lr=0.0023, loss_reduction="mean", target_update_period=256,
        clip_reward=False, eps_end=0.04, eps_decay_steps=8_000, terminal_on_life_loss=False,
        eval_every=5_000, eval_steps=5_000, eval_episodes=10, eval_envs=5, log_every=2_000,
    ),
}  # fmt: skip
"""Per-family defaults for every ``None`` field of :class:`DDQNConfig`."""


def resolve(config: DDQNConfig) -> DDQNConfig:
    """``config`` with every ``None`` field set from its environment's preset and arm."""
    preset = PRESETS[env_family(config.env)]
    values = {
        f.name: preset[f.name] for f in fields(config) if getattr(config, f.name) is None and f.name in preset
    }
    alpha, beta0 = PAPER_PRIORITY[config.arm]
    if config.alpha is None:
        values["alpha"] = alpha
    if config.beta0 is None:
        values["beta0"] = beta0
    if config.beta_end is None:
        values["beta_end"] = 0.0 if config.arm == "uniform" else 1.0
    if config.run_name is None:
        values["run_name"] = f"{config.env.replace('/', '_')}/{config.arm}/seed{config.seed}"
    resolved = replace(config, **values)
    assert resolved.memory_size is not None and resolved.total_steps is not None
    assert resolved.learning_starts is not None
    cli.require(
        resolved.memory_size >= resolved.batch_size,
        "memory_size",
        f"be >= batch_size={resolved.batch_size}",
        resolved.memory_size,
    )
    # Fewer steps than learning_starts used to finish "done" after 0 updates, without a word.
    cli.require(
        resolved.total_steps > resolved.learning_starts,
        "total_steps",
        f"be > learning_starts={resolved.learning_starts} (no update would run)",
        resolved.total_steps,
    )
    return resolved


# -- networks ----------------------------------------------------------------------------------------


class SharedBias(nn.Module):
    """Linear output layer whose action values share one bias (tuned Double DQN, van Hasselt et al.)."""

    def __init__(self, in_features: int, num_actions: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, num_actions, bias=False)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.bias


class QNetwork(nn.Module):
    """``Q(s, ·)`` for every action; observations enter as stored (uint8 frames, bool grids, floats).

    * ``nature_cnn``: 4×84×84 frames / 255 → conv 32×8×8 s4 → conv 64×4×4 s2 → conv 64×3×3 s1 →
      512 → actions, ReLU between (Mnih et al. 2015);
    * ``minatar_cnn``: 10×10×C grid → conv 16×3×3 s1 → 128 → actions (Young & Tian 2019);
    * ``mlp``: observation → hidden widths → actions.
    """

    def __init__(self, network: Network, spec: EnvSpec, hidden: tuple[int, ...], shared_bias: bool) -> None:
        super().__init__()
        self.network = network
        if network == "nature_cnn":
            channels = spec.obs_shape[0]
            self.body: nn.Module = nn.Sequential(
                nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
                nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(),
            )  # fmt: skip
            width = 64 * 7 * 7
        elif network == "minatar_cnn":
            height, breadth, channels = spec.obs_shape
            self.body = nn.Sequential(nn.Conv2d(channels, 16, 3, stride=1), nn.ReLU(), nn.Flatten())
            width = 16 * (height - 2) * (breadth - 2)
        elif network == "mlp":
            self.body = nn.Flatten()
            width = int(np.prod(spec.obs_shape))
        else:
            raise ValueError(f"network should be one of nature_cnn, minatar_cnn, mlp, but got {network!r}")
        layers: list[nn.Module] = []
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.head = nn.Sequential(*layers)
        self.out = SharedBias(width, spec.num_actions) if shared_bias else nn.Linear(width, spec.num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.network == "nature_cnn":
            x = obs.float() / 255.0
        elif self.network == "minatar_cnn":
            x = obs.permute(0, 3, 1, 2).float()
        else:
            x = obs.float()
        return self.out(self.head(self.body(x)))  # type: ignore[no-any-return]


class DQNRMSprop(torch.optim.Optimizer):
    """DeepMind's DQN RMSProp (Mnih et al. 2015; the ``NeuralQLearner`` of their release).

    ``g ← ρ g + (1−ρ) ∇``, ``n ← ρ n + (1−ρ) ∇²``, ``θ ← θ − η ∇ / sqrt(n − g² + ε)``: centred,
    with ``ε`` (the "min squared gradient", 0.01) inside the root, unlike ``torch.optim.RMSprop``.
    """

    def __init__(self, params: Any, lr: float, decay: float = 0.95, eps: float = 0.01) -> None:
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
                g, n, rho = state["g"], state["n"], group["decay"]
                g.mul_(rho).add_(p.grad, alpha=1 - rho)
                n.mul_(rho).addcmul_(p.grad, p.grad, value=1 - rho)
                p.addcdiv_(p.grad, (n - g * g + group["eps"]).sqrt_(), value=-group["lr"])


def make_optimizer(config: DDQNConfig, params: Any) -> torch.optim.Optimizer:
    """The optimiser with step size η, or η / 4 for the prioritized arms (Sec. 4)."""
    assert config.lr is not None
    # PER: the prioritized arms step η / 4: they replay high-error transitions more often (Sec. 4).
    lr = config.lr if config.arm == "uniform" else config.lr / config.prioritized_lr_divisor
    if config.optimizer == "dqn_rmsprop":
        return DQNRMSprop(params, lr, config.rmsprop_decay, config.rmsprop_eps)
    if config.optimizer == "rmsprop":
        return torch.optim.RMSprop(
            params, lr=lr, alpha=config.rmsprop_decay, eps=config.rmsprop_eps, centered=True
        )
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(f"optimizer should be dqn_rmsprop, rmsprop or adam, but got {config.optimizer!r}")


# -- the update of Algorithm 1 -----------------------------------------------------------------------


def double_dqn_td_error(
    q: nn.Module,
    q_target: nn.Module,
    obs: torch.Tensor,
    action: torch.Tensor,
    reward: torch.Tensor,
    discount: torch.Tensor,
    next_obs: torch.Tensor,
) -> torch.Tensor:
    """``δ_j = R_j + γ_j Q_target(S_j, argmax_a Q(S_j, a)) − Q(S_{j−1}, A_{j−1})`` (Algorithm 1, line 11).

    ``discount`` is the bootstrap factor the replay returns: ``γ_j`` (γ, or 0 where the episode
    terminated or a life was lost) for one step, ``Π_{k<m} γ_{t+k}`` for an m-step return, whose
    ``reward`` is then ``Σ_{k<m} (Π_{j<k} γ_{t+j}) R_{t+k}``.  The greedy action comes from the
    online network and its value from the target network (Double Q-learning, van Hasselt et al.
    2016); only ``Q(S_{j−1}, A_{j−1})`` carries a gradient.
    """
    q_taken = q(obs).gather(1, action.long().view(-1, 1)).squeeze(1)
    with torch.no_grad():
        greedy = q(next_obs).argmax(dim=1, keepdim=True)
        bootstrap = q_target(next_obs).gather(1, greedy).squeeze(1)
        target = reward + discount * bootstrap
    return target - q_taken


def transition_targets(
    reward: np.ndarray, terminated: np.ndarray, life_lost: np.ndarray, clip_reward: bool, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(R_t, γ_t)`` as stored: the reward clipped to [−1, 1] when asked (Sec. 4), and the per-step
    discount ``γ_t``: 0 where the episode terminated or a life was lost (the bootstrapped return
    ends there), else γ."""
    learn_reward = np.clip(reward, -1.0, 1.0) if clip_reward else np.asarray(reward, dtype=np.float64)
    return learn_reward, np.where(terminated | life_lost, 0.0, gamma)


def weighted_td_loss(
    delta: torch.Tensor, weights: torch.Tensor, clip_td: bool, reduction: str
) -> torch.Tensor:
    """Loss whose gradient is ``−Σ_j w_j clip(δ_j) ∇Q_j`` (Algorithm 1, line 13, with δ clipped, Sec. 4).

    With ``clip_td`` the per-item loss is the Huber loss (quadratic for |δ| ≤ 1, linear beyond),
    whose derivative in ``Q`` is ``−clip(δ, −1, 1)``; without it ``δ²/2``.  ``"mean"`` divides by k.
    """
    magnitude = delta.abs()
    if clip_td:
        per_item = torch.where(magnitude <= 1.0, 0.5 * delta**2, magnitude - 0.5)
    else:
        per_item = 0.5 * delta**2
    total = (weights * per_item).sum()
    return total / delta.shape[0] if reduction == "mean" else total


# -- training ----------------------------------------------------------------------------------------


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


COLUMNS = {
    "metrics": ("step", "train/episode_return", "train/episodes", "train/epsilon", "train/loss",
                "train/td_abs", "per/beta", "per/weight_mean", "per/weight_min", "per/max_priority",
                "perf/steps_per_s", "replay/size", "updates"),
    "eval": ("step", "eval/score", "eval/episodes", "eval/normalized"),
}  # fmt: skip
"""Columns of ``metrics.csv`` (every log_every steps) and ``eval.csv`` (every evaluation)."""


class Logger:
    """CSV rows (``metrics.csv``, ``eval.csv``; columns in ``COLUMNS``) and TensorBoard scalars."""

    def __init__(self, run_dir: Path, tensorboard: bool, resume: bool) -> None:
        self.paths = {name: run_dir / f"{name}.csv" for name in COLUMNS}
        for name, path in self.paths.items():
            if not (resume and path.exists()):
                with path.open("w", newline="") as f:
                    csv.writer(f).writerow(COLUMNS[name])
        self.writer: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError:
                print("tensorboard is not installed: metrics go to the CSV files only", file=sys.stderr)

    def log(self, name: str, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **metrics}
        with self.paths[name].open("a", newline="") as f:
            csv.writer(f).writerow([row.get(c, "") for c in COLUMNS[name]])
        if self.writer is not None:
            for key, value in metrics.items():
                if math.isfinite(value):
                    self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


@dataclass
class RunResult:
    """What one run returns (and ``result.json`` in its directory holds)."""

    config: dict[str, Any]
    eval_steps: list[int]
    """Nominal step of each evaluation (multiples of eval_every; the final one at the stop)."""
    eval_scores: list[float]
    best_score: float
    steps: int
    updates: int
    wall_s: float
    steps_per_s: float
    stopped: str
    """'done', 'time_budget' or 'stop_after'."""
    timing_s: dict[str, float]
    """Seconds spent acting, stepping the environments, in replay.add, replay.sample, the network
    update ('learn') and replay.update_priorities."""
    learning_phase: dict[str, Any] | None = None
    """From the first update on: {"steps", "updates", "timing_s"} (None if learning never started)."""
    normalized_best: float | None = None


def train(config: DDQNConfig) -> RunResult:
    """Train one Double DQN agent with ``config.arm`` replay; evaluate, log and checkpoint."""
    from prisample.replay import PrioritizedReplay

    cfg = resolve(config)
    assert cfg.total_steps is not None and cfg.num_envs is not None and cfg.memory_size is not None
    assert cfg.replay_period is not None and cfg.learning_starts is not None and cfg.lr is not None
    assert cfg.target_update_period is not None and cfg.eps_decay_steps is not None
    assert cfg.eval_every is not None and cfg.eval_steps is not None and cfg.eval_episodes is not None
    assert cfg.eval_envs is not None and cfg.log_every is not None and cfg.network is not None
    assert cfg.hidden is not None and cfg.alpha is not None and cfg.beta0 is not None
    assert cfg.beta_end is not None and cfg.eps_end is not None and cfg.run_name is not None
    started = time.perf_counter()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    run_dir = Path(cfg.log_dir) / cfg.run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(asdict(cfg), indent=1) + "\n")

    env_options: dict[str, Any] = dict(
        backend=cfg.env_backend, noop_max=cfg.noop_max, threads=cfg.env_threads
    )
    env, spec = make_env(cfg.env, cfg.num_envs, **env_options)
    eval_env, _ = make_env(cfg.env, cfg.eval_envs, **env_options)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed input shapes: pick the fastest convolutions once
    q = QNetwork(cfg.network, spec, cfg.hidden, bool(cfg.shared_bias)).to(device)
    q_target = copy.deepcopy(q)
    optimizer = make_optimizer(cfg, q.parameters())
    total_updates = max(1, (cfg.total_steps - cfg.learning_starts) // cfg.replay_period)
    # PER: the memory is a PrioritizedReplay whatever the arm; 'uniform' is α = 0, β = 0.
    replay = PrioritizedReplay(
        cfg.memory_size,
        spec.obs_shape[1:] if spec.frame_stack > 1 else spec.obs_shape,
        frame_stack=spec.frame_stack,
        obs_dtype=spec.obs_dtype,
        num_streams=cfg.num_envs,
        n_step=cfg.n_step,
        alpha=cfg.alpha,
        beta=LinearSchedule(cfg.beta0, cfg.beta_end, total_updates),  # PER: β0 → 1 over training
        eps=cfg.priority_eps,
        backend=cfg.arm,
        seed=cfg.seed,
    )
    rng = np.random.default_rng([cfg.seed, 1])
    eval_rng = np.random.default_rng([cfg.seed, 2])
    scores = load_atari_scores().get(atari_rom(cfg.env)) if env_family(cfg.env) == "atari" else None

    s: dict[str, Any] = dict(
        step=0, updates=0, due=0, next_target=cfg.target_update_period, next_eval=cfg.eval_every,
        next_log=cfg.log_every, next_checkpoint=cfg.checkpoint_every, eval_steps=[], eval_scores=[],
        best_score=-math.inf, episode_returns=[], timing={"add": 0.0, "sample": 0.0, "update_priorities": 0.0,
        "learn": 0.0, "act": 0.0, "env": 0.0}, window={},
    )  # fmt: skip
    checkpoint_path = run_dir / "checkpoint.pt"
    obs = None
    if cfg.resume and checkpoint_path.exists():
        ck = torch.load(checkpoint_path, map_location=device, weights_only=False)
        q.load_state_dict(ck["q"])
        q_target.load_state_dict(ck["q_target"])
        optimizer.load_state_dict(ck["optimizer"])
        s = ck["loop"]
        if "memory" in ck["replay"]:
            replay.load_state_dict(ck["replay"])
        else:  # memory not saved: refill it (learning_starts steps) and go on with β where it was
            s["refill_until"] = s["step"] + cfg.learning_starts
            beta_now = LinearSchedule(cfg.beta0, cfg.beta_end, total_updates)(s["updates"])
            replay.sampler.beta = LinearSchedule(beta_now, cfg.beta_end, max(1, total_updates - s["updates"]))
        rng.bit_generator.state = ck["rng"]
        eval_rng.bit_generator.state = ck["eval_rng"]
        torch.set_rng_state(ck["torch_rng"])
        if ck.get("env") is not None:  # gymnasium environments pickle; ALE's vector env does not
            env.close()
            env, obs, prev_done, life = pickle.loads(ck["env"])
    if obs is None:
        obs, info = seed_envs(env, cfg.seed + 1000 * s["step"])
        prev_done = np.zeros(cfg.num_envs, dtype=bool)
        life = lives(info, cfg.num_envs)
    logger = Logger(run_dir, cfg.tensorboard, resume=cfg.resume)
    returns = np.zeros(cfg.num_envs) if "running" not in s else np.asarray(s["running"])
    timing: dict[str, float] = s["timing"]
    window: dict[str, list[float]] = s["window"]

    def epsilon(step: int) -> float:
        if step < cfg.learning_starts:
            return cfg.eps_start
        fraction = min((step - cfg.learning_starts) / cfg.eps_decay_steps, 1.0)
        return cfg.eps_start + fraction * (cfg.eps_end - cfg.eps_start)  # type: ignore[operator]

    def learn() -> None:
        """One minibatch update (Algorithm 1, lines 9-15)."""
        t0 = time.perf_counter()
        batch, draw = replay.sample(cfg.batch_size)  # PER: j ~ P(j) = p_j^α / Σ_i p_i^α, stratified
        t1 = time.perf_counter()
        obs_b, next_b = (torch.as_tensor(batch[key], device=device) for key in ("obs", "next_obs"))
        action = torch.as_tensor(batch["action"], device=device)
        reward = torch.as_tensor(batch["reward"], device=device, dtype=torch.float32)
        discount = torch.as_tensor(batch["discount"], device=device, dtype=torch.float32)
        weights = torch.as_tensor(draw.weights, device=device)  # PER: w_j = (N·P(j))^-β / max_i w_i
        delta = double_dqn_td_error(q, q_target, obs_b, action, reward, discount, next_b)
        loss = weighted_td_loss(delta, weights, cfg.clip_td, str(cfg.loss_reduction))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        td = (delta.detach().clamp(-1.0, 1.0) if cfg.clip_td else delta.detach()).abs().cpu().numpy()
        t2 = time.perf_counter()
        replay.update_priorities(draw.indices, td)  # PER: p_j ← |δ_j|
        t3 = time.perf_counter()
        timing["sample"] += t1 - t0
        timing["learn"] += t2 - t1
        timing["update_priorities"] += t3 - t2
        for key, value in (("loss", float(loss.detach())), ("td_abs", float(td.mean())),
                           ("weight_mean", float(draw.weights.mean())),
                           ("weight_min", float(draw.weights.min()))):  # fmt: skip
            window.setdefault(key, []).append(value)
        s["updates"] += 1

    def run_evaluation(at: int) -> Evaluation:
        result = evaluate(
            q, eval_env, epsilon=cfg.eval_epsilon, max_steps=cfg.eval_steps, max_episodes=cfg.eval_episodes,
            rng=eval_rng, device=device, seed=cfg.seed + 10_000 + len(s["eval_steps"]),
        )  # fmt: skip
        s["eval_steps"].append(at)
        s["eval_scores"].append(result.score)
        metrics = {"eval/score": result.score, "eval/episodes": float(result.episodes)}
        if scores is not None:
            random, human = float(scores["random"]), float(scores["human"])
            metrics["eval/normalized"] = float(normalized_score(result.score, random, human))
        if result.score > s["best_score"]:  # the best policy is kept (App. B.2.3)
            s["best_score"] = result.score
            torch.save(q.state_dict(), run_dir / "best_q.pt")
        logger.log("eval", at, metrics)
        return result

    def save_checkpoint() -> None:
        s["running"] = returns.tolist()
        try:
            env_blob: bytes | None = cloudpickle.dumps((env, obs, prev_done, life))
        except Exception:  # ALE's vector env holds C++ state: episodes in flight restart on resume
            env_blob = None
        torch.save(
            {
                "config": asdict(cfg), "q": q.state_dict(), "q_target": q_target.state_dict(),
                "optimizer": optimizer.state_dict(),
                "replay": replay.state_dict(include_memory=cfg.checkpoint_memory),
                "rng": rng.bit_generator.state, "eval_rng": eval_rng.bit_generator.state,
                "torch_rng": torch.get_rng_state(), "loop": s, "env": env_blob,
            },
            run_dir / "checkpoint.tmp",
        )  # fmt: skip
        os.replace(run_dir / "checkpoint.tmp", checkpoint_path)

    bar = tqdm(total=cfg.total_steps, initial=s["step"], desc=f"{cfg.env} {cfg.arm}", unit="step",
               disable=not cfg.progress, dynamic_ncols=True, smoothing=0.05)  # fmt: skip
    stopped = "done"
    clock = time.perf_counter()
    steps_at_clock = s["step"]
    while s["step"] < cfg.total_steps:
        if cfg.stop_after is not None and s["step"] >= cfg.stop_after:
            stopped = "stop_after"
            break
        if cfg.time_budget_s is not None and time.perf_counter() - started > cfg.time_budget_s:
            stopped = "time_budget"
            break
        # Act ε-greedily in every environment (Algorithm 1, line 4).
        t0 = time.perf_counter()
        eps = epsilon(s["step"])
        if eps >= 1.0:
            actions = rng.integers(0, spec.num_actions, cfg.num_envs)
        else:
            with torch.no_grad():
                greedy = q(torch.as_tensor(obs, device=device)).argmax(dim=1).cpu().numpy()
            explore = rng.random(cfg.num_envs) < eps
            actions = np.where(explore, rng.integers(0, spec.num_actions, cfg.num_envs), greedy)
        t1 = time.perf_counter()
        next_obs, reward, terminated, truncated, info = env.step(actions.astype(np.int64))
        t2 = time.perf_counter()
        reward = np.asarray(reward, dtype=np.float64)
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        next_life = lives(info, cfg.num_envs)
        life_lost = (next_life < life) if cfg.terminal_on_life_loss else np.zeros(cfg.num_envs, dtype=bool)
        learn_reward, discount = transition_targets(
            reward, terminated, life_lost, bool(cfg.clip_reward), cfg.gamma
        )
        # Store (S_{t-1}, A_{t-1}, R_t, γ_t, S_t) (line 6); a step that only resets an environment
        # (next-step autoreset) is not a transition.
        live = np.flatnonzero(~prev_done)
        t3 = time.perf_counter()
        if live.size:
            # PER: a new transition enters at the maximal priority, p_t = max_{i<t} p_i
            replay.add_many(obs[live], actions[live], learn_reward[live], discount[live], next_obs[live],
                            episode_end=(terminated | truncated)[live], streams=live)  # fmt: skip
        t4 = time.perf_counter()
        timing["act"] += t1 - t0
        timing["env"] += (t2 - t1) + (t3 - t2)  # the step and its bookkeeping
        timing["add"] += t4 - t3
        returns += np.where(prev_done, 0.0, reward)
        done = (terminated | truncated) & ~prev_done
        for i in np.flatnonzero(done):
            s["episode_returns"].append(float(returns[i]))
            returns[i] = 0.0
        prev_done, obs, life = done, next_obs, next_life
        s["step"] += cfg.num_envs
        bar.update(cfg.num_envs)

        if s["step"] >= max(cfg.learning_starts, s.get("refill_until", 0)):
            if "learning_from" not in s:  # splits the loop's timings into acting and learning phases
                s["learning_from"] = {"step": s["step"], "timing": dict(timing)}
            s["due"] += cfg.num_envs
            while s["due"] >= cfg.replay_period:  # one update per K agent steps (line 8)
                learn()
                s["due"] -= cfg.replay_period
        if s["step"] >= s["next_target"]:  # from time to time θ_target ← θ (line 17)
            q_target.load_state_dict(q.state_dict())
            s["next_target"] += cfg.target_update_period
        if s["step"] >= s["next_eval"]:
            result = run_evaluation(s["next_eval"])
            s["next_eval"] += cfg.eval_every
            bar.set_postfix_str(f"eval {result.score:.1f}", refresh=False)
        if s["step"] >= s["next_log"]:
            now = time.perf_counter()
            recent = s["episode_returns"][-20:]
            metrics = {
                "train/episode_return": float(np.mean(recent)) if recent else math.nan,
                "train/episodes": float(len(s["episode_returns"])),
                "train/epsilon": eps,
                "per/beta": replay.sampler.beta,  # PER: logged β, weights and max priority
                "per/max_priority": replay.sampler.max_priority,
                "perf/steps_per_s": (s["step"] - steps_at_clock) / max(now - clock, 1e-9),
                "replay/size": float(len(replay)),
                "updates": float(s["updates"]),
            }
            for key, values in window.items():
                metrics[("per/" if key.startswith("weight") else "train/") + key] = float(np.mean(values))
            window.clear()
            logger.log("metrics", s["step"], metrics)
            clock, steps_at_clock = now, s["step"]
            s["next_log"] += cfg.log_every
        if s["next_checkpoint"] is not None and s["step"] >= s["next_checkpoint"]:
            save_checkpoint()
            s["next_checkpoint"] += cfg.checkpoint_every
    bar.close()
    if stopped == "done" and (not s["eval_steps"] or s["eval_steps"][-1] < s["step"]):
        run_evaluation(s["step"])
    save_checkpoint()
    logger.close()
    env.close()
    eval_env.close()
    wall = time.perf_counter() - started
    result = RunResult(
        config=asdict(cfg),
        eval_steps=list(s["eval_steps"]),
        eval_scores=list(s["eval_scores"]),
        best_score=float(s["best_score"]),
        steps=int(s["step"]),
        updates=int(s["updates"]),
        wall_s=wall,
        steps_per_s=s["step"] / wall,
        stopped=stopped,
        timing_s=dict(timing),
        learning_phase=(
            {
                "steps": s["step"] - s["learning_from"]["step"],
                "updates": s["updates"],
                "timing_s": {k: timing[k] - s["learning_from"]["timing"][k] for k in timing},
            }
            if "learning_from" in s
            else None
        ),
        normalized_best=(
            float(normalized_score(s["best_score"], scores["random"], scores["human"]))  # type: ignore[arg-type]
            if scores is not None and math.isfinite(s["best_score"])
            else None
        ),
    )
    (run_dir / "result.json").write_text(json.dumps(asdict(result), indent=1) + "\n")
    return result


COMMANDS = ("train", "sweep", "plot")
EPILOG = (
    "Commands: train (the default: one run, these options), sweep (every arm x seed of one environment; "
    "python -m recipes.atari_ddqn sweep --help), plot (re-draw a sweep's PNG from its JSON)."
)


def main(argv: list[str] | None = None) -> Any:
    """``python -m recipes.atari_ddqn [train|sweep|plot] [options]``; ``--help`` lists the options."""
    from recipes import dqn_sweep

    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv and argv[0] in COMMANDS else "train"
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        print(
            f"error: the command should be one of {', '.join(COMMANDS)}, but got {argv[0]}", file=sys.stderr
        )
        raise SystemExit(2)
    args = argv[1:] if argv and argv[0] in COMMANDS else argv
    classes: dict[str, Any] = {
        "train": DDQNConfig,
        "sweep": dqn_sweep.SweepConfig,
        "plot": dqn_sweep.PlotConfig,
    }
    config = cli.parse(classes[command], args, prog=f"python -m recipes.atari_ddqn {command}", epilog=EPILOG)
    if command == "train":
        with cli.reporting():
            resolve(config)
        result = train(config)
        print(json.dumps({k: v for k, v in asdict(result).items() if k != "config"}, indent=1))
        return result
    if command == "sweep":
        with cli.reporting():
            resolve(dqn_sweep.run_config(config, config.arms[0], config.seed))
        return dqn_sweep.sweep(config)
    return dqn_sweep.replot(config)


if __name__ == "__main__":
    main()
