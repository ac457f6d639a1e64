"""The options of the Ape-X studies (``recipes/apex/studies.py``): :class:`ScalingConfig`,
:class:`CompareConfig` and the configs of their runs, every value refused before any run starts, and
what a study is about to run (:func:`study_plan`); parsed without importing torch, Gymnasium or Ray,
so that ``python -m recipes.apex scaling|compare --help`` answers at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from recipes.apex.config import ApexConfig, apex_fields, learner_config, recipe_config
from recipes.common import cli, launch
from recipes.common.launch import RunPlan
from recipes.dqn.config import PAPER_ARMS, DDQNConfig

__all__ = [
    "COMPARE_SETS",
    "RATIOS",
    "SCALING_SETS",
    "CompareConfig",
    "ScalingConfig",
    "apex_run",
    "parse_study",
    "scaling_run",
    "single_run",
    "study_plan",
]

PROG = "python -m recipes.apex"
COMMANDS = ("scaling", "compare")
EPILOG = "One run: python -m recipes.apex train."


@dataclass(frozen=True)
class ScalingConfig:
    """Fixed-duration Ape-X runs, one per actor count."""

    env: str = "CartPole-v1"
    """Gymnasium id (CartPole-v1, MinAtar/Breakout-v1, ...)."""
    actors: tuple[int, ...] = (1, 2, 4)
    """Actor counts, a comma list."""
    seconds: float = 60.0
    """Time budget of each run (Ray start, actors' start and learning_starts included)."""
    envs_per_actor: int = 4
    """Environments per actor."""
    device: str = "auto"
    """The learner's device."""
    seed: int = 0
    """Seed of every run."""
    out: str = "runs/apex_dqn/apex_scaling"
    """Output prefix: <out>.json, <out>.png, <out>.md; the runs under <out>_runs/."""
    apex: dict[str, Any] | None = None
    """Other ApexConfig fields of every run as JSON, e.g. '{"actor_sync_every": 800, "shards": 2}'."""

    def __post_init__(self) -> None:
        cli.require(
            bool(self.actors) and min(self.actors) >= 1,
            "actors",
            "be a comma list of counts >= 1",
            self.actors,
        )
        cli.positive(self, "seconds", "envs_per_actor")
        apex_fields(self.apex, SCALING_SETS)
        scaling_run(self, max(self.actors))  # refused here, before any run starts


def scaling_run(config: ScalingConfig, actors: int) -> ApexConfig:
    """The run of ``actors`` actors: ``seconds`` long, no evaluation, no cap on updates."""
    total = config.envs_per_actor * (10**9 // config.envs_per_actor)  # the time budget stops the run
    return ApexConfig(
        env=config.env,
        actors=actors,
        envs_per_actor=config.envs_per_actor,
        total_steps=total,
        time_budget_s=config.seconds,
        eval_every=0,
        device=config.device,
        seed=config.seed,
        out=f"{config.out}_runs/actors{actors}",
        progress=False,
        **(config.apex or {}),
    )


SCALING_SETS = (
    "env",
    "actors",
    "envs_per_actor",
    "total_steps",
    "time_budget_s",
    "eval_every",
    "device",
    "seed",
    "out",
    "progress",
)


# -- learning against the single-process recipe ------------------------------------------------------


@dataclass(frozen=True)
class CompareConfig:
    """Ape-X and the single-process recipe at the same env steps, seeds, arm and n-step."""

    env: str = "CartPole-v1"
    """Gymnasium id (CartPole-v1, MinAtar/Breakout-v1, ...)."""
    arm: str = "proportional"
    """The recipe's arm, for both: uniform, proportional or rank."""
    actors: int = 2
    """Ape-X actors."""
    envs_per_actor: int = 4
    """Environments per Ape-X actor."""
    total_steps: int = 50_000
    """Env steps of every run (summed over Ape-X's actors)."""
    seeds: int = 3
    """Seeds seed, seed + 1, ...: each gets one Ape-X and one single-process run."""
    seed: int = 0
    """The first seed."""
    device: str = "auto"
    """Both learners' device."""
    ratios: tuple[str, ...] = ("free", "matched")
    """Ape-X runs per seed, by their updates per env step against the recipe's r = 1 / replay_period,
    a comma list: free (no bound), capped (at most r), matched (at most and at least r)."""
    n_step: int = 3
    """n of both (Ape-X: 3; the single-process recipe's default is 1)."""
    learner: dict[str, Any] | None = None
    """Fields of the recipe's config for both, as JSON (e.g. '{"lr": 0.001}')."""
    apex: dict[str, Any] | None = None
    """Other ApexConfig fields as JSON (e.g. '{"actor_sync_every": 800}')."""
    out: str = "runs/apex_dqn/apex_compare"
    """Output prefix: <out>.json, <out>.png, <out>.md; runs under <out>_runs/."""

    def __post_init__(self) -> None:
        cli.one_of(self, "arm", PAPER_ARMS)
        cli.positive(self, "actors", "seeds", "n_step")
        cli.subset_of(self, "ratios", RATIOS)
        apex_fields(self.apex, COMPARE_SETS)
        apex_run(self, self.seed)  # both refused here, before any run starts
        single_run(self, self.seed)


RATIOS = ("free", "capped", "matched")


def apex_run(config: CompareConfig, seed: int, ratio: str = "free") -> ApexConfig:
    """Ape-X with ``seed``, its updates per env step bounded as ``ratio`` says."""
    run = ApexConfig(
        env=config.env,
        arm=config.arm,
        actors=config.actors,
        envs_per_actor=config.envs_per_actor,
        total_steps=config.total_steps,
        n_step=config.n_step,
        device=config.device,
        seed=seed,
        out=f"{config.out}_runs/apex_{ratio}/seed{seed}",
        progress=False,
        learner=config.learner,
        **(config.apex or {}),
    )
    recipe = 1.0 / learner_config(run).replay_period
    if ratio in ("capped", "matched"):
        run = replace(run, max_replay_ratio=recipe)
    if ratio == "matched":
        run = replace(run, min_replay_ratio=recipe)
    return run


def single_run(config: CompareConfig, seed: int) -> DDQNConfig:
    """``python -m recipes.dqn train`` with the same env, arm, steps, seed, n-step and learner."""
    return recipe_config(
        config.env,
        config.arm,
        config.learner,
        seed=seed,
        total_steps=config.total_steps,
        n_step=config.n_step,
        device=config.device,
        log_dir=f"{config.out}_runs/single",
        run_name=f"seed{seed}",
        tensorboard=False,
        progress=False,
    )


COMPARE_SETS = (
    "env",
    "arm",
    "actors",
    "envs_per_actor",
    "total_steps",
    "n_step",
    "device",
    "seed",
    "out",
    "progress",
    "learner",
    "max_replay_ratio",
    "min_replay_ratio",
)


def parse_study(argv: Sequence[str] | None = None) -> tuple[str, ScalingConfig | CompareConfig]:
    """``scaling|compare [options]``: the study's name and its config (what ``--help`` lists)."""
    command, options = cli.subcommand(argv, COMMANDS, prog=PROG, epilog=EPILOG)
    prog = f"{PROG} {command}"
    if command == "scaling":
        return command, cli.parse(ScalingConfig, options, prog=prog, epilog=EPILOG)
    return command, cli.parse(CompareConfig, options, prog=prog, epilog=EPILOG)


COMPARE_RESULT = "docs/results/apex_compare_cartpole.json"
SAME_RUNS = ("env", "arm", "actors", "envs_per_actor")
"""The fields of a recorded study that must match for its throughput to count as this one's."""


def recorded_rate(path: str, config: Any, label: str, per: int = 1) -> tuple[launch.Measured | None, bool]:
    """The env steps per second (each of ``per`` runs at once) of the study ``path`` records: every
    run's ``total_steps`` over its wall time; and whether its runs are this ``config``'s."""
    rate = launch.measured(
        path, label, lambda d: d["config"]["total_steps"] * len(d["runs"]) / (d["wall_s"] * per)
    )
    recorded = launch.recorded_config(path)
    exact = bool(recorded) and all(recorded.get(k) == getattr(config, k) for k in SAME_RUNS)
    return rate, exact


def study_plan(command: str, config: ScalingConfig | CompareConfig) -> RunPlan:
    """What ``scaling`` or ``compare`` is about to run.  ``scaling``: its runs' time budgets (no
    step count: the budget stops each run); ``compare``: its env steps at the throughput of the
    committed comparison (``docs/results/apex_compare_cartpole.json``)."""
    out = f"{config.out}.json, .png, .md and {config.out}_runs/"
    if isinstance(config, ScalingConfig):
        counts = ", ".join(map(str, config.actors))
        return RunPlan(
            command=f"{PROG} scaling",
            what=f"Ape-X on {config.env}, one {config.seconds:g} s run per actor count ({counts})",
            steps=None,
            out_dir=out,
            short="--actors 1 --seconds 20",
            time_budget_s=config.seconds * len(config.actors),
            budget_option="--seconds per run",
        )
    runs = config.seeds * (len(config.ratios) + 1)
    rate, exact = recorded_rate(COMPARE_RESULT, config, "the committed comparison, on CPU")
    return RunPlan(
        command=f"{PROG} compare",
        what=f"{runs} runs on {config.env} ({config.seeds} seeds x Ape-X {', '.join(config.ratios)} "
        "and one process)",
        steps=config.total_steps * runs,
        out_dir=out,
        short="--seeds 1 --total_steps 10000",
        rate=rate,
        exact=exact,
        unit="env steps",
    )
