"""The Double DQN recipe's configuration: :class:`DDQNConfig`, its config files and its command line.

A run's values come from three YAML files under ``recipes/dqn/configs/`` (the environment
family's, the protocol's if any, the arm's; :func:`config_files`), then the command line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

import yaml

from recipes.common import cli
from recipes.dqn.env_ids import EnvBackend, check_env, env_family

CONFIG_DIR = Path(__file__).parent / "configs"
ARMS: tuple[str, ...] = (
    "uniform",
    "proportional",
    "rank",
    "dqn_uniform",
    "dqn_rank",
    "lap",
    "laber",
    "proportional_dopamine",
)
"""Arm config files (``CONFIG_DIR/arms/<arm>.yaml``): Table 3 of the paper as the authors' release
runs it (the "paper" profile), then LAP, LaBER and Dopamine's prioritized replay (the "dopamine"
profile)."""
ABLATION_ARMS: tuple[str, ...] = ("uniform", "proportional", "rank", "lap", "laber")
"""The Double DQN arms of the replay ablation (``recipes/studies/replay_ablation.py``)."""
PAPER_ARMS: tuple[str, ...] = ("uniform", "proportional", "rank")
"""The Double DQN arms of the paper's headline (Figs. 9-10): a sweep's default."""
Replay = Literal["uniform", "proportional", "rank"]
Algorithm = Literal["double_dqn", "dqn"]
PriorityRule = Literal["abs_td", "lap", "sqrt_loss"]
Sampling = Literal["replay", "laber"]
Network = Literal["nature_cnn", "minatar_cnn", "dopamine_minatar", "mlp"]
Optimizer = Literal["dqn_rmsprop", "rmsprop", "adam"]


@dataclass(frozen=True)
class DDQNConfig:
    """One run.  The defaults are the paper's Atari agent with proportional replay; build the
    config of another environment or arm with :func:`load_config` (the command line does)."""

    env: str = "ALE/Pong-v5"
    """Gymnasium id: ``ALE/<Game>-v5`` (Atari), ``MinAtar/<Game>-v1`` or e.g. ``CartPole-v1``."""
    protocol: str | None = None
    """A protocol file (recipes/dqn/configs/protocols/<protocol>.yaml) loaded between the
    family's preset and the arm's file, e.g. 'atari100k'; None: the family's preset alone."""
    arm: str = "proportional"
    """The arm's name: on the command line it loads recipes/dqn/configs/arms/<arm>.yaml
    (uniform, proportional, rank, dqn_uniform, dqn_rank, lap, laber); names run directories and
    sweep curves."""
    algorithm: Algorithm = "double_dqn"
    """'double_dqn': bootstrap Q_target(S, argmax_a Q(S, a)); 'dqn': max_a Q_target(S, a)."""
    replay: Replay = "proportional"
    """Replay distribution: 'uniform', 'proportional' (p = |δ| + ε) or 'rank' (p = 1/rank)."""
    total_steps: int = 50_000_000
    """Agent steps of training T (Atari: 50M = 200M frames)."""
    schedule_horizon: int | None = 50_000_000
    """Agent steps at which α and β reach their end values: the reference's whole training budget
    (Table 3: "the limiting value is reached at the end of training"; DQN Zoo anneals β over all its
    iterations), so that a run cut short stops where the reference's schedule stands at that step
    instead of at β = 1.  The family's file names its budget; None: ``total_steps``."""
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
    """The priority written for a replayed transition: 'abs_td' ``p = |δ|`` (Algorithm 1, line 12;
    ``|clip(δ)|`` with clip_priority; the sampler adds ε), 'lap' ``p = max(|δ|, κ)`` with the
    unclipped δ, no ε, and the loss a Huber loss at κ (Fujimoto, Meger & Precup 2020, LAP; needs
    replay 'proportional'), or 'sqrt_loss' ``p = sqrt(ℓ(δ) + 1e-10)`` of the per-item loss ℓ, no ε
    (Dopamine's prioritized agents, ``rainbow_agent.py``: "sqrt(loss + 1e-10)"; needs replay
    'proportional')."""
    clip_priority: bool = False
    """Write ``|clip(δ)|`` (δ clipped to [−1, 1]) instead of ``|δ|`` as the priority.  False follows
    the authors' release (DQN Zoo's prioritized agent writes ``|δ|`` and clips only the gradient);
    clipped, every |δ| ≥ 1 ties at 1, which flattens the prioritization where errors are large."""
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
    weight_norm: Literal["memory", "batch"] = "batch"
    """Importance weights divided by their maximum over the minibatch (the authors' release: DQN
    Zoo's ``importance_sampling_weights(normalize=True)``; Dopamine likewise) or over the memory
    (the paper's text, App. B.2.1, read literally)."""
    network: Network = "nature_cnn"
    """'nature_cnn' (Mnih et al. 2015), 'minatar_cnn' (Young & Tian 2019), 'dopamine_minatar'
    (Dopamine's ``MinatarDQNNetwork``: one 'same' conv layer, no hidden layer) or 'mlp'."""
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
    eps_follows_lr: bool = True
    """Divide the optimiser's ε with η as the authors' release does, so that where ε dominates the
    denominator the step is unchanged and only a gradient-dominated step shrinks (the paper's reason
    for η/4: larger prioritized gradients): by lr_divisor² where ε is inside the root
    (dqn_rmsprop; DQN Zoo prioritized ``run_atari.py``: learning_rate 0.00025/4 with
    optimizer_epsilon × (1/4)²), by lr_divisor where ε is added to the root (rmsprop, adam).
    False: only η is divided (:func:`recipes.dqn.networks.optimizer_settings`)."""
    rmsprop_decay: float = 0.95
    """RMSProp gradient and squared-gradient momentum (Mnih et al. 2015: 0.95)."""
    rmsprop_eps: float = 0.01
    """RMSProp min squared gradient (Mnih et al. 2015: 0.01)."""
    adam_eps: float = 1e-8
    """Adam's ε, added to the root (torch's and Stable-Baselines3's default 1e-8; Dopamine's
    MinAtar DQN 3.125e-4)."""
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
    """Clip δ's gradient to [−1, 1] (Sec. 4): the Huber loss (priorities: clip_priority)."""
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
    repeat_action_probability: float = 0.0
    """Atari: sticky actions, the probability that the emulator repeats the previous action instead
    of the chosen one at each frame (Machado et al. 2018; Dopamine: 0.25).  0: the DQN papers' game."""
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
    priorities_on_device: bool = False
    """With ``replay_on_device`` on a CUDA device, keep the priorities there too (prisample's
    ``device_proportional``/``device_uniform`` backends; ``rank`` stays on the host): the draw,
    the gather and the priority write run on the GPU without waiting for the host, and ``|δ|`` is
    written without a copy back."""
    diagnostics: bool = False
    """Record the paper's replay diagnostics (prisample.diagnostics): replay counts M_i, the sorted
    |δ| of the memory at each metrics row (Fig. 10), P(i) against |δ| (Fig. 11) and the weights;
    the run directory gets diagnostics.json and diagnostics_*.png at the end (not checkpointed)."""

    def __post_init__(self) -> None:
        cli.one_of(self, "arm", ARMS)
        cli.one_of(self, "algorithm", ("double_dqn", "dqn"))
        cli.one_of(self, "replay", ("uniform", "proportional", "rank"))
        cli.one_of(self, "weight_norm", ("memory", "batch"))
        cli.one_of(self, "priority_rule", ("abs_td", "lap", "sqrt_loss"))
        cli.one_of(self, "sampling", ("replay", "laber"))
        if self.priority_rule != "abs_td":  # p = max(|δ|, κ) or sqrt(ℓ) mean something under P(i) ∝ p_i^α
            cli.require(
                self.replay == "proportional",
                "replay",
                f"be proportional with priority_rule={self.priority_rule}",
                self.replay,
            )
        if self.sampling == "laber":  # LaBER's large batch is uniform; it stores no priorities
            cli.require(self.replay == "uniform", "replay", "be uniform with sampling=laber", self.replay)
            cli.require(
                not self.diagnostics,
                "diagnostics",
                "be false with sampling=laber (no priorities)",
                self.diagnostics,
            )
        if self.priorities_on_device:  # the draws' slots stay on the GPU: nothing on the host reads them
            need = "with priorities_on_device (the draws stay on the GPU)"
            cli.require(not self.diagnostics, "diagnostics", f"be false {need}", self.diagnostics)
            cli.require(self.sampling == "replay", "sampling", f"be 'replay' {need}", self.sampling)
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
            "laber_m",
            "schedule_horizon",
        )
        cli.at_least(self, 0, "learning_starts", "noop_max", "alpha", "alpha_end", "seed")
        cli.positive(self, "lr", "lr_divisor", "priority_eps", "rmsprop_eps", "adam_eps", "lap_kappa")
        for name in ("gamma", "beta0", "beta_end", "eps_start", "eps_end", "eval_epsilon", "rmsprop_decay"):
            cli.in_range(self, name, 0.0, 1.0)
        cli.require(
            0.0 <= self.repeat_action_probability < 1.0,
            "repeat_action_probability",
            "be in [0, 1)",
            self.repeat_action_probability,
        )
        cli.require(
            self.repeat_action_probability == 0.0 or env_family(self.env) == "atari",
            "repeat_action_probability",
            f"be 0 for env={self.env!r} (sticky actions are the Atari emulator's)",
            self.repeat_action_probability,
        )
        if self.time_budget_s is not None:
            cli.at_least(self, 0.0, "time_budget_s")
        cli.require(  # Dopamine's MinAtar network has no hidden layer; every other network has one
            (bool(self.hidden) or self.network == "dopamine_minatar") and min(self.hidden, default=1) >= 1,
            "hidden",
            "be a comma list of widths >= 1 (empty only with network dopamine_minatar)",
            self.hidden,
        )
        cli.require(
            self.memory_size >= self.batch_size,
            "memory_size",
            f"be >= batch_size={self.batch_size}",
            self.memory_size,
        )
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


