"""Replay ablation: uniform, proportional, rank, LAP and LaBER arms of the Double DQN recipe on two envs.

One command runs, per environment, a sweep (:func:`recipes.dqn.sweep.sweep`) of the five arms
(``recipes/dqn/configs/arms/{uniform,proportional,rank,lap,laber}.yaml``) × seeds and
writes one Markdown table and one plot per environment under ``--out``::

    python -m recipes.studies replay-ablation --jobs 2 --out runs/replay_ablation
    # -> runs/replay_ablation/CartPole-v1.{json,png,md} and MinAtar_Breakout-v1.{json,png,md}

Defaults: CartPole-v1 for 50,000 agent steps with 5 seeds, MinAtar Breakout for 100,000 agent steps
(2% of Young & Tian's 5M) with 3 seeds, evaluated every 10,000 steps on 5,000 steps; each
environment's family file gives every other value.  ``--overrides`` (JSON) sets fields of every run,
e.g. a tiny check: ``--cartpole_steps 600 --minatar_steps 400 --cartpole_seeds 1 --minatar_seeds 1
--overrides '{"learning_starts": 200, "eval_every": 200, "eval_steps": 100, "eval_episodes": 1}'``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from recipes.common import cli, launch
from recipes.common.launch import Measured, RunPlan
from recipes.dqn.config import ABLATION_ARMS, ARMS, CONFIG_DIR, DDQNConfig
from recipes.dqn.env_ids import env_family
from recipes.dqn.plan import sweep_plan
from recipes.dqn.sweep_config import SweepConfig

CARTPOLE = "CartPole-v1"
BREAKOUT = "MinAtar/Breakout-v1"


@dataclass(frozen=True)
class AblationConfig:
    """The ablation's environments, arms, seeds and scale; everything else from the config files."""

    out: str = "runs/replay_ablation"
    """Folder of the results: <out>/<env>.json, .png, _weights.png and .md, one set per environment."""
    arms: tuple[str, ...] = ABLATION_ARMS
    """Arms to compare, a comma list (recipes/dqn/configs/arms/<arm>.yaml)."""
    envs: tuple[str, ...] = (CARTPOLE, BREAKOUT)
    """Environments, a comma list; each gets the steps and seeds of its family below."""
    cartpole_steps: int = 50_000
    """Agent steps per classic-control run (CartPole-v1)."""
    cartpole_seeds: int = 5
    """Seeds per arm on classic control."""
    minatar_steps: int = 100_000
    """Agent steps per MinAtar run (Young & Tian train 5M; this is the first 2%)."""
    minatar_seeds: int = 3
    """Seeds per arm on MinAtar."""
    minatar_eval_steps: int = 5_000
    """Agent steps of one MinAtar evaluation (the family's 20,000 would cost more than training)."""
    jobs: int = 2
    """Runs in parallel, one process and one torch thread each."""
    device: str = "cpu"
    """Torch device of every run."""
    log_dir: str = "runs/replay_ablation/runs"
    """Root of the run directories."""
    overrides: dict[str, Any] | None = None
    """Fields of every run, as JSON, e.g. '{"learning_starts": 200, "eval_every": 200}'."""

    def __post_init__(self) -> None:
        cli.subset_of(self, "arms", ARMS)
        cli.at_least(
            self,
            1,
            "cartpole_steps",
            "cartpole_seeds",
            "minatar_steps",
            "minatar_seeds",
            "jobs",
            "minatar_eval_steps",
        )
        names = {f.name for f in fields(DDQNConfig)} - {"env", "arm", "seed", "total_steps", "log_dir"}
        for key in self.overrides or {}:
            cli.require(key in names, "overrides", "name fields of a run (not env, arm, seed)", key)


def sweep_configs(config: AblationConfig) -> list[SweepConfig]:
    """One :class:`SweepConfig` per environment: its steps and seeds, the arms, the overrides."""
    sweeps = []
    for env in config.envs:
        minatar = env.startswith("MinAtar/")
        values: dict[str, Any] = dict(
            env=env,
            arms=config.arms,
            jobs=config.jobs,
            device=config.device,
            log_dir=config.log_dir,
            total_steps=config.minatar_steps if minatar else config.cartpole_steps,
            seeds=config.minatar_seeds if minatar else config.cartpole_seeds,
            out=str(Path(config.out) / env.replace("/", "_")),
            tensorboard=False,
            progress=False,
        )
        if minatar:
            values.update(eval_every=10_000, eval_steps=config.minatar_eval_steps)
        # the family's replay start: a sweep's own check (total_steps > learning_starts) would
        # otherwise compare against the Atari default of 50,000
        family = yaml.safe_load((CONFIG_DIR / f"{env_family(env)}.yaml").read_text())
        values["learning_starts"] = family["learning_starts"]
        values.update(config.overrides or {})
        sweeps.append(SweepConfig(**values))
    return sweeps


def ablation_plan(config: AblationConfig, sweeps: list[SweepConfig]) -> RunPlan:
    """What the ablation is about to run: every environment's sweep (:func:`recipes.dqn.plan.sweep_plan`),
    one after the other; the time is the sum of theirs ("at least" when one is a lower bound)."""
    plans = [sweep_plan(s) for s in sweeps]
    seconds = [p.estimate_s() for p in plans]
    steps = sum(p.steps or 0 for p in plans)
    parallel = max(p.parallel for p in plans)
    rate = None
    if all(s is not None and s > 0 for s in seconds):
        paths = ", ".join(sorted({p.rate.path for p in plans if p.rate is not None}))
        total = sum(s for s in seconds if s is not None)
        rate = Measured(steps / (total * parallel), paths, "each environment's sweep, as its plan says")
    return RunPlan(
        command="python -m recipes.studies replay-ablation",
        what="; ".join(p.what for p in plans),
        steps=steps,
        out_dir=f"{config.out}/<env>.json, .png, .md and runs under {config.log_dir}",
        short="--envs CartPole-v1 --cartpole_seeds 1 --cartpole_steps 2000",
        rate=rate,
        exact=all(p.exact for p in plans),
        parallel=parallel,
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``python -m recipes.studies replay-ablation [options]``; ``--help`` lists them.  What it runs
    and its estimated time are printed first (and asked about on a terminal when over an hour;
    ``--yes`` does not ask)."""
    yes, argv = launch.take_yes(sys.argv[1:] if argv is None else argv)
    config = cli.parse(AblationConfig, argv, prog="python -m recipes.studies replay-ablation")
    with cli.reporting():
        sweeps = sweep_configs(config)  # every sweep checked before the first run starts
    launch.confirm(ablation_plan(config, sweeps), yes)
    from recipes.dqn.sweep import sweep  # here: --help and the checks do without torch

    return {s.env: sweep(s) for s in sweeps}
