"""Studies of the Ape-X recipe (``recipes/apex_dqn.py``): throughput against actors, and learning
against the single-process recipe.  Run through ``python -m recipes.apex_dqn scaling|compare``.

* ``scaling``: one fixed-duration run per actor count (no evaluation, no replay-ratio cap), in
  one Ray; writes ``<out>.json`` (every run's rates, replay ratio, learner and actor time per
  part), ``<out>.png`` (actor env steps/s and learner updates/s against actors) and ``<out>.md``::

      python -m recipes.apex_dqn scaling --env CartPole-v1 --actors 1,2,4 --seconds 60 \\
          --out runs/apex_dqn/apex_scaling_cartpole

* ``compare``: for each seed, one Ape-X run per replay-ratio mode and a single-process run
  (``recipes.atari_ddqn.train``: same env, arm, total env steps, seed and n-step).  Modes: ``free``
  (Ape-X as published: the learner takes what it can, the actors never wait), ``capped`` (at most
  the recipe's 1 / replay_period updates per env step), ``matched`` (exactly that: the actors also
  wait for the learner);
  writes ``<out>.json`` (the curves as ``recipes.dqn_sweep.collect`` builds them, a summary per
  curve, every run), ``<out>.png`` (mean evaluation score, min–max band) and ``<out>.md``::

      python -m recipes.apex_dqn compare --env CartPole-v1 --actors 2 --total_steps 50000 \\
          --seeds 3 --out runs/apex_dqn/apex_compare_cartpole

Runs of both go under ``<out>_runs/``.  The committed results are copies of these files in
``docs/results/`` (the Markdown links its PNG by file name).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import ray

from recipes import cli
from recipes.apex_dqn import ApexConfig, learner_config, ray_cpus, train
from recipes.atari_ddqn import PAPER_ARMS, DDQNConfig, load_config
from recipes.atari_ddqn import train as train_single
from recipes.dqn_sweep import _machine, collect, plot


def _apex_fields(values: dict[str, Any] | None, taken: tuple[str, ...]) -> dict[str, Any]:
    """``--apex`` JSON: fields of :class:`ApexConfig` the study does not set itself."""
    names = {f for f in ApexConfig.__dataclass_fields__} - set(taken)
    for key in values or {}:
        cli.require(key in names, "apex", f"name fields of ApexConfig but {', '.join(taken)}", key)
    return dict(values or {})


def _start_ray(cpus: int) -> bool:
    if ray.is_initialized():
        return False
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    return True


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
        _apex_fields(self.apex, SCALING_SETS)
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
    own = _start_ray(max(ray_cpus(run) for run in runs))
    rows = []
    try:
        for run in runs:
            result = train(run)
            rows.append(_scaling_row(result))
            print(
                f"{run.actors} actor(s): {rows[-1]['actor_steps_per_s']:.0f} env steps/s, "
                f"{rows[-1]['learner_updates_per_s']:.0f} updates/s"
            )
    finally:
        if own:
            ray.shutdown()
    report = {
        "command": "python -m recipes.apex_dqn " + shlex.join(argv),
        "machine": _machine(),
        "cores": os.cpu_count(),
        "device": rows[0]["device"],
        "ray_version": ray.__version__,
        "config": asdict(config),
        "apex_config": asdict(runs[0]),
        "wall_s": time.perf_counter() - started,
        "loadavg_end": os.getloadavg(),
        "runs": rows,
    }
    out = Path(config.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    _plot_scaling(rows, out.with_suffix(".png"), title=f"Ape-X on {config.env}: {_cores()}")
    out.with_suffix(".md").write_text(_scaling_markdown(report, out.stem))
    print(f"wrote {out}.json, {out}.png and {out}.md")
    return report


def _scaling_row(result: dict[str, Any]) -> dict[str, Any]:
    """One run's line: rates over the learning phase, replay ratio, where the time went."""
    learning, timing = result["learning_s"], result["learner_timing_s"]
    actor_parts: dict[str, float] = {}
    for actor in result["actors"]:
        for part, seconds in actor["timing_s"].items():
            actor_parts[part] = actor_parts.get(part, 0.0) + seconds
    busy = sum(actor_parts.values())
    return {
        "actors": result["config"]["actors"],
        "epsilons": [a["epsilon"] for a in result["actors"]],
        "device": result["device"],
        "env_steps": result["steps"],
        "updates": result["updates"],
        "learning_s": learning,
        "actor_steps_per_s": result["actor_steps_per_s"],
        "actor_steps_per_s_per_actor": result["actor_steps_per_s"] / result["config"]["actors"],
        "learner_updates_per_s": result["learner_updates_per_s"],
        "updates_per_env_step": result["replay_ratio"]["updates_per_env_step"],
        "replayed_per_added": result["replay_ratio"]["replayed_per_added"],
        "dropped_updates": result["dropped_updates"],
        "learner_share": {part: seconds / learning for part, seconds in timing.items()} if learning else {},
        "actor_share": {part: seconds / busy for part, seconds in actor_parts.items()} if busy else {},
        "publish_ms_mean": result["weights"]["publish_ms_mean"],
        "pull_ms_mean": result["weights"]["pull_ms_mean"],
        "wall_s": result["wall_s"],
        "loadavg": result["loadavg"],
        "run_dir": result["run_dir"],
    }


