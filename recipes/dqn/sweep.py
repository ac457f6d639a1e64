"""Sweeps of the Double DQN recipe: many (arm, seed) runs in parallel processes, one JSON, PNGs and table.

``python -m recipes.dqn sweep --env CartPole-v1 --seeds 5 --jobs 14`` runs every arm × seed
(× every point of ``--grid``) of one environment and writes (``--out docs/results/cartpole`` for
the committed results)

* ``<out>.json``: ``{curve: {"steps": [...], "returns": [[score per seed] per step], ...,
  "log_steps", "weight_mean"}}``, one curve per arm (per arm and grid point with ``--grid``): the
  evaluation score of each seed at each evaluation (``null`` where a run stopped earlier or no
  episode finished), and the mean importance weight ``per/weight_mean`` of each logged row;
* ``<out>.png``: mean evaluation score over seeds with the min–max band, at the evaluations every
  seed reached; ``<out>_weights.png``: the same for ``per/weight_mean``;
* ``<out>.md``: the command, the machine, steps/s and wall time per run, a summary table.

``python -m recipes.dqn plot --json <out>.json [--metric weight_mean]`` re-draws a PNG from
the JSON.  This module imports the recipe (``recipes.dqn.agent``); the recipe does not import it.
The curves, plots and table are built in ``recipes/dqn/sweep_report.py``.

The importance-weight ablation (``docs/results/weight_ablation.md``) is a sweep with a grid::

    python -m recipes.dqn sweep --env MinAtar/Breakout-v1 --arms proportional \\
        --grid '{"priority_eps": [1e-6, 1e-3, 1e-2], "weight_norm": ["memory", "batch"]}' ...
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from recipes.common import cli, launch, outputs
from recipes.common.provenance import SOURCE_FILE
from recipes.dqn import sweep_report as report
from recipes.dqn.config import DDQNConfig, run_dir, same_config
from recipes.dqn.plan import sweep_plan
from recipes.dqn.run import train
from recipes.dqn.sweep_config import (
    COMMANDS as COMMANDS,
)
from recipes.dqn.sweep_config import (
    EPILOG as EPILOG,
)
from recipes.dqn.sweep_config import (
    PlotConfig as PlotConfig,
)
from recipes.dqn.sweep_config import (
    SweepConfig as SweepConfig,
)
from recipes.dqn.sweep_config import (
    arm_list as arm_list,
)
from recipes.dqn.sweep_config import (
    grid_points as grid_points,
)
from recipes.dqn.sweep_config import (
    label as label,
)
from recipes.dqn.sweep_config import (
    parse_command,
)
from recipes.dqn.sweep_config import (
    run_config as run_config,
)


def _run(config: DDQNConfig, name: str) -> dict[str, Any]:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    return {**asdict(train(config)), "label": name}


def sweep(config: SweepConfig) -> dict[str, Any]:
    """Run every (arm, seed), then write ``<out>.json``, ``<out>.png`` and ``<out>.md``.

    ``<out>.json`` is rewritten after every finished run, and a run that fails is reported and
    left out, so a sweep cut short still leaves the curves of the runs that finished.
    """
    runs, names = [], []
    for arm in arm_list(config):
        for point in grid_points(config):
            for k in range(config.seeds):
                runs.append(run_config(config, arm, config.seed + k, point))
                names.append(label(arm, point))
    out = Path(config.out)
    started = time.perf_counter()
    finished = run_all(runs, names, config.jobs, out.with_suffix(".json"), desc=f"sweep {config.env}")
    wall = time.perf_counter() - started
    curves = report.collect(finished)

    def figures(_: Path) -> list[Path]:
        weights = out.with_name(out.name + "_weights.png")
        return [
            report.plot(curves, out.with_suffix(".png"), title=config.env),
            report.plot(curves, weights, title=config.env, metric="weight_mean"),
        ]

    table = markdown(config, finished, curves, wall, out.stem)
    outputs.write_results(out.parent, out.stem, curves, table, figures, compact_lists=True)
    print(f"wrote {out}.json, {out}.png and {out}.md ({len(finished)} of {len(runs)} runs, {wall:.0f} s)")
    return curves


def finished_result(run: DDQNConfig) -> dict[str, Any] | None:
    """The ``result.json`` a finished run left in its directory, if it ran with exactly this config
    to the end (``stopped == "done"``); None otherwise."""
    path = run_dir(run) / "result.json"
    if not path.exists():
        return None
    result: dict[str, Any] = json.loads(path.read_text())
    same = isinstance(result.get("config"), dict) and same_config(result["config"], run)
    return counted_resumes(result, path.parent) if same and result.get("stopped") == "done" else None


def counted_resumes(result: dict[str, Any], directory: Path) -> dict[str, Any]:
    """``result`` with its ``resumes``.  A result written before runs counted them took ``wall_s``
    and ``steps_per_s`` from its last process alone; where the run's ``source.json`` lists more than
    one start, the run's wall time is unknown, so both become None."""
    if "resumes" in result:
        return result
    path = directory / SOURCE_FILE
    starts = json.loads(path.read_text()) if path.exists() else []
    resumes = max(len(starts) - 1, 0)
    unknown = {"wall_s": None, "steps_per_s": None} if resumes else {}
    return {**result, "resumes": resumes, **unknown}


