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
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import ray

from recipes.apex.config import ray_cpus, start_ray
from recipes.apex.report import (
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
from recipes.apex.study_config import (
    CompareConfig,
    ScalingConfig,
    apex_run,
    parse_study,
    scaling_run,
    single_run,
    study_plan,
)
from recipes.common import launch, outputs
from recipes.dqn.run import train as train_single
from recipes.dqn.sweep_report import collect, plot

# -- throughput against actors ----------------------------------------------------------------------


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
    """``python -m recipes.apex scaling|compare [options]``; ``--help`` lists them.  What will run is
    printed first (and asked about on a terminal when over an hour; ``--yes`` does not ask)."""
    yes, args = launch.take_yes(sys.argv[1:] if argv is None else argv)  # args: what the JSON records
    command, config = parse_study(args)
    launch.confirm(study_plan(command, config), yes)
    if isinstance(config, ScalingConfig):
        return scaling(config, args)
    assert isinstance(config, CompareConfig)
    return compare(config, args)
