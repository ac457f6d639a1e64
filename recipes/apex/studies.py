"""Studies of the Ape-X recipe (``recipes/apex/run.py``): throughput against actors, and learning
against the single-process recipe.  Run as ``python -m recipes.apex scaling|compare``.

* ``scaling``: one fixed-duration run per actor count (no evaluation, no replay-ratio cap), in
  one Ray; writes ``<out>.json`` (every run's rates, replay ratio, learner and actor time per
  part), ``<out>.png`` (actor env steps/s and learner updates/s against actors) and ``<out>.md``::

      python -m recipes.apex scaling --env CartPole-v1 --actors 1,2,4 --seconds 60 \\
          --out runs/apex_dqn/apex_scaling_cartpole

* ``compare``: for each seed, one Ape-X run per replay-ratio mode and a single-process run
  (``recipes.dqn.run.train``: same env, arm, total env steps, seed and n-step).  Modes: ``free``
  (Ape-X as published: the learner takes what it can, the actors never wait), ``capped`` (at most
  the recipe's 1 / replay_period updates per env step), ``matched`` (exactly that: the actors also
  wait for the learner);
  writes ``<out>.json`` (the curves as ``recipes.dqn.sweep_report.collect`` builds them, a summary per
  curve, every run), ``<out>.png`` (mean evaluation score, min–max band) and ``<out>.md``::

      python -m recipes.apex compare --env CartPole-v1 --actors 2 --total_steps 50000 \\
          --seeds 3 --out runs/apex_dqn/apex_compare_cartpole

Runs of both go under ``<out>_runs/``.  The committed results are copies of these files in
``docs/results/`` (the Markdown links its PNG by file name).  Until it had its own entry point
this module ran as ``python -m recipes.apex scaling|compare``.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import ray

from recipes.apex.config import ApexConfig, apex_fields, learner_config, ray_cpus, recipe_config, start_ray
from recipes.apex.report import (
    PROG,
    compare_markdown,
    compare_row,
    compare_summary,
    cores,
    plot_scaling,
    provenance,
    scaling_markdown,
    scaling_row,
)
from recipes.apex.run import train
from recipes.common import cli, outputs
from recipes.dqn.config import PAPER_ARMS, DDQNConfig
from recipes.dqn.run import train as train_single
from recipes.dqn.sweep_report import collect, plot

COMMANDS = ("scaling", "compare")
EPILOG = "One run: python -m recipes.apex train."


# -- throughput against actors ----------------------------------------------------------------------


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


def scaling(config: ScalingConfig, argv: list[str]) -> dict[str, Any]:
    """Run every actor count; write ``<out>.json``, ``<out>.png`` and ``<out>.md``."""
    started = time.perf_counter()
    runs = [scaling_run(config, n) for n in config.actors]
    own = start_ray(max(ray_cpus(run) for run in runs))
    rows = []
    try:
        for run in runs:
            result = train(run)
            rows.append(scaling_row(result))
            print(
                f"{run.actors} actor(s): {rows[-1]['actor_steps_per_s']:.0f} env steps/s, "
                f"{rows[-1]['learner_updates_per_s']:.0f} updates/s"
            )
    finally:
        if own:
            ray.shutdown()
    report = {
        **provenance(argv, rows[0]["device"], asdict(config)),
        "apex_config": asdict(runs[0]),
        "wall_s": time.perf_counter() - started,
        "loadavg_end": os.getloadavg(),
        "runs": rows,
    }
    out = Path(config.out)
    outputs.write_results(
        out.parent,
        out.stem,
        report,
        table=scaling_markdown(report, out.stem),
        figure=lambda folder: plot_scaling(
            rows, folder / f"{out.stem}.png", f"Ape-X on {config.env}: {cores()}"
        ),
    )
    print(f"wrote {out}.json, {out}.png and {out}.md")
    return report


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


def compare(config: CompareConfig, argv: list[str]) -> dict[str, Any]:
    """Every seed's Ape-X and single-process runs, one after the other; ``<out>.json``, ``<out>.png``
    and ``<out>.md`` are rewritten after each seed, so a study cut short keeps the seeds it finished."""
    started = time.perf_counter()
    apex_labels = {ratio: f"{config.arm} Ape-X {config.actors} actors, {ratio}" for ratio in config.ratios}
    single_label = f"{config.arm} single process"
    own = start_ray(ray_cpus(apex_run(config, config.seed)))
    results: list[dict[str, Any]] = []
    try:
        for seed in range(config.seed, config.seed + config.seeds):
            for ratio, label in apex_labels.items():
                apex = train(apex_run(config, seed, ratio))
                results.append({**apex, "label": label})
                print(
                    f"seed {seed}, Ape-X {ratio}: {apex['wall_s']:.0f} s, {apex['updates']} updates, best "
                    f"policy {apex['best_policy_score']:.1f}"
                )
            single = asdict(train_single(single_run(config, seed)))
            results.append({**single, "label": single_label})
            print(
                f"seed {seed}, one process: {single['wall_s']:.0f} s, {single['updates']} updates, best "
                f"policy {single['best_policy_score']:.1f}"
            )
            report = _write_compare(config, argv, results, time.perf_counter() - started)
    finally:
        if own:
            ray.shutdown()
    return report


def _write_compare(
    config: CompareConfig, argv: list[str], results: list[dict[str, Any]], wall: float
) -> dict[str, Any]:
    curves = collect(results)
    labels = list(dict.fromkeys(r["label"] for r in results))
    report = {
        **provenance(argv, results[0]["device"], asdict(config)),
        "wall_s": wall,
        "loadavg_end": os.getloadavg(),
        "summary": {
            label: compare_summary([r for r in results if r["label"] == label], curves[label])
            for label in labels
        },
        "curves": curves,
        "runs": [compare_row(r) for r in results],
    }
    out = Path(config.out)
    outputs.write_results(
        out.parent,
        out.stem,
        report,
        table=compare_markdown(report, out.stem),
        figure=lambda folder: plot(curves, folder / f"{out.stem}.png", title=compare_title(config)),
    )
    print(f"wrote {out}.json, {out}.png and {out}.md ({len(results)} runs)")
    return report


def compare_title(config: CompareConfig) -> str:
    return f"{config.env}, {config.total_steps:,} env steps, {cores()}"


# -- command line ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``python -m recipes.apex scaling|compare [options]``; ``--help`` lists them."""
    command, options = cli.subcommand(argv, COMMANDS, prog=PROG, epilog=EPILOG)
    args = [command, *options]  # the command line the JSON records
    if command == "scaling":
        return scaling(cli.parse(ScalingConfig, options, prog=f"{PROG} scaling", epilog=EPILOG), args)
    return compare(cli.parse(CompareConfig, options, prog=f"{PROG} compare", epilog=EPILOG), args)