def run_all(
    runs: list[DDQNConfig], names: list[str], jobs: int, out_json: Path, desc: str, reuse: bool = False
) -> list[dict[str, Any]]:
    """Train every run (``jobs`` at a time, one process and one torch thread each) and return the
    ``result.json`` records of those that finished, each with its curve's name as ``label``.

    ``out_json`` is rewritten with the curves (:func:`recipes.dqn.sweep_report.collect`) after every
    finished run, and a run that fails is reported and left out, so a sweep cut short still leaves
    the curves of the runs that finished.  ``reuse``: a run whose directory holds the result of the
    same config run to the end (:func:`finished_result`) is taken as it is, not run again, so a
    sweep that was stopped continues where it stood."""
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the workers before torch starts there
    out_json.parent.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any] | None] = [None] * len(runs)
    for i, run in enumerate(runs):
        earlier = finished_result(run) if reuse else None
        if earlier is not None:
            results[i] = {**earlier, "label": names[i]}
    todo = [i for i, r in enumerate(results) if r is None]
    bar = tqdm(total=len(runs), initial=len(runs) - len(todo), desc=desc, unit="run")

    def finish(i: int, outcome: dict[str, Any] | BaseException) -> None:
        run = runs[i]
        if isinstance(outcome, BaseException):
            print(f"run {run.arm} seed {run.seed} failed: {outcome!r}", file=sys.stderr)
        else:
            results[i] = outcome
            rate = outcome["steps_per_s"]
            speed = "speed unknown" if rate is None else f"{rate:.0f} steps/s"
            bar.set_postfix_str(f"{run.arm} s{run.seed}: {speed}", refresh=False)
            outputs.write_json(
                out_json, report.collect([r for r in results if r is not None]), compact_lists=True
            )
        bar.update()

    if jobs == 1:
        for i in todo:
            run = runs[i]
            try:
                outcome: dict[str, Any] | BaseException = _run(run, names[i])
            except Exception as failure:
                outcome = failure
            finish(i, outcome)
    else:
        context = multiprocessing.get_context("spawn")  # CUDA and torch threads need fresh processes
        with ProcessPoolExecutor(max(1, min(jobs, len(todo))), mp_context=context) as pool:
            futures = {pool.submit(_run, runs[i], names[i]): i for i in todo}
            for future in as_completed(futures):
                error = future.exception()
                finish(futures[future], error if error is not None else future.result())
    bar.close()
    finished = [r for r in results if r is not None]
    if not finished:
        raise RuntimeError(f"every run of the sweep failed (see above); nothing written to {out_json}")
    return finished


def replot(config: PlotConfig) -> Path:
    """``plot`` command: the PNG of a sweep JSON."""
    source = Path(config.json)
    if config.runs is not None:
        results = [json.loads(p.read_text()) for p in sorted(Path(config.runs).rglob("result.json"))]
        if not results:
            raise ValueError(f"no result.json under runs={config.runs!r}")
        source.write_text(report.to_json(report.collect(results)))
    curves = json.loads(source.read_text())
    cli.one_of(config, "metric", ("returns", "weight_mean"))
    suffix = ".png" if config.metric == "returns" else "_weights.png"
    out = Path(config.out) if config.out else source.with_name(source.stem + suffix)
    report.plot(curves, out, title=config.title or source.stem, metric=config.metric)
    print(f"wrote {out}")
    return out


def command_line(config: SweepConfig) -> str:
    """The command that reproduces the sweep: its non-default arguments."""
    return outputs.command_line("python -m recipes.dqn sweep", config, SweepConfig())


def markdown(
    config: SweepConfig,
    results: list[dict[str, Any]],
    curves: dict[str, Any],
    wall: float,
    stem: str,
    machine: str | None = None,
) -> str:
    """The sweep's record (:func:`recipes.dqn.sweep_report.markdown`) with each arm's settings and
    the command that reproduces it."""
    return report.markdown(config, config.jobs, command_line(config), results, curves, wall, stem, machine)


def main(argv: list[str] | None = None) -> Any:
    """``python -m recipes.dqn sweep|plot [options]``; ``--help`` lists the options.  Before a sweep
    starts, what it will run and its estimated time are printed (and asked about on a terminal
    when over an hour; ``--yes`` does not ask)."""
    yes, options = launch.take_yes(sys.argv[1:] if argv is None else argv)
    config = parse_command(options)
    if isinstance(config, PlotConfig):
        return replot(config)
    launch.confirm(sweep_plan(config), yes)
    return sweep(config)