def _cores() -> str:
    return f"{os.cpu_count()} CPU cores"


def _plot_scaling(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    actors = [row["actors"] for row in rows]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, label in (
        (axes[0], "actor_steps_per_s", "actor env steps/s (all actors)"),
        (axes[1], "learner_updates_per_s", "learner updates/s"),
    ):
        ax.plot(actors, [row[key] for row in rows], "o-", color="tab:blue")
        ax.set_xlabel("actors")
        ax.set_ylabel(label)
        ax.set_xticks(actors)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _scaling_markdown(report: dict[str, Any], stem: str) -> str:
    config = report["config"]
    lines = [
        f"# Ape-X throughput against actors on {config['env']}",
        "",
        "Written by `python -m recipes.apex_dqn scaling` (`recipes/apex_studies.py`); discussion in "
        "`docs/recipes/apex_dqn.md`.",
        "",
        f"- command: `{report['command']}`",
        f"- machine: {report['machine']}; Ray {report['ray_version']}; learner on {report['device']}",
        f"- each run: {config['seconds']:g} s in all (actors' start and the learner's wait for "
        f"learning_starts included), {config['envs_per_actor']} environments per actor, no evaluation, "
        "no cap on updates; rates over the learning phase (first update to the end)",
        f"- wall time: {report['wall_s']:,.0f} s",
        "",
        "| actors | ε_i | env steps/s (all actors) | per actor | learner updates/s | updates per env step "
        "| replayed per added | dropped updates | learner waiting for batches | learner updating |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["runs"]:
        share = row["learner_share"]
        epsilons = ", ".join(f"{e:.3g}" for e in row["epsilons"])
        lines.append(
            f"| {row['actors']} | {epsilons} | {row['actor_steps_per_s']:,.0f} "
            f"| {row['actor_steps_per_s_per_actor']:,.0f} | {row['learner_updates_per_s']:,.0f} "
            f"| {row['updates_per_env_step']:.3f} | {row['replayed_per_added']:.2f} "
            f"| {row['dropped_updates']:,} | {100 * share.get('wait_batch', 0.0):.0f}% "
            f"| {100 * share.get('learn', 0.0):.0f}% |"
        )
    lines += [
        "",
        "Actors' time per part (share of the actors' busy time, all actors): "
        + "; ".join(
            f"{row['actors']} actor(s): "
            + ", ".join(f"{part} {100 * value:.0f}%" for part, value in row["actor_share"].items())
            for row in report["runs"]
        ),
        "",
        f"![{stem}]({stem}.png)",
        "",
    ]
    return "\n".join(lines)


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
        _apex_fields(self.apex, COMPARE_SETS)
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
    """``python -m recipes.atari_ddqn train`` with the same env, arm, steps, seed, n-step and learner."""
    learner = dict(config.learner or {})
    if "hidden" in learner:
        learner["hidden"] = tuple(learner["hidden"])
    return load_config(
        config.env,
        config.arm,
        seed=seed,
        total_steps=config.total_steps,
        n_step=config.n_step,
        device=config.device,
        log_dir=f"{config.out}_runs/single",
        run_name=f"seed{seed}",
        tensorboard=False,
        progress=False,
        **learner,
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
    own = _start_ray(ray_cpus(apex_run(config, config.seed)))
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
        "command": "python -m recipes.apex_dqn " + shlex.join(argv),
        "machine": _machine(),
        "cores": os.cpu_count(),
        "device": results[0]["device"],
        "ray_version": ray.__version__,
        "config": asdict(config),
        "wall_s": wall,
        "loadavg_end": os.getloadavg(),
        "summary": {
            label: _summary([r for r in results if r["label"] == label], curves[label]) for label in labels
        },
        "curves": curves,
        "runs": [_compare_row(r) for r in results],
    }
    out = Path(config.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    plot(curves, out.with_suffix(".png"), title=compare_title(config))
    out.with_suffix(".md").write_text(_compare_markdown(report, out.stem))
    print(f"wrote {out}.json, {out}.png and {out}.md ({len(results)} runs)")
    return report


def compare_title(config: CompareConfig) -> str:
    return f"{config.env}, {config.total_steps:,} env steps, {_cores()}"


def _final(scores: list[float]) -> float:
    finite = [s for s in scores if s is not None and math.isfinite(s)]
    return finite[-1] if finite else math.nan


def _updates_per_step(result: dict[str, Any]) -> float:
    return result["updates"] / result["steps"] if result["steps"] else math.nan


def _compare_row(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "label": result["label"],
        "seed": result["config"]["seed"],
        "steps": result["steps"],
        "updates": result["updates"],
        "updates_per_env_step": _updates_per_step(result),
        "final_score": _final(result["eval_scores"]),
        "best_policy_score": result["best_policy_score"],
        "wall_s": result["wall_s"],
        "steps_per_s": result["steps_per_s"],
        "run_dir": result["run_dir"],
    }


def _summary(results: list[dict[str, Any]], curve: dict[str, Any]) -> dict[str, Any]:
    """Means over seeds (with min and max) of what the table shows."""

    def stats(values: list[float]) -> dict[str, float]:
        finite = [v for v in values if math.isfinite(v)]
        if not finite:
            return {"mean": math.nan, "min": math.nan, "max": math.nan}
        return {"mean": float(np.mean(finite)), "min": min(finite), "max": max(finite)}

    return {
        "seeds": len(results),
        "final_score": stats([_final(r["eval_scores"]) for r in results]),
        "best_policy_score": stats([r["best_policy_score"] for r in results]),
        "updates_per_env_step": stats([_updates_per_step(r) for r in results]),
        "wall_s": stats([r["wall_s"] for r in results]),
        "steps_per_s": stats([r["steps_per_s"] for r in results]),
        "eval_steps": curve["steps"],
    }


def _compare_markdown(report: dict[str, Any], stem: str) -> str:
    config = report["config"]

    def cell(s: dict[str, float], fmt: str) -> str:
        return f"{s['mean']:{fmt}} ({s['min']:{fmt}} to {s['max']:{fmt}})"

    lines = [
        f"# Ape-X against the single-process recipe on {config['env']}",
        "",
        "Written by `python -m recipes.apex_dqn compare` (`recipes/apex_studies.py`); discussion in "
        "`docs/recipes/apex_dqn.md`.",
        "",
        f"- command: `{report['command']}`",
        f"- machine: {report['machine']}; Ray {report['ray_version']}; learners on {report['device']}",
        f"- {config['total_steps']:,} env steps per run, seeds {config['seed']} to "
        f"{config['seed'] + config['seeds'] - 1}, arm {config['arm']}, n-step {config['n_step']} for both; "
        "the single-process runs are `python -m recipes.atari_ddqn train` with those values",
        f"- wall time: {report['wall_s']:,.0f} s",
        "",
        "| run | seeds | final score, mean (min to max) | best policy score, mean (min to max) "
        "| updates per env step | env steps/s | wall s per run |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, s in report["summary"].items():
        lines.append(
            f"| {label} | {s['seeds']} | {cell(s['final_score'], '.1f')} "
            f"| {cell(s['best_policy_score'], '.1f')} "
            f"| {s['updates_per_env_step']['mean']:.3f} | {s['steps_per_s']['mean']:,.0f} "
            f"| {s['wall_s']['mean']:,.0f} |"
        )
    lines += ["", f"![{stem}]({stem}.png)", ""]
    return "\n".join(lines)


# -- command line ----------------------------------------------------------------------------------


def main(argv: list[str]) -> dict[str, Any]:
    """``scaling`` or ``compare`` (``argv[0]``) with their options."""
    prog = f"python -m recipes.apex_dqn {argv[0]}"
    if argv[0] == "scaling":
        return scaling(cli.parse(ScalingConfig, argv[1:], prog=prog), argv)
    if argv[0] == "compare":
        return compare(cli.parse(CompareConfig, argv[1:], prog=prog), argv)
    print(f"error: the command should be scaling or compare, but got {argv[0]}", file=sys.stderr)
    raise SystemExit(2)
