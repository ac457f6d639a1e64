"""Double DQN with uniform, proportional and rank-based prioritized replay (Schaul et al. 2016, Algorithm 1).

The agent is the tuned Double DQN of van Hasselt, Guez & Silver (2016) with its replay memory
replaced by :class:`prisample.replay.PrioritizedReplay`.  Every ``K`` agent steps it draws a
minibatch of ``k`` transitions ``j`` with probability ``P(j) = p_j^α / Σ_i p_i^α`` and updates

    w_j = (N · P(j))^-β / max_i w_i
    δ_j = R_j + γ_j Q_target(S_j, argmax_a Q(S_j, a)) − Q(S_{j−1}, A_{j−1})      (clipped to [−1, 1])
    p_j ← |δ_j|
    θ ← θ + η Σ_j w_j δ_j ∇_θ Q(S_{j−1}, A_{j−1})

(Algorithm 1, Sec. 3.3-4, App. B.2).  An *arm* is a config file under
``recipes/configs/atari_ddqn/arms/`` (Table 3): ``uniform`` (α = 0, β = 0: the Double DQN
baseline), ``proportional`` (``p = |δ| + ε``, α = 0.6, β 0.4 → 1), ``rank`` (``p = 1/rank``,
α = 0.7, β 0.5 → 1), and the paper's first experiment, plain DQN (``max_a Q_target``) with
``dqn_uniform`` or ``dqn_rank`` (α annealed 0.5 → 0, β = 0); the prioritized arms step η/4.
Two later schemes are arms for the replay ablation (``recipes/replay_ablation.py``): ``lap``
(Fujimoto et al. 2020: ``p = max(|δ|, κ)``, α = 0.4, no importance weights, Huber loss at κ = 1)
and ``laber`` (Lahire et al. 2022, LaBER-mean: no stored priorities; each update scores ``m·B``
uniformly drawn transitions by ``|δ|`` and keeps ``B`` of them ``∝ |δ|``, weighted
``mean_k |δ_k| / |δ_i|``).
The environment's family picks the other values (``recipes/configs/atari_ddqn/<family>.yaml``).
Lines marked ``# PER:`` are where prioritization touches the loop; all of them are in ``train``
and ``make_optimizer``.

Commands (``PYTHONPATH=.`` is enough, nothing needs installing)::

    python -m recipes.atari_ddqn train --env ALE/Pong-v5 --arm proportional --device cuda
    python -m recipes.atari_ddqn train --env CartPole-v1 --arm rank
    python -m recipes.atari_ddqn train --env ALE/Pong-v5 --arm dqn_rank
    python -m recipes.dqn_sweep sweep --env CartPole-v1 --seeds 5 --jobs 14 --out docs/results/cartpole

Options given on the command line win over the arm's file, which wins over the family's; each
value and its source is listed in ``docs/recipes/atari_ddqn.md``.  Sweeps, plots and the weight
ablation live in ``recipes/dqn_sweep.py``; timers, logging, evaluation bookkeeping and checkpoint
files in ``recipes/dqn_parts.py``; environments in ``recipes/dqn_envs.py``.
"""

from __future__ import annotations

import copy
import json
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import cloudpickle  # type: ignore[import-untyped]
import numpy as np
import torch
import yaml
from torch import nn
from tqdm import tqdm  # type: ignore[import-untyped]

from prisample import LinearSchedule
from prisample.diagnostics import Diagnostics
from prisample.laber import LaBER
from prisample.losses import lap_priorities
from recipes import cli
from recipes.dqn_envs import (
    EnvBackend,
    EnvSpec,
    SendRecv,
    atari_rom,
    check_env,
    env_family,
    lives,
    load_atari_scores,
    make_env,
    seed_envs,
)
from recipes.dqn_parts import (
    Evaluator,
    Logger,
    MetricWindow,
    RunResult,
    StepRate,
    Timer,
    finite_or_none,
    load_checkpoint,
    normalized_or_nan,
    save_checkpoint,
)
from recipes.dqn_update import GraphedForward, HostCopy, LossFn, OptimizerStep, Pending

CONFIG_DIR = Path(__file__).parent / "configs" / "atari_ddqn"
ARMS: tuple[str, ...] = ("uniform", "proportional", "rank", "dqn_uniform", "dqn_rank", "lap", "laber")
"""Arm config files (``CONFIG_DIR/arms/<arm>.yaml``): Table 3 of the paper, then LAP and LaBER."""
ABLATION_ARMS: tuple[str, ...] = ("uniform", "proportional", "rank", "lap", "laber")
"""The Double DQN arms of the replay ablation (``recipes/replay_ablation.py``)."""
PAPER_ARMS: tuple[str, ...] = ("uniform", "proportional", "rank")
"""The Double DQN arms of the paper's headline (Figs. 9-10): a sweep's default."""
Replay = Literal["uniform", "proportional", "rank"]
Algorithm = Literal["double_dqn", "dqn"]
PriorityRule = Literal["abs_td", "lap"]
Sampling = Literal["replay", "laber"]
Network = Literal["nature_cnn", "minatar_cnn", "mlp"]
Optimizer = Literal["dqn_rmsprop", "rmsprop", "adam"]


