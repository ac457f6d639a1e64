"""The R2D2 recipe's settings: one frozen dataclass, every value with its source.

Sources: R2D2 = Kapturowski et al. 2019, Table 2 (the paper's hyper-parameters); Acme = DeepMind
Acme's ``agents/jax/r2d2/config.py`` (``R2D2Config``).  The defaults are the CPU tasks' scaled-down
settings; each scaled value says from what and why.  ``recipes/r2d2/configs/<name>.yaml`` files hold
the per-task settings (``--preset``): ``atari.yaml`` is R2D2's own for a lent GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from recipes.common import cli

__all__ = ["CONFIGS", "PROG", "R2D2Config", "load_preset", "parse_command"]

PROG = "python -m recipes.r2d2 train"
CONFIGS = Path(__file__).parent / "configs"


@dataclass(frozen=True)
class R2D2Config:
    """One R2D2 agent on one task: train, evaluate, write ``<out>`` (its evaluation curve, JSON)."""

    preset: str | None = None
    """A settings file, recipes/r2d2/configs/<preset>.yaml (masked_cartpole, tmaze, atari); options given
    on the command line win over it."""
    task: str = "MaskedCartPole-v1"
    """MaskedCartPole-v1, TMaze, or ALE/<Game>-v5 (Atari: a lent GPU)."""
    task_options: dict[str, Any] = field(default_factory=dict)
    """Keywords of the task's constructor, as JSON (TMaze: length, max_steps)."""
    replay: str = "proportional"
    """Sequence sampling: proportional (R2D2) or uniform (the ablation)."""
    stored_state: bool = True
    """Start the learner's LSTM from the item's stored state (R2D2); false: from zeros (the ablation; use
    burn_in 0)."""
    burn_in: int = 10
    """Burn-in steps (R2D2/Acme: 40; scaled by 1/4 with length and period so their 1:2:1 ratio stays on
    tasks whose episodes are tens of steps)."""
    length: int = 20
    """Learn steps per item (R2D2/Acme trace_length 80; scaled by 1/4, see burn_in)."""
    period: int = 10
    """Steps between item starts (R2D2/Acme sequence_period 40: items overlap by half; scaled by 1/4)."""
    n_step: int = 5
    """n of the n-step targets (R2D2/Acme bootstrap_n 5)."""
    gamma: float = 0.99
    """Discount (R2D2/Acme 0.997; 0.99 here: the CPU tasks' horizons are tens to hundreds of steps)."""
    rescale_eps: float = 1e-3
    """ε of the value rescaling h (R2D2 Sec. 2: 10^-3); a negative value turns the rescaling off."""
    alpha: float = 0.9
    """Priority exponent (R2D2/Acme priority_exponent 0.9)."""
    beta: float = 0.6
    """Importance-sampling exponent, constant (R2D2/Acme importance_sampling_exponent 0.6)."""
    eta: float = 0.9
    """Priority mix η·max + (1−η)·mean of |δ| (R2D2/Acme max_priority_weight 0.9)."""
    lr: float = 1e-3
    """Adam step size (Acme learning_rate 1e-3; the paper's Table 2: 1e-4)."""
    adam_eps: float = 1e-3
    """Adam ε (R2D2 Table 2: 10^-3)."""
    max_grad_norm: float = 80.0
    """Gradient-norm clip (Acme max_gradient_norm 80)."""
    batch_size: int = 32
    """Items per update (R2D2/Acme 64; 32: one CPU thread)."""
    target_period: int = 200
    """Updates between target-network copies (R2D2/Acme 2,500; scaled to runs of a few thousand updates)."""
    capacity: int = 50_000
    """Stored steps (R2D2: 4M observations, Acme 100,000 items; scaled to the runs' length: nothing is
    evicted in a CPU run)."""
    learning_starts: int = 2_000
    """Agent steps before the first update (Acme min_replay_size 50,000 items; scaled)."""
    update_every: int = 8
    """Agent steps per update: samples per inserted item = batch_size·period/update_every = 40 (Acme 4;
    raised: the CPU runs are short in steps, not in actor throughput)."""
    torso_size: int = 64
    """Torso width (mlp: one ReLU layer; R2D2's Atari torso is the Nature CNN, then 512)."""
    lstm_size: int = 64
    """LSTM units (R2D2: 512; 64 for the 2- and 3-number observations of the CPU tasks)."""
    num_envs: int = 8
    """Actors (environment copies), each with Ape-X's fixed ε_i = 0.4^(1+7i/(N−1)) (R2D2: 256 actors)."""
    total_steps: int = 60_000
    """Agent steps (summed over the actors)."""
    eval_every: int = 5_000
    """Agent steps between evaluations."""
    eval_episodes: int = 10
    """Greedy episodes per evaluation (Acme evaluation_epsilon 0)."""
    device: str = "cpu"
    """cpu or cuda."""
    seed: int = 0
    """Seed of the networks, actors, replay and environments."""
    out: str = "runs/r2d2/run.json"
    """The run's JSON: its config, evaluation curve, throughput."""

    def __post_init__(self) -> None:
        cli.one_of(self, "replay", ("proportional", "uniform"))
        cli.at_least(self, 0, "burn_in", "learning_starts", "seed")
        cli.at_least(self, 1, "length", "period", "n_step", "batch_size", "target_period")
        cli.at_least(self, 1, "capacity", "update_every", "torso_size", "lstm_size", "num_envs")
        cli.at_least(self, 1, "total_steps", "eval_every", "eval_episodes")
        cli.in_range(self, "gamma", 0.0, 1.0)
        cli.in_range(self, "alpha", 0.0, 1.0)
        cli.in_range(self, "beta", 0.0, 1.0)
        cli.in_range(self, "eta", 0.0, 1.0)
        cli.positive(self, "lr", "adam_eps", "max_grad_norm")
        cli.require(
            self.stored_state or self.burn_in == 0, "burn_in", "be 0 without stored_state", self.burn_in
        )


def load_preset(name: str) -> dict[str, Any]:
    """The values of ``configs/<name>.yaml`` (``ValueError`` naming the preset when it is missing)."""
    path = CONFIGS / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIGS.glob("*.yaml") if p.stem != "study"))
        raise cli.ConfigError("preset", f"be one of {known}", name)
    values: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    unknown = set(values) - {f.name for f in fields(R2D2Config)}
    if unknown:
        raise ValueError(f"{path} sets unknown fields: {', '.join(sorted(unknown))}")
    return values


def parse_command(argv: Sequence[str] | None = None) -> R2D2Config:
    """``train [options]``: the command line's config, on top of its ``--preset`` file."""
    options = list(argv or [])
    config = cli.parse(R2D2Config, options, prog=PROG)
    if config.preset is None:
        return config
    given = {a[2:].split("=", 1)[0] for a in options if a.startswith("--")}
    with cli.reporting():
        values = {k: v for k, v in load_preset(config.preset).items() if k not in given}
        return replace(config, **values)
