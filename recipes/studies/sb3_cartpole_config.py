"""The config of ``python -m recipes.studies sb3-cartpole``, the arms it compares and the summary
printed before it runs, apart from the runs: ``--help`` and the checks of a command line read this
module without importing torch, Gymnasium or Stable-Baselines3.

The summary's time is ``runs × steps / (rate · jobs)``, the rate being the environment steps per
second (evaluations included) of the committed comparison's runs (``RESULT``, one run at a time, one
torch thread): each arm's median, "about" for the evaluation schedule it was measured with, "at
least" (its fastest run) for another.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from recipes.common import cli, launch
from recipes.common.launch import Measured, RunPlan

__all__ = [
    "ARMS",
    "DESCRIPTION",
    "ENV_ID",
    "PROG",
    "RESULT",
    "ZOO_CARTPOLE",
    "ZOO_SOURCE",
    "Config",
    "parse",
    "run_plan",
]

DESCRIPTION = "Stable-Baselines3 DQN on CartPole-v1: uniform replay vs prioritized (proportional, rank)."
RESULT = "docs/results/sb3_cartpole_fixed.json"
"""The committed comparison whose run times the estimate reads."""

PROG = "python -m recipes.studies sb3-cartpole"
ENV_ID = "CartPole-v1"
ZOO_SOURCE = "DLR-RM/rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1 (commit 22e3ff2)"
ZOO_CARTPOLE: dict[str, Any] = {
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_fraction": 0.16,
    "exploration_final_eps": 0.04,
    "policy_kwargs": {"net_arch": [256, 256]},
}
ARMS: dict[str, tuple[str, dict[str, Any] | None]] = {
    "uniform": ("SB3 DQN, uniform replay", None),
    "proportional": (
        "PrioritizedDQN, proportional",
        {
            "backend": "proportional",
            "alpha": 0.6,  # Schaul et al. 2016, App. B.2.1 (proportional)
            "beta": 0.4,  # ibid., β₀, annealed to 1 (PrioritizedDQN's beta_final)
            "eps": 0.01,  # prisample.sb3 default: the DQN recipe's weight ablation (arms/proportional.yaml)
            "weight_norm": "batch",  # prisample.sb3 default: DQN Zoo replay.py (normalize=True), Dopamine
        },
    ),
    "rank": (
        "PrioritizedDQN, rank-based",
        {
            "backend": "rank",
            "alpha": 0.7,  # Schaul et al. 2016, App. B.2.1 (rank-based)
            "beta": 0.5,  # ibid., β₀, annealed to 1 (PrioritizedDQN's beta_final)
            "eps": 0.01,  # prisample.sb3 default (no effect on rank-based P(i), which uses ranks only)
            "weight_norm": "batch",  # prisample.sb3 default: DQN Zoo replay.py (normalize=True), Dopamine
        },
    ),
}


@dataclass(frozen=True)
class Config:
    """One comparison: each arm on the same seeds (environment, network initialisation, replay)."""

    seeds: int = 10
    """Independent runs per arm (seeds 0 .. seeds-1; the registered protocol's 10)."""
    timesteps: int = 50_000
    """Environment steps per run (the zoo's n_timesteps; SB3 rounds up to whole rollouts of 256)."""
    arms: str = "uniform,proportional,rank"
    """Comma list of arms: uniform, proportional, rank."""
    eval_every: int = 5_000
    """Steps between evaluations of the greedy policy (one more evaluates the final policy)."""
    eval_episodes: int = 10
    """Greedy episodes per evaluation."""
    curve_points: int = 50
    """Points of the training-return curves (evenly spaced over the run)."""
    curve_window: int = 10
    """Each curve point: the mean return of the last this many training episodes."""
    jobs: int = 1
    """Runs at a time, each in its own process with one torch thread."""
    out: str = "runs/sb3_cartpole"
    """Output prefix: writes <out>.json, <out>.png and <out>.md; each finished run is kept under
    <out>_runs/ and read, not trained again, by the same command."""
    report: str = ""
    """A JSON this command wrote: recompute its statistics (IQMs, tests) from the runs it records and
    write <out>.*; trains nothing (empty: run)."""

    def __post_init__(self) -> None:
        for f in fields(self):  # every count
            value = getattr(self, f.name)
            if type(f.default) is int and not value >= 1:
                raise ValueError(f"{f.name} should be >= 1, but got {f.name}={value!r}")
        unknown = [a for a in self.arm_list if a not in ARMS]
        if unknown or not self.arm_list:
            raise ValueError(f"arms should be a comma list of {list(ARMS)}, but got arms={self.arms!r}")

    @property
    def arm_list(self) -> list[str]:
        return [a.strip() for a in self.arms.split(",") if a.strip()]

    @property
    def steps_per_run(self) -> int:
        """``timesteps`` rounded up to whole rollouts: SB3 collects ``train_freq`` steps at a time."""
        rollout: int = ZOO_CARTPOLE["train_freq"]
        return math.ceil(self.timesteps / rollout) * rollout

    @property
    def eval_steps(self) -> list[int]:
        """Steps of the evaluations: every ``eval_every`` before ``timesteps``, then the run's end."""
        return [*range(self.eval_every, self.timesteps, self.eval_every), self.steps_per_run]


def parse(argv: Sequence[str] | None) -> Config:
    """The config of the command line; no argument at all prints the usage and exits (status 2), so
    that a bare command does not start an hour-long run: ``--run`` runs the defaults."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = cli.PlainHelpParser(prog=PROG, description=DESCRIPTION)
    parser.add_argument("--run", action="store_true", help="run (needed only when no other option is given)")
    cli.add_field_options(parser, Config)
    if not args:
        parser.print_usage(sys.stderr)
        print(
            f"{PROG}: nothing run: pass --run for the default comparison ({Config().seeds} seeds × "
            f"{Config().timesteps:,} steps per arm) or any option; --help lists them",
            file=sys.stderr,
        )
        raise SystemExit(2)
    options = vars(parser.parse_args(args))
    options.pop("run")
    try:
        return Config(**options)
    except ValueError as error:
        parser.error(str(error))


def _arm_rate(arm: str, pick: str) -> Measured | None:
    """Environment steps per second of the committed runs of ``arm``: their median (``pick``
    ``"median"``) or the fastest (``"max"``)."""

    def read(data: Any) -> float | list[float]:
        steps = Config(timesteps=data["config"]["timesteps"]).steps_per_run
        rates = [steps / run["train_seconds"] for run in data["arms"][arm]["runs"]]
        return rates if pick == "median" else max(rates)

    return launch.measured(RESULT, f"{arm} arm, one run at a time, one torch thread", read)


def run_plan(cfg: Config) -> RunPlan:
    """What the command is about to run: every arm on every seed, ``jobs`` at once."""
    recorded = launch.recorded_config(RESULT)
    same = all(recorded.get(name) == getattr(cfg, name) for name in ("eval_every", "eval_episodes"))
    rates = {arm: _arm_rate(arm, "median") for arm in cfg.arm_list}
    exact = same and all(rates.values())
    rate: Measured | None
    if exact:
        seconds = sum(cfg.steps_per_run / m.steps_per_s for m in rates.values() if m is not None)
        rate = Measured(len(rates) * cfg.steps_per_run / seconds, RESULT, "each arm's median run")
    else:
        fastest = [m for m in (_arm_rate(arm, "max") for arm in ARMS) if m is not None]
        rate = max(fastest, key=lambda m: m.steps_per_s, default=None)
    runs = len(cfg.arm_list) * cfg.seeds
    return RunPlan(
        command=PROG,
        what=f"{runs} SB3 DQN runs on {ENV_ID} ({', '.join(cfg.arm_list)} x {cfg.seeds} seeds)",
        steps=runs * cfg.steps_per_run,
        unit="env steps",
        out_dir=f"{cfg.out}.json, .png and .md",
        short="--seeds 2 --timesteps 2000",
        rate=rate,
        exact=exact,
        parallel=max(1, min(cfg.jobs, runs, os.cpu_count() or 1)),
    )