@dataclass(frozen=True)
class DDQNConfig:
    """One run.  The defaults are the paper's Atari agent with proportional replay; build the
    config of another environment or arm with :func:`load_config` (the command line does)."""

    env: str = "ALE/Pong-v5"
    """Gymnasium id: ``ALE/<Game>-v5`` (Atari), ``MinAtar/<Game>-v1`` or e.g. ``CartPole-v1``."""
    protocol: str | None = None
    """A protocol file (recipes/configs/atari_ddqn/protocols/<protocol>.yaml) loaded between the
    family's preset and the arm's file, e.g. 'atari100k'; None: the family's preset alone."""
    arm: str = "proportional"
    """The arm's name: on the command line it loads recipes/configs/atari_ddqn/arms/<arm>.yaml
    (uniform, proportional, rank, dqn_uniform, dqn_rank, lap, laber); names run directories and
    sweep curves."""
    algorithm: Algorithm = "double_dqn"
    """'double_dqn': bootstrap Q_target(S, argmax_a Q(S, a)); 'dqn': max_a Q_target(S, a)."""
    replay: Replay = "proportional"
    """Replay distribution: 'uniform', 'proportional' (p = |δ| + ε) or 'rank' (p = 1/rank)."""
    total_steps: int = 50_000_000
    """Agent steps of training T; α and β reach their end values here (Atari: 50M = 200M frames)."""
    seed: int = 0
    """Seeds the network, the environments, exploration and the sampler."""
    device: str = "cpu"
    """Torch device of the networks: 'cpu', 'cuda', 'cuda:1', or 'auto' (cuda when available)."""
    num_envs: int = 4
    """Environments stepped together; each step of all of them counts num_envs agent steps."""
    env_backend: EnvBackend = "auto"
    """Atari only: 'vector' (ale-py AtariVectorEnv, the default) or 'gymnasium' (wrapper stack)."""
    env_threads: int = 1
    """Atari 'vector' backend: emulator threads per vector environment."""
    memory_size: int = 1_000_000
    """Replay capacity N in transitions, a sliding window (Atari: 10^6, Sec. 4)."""
    batch_size: int = 32
    """Minibatch k (Sec. 4: 32)."""
    replay_period: int = 4
    """K: one minibatch update per K agent steps (Atari: 4, Sec. 4)."""
    learning_starts: int = 50_000
    """Agent steps of ε = 1 play before the first update (DQN release: 50,000)."""
    alpha: float = 0.6
    """Priority exponent α (at the first update when annealed)."""
    alpha_end: float | None = None
    """α at the end of training, annealed linearly from ``alpha`` (dqn_rank: 0.5 → 0); None: constant."""
    beta0: float = 0.4
    """IS exponent β at the first update, annealed linearly to beta_end."""
    beta_end: float = 1.0
    """β at the end of training (prioritized Double DQN arms 1, Table 3)."""
    priority_rule: PriorityRule = "abs_td"
    """The priority written for a replayed transition: 'abs_td' ``p = |δ|`` (clipped with clip_td;
    the sampler adds ε), or 'lap' ``p = max(|δ|, κ)`` with the unclipped δ, no ε, and the loss a
    Huber loss at κ (Fujimoto, Meger & Precup 2020, LAP; needs replay 'proportional')."""
    lap_kappa: float = 1.0
    """κ of LAP: the priority floor and the Huber threshold (their paper and non-Atari code: 1)."""
    sampling: Sampling = "replay"
    """'replay': draw the minibatch from the sampler (Algorithm 1); 'laber': LaBER-mean (Lahire,
    Geist & Rachelson 2022): draw laber_m·k transitions uniformly (needs replay 'uniform'), score
    them with |δ| and keep k ∝ |δ|, weighted mean|δ| / |δ_i|; nothing is written back."""
    laber_m: int = 4
    """LaBER's large-batch factor m: laber_m·batch_size transitions scored per update (paper: 4)."""
    priority_eps: float = 0.01
    """ε of p = |δ| + ε (proportional; "a small positive constant", Sec. 3.3).  0.01, not 1e-6: with
    the memory's max weight (App. B.2.1) a slot with |δ| ≈ 0 and ε = 1e-6 shrinks every other
    weight towards 0 (the weight ablation in docs/recipes/atari_ddqn.md)."""
    weight_norm: Literal["memory", "batch"] = "memory"
    """Importance weights divided by their maximum over the memory (the paper, App. B.2.1) or
    over the minibatch."""
    network: Network = "nature_cnn"
    """'nature_cnn' (Mnih et al. 2015), 'minatar_cnn' (Young & Tian 2019) or 'mlp'."""
    hidden: tuple[int, ...] = (512,)
    """Hidden widths after the convolutions ('mlp': of the whole network)."""
    shared_bias: bool = True
    """One bias shared by all action values in the output layer (tuned Double DQN, van Hasselt et al.)."""
    optimizer: Optimizer = "dqn_rmsprop"
    """'dqn_rmsprop' (DeepMind's centred RMSProp, ε inside the root), 'rmsprop' (torch centred) or 'adam'."""
    lr: float = 0.00025
    """η of the baseline (Atari: 0.00025, Table 3)."""
    lr_divisor: float = 4.0
    """The optimiser steps η / lr_divisor (Table 3: 4 for the prioritized arms, 1 for the baselines)."""
    rmsprop_decay: float = 0.95
    """RMSProp gradient and squared-gradient momentum (Mnih et al. 2015: 0.95)."""
    rmsprop_eps: float = 0.01
    """RMSProp min squared gradient (Mnih et al. 2015: 0.01)."""
    loss_reduction: Literal["sum", "mean"] = "sum"
    """'sum': Δ = Σ_j w_j δ_j ∇Q as in Algorithm 1; 'mean': divided by k."""
    gamma: float = 0.99
    """Discount γ (Mnih et al. 2015)."""
    n_step: int = 1
    """Steps per return (the paper: 1).  n > 1 learns from ``Σ_{k<m} γ^k R_{t+k} + γ^m Q(S_{t+m})``,
    ``m = n`` unless the episode ends first (multi-step returns with PER: Hessel et al. 2018)."""
    target_update_period: int = 30_000
    """Agent steps between copies θ_target ← θ (tuned Double DQN: 30,000)."""
    clip_reward: bool = True
    """Clip rewards to [−1, 1] for learning (Atari, Sec. 4); scores stay unclipped."""
    clip_td: bool = True
    """Clip δ to [−1, 1] (Sec. 4): Huber loss, and priorities |clip(δ)|."""
    eps_start: float = 1.0
    """Initial exploration ε."""
    eps_end: float = 0.01
    """Final exploration ε (tuned Double DQN: 0.01)."""
    eps_decay_steps: int = 1_000_000
    """Agent steps of the linear ε decay after learning_starts (DQN release: 10^6)."""
    terminal_on_life_loss: bool = True
    """Atari: a lost life ends the bootstrapped return (γ_t = 0) though the game goes on (DQN)."""
    eval_every: int = 250_000
    """Agent steps between evaluations (DQN release: 250,000)."""
    eval_steps: int = 125_000
    """Agent-step budget of one evaluation (the paper's test protocol: 125,000 = 500k frames)."""
    eval_episodes: int = 1_000
    """Stop an evaluation after this many completed episodes."""
    eval_epsilon: float = 0.01
    """ε of the evaluation policy (App. B.2.3: 0.01 for Double DQN, 0.05 for DQN)."""
    eval_envs: int = 4
    """Environments played in parallel during evaluation."""
    noop_max: int = 30
    """Atari: up to this many no-op actions start each episode (train and test, Mnih et al. 2015)."""
    log_dir: str = "runs/atari_ddqn"
    """Root of run directories (metrics.csv, TensorBoard events, checkpoints)."""
    run_name: str | None = None
    """Run directory under log_dir; None: '<env>/<arm>/seed<seed>'."""
    log_every: int = 10_000
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
    cuda_graph: bool = True
    """On a CUDA device, capture the update as a CUDA graph and replay it (the same arithmetic as
    the eager update, without launching its kernels one by one from Python)."""
    defer_priorities: bool = False
    """Write an update's new priorities after the next update's minibatch is drawn, so that the CPU
    draws while the GPU computes (priorities arrive one update late); False: Algorithm 1's order."""
    overlap_env: bool = False
    """Run the updates due at agent step t while the emulators compute step t (ALE's vector env
    steps on its own threads between ``send`` and ``recv``): faster on a GPU, and a minibatch then
    cannot hold the transitions of that step.  False: Algorithm 1's order (store, then learn)."""
    replay_on_device: bool = True
    """On a CUDA device, keep the replay memory's frames and columns there, so that a minibatch is
    gathered on the GPU (prisample's ``device=`` path) instead of copied from the host."""
    diagnostics: bool = False
    """Record the paper's replay diagnostics (prisample.diagnostics): replay counts M_i, the sorted
    |δ| of the memory at each metrics row (Fig. 10), P(i) against |δ| (Fig. 11) and the weights;
    the run directory gets diagnostics.json and diagnostics_*.png at the end (not checkpointed)."""

    def __post_init__(self) -> None:
        cli.one_of(self, "arm", ARMS)
        cli.one_of(self, "algorithm", ("double_dqn", "dqn"))
        cli.one_of(self, "replay", ("uniform", "proportional", "rank"))
        cli.one_of(self, "weight_norm", ("memory", "batch"))
        cli.one_of(self, "priority_rule", ("abs_td", "lap"))
        cli.one_of(self, "sampling", ("replay", "laber"))
        if self.priority_rule == "lap":  # p = max(|δ|, κ) only means LAP under P(i) ∝ p_i^α
            cli.require(self.replay == "proportional", "replay", "be proportional with priority_rule=lap",
                        self.replay)  # fmt: skip
        if self.sampling == "laber":  # LaBER's large batch is uniform; it stores no priorities
            cli.require(self.replay == "uniform", "replay", "be uniform with sampling=laber", self.replay)
            cli.require(not self.diagnostics, "diagnostics", "be false with sampling=laber (no priorities)",
                        self.diagnostics)  # fmt: skip
        check_env(self.env)  # Pendulum-v1 used to get as far as an AttributeError on its action space
        cli.at_least(
            self, 1, "batch_size", "threads", "env_threads", "total_steps", "num_envs", "memory_size",
            "n_step", "replay_period", "target_update_period", "eval_every", "eval_steps",
            "eval_episodes", "eval_envs", "log_every", "checkpoint_every", "eps_decay_steps", "laber_m",
        )  # fmt: skip
        cli.at_least(self, 0, "learning_starts", "noop_max", "alpha", "alpha_end", "seed")
        cli.positive(self, "lr", "lr_divisor", "priority_eps", "rmsprop_eps", "lap_kappa")
        for name in ("gamma", "beta0", "beta_end", "eps_start", "eps_end", "eval_epsilon", "rmsprop_decay"):
            cli.in_range(self, name, 0.0, 1.0)
        if self.time_budget_s is not None:
            cli.at_least(self, 0.0, "time_budget_s")
        cli.require(bool(self.hidden) and min(self.hidden) >= 1, "hidden", "be a comma list of widths >= 1",
                    self.hidden)  # fmt: skip
        cli.require(self.memory_size >= self.batch_size, "memory_size", f"be >= batch_size={self.batch_size}",
                    self.memory_size)  # fmt: skip
        # Fewer steps than learning_starts used to finish "done" after 0 updates, without a word.
        cli.require(
            self.total_steps > self.learning_starts,
            "total_steps",
            f"be > learning_starts={self.learning_starts} (no update would run)",
            self.total_steps,
        )


