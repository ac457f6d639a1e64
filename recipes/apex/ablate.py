"""Why Ape-X learns worse than one process: ``python -m recipes.apex ablate``.

At the single-process recipe's replay ratio (``matched``), Ape-X still differs from
``python -m recipes.dqn train`` in what it is built of.  This study removes those differences one
at a time (:data:`ABLATIONS`: each is ``apex_matched`` with one set of ``ApexConfig`` fields taking
the single process's value), then all of them together (``apex_all_matched``), and runs every arm
with the same seeds, env steps and evaluation as the single process::

    single            python -m recipes.dqn train (n-step 3)
    apex_matched      Ape-X, min_replay_ratio = max_replay_ratio = 1 / replay_period
    apex_free         Ape-X as published (no rate limit): the replay ratio's part of the gap
    ablation <name>   apex_matched with ABLATIONS[name]
    apex_all_matched  apex_matched with every ablation's fields

Each run is one process of its own (a Ray of its own for Ape-X), ``jobs`` at a time, in seed-major
order, so a study cut short holds whole seeds.  A run whose result file is already in its folder is
read, not rerun (``--rerun true`` reruns it).  ``<out>.json`` (per arm and seed the final score and
the AUC; per arm their IQM with a 95 % bootstrap interval; each arm against ``apex_matched`` and
against ``single``), ``<out>.md`` and ``<out>.png`` are rewritten after every run::

    python -m recipes.apex ablate --env CartPole-v1 --actors 2 --total_steps 50000 --seeds 5 \\
        --out runs/apex_dqn/apex_matched
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from recipes.apex.ablate_config import (
    ABLATIONS,
    ALL,
    FIRST,
    FREE,
    MATCHED,
    SECOND,
    SINGLE,
    AblateConfig,
    Run,
    all_matched,
    arms,
    parse_command,
    run_plan,
    tasks,
)
from recipes.apex.config import ApexConfig, run_dir
from recipes.apex.report import ablate_markdown, ablate_summary, compare_row
from recipes.common import launch, outputs
from recipes.common.provenance import now, source_tree
from recipes.dqn.config import run_dir as single_dir
from recipes.dqn.sweep_report import collect, plot

__all__ = [
    "ABLATIONS",
    "ALL",
    "FIRST",
    "FREE",
    "MATCHED",
    "RUN_RECORD",
    "SECOND",
    "SINGLE",
    "AblateConfig",
    "Run",
    "ablate",
    "all_matched",
    "arms",
    "main",
    "result_path",
    "run_one",
    "tasks",
    "write",
]


def result_path(run: Run) -> Path:
    if isinstance(run, ApexConfig):
        return run_dir(run) / "apex_dqn.json"
    return single_dir(run) / "result.json"


RUN_RECORD = "run_record.json"
"""Beside each run's result file: when it ran, the load average at its start and end, and the
commit of its code (:mod:`recipes.common.provenance`)."""


def run_one(task: tuple[str, int, Run, bool]) -> dict[str, Any]:
    """One run (in a process of its own), or its result file when there is one and not ``rerun``;
    with its :data:`RUN_RECORD` (``run_record``, empty for a run that predates the record)."""
    label, _, run, rerun = task
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    path = result_path(run)
    record = path.parent / RUN_RECORD
    if path.exists() and not rerun:
        result: dict[str, Any] = json.loads(path.read_text())
        return {
            **result,
            "label": label,
            "run_record": json.loads(record.read_text()) if record.exists() else {},
        }
    started = {"started": now(), "loadavg_start": list(os.getloadavg()), "code": source_tree()}
    if isinstance(run, ApexConfig):
        from recipes.apex.run import train

        result = train(run)
    else:
        from recipes.dqn.run import train as train_single

        result = asdict(train_single(run))
    ran = {**started, "ended": now(), "loadavg_end": list(os.getloadavg())}
    outputs.write_json(record, ran)
    return {**result, "label": label, "run_record": ran}


def ablate(config: AblateConfig, argv: list[str]) -> dict[str, Any]:
    """Every run, ``jobs`` at a time; the report rewritten after each."""
    started = time.perf_counter()
    todo = tasks(config)
    results: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    if config.report_only:
        for label, seed, run in todo:
            if result_path(run).exists():
                results.append(run_one((label, seed, run, False)))
        print(f"{len(results)} of {len(todo)} runs have finished")
        return write(config, argv, results, todo, time.perf_counter() - started) if results else report
    context = multiprocessing.get_context("spawn")  # a fresh process (and Ray) per run
    with context.Pool(config.jobs, maxtasksperchild=1) as pool:
        work = [(label, seed, run, config.rerun) for label, seed, run in todo]
        for result in pool.imap_unordered(run_one, work):
            results.append(result)
            print(
                f"{result['label']}, seed {result['config']['seed']}: {result['wall_s']:.0f} s, "
                f"{result['updates']} updates, final {compare_row(result)['final_score']:.1f} "
                f"({len(results)}/{len(todo)})",
                flush=True,
            )
            report = write(config, argv, results, todo, time.perf_counter() - started)
    return report


def write(
    config: AblateConfig,
    argv: list[str],
    results: list[dict[str, Any]],
    todo: list[tuple[str, int, Run]],
    wall: float,
) -> dict[str, Any]:
    """``<out>.json``, ``<out>.md`` and ``<out>.png`` of the runs finished so far."""
    from recipes.apex.report import provenance

    order = [label for label, _ in arms(config)]
    results = sorted(results, key=lambda r: (order.index(r["label"]), r["config"]["seed"]))
    done = {(r["label"], r["config"]["seed"]) for r in results}
    missing = [f"{label} seed {seed}" for label, seed, _ in todo if (label, seed) not in done]
    results = [{**r, "curve": f"{config.arm} {r['label']}"} for r in results]  # collect's names
    curves = collect([{**r, "label": r["curve"]} for r in results])
    device = next((r["device"] for r in results if "device" in r), config.device)  # result.json has none
    report = {
        **provenance(argv, device, asdict(config)),
        "wall_s": wall,
        "loadavg_end": os.getloadavg(),
        "partial": bool(missing),
        "missing": missing,
        "ablation_fields": {**ABLATIONS, "all": all_matched()},
        **ablate_summary(results, curves, order),
        "runs": [compare_row(r) for r in results],
        "curves": curves,
    }
    out = Path(config.out)
    outputs.write_results(
        out.parent,
        out.stem,
        report,
        table=ablate_markdown(report, out.stem),
        figure=lambda folder: plot(
            curves, folder / f"{out.stem}.png", title=f"{config.env}, {config.total_steps:,} env steps"
        ),
    )
    return report


def main(argv: list[str]) -> dict[str, Any]:
    """``python -m recipes.apex ablate [options]``; ``--help`` lists them."""
    yes, argv = launch.take_yes(argv)
    config = parse_command(argv)
    if not config.report_only:  # a report from the runs on disk runs nothing
        launch.confirm(run_plan(config), yes)
    return ablate(config, ["ablate", *argv])