def differing_fields(stored: dict[str, Any], cfg: DDQNConfig) -> list[str]:
    """The fields in which a config written to a record or checkpoint (``asdict`` of a
    ``DDQNConfig``, maybe through JSON) differs from ``cfg``.  A field the record lacks counts as
    its default: the record was written before the field existed, when every run had that default."""
    defaults = {f.name: f.default for f in fields(DDQNConfig)}
    current = json.loads(json.dumps(asdict(cfg)))
    completed = json.loads(json.dumps({**{k: v for k, v in defaults.items() if k not in stored}, **stored}))
    return sorted(k for k in completed.keys() | current.keys() if completed.get(k) != current.get(k))


def same_config(stored: dict[str, Any], cfg: DDQNConfig) -> bool:
    """Whether a config written to a record or checkpoint is ``cfg`` (:func:`differing_fields`)."""
    return not differing_fields(stored, cfg)


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


# -- the command line of ``python -m recipes.dqn train`` ---------------------------------------


def parse_command(argv: Sequence[str]) -> DDQNConfig:
    """The config of ``python -m recipes.dqn train [options]`` (the options after ``train``)."""
    argv = list(argv)
    if argv and not argv[0].startswith("-"):
        print(f"error: train takes options only, but got {argv[0]}", file=sys.stderr)
        raise SystemExit(2)
    return parse_train(argv)


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
    return cli.parse(DDQNConfig, [*preset, *rest], prog="python -m recipes.dqn train", epilog=EPILOG)


EPILOG = (
    "--env, --protocol and --arm load recipes/dqn/configs/<family>.yaml, protocols/<protocol>.yaml "
    "and arms/<arm>.yaml; other options "
    "override them. Before it starts, the run is summarised with its estimated time; on a terminal a "
    "run over an hour asks first (--yes: start without asking). "
    "Sweeps, plots and the weight ablation: python -m recipes.dqn --help."
)