def run_dir(cfg: DDQNConfig) -> Path:
    """``log_dir/run_name``, by default ``log_dir/<env>/<arm>/seed<seed>``."""
    return Path(cfg.log_dir) / (cfg.run_name or f"{cfg.env.replace('/', '_')}/{cfg.arm}/seed{cfg.seed}")


def protocols() -> list[str]:
    """The protocol files under ``CONFIG_DIR/protocols`` (e.g. ``atari100k``)."""
    return sorted(p.stem for p in (CONFIG_DIR / "protocols").glob("*.yaml"))


def config_files(env: str, arm: str, protocol: str | None = None) -> list[Path]:
    """The family's preset, the protocol's file if any, then the arm's file: the config files
    behind ``--env env [--protocol protocol] --arm arm``."""
    if arm not in ARMS:
        raise cli.ConfigError("arm", f"be one of {', '.join(ARMS)}", arm)
    if protocol is not None and protocol not in protocols():
        raise cli.ConfigError("protocol", f"be one of {', '.join(protocols())}", protocol)
    files = [CONFIG_DIR / f"{env_family(env)}.yaml"]
    if protocol is not None:
        files.append(CONFIG_DIR / "protocols" / f"{protocol}.yaml")
    return [*files, CONFIG_DIR / "arms" / f"{arm}.yaml"]


def load_config(
    env: str = "ALE/Pong-v5", arm: str = "proportional", protocol: str | None = None, **overrides: Any
) -> DDQNConfig:
    """The config of ``env``, ``protocol`` and ``arm`` from their files (:func:`config_files`),
    then ``overrides``."""
    values: dict[str, Any] = {}
    for path in config_files(env, arm, protocol):
        values.update(yaml.safe_load(path.read_text()))
    values.update(env=env, protocol=protocol, **overrides)
    values["hidden"] = tuple(values["hidden"])
    return DDQNConfig(**values)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


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
    A step is a fixed sequence of tensor operations, so it can be captured in a CUDA graph.
    ``lr`` may be a tensor of one step size per agent for parameters stacked along their first
    dimension (:class:`recipes.dqn_stacked.StackedQNetwork`).
    """

    def __init__(self, params: Any, lr: float | torch.Tensor, decay: float = 0.95, eps: float = 0.01) -> None:
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
                denominator = (n - g * g + group["eps"]).sqrt_()
                if isinstance(lr, torch.Tensor):  # one η per agent along the first dimension
                    p.sub_(lr.view(-1, *[1] * (p.dim() - 1)) * p.grad / denominator)
                else:
                    p.addcdiv_(p.grad, denominator, value=-lr)


def make_optimizer(config: DDQNConfig, params: Any, capturable: bool = False) -> torch.optim.Optimizer:
    """The optimiser with step size η / lr_divisor (``capturable``: one a CUDA graph can replay)."""
    # PER: the prioritized arms step η / 4: they replay high-error transitions more often (Sec. 4).
    lr = config.lr / config.lr_divisor
    if config.optimizer == "dqn_rmsprop":
        return DQNRMSprop(params, lr, config.rmsprop_decay, config.rmsprop_eps)
    if config.optimizer == "rmsprop":
        return torch.optim.RMSprop(
            params,
            lr=lr,
            alpha=config.rmsprop_decay,
            eps=config.rmsprop_eps,
            centered=True,
            capturable=capturable,
        )
    return torch.optim.Adam(params, lr=lr, capturable=capturable)


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
    q_taken = q(obs).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        greedy = q(next_obs).argmax(dim=-1, keepdim=True)
        bootstrap = q_target(next_obs).gather(-1, greedy).squeeze(-1)
        target = reward + discount * bootstrap
    return target - q_taken


def dqn_td_error(
    q: nn.Module,
    q_target: nn.Module,
    obs: torch.Tensor,
    action: torch.Tensor,
    reward: torch.Tensor,
    discount: torch.Tensor,
    next_obs: torch.Tensor,
) -> torch.Tensor:
    """``δ_j = R_j + γ_j max_a Q_target(S_j, a) − Q(S_{j−1}, A_{j−1})`` (DQN, Mnih et al. 2015):
    the target network both picks and values the action (the paper's DQN arms, Table 3)."""
    q_taken = q(obs).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        target = reward + discount * q_target(next_obs).max(dim=-1).values
    return target - q_taken


TD_ERRORS = {"double_dqn": double_dqn_td_error, "dqn": dqn_td_error}
LABER_EPS = 1e-6
"""Added to LaBER's scores |δ| so that a large batch of zero errors still keeps k (then uniformly)."""


class Batch(NamedTuple):
    """One minibatch as tensors on the networks' device (``draw.weights`` as ``weights``)."""

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    discount: torch.Tensor
    next_obs: torch.Tensor
    weights: torch.Tensor


def as_batch(sample: Any, weights: Any, device: torch.device) -> Batch:
    """The replay's sample as a :class:`Batch` on ``device``: a copy from host arrays, nothing for
    tensors already there (a replay that samples on the device)."""

    def put(value: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.as_tensor(value, device=device, dtype=dtype)

    return Batch(put(sample["obs"]), put(sample["action"]), put(sample["reward"], torch.float32),
                 put(sample["discount"], torch.float32), put(sample["next_obs"]),
                 put(weights))  # fmt: skip


def td_loss(q: nn.Module, q_target: nn.Module, cfg: DDQNConfig) -> LossFn:
    """``batch -> (loss, |δ|)`` for :class:`~recipes.dqn_update.OptimizerStep`: the loss whose
    gradient step is ``θ ← θ + η Σ_j w_j δ_j ∇θ Q(S_{j−1}, A_{j−1})`` (Algorithm 1, lines 11-15),
    and the new priorities: ``|δ_j|`` (clipped as the update clips them), or LAP's
    ``max(|δ_j|, κ)`` of the unclipped δ with the Huber loss at κ (``priority_rule='lap'``)."""
    td_error = TD_ERRORS[cfg.algorithm]
    lap = cfg.priority_rule == "lap"
    kappa = cfg.lap_kappa if lap else 1.0  # LAP: Huber at κ; κ = 1 is clip_td's Huber, the same loss

    def loss_and_priorities(batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        obs, action, reward, discount, next_obs, weights = batch
        delta = td_error(q, q_target, obs, action, reward, discount, next_obs)
        loss = weighted_td_loss(delta, weights, cfg.clip_td or lap, cfg.loss_reduction, kappa=kappa)
        if lap:  # PER: LAP's p = max(|δ|, κ) of the unclipped δ (clipped, every |δ| >= 1 would tie at κ)
            return loss, lap_priorities(delta, kappa)
        delta = delta.detach()
        return loss, (delta.clamp(-1.0, 1.0) if cfg.clip_td else delta).abs()

    return loss_and_priorities


def laber_batch(
    sample: Any, candidates: np.ndarray, laber: LaBER, q: nn.Module, q_target: nn.Module, cfg: DDQNConfig,
    device: torch.device,
) -> tuple[Batch, np.ndarray]:  # fmt: skip
    """LaBER-mean (Lahire, Geist & Rachelson 2022, Alg. 1): the kept minibatch and its slots.

    ``sample`` holds the ``m·B`` transitions drawn uniformly (slots ``candidates``).  One forward
    without gradient scores each by ``s_i = |δ_i|`` (clipped as the update clips it: the norm of
    the loss's gradient in ``Q``), then ``B`` are kept with ``q_i = s_i / Σ_k s_k`` and weighted
    ``w_i = mean_k s_k / s_i`` (:meth:`prisample.LaBER.select`), so that the kept batch's weighted
    gradient is an unbiased estimate of the large batch's mean gradient.
    """
    large = as_batch(sample, np.ones(len(candidates), dtype=np.float32), device)
    with torch.no_grad():
        delta = TD_ERRORS[cfg.algorithm](q, q_target, *large[:5])
    scores = (delta.clamp(-1.0, 1.0) if cfg.clip_td else delta).abs()
    kept = laber.select(candidates, scores.double().cpu().numpy())
    rows = torch.as_tensor(kept.positions, device=device)
    obs, action, reward, discount, next_obs = (column.index_select(0, rows) for column in large[:5])
    weights = torch.as_tensor(kept.weights, device=device)
    return Batch(obs, action, reward, discount, next_obs, weights), kept.indices


def make_learner(
    q: nn.Module, q_target: nn.Module, optimizer: torch.optim.Optimizer, cfg: DDQNConfig, device: torch.device
) -> OptimizerStep:
    """The update as one call ``learner(batch) -> (loss, |δ|)``: captured as a CUDA graph on a
    CUDA device when ``cfg.cuda_graph``, eager otherwise (the same arithmetic)."""
    graph = cfg.cuda_graph and device.type == "cuda"
    return OptimizerStep(td_loss(q, q_target, cfg), list(q.parameters()), optimizer, graph=graph)


def weighted_td_loss(
    delta: torch.Tensor, weights: torch.Tensor, clip_td: bool, reduction: str, *, kappa: float = 1.0
) -> torch.Tensor:
    """Loss whose gradient is ``−Σ_j w_j clip(δ_j) ∇Q_j`` (Algorithm 1, line 13, with δ clipped, Sec. 4).

    With ``clip_td`` the per-item loss is the Huber loss at ``κ`` (quadratic ``δ²/2`` for |δ| ≤ κ,
    linear ``κ(|δ| − κ/2)`` beyond), whose derivative in ``Q`` is ``−clip(δ, −κ, κ)``; κ = 1 is the
    paper's TD clipping and LAP's loss (Fujimoto et al. 2020, :func:`prisample.losses.lap_loss`, up to
    the reduction); without ``clip_td`` ``δ²/2``.  ``"mean"`` divides by k.
    ``delta`` is ``(k,)``, or ``(agents, k)`` for stacked agents: the sum of their losses, each of
    which reaches only its own agent's parameters.
    """
    magnitude = delta.abs()
    if clip_td:
        per_item = torch.where(magnitude <= kappa, 0.5 * delta**2, kappa * (magnitude - 0.5 * kappa))
    else:
        per_item = 0.5 * delta**2
    total = (weights * per_item).sum()
    return total / delta.shape[-1] if reduction == "mean" else total


# -- schedules and loop state ------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedules:
    """ε, α and β as functions of the agent step ``t``, the one unit of every schedule.

    ε: ``eps_start`` until ``learning_starts``, then linear to ``eps_end`` over ``eps_decay_steps``
    (DQN release).  α and β: linear from their start values at the first update
    (``learning_starts``) to their end values at ``total_steps`` (Sec. 3.4, Table 3: "the limiting
    value is reached at the end of training").  α changes in steps of 0.01: a new α rebuilds the
    sampler's distribution, which the paper also updated "infrequently" (App. B.2.1).
    """

    learning_starts: int
    epsilon: LinearSchedule
    alpha: LinearSchedule
    beta: LinearSchedule

    @classmethod
    def of(cls, cfg: DDQNConfig) -> Schedules:
        annealing = max(1, cfg.total_steps - cfg.learning_starts)
        alpha_end = cfg.alpha if cfg.alpha_end is None else cfg.alpha_end
        return cls(
            cfg.learning_starts,
            LinearSchedule(cfg.eps_start, cfg.eps_end, cfg.eps_decay_steps),
            LinearSchedule(cfg.alpha, alpha_end, annealing),
            LinearSchedule(cfg.beta0, cfg.beta_end, annealing),
        )

    def at(self, t: int) -> tuple[float, float, float]:
        """``(ε, α, β)`` at agent step ``t``."""
        since = t - self.learning_starts
        epsilon = self.epsilon(since) if since >= 0 else self.epsilon.start
        return epsilon, round(self.alpha(since), 2), self.beta(since)


@dataclass
class LoopState:
    """Everything the loop carries from one agent step to the next (checkpointed whole)."""

    step: int
    """Agent steps t so far, summed over the environments."""
    next_target: int
    next_eval: int
    next_log: int
    next_checkpoint: int | None
    obs: np.ndarray
    prev_done: np.ndarray
    """Per environment: its last step ended an episode, so its next step only resets it."""
    life: np.ndarray
    returns: np.ndarray
    """Undiscounted, unclipped return of each environment's episode so far."""
    updates: int = 0
    due: int = 0
    """Agent steps not yet paid for by an update (one per replay_period)."""
    refill_until: int = 0
    """No update before this step (a resumed run without its memory refills it first)."""
    episode_returns: list[float] = field(default_factory=list)
    timer: Timer = field(default_factory=Timer)
    window: MetricWindow = field(default_factory=MetricWindow)

    def end_episodes(self, reward: np.ndarray, done: np.ndarray) -> None:
        """Add the step's rewards (not to a resetting environment's) and close finished episodes."""
        self.returns += np.where(self.prev_done, 0.0, reward)
        for i in np.flatnonzero(done):
            self.episode_returns.append(float(self.returns[i]))
            self.returns[i] = 0.0


def act(
    q: Callable[[torch.Tensor], torch.Tensor],
    obs: np.ndarray,
    epsilon: float,
    rng: np.random.Generator,
    num_actions: int,
    device: torch.device,
) -> np.ndarray:
    """ε-greedy actions, one per environment (Algorithm 1, line 4); no network call while ε = 1."""
    n = obs.shape[0]
    if epsilon >= 1.0:
        return rng.integers(0, num_actions, n)
    with torch.no_grad():
        greedy = q(torch.as_tensor(obs, device=device)).argmax(dim=1).cpu().numpy()
    explore = rng.random(n) < epsilon
    return np.where(explore, rng.integers(0, num_actions, n), greedy)


def transition_targets(
    reward: np.ndarray, terminated: np.ndarray, life_lost: np.ndarray, clip_reward: bool, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(R_t, γ_t)`` as stored: the reward clipped to [−1, 1] when asked (Sec. 4), and the per-step
    discount ``γ_t``: 0 where the episode terminated or a life was lost (the bootstrapped return
    ends there), else γ."""
    learn_reward = np.clip(reward, -1.0, 1.0) if clip_reward else np.asarray(reward, dtype=np.float64)
    return learn_reward, np.where(terminated | life_lost, 0.0, gamma)


# -- training ----------------------------------------------------------------------------------------


def train(cfg: DDQNConfig) -> RunResult:
    """Train one agent with ``cfg``'s arm: Algorithm 1, with evaluation, logging and checkpoints."""
    from prisample.replay import PrioritizedReplay

    started = time.perf_counter()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    run_dir(cfg).mkdir(parents=True, exist_ok=True)
    (run_dir(cfg) / "config.json").write_text(json.dumps(asdict(cfg), indent=1) + "\n")
    options: dict[str, Any] = dict(backend=cfg.env_backend, noop_max=cfg.noop_max, threads=cfg.env_threads)
    env, spec = make_env(cfg.env, cfg.num_envs, **options)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed input shapes: pick the fastest convolutions once
        torch.backends.cuda.matmul.allow_tf32 = True  # as cuDNN's convolutions: TF32 matrix products
    q = QNetwork(cfg.network, spec, cfg.hidden, cfg.shared_bias).to(device)  # Q with random θ
    q_target = copy.deepcopy(q)
    graph = cfg.cuda_graph and device.type == "cuda"
    optimizer = make_optimizer(cfg, q.parameters(), capturable=graph)
    learner = make_learner(q, q_target, optimizer, cfg, device)
    schedules = Schedules.of(cfg)
    # PER: the memory is a PrioritizedReplay whatever the arm; 'uniform' is α = 0, β = 0 (line 1).
    replay = PrioritizedReplay(
        cfg.memory_size, spec.obs_shape[1:] if spec.frame_stack > 1 else spec.obs_shape,
        frame_stack=spec.frame_stack, obs_dtype=spec.obs_dtype, num_streams=cfg.num_envs,
        n_step=cfg.n_step, alpha=cfg.alpha, beta=cfg.beta0,
        weight_norm=cfg.weight_norm, backend=cfg.replay, seed=cfg.seed,
        eps=0.0 if cfg.priority_rule == "lap" else cfg.priority_eps,  # PER: LAP's p = max(|δ|, κ) > 0
        device=device if cfg.replay_on_device and device.type == "cuda" else None,
    )  # fmt: skip
    diagnostics = Diagnostics(cfg.memory_size) if cfg.diagnostics else None  # PER: M_i, Figs. 10-11
    # PER: LaBER draws m·B uniformly (the 'uniform' replay) and keeps B ∝ |δ| (a stream of its own)
    laber = None
    if cfg.sampling == "laber":
        laber_seed = int(np.random.SeedSequence([cfg.seed, 2]).generate_state(1)[0])
        laber = LaBER(cfg.batch_size, cfg.laber_m, eps=LABER_EPS, seed=laber_seed)
    rng = np.random.default_rng([cfg.seed, 1])
    logger = Logger(run_dir(cfg), cfg.tensorboard, resume=cfg.resume)
    scores = load_atari_scores().get(atari_rom(cfg.env)) if env_family(cfg.env) == "atari" else None
    evaluator = Evaluator(
        make_env(cfg.env, cfg.eval_envs, **options)[0], epsilon=cfg.eval_epsilon, max_steps=cfg.eval_steps,
        max_episodes=cfg.eval_episodes, seed=cfg.seed, device=device, scores=scores, logger=logger,
        run_dir=run_dir(cfg),
    )  # fmt: skip
    parts = dict(q=q, q_target=q_target, optimizer=optimizer, replay=replay, rng=rng, evaluator=evaluator,
                 laber=laber)  # fmt: skip
    state, env = resume(cfg, load_checkpoint(run_dir(cfg) / "checkpoint.pt", device), env, parts)
    timer, window, rate = state.timer, state.window, StepRate(state.step)
    bar = tqdm(total=cfg.total_steps, initial=state.step, desc=f"{cfg.env} {cfg.arm}", unit="step",
               disable=not cfg.progress, dynamic_ncols=True, smoothing=0.05)  # fmt: skip
    forward = GraphedForward(q, graph=graph)  # acting's Q(S_t, ·), a CUDA graph on a GPU
    stepper = SendRecv(env)

    copier = HostCopy(device)
    pending: list[tuple[np.ndarray, Pending]] = []  # updates whose new priorities are not written yet

    def write_priorities(keep: int) -> None:
        """p_j ← |δ_j| for the updates in flight but the last ``keep`` (line 12)."""
        while len(pending) > keep:
            indices, values = pending.pop(0)
            with timer("learn"):  # waits for the GPU
                host = values.wait()
            if laber is None:  # LaBER stores no priorities: it scores its large batch afresh
                with timer("update_priorities"):
                    # PER: p_j ← |δ_j| (line 12), or LAP's max(|δ_j|, κ) (priority_rule, in td_loss)
                    replay.update_priorities(indices, host[:-3])
            if diagnostics is not None:
                diagnostics.on_update(indices, host[:-3])
            # PER: the loss, mean |δ|, and the weights' mean and minimum
            window.add(loss=float(host[-3]), td_abs=float(host[:-3].mean()), weight_mean=float(host[-2]),
                       weight_min=float(host[-1]))  # fmt: skip

    def update_due(step: int, alpha: float, beta: float) -> None:
        """Lines 7-15 once learning started: one minibatch update per K agent steps up to ``step``."""
        if step < max(cfg.learning_starts, state.refill_until):
            return
        timer.mark_learning(step)
        state.due += cfg.num_envs
        while state.due >= cfg.replay_period:  # one minibatch update per K agent steps (line 7)
            if replay.sampler.alpha != alpha:
                replay.sampler.alpha = alpha  # PER: α annealed (dqn_rank: 0.5 → 0, Table 3)
            replay.sampler.beta = beta  # PER: β annealed β0 → 1 over training (Sec. 3.4)
            with timer("sample"):
                # PER: j ~ P(j) = p_j^α / Σ_i p_i^α (line 9); LaBER: m·k uniform candidates
                sample, draw = replay.sample(cfg.batch_size if laber is None else laber.large_batch_size)
            if diagnostics is not None:
                diagnostics.on_draw(step, draw)
            with timer("learn"):  # PER: w_j = (N·P(j))^-β / max_i w_i (line 10), Δ += w_j δ_j ∇Q
                if laber is None:
                    batch, indices = as_batch(sample, draw.weights, device), draw.indices
                else:  # PER: LaBER keeps k of the m·k ∝ |δ|, w_i = mean|δ| / |δ_i|
                    batch, indices = laber_batch(sample, draw.indices, laber, q, q_target, cfg, device)
                loss, td_abs = learner(batch)
                w = batch.weights
                pending.append(
                    (indices, copier.start(td_abs, loss.view(1), w.mean().view(1), w.min().view(1)))
                )
            # defer_priorities: this update's priorities are written after the next update's draw
            write_priorities(keep=1 if cfg.defer_priorities else 0)
            state.updates += 1
            state.due -= cfg.replay_period

    stopped = "done"
    while state.step < cfg.total_steps:
        if cfg.stop_after is not None and state.step >= cfg.stop_after:
            stopped = "stop_after"
            break
        if cfg.time_budget_s is not None and time.perf_counter() - started > cfg.time_budget_s:
            stopped = "time_budget"
            break
        epsilon, alpha, beta = schedules.at(state.step)
        with timer("act"):  # A_t ~ ε-greedy(Q(S_t, ·)) in every environment (line 4)
            actions = act(forward, state.obs, epsilon, rng, spec.num_actions, device)
        with timer("env"):
            stepper.send(actions.astype(np.int64))
        if cfg.overlap_env:  # the updates of this step run while the emulators compute it
            update_due(state.step + cfg.num_envs, alpha, beta)
        with timer("env"):  # observe S_t, R_t, γ_t (line 5)
            next_obs, reward, terminated, truncated, info = stepper.recv()
            reward, terminated = np.asarray(reward, dtype=np.float64), np.asarray(terminated, dtype=bool)
            done = (terminated | np.asarray(truncated, dtype=bool)) & ~state.prev_done
            next_life = lives(info, cfg.num_envs)
            life_lost = (next_life < state.life) & cfg.terminal_on_life_loss
            learn_reward, discount = transition_targets(
                reward, terminated, life_lost, cfg.clip_reward, cfg.gamma
            )
            live = np.flatnonzero(~state.prev_done)  # a step that only resets an environment stores nothing
        with timer("add"):  # store (S_{t-1}, A_{t-1}, R_t, γ_t, S_t) (line 6)
            # PER: a new transition enters at the maximal priority, p_t = max_{i<t} p_i
            slots = replay.add_many(state.obs[live], actions[live], learn_reward[live], discount[live],
                                    next_obs[live], episode_end=done[live], streams=live)  # fmt: skip
        if diagnostics is not None:
            diagnostics.on_write(slots)
        state.end_episodes(reward, done)
        state.prev_done, state.obs, state.life = done, next_obs, next_life
        state.step += cfg.num_envs
        bar.update(cfg.num_envs)
        if not cfg.overlap_env:
            update_due(state.step, alpha, beta)
        if state.step >= state.next_target:  # from time to time θ_target ← θ (line 17)
            q_target.load_state_dict(q.state_dict())
            state.next_target += cfg.target_update_period
        if state.step >= state.next_eval:
            result = evaluator.select(q, state.next_eval)
            state.next_eval += cfg.eval_every
            bar.set_postfix_str(f"eval {result.score:.1f}", refresh=False)
        if state.step >= state.next_log:
            recent = state.episode_returns[-20:]
            logger.log("metrics", state.step, {
                "train/episode_return": float(np.mean(recent)) if recent else float("nan"),
                "train/episodes": float(len(state.episode_returns)), "train/epsilon": epsilon,
                "per/alpha": replay.sampler.alpha, "per/beta": replay.sampler.beta,  # PER: logged α, β,
                "per/max_priority": replay.sampler.max_priority,  # PER: max priority and the weights' window
                "perf/steps_per_s": rate(state.step), "replay/size": float(len(replay)),
                "updates": float(state.updates), **window.drain(),
            })  # fmt: skip
            if diagnostics is not None:  # PER: sorted |δ| and P(i) against |δ| of the memory now
                diagnostics.snapshot(state.step, replay.sampler)
            state.next_log += cfg.log_every
        if state.next_checkpoint is not None and state.step >= state.next_checkpoint:
            write_priorities(keep=0)
            save_checkpoint(run_dir(cfg) / "checkpoint.pt", checkpoint(cfg, state, env, parts))
            state.next_checkpoint += cfg.checkpoint_every  # type: ignore[operator]
    write_priorities(keep=0)
    bar.close()
    if diagnostics is not None:
        diagnostics.snapshot(state.step, replay.sampler)
        diagnostics.save_json(run_dir(cfg) / "diagnostics.json")
        diagnostics.plot(run_dir(cfg) / "diagnostics", title=f"{cfg.env} {cfg.arm}")
    return finish(cfg, state, env, parts, stopped, started, logger)


# -- checkpoints and the end of a run ----------------------------------------------------------------


def checkpoint(cfg: DDQNConfig, state: LoopState, env: Any, parts: dict[str, Any]) -> dict[str, Any]:
    """Everything an exactly identical continuation needs (the memory only with checkpoint_memory)."""
    try:
        env_blob: bytes | None = cloudpickle.dumps(env)
    except Exception:  # ALE's vector env holds C++ state: episodes in flight restart on resume
        env_blob = None
    return {
        "config": asdict(cfg), "q": parts["q"].state_dict(), "q_target": parts["q_target"].state_dict(),
        "optimizer": parts["optimizer"].state_dict(),
        "replay": parts["replay"].state_dict(include_memory=cfg.checkpoint_memory),
        "rng": parts["rng"].bit_generator.state, "evaluator": parts["evaluator"].state_dict(),
        "torch_rng": torch.get_rng_state(), "loop": state, "env": env_blob,
        "laber": parts["laber"].state_dict() if parts["laber"] is not None else None,
    }  # fmt: skip


def resume(
    cfg: DDQNConfig, ck: dict[str, Any] | None, env: Any, parts: dict[str, Any]
) -> tuple[LoopState, Any]:
    """The loop state (and environment) to start from: a fresh one, or the checkpoint's when
    ``cfg.resume`` and one exists."""
    if not cfg.resume or ck is None:
        obs, info = seed_envs(env, cfg.seed)
        n = cfg.num_envs
        return LoopState(0, cfg.target_update_period, cfg.eval_every, cfg.log_every, cfg.checkpoint_every,
                         obs, np.zeros(n, dtype=bool), lives(info, n), np.zeros(n)), env  # fmt: skip
    for name in ("q", "q_target", "optimizer"):
        parts[name].load_state_dict(ck[name])
    state: LoopState = ck["loop"]
    if "memory" in ck["replay"]:
        parts["replay"].load_state_dict(ck["replay"])
    else:  # memory not saved: refill it (learning_starts steps); α and β follow the step anyway
        state.refill_until = state.step + cfg.learning_starts
    parts["rng"].bit_generator.state = ck["rng"]
    parts["evaluator"].load_state_dict(ck["evaluator"])
    if parts["laber"] is not None and ck.get("laber") is not None:
        parts["laber"].load_state_dict(ck["laber"])
    torch.set_rng_state(ck["torch_rng"])
    if ck["env"] is not None:  # gymnasium environments pickle; ALE's vector env does not
        env.close()
        env = pickle.loads(ck["env"])
    else:
        state.obs, info = seed_envs(env, cfg.seed + 1000 * state.step)
        state.prev_done, state.life = np.zeros(cfg.num_envs, dtype=bool), lives(info, cfg.num_envs)
        state.returns = np.zeros(cfg.num_envs)
    return state, env


def finish(
    cfg: DDQNConfig, state: LoopState, env: Any, parts: dict[str, Any], stopped: str, started: float,
    logger: Logger,
) -> RunResult:  # fmt: skip
    """Last evaluation, the best policy re-evaluated on fresh episodes (App. B.2.3), the final
    checkpoint and ``result.json``."""
    learning = state.timer.learning_phase(state.step, state.updates)  # before the final evaluation
    evaluator: Evaluator = parts["evaluator"]
    record = evaluator.record
    if stopped == "done" and (not record.steps or record.steps[-1] < state.step):
        evaluator.select(parts["q"], state.step)
    save_checkpoint(run_dir(cfg) / "checkpoint.pt", checkpoint(cfg, state, env, parts))
    best = evaluator.reevaluate_best(parts["q"]) if stopped != "stop_after" else None
    logger.close()
    env.close()
    evaluator.env.close()
    wall = time.perf_counter() - started
    best_score = record.best_score if record.best_step is not None else float("nan")
    best_policy = best.score if best is not None else float("nan")
    result = RunResult(
        config=asdict(cfg), run_dir=str(run_dir(cfg)), eval_steps=list(record.steps),
        eval_scores=list(record.scores), best_score=best_score, best_step=record.best_step,
        best_policy_score=best_policy, best_policy_episodes=best.episodes if best is not None else 0,
        normalized_best=finite_or_none(normalized_or_nan(best_policy, evaluator.scores)),
        normalized_best_selecting=finite_or_none(normalized_or_nan(best_score, evaluator.scores)),
        steps=state.step, updates=state.updates, wall_s=wall, steps_per_s=state.step / wall,
        stopped=stopped, timing_s=dict(state.timer.totals),
        learning_phase=learning,
    )  # fmt: skip
    (run_dir(cfg) / "result.json").write_text(json.dumps(asdict(result), indent=1) + "\n")
    return result


# -- command line ------------------------------------------------------------------------------------


def parse_train(argv: list[str]) -> DDQNConfig:
    """``train``'s options: ``--env``, ``--protocol`` and ``--arm`` pick the config files
    (:func:`config_files`), loaded first; every other option then overrides them."""
    picked: dict[str, str] = {"env": DDQNConfig.env, "arm": DDQNConfig.arm, "protocol": ""}
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        name, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name in picked:
            picked[name] = value if eq else next(args, "")
            if name in ("env", "protocol"):
                rest += [f"--{name}", picked[name]]
        else:
            rest.append(arg)
    with cli.reporting():
        check_env(picked["env"])
        files = config_files(picked["env"], picked["arm"], picked["protocol"] or None)
    preset = [item for path in files for item in ("--config", str(path))]
    return cli.parse(DDQNConfig, [*preset, *rest], prog="python -m recipes.atari_ddqn train", epilog=EPILOG)


EPILOG = (
    "--env, --protocol and --arm load recipes/configs/atari_ddqn/<family>.yaml, protocols/<protocol>.yaml "
    "and arms/<arm>.yaml; other options "
    "override them. Sweeps, plots and the weight ablation: python -m recipes.dqn_sweep --help."
)


def main(argv: list[str] | None = None) -> RunResult:
    """``python -m recipes.atari_ddqn [train] [options]``; ``--help`` lists the options."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("sweep", "plot"):
        print(f"error: {argv[0]} moved: python -m recipes.dqn_sweep {argv[0]} ...", file=sys.stderr)
        raise SystemExit(2)
    if argv and not argv[0].startswith("-") and argv[0] != "train":
        print(f"error: the command should be train, but got {argv[0]}", file=sys.stderr)
        raise SystemExit(2)
    config = parse_train(argv[1:] if argv and argv[0] == "train" else argv)
    result = train(config)
    print(json.dumps({k: v for k, v in asdict(result).items() if k != "config"}, indent=1))
    return result


if __name__ == "__main__":
    main()
