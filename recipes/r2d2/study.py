"""The registered comparison of the R2D2 recipe: prioritized against uniform sequences, stored state
with burn-in against zero state (R2D2's own ablation, Kapturowski et al. 2019, Sec. 3).

The protocol is ``recipes/r2d2/configs/study.yaml`` (prose: ``docs/recipes/r2d2.md``), committed
before its first run.  Per task, seed by seed, every arm's run (``recipes/r2d2/train.py``) writes
``<runs>/<task>/<arm>/seed<k>.json``; a run whose JSON exists is skipped (the study resumes where it
stopped).  After each seed the results are rewritten from the seeds that *every* arm finished
(never part of a seed): ``docs/results/r2d2_<task>.json`` and ``.png``, holding per arm and seed the
AUC (the mean of the evaluation curve, the primary metric) and the final score, per arm their IQM
with a 95 % bootstrap interval, per arm against the baseline the interval of the IQM difference and
its verdict (``recipes/common/rl_metrics.py``), and what remains to run.

    python -m recipes.r2d2 study run --tasks TMaze --seeds 3        # the first 3 seeds of every arm
    python -m recipes.r2d2 study run --tasks TMaze,MaskedCartPole-v1 # all registered seeds
    python -m recipes.r2d2 study report                              # rewrite the results only
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from recipes.common import launch, outputs, rl_metrics
from recipes.common.cli import PlainHelpParser

__all__ = ["PROTOCOL", "load_protocol", "main", "report", "run", "run_config"]

PROTOCOL = Path(__file__).parent / "configs" / "study.yaml"
PROG = "python -m recipes.r2d2 study"


def load_protocol(path: Path = PROTOCOL) -> dict[str, Any]:
    """The registered protocol, as written."""
    protocol: dict[str, Any] = yaml.safe_load(path.read_text())
    return protocol


def _stem(task: str) -> str:
    return task.replace("/", "_").replace("-", "_").lower()


def run_path(runs: Path, task: str, arm: str, seed: int) -> Path:
    """Where one run's JSON goes."""
    return runs / _stem(task) / arm / f"seed{seed}.json"


def run_config(protocol: dict[str, Any], task: str, arm: str, seed: int, runs: Path) -> Any:
    """The :class:`~recipes.r2d2.config.R2D2Config` of one registered run: the task's preset, the
    task's ``set``, the arm's ``set``, the seed."""
    from recipes.r2d2.config import R2D2Config, load_preset

    spec = protocol["tasks"][task]
    values = {**load_preset(spec["preset"]), **spec.get("set", {}), **protocol["arms"][arm]["set"]}
    return R2D2Config(**values, seed=seed, out=str(run_path(runs, task, arm, seed)))


def _complete_seeds(protocol: dict[str, Any], task: str, runs: Path) -> list[int]:
    """The registered seeds every arm of ``task`` finished, in order."""
    seeds = protocol["tasks"][task]["seeds"]
    return [s for s in seeds if all(run_path(runs, task, a, s).exists() for a in protocol["arms"])]


def report(
    protocol: dict[str, Any], task: str, runs: Path, out_dir: Path, command: str
) -> dict[str, Any] | None:
    """Write ``<out_dir>/r2d2_<task>.json`` and ``.png`` from the task's complete seeds; ``None``
    when fewer than 2 are complete (no interval can be drawn)."""
    seeds = _complete_seeds(protocol, task, runs)
    if len(seeds) < 2:
        return None
    arms: dict[str, Any] = {}
    for arm in protocol["arms"]:
        records = [json.loads(run_path(runs, task, arm, s).read_text()) for s in seeds]
        aucs = [rl_metrics.auc(r["returns"]) for r in records]
        finals = [rl_metrics.final(r["returns"]) for r in records]
        arms[arm] = {
            "seeds": seeds,
            "auc": aucs,
            "final": finals,
            "auc_iqm": rl_metrics.iqm_interval(aucs),
            "final_iqm": rl_metrics.iqm_interval(finals),
            "eval_steps": records[0]["eval_steps"],
            "returns": [r["returns"] for r in records],
            "steps_per_s": [r["steps_per_s"] for r in records],
            "dropped_updates": [r["dropped_updates"] for r in records],
        }
    base = protocol["baseline"]
    comparisons = {
        arm: rl_metrics.compare(arms[arm]["auc"], arms[base]["auc"]) for arm in arms if arm != base
    }
    registered = protocol["tasks"][task]["seeds"]
    results = {
        "task": task,
        "command": command,
        "machine": outputs.machine_description(),
        "protocol": protocol,
        "arms": arms,
        "comparisons": comparisons,
        "verdict": {
            arm: f"{arm} vs {base}: {c['verdict']} (AUC IQM difference {c['difference'][0]:+.2f}, "
            f"95% CI {c['difference'][1]:+.2f} to {c['difference'][2]:+.2f})"
            for arm, c in comparisons.items()
        },
        "complete": len(seeds) == len(registered),
        "remaining_seeds": [s for s in registered if s not in seeds],
    }
    stem = f"r2d2_{_stem(task)}"
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs.write_json(out_dir / f"{stem}.json", results, compact_lists=True)
    plot(results, out_dir / f"{stem}.png")
    return results


def plot(results: dict[str, Any], path: Path) -> Path:
    """Left: each arm's mean evaluation curve with one line per seed; right: per-seed AUC (dots)
    and the arm's IQM with its interval."""
    with outputs.figure(path, figsize=(10.0, 3.8), ncols=2) as (_, (curves, aucs)):
        for i, (arm, data) in enumerate(results["arms"].items()):
            color = f"C{i}"
            steps = np.asarray(data["eval_steps"])
            returns = np.asarray(data["returns"], dtype=np.float64)
            for row in returns:
                curves.plot(steps, row, color=color, alpha=0.2, lw=0.8)
            curves.plot(steps, returns.mean(axis=0), color=color, lw=2, label=arm)
            point, low, high = data["auc_iqm"]
            values = np.asarray(data["auc"])
            aucs.scatter(i + np.linspace(-0.15, 0.15, len(values)), values, s=10, color="gray", zorder=2)
            aucs.errorbar(i, point, yerr=[[point - low], [high - point]], fmt="o", color=color, capsize=4)
        curves.set_xlabel("agent steps")
        curves.set_ylabel("greedy evaluation return")
        curves.legend(fontsize=8)
        curves.set_title(f"{results['task']}: {len(data['seeds'])} seeds per arm", fontsize=9)
        aucs.set_xticks(range(len(results["arms"])))
        aucs.set_xticklabels(list(results["arms"]), fontsize=8)
        aucs.set_ylabel("AUC: mean evaluation return; IQM [95% CI]")
        for ax in (curves, aucs):
            ax.grid(True, alpha=0.3)
    return path


def run(
    protocol: dict[str, Any], tasks: list[str], seeds: int | None, runs: Path, out_dir: Path, command: str
) -> None:
    """Every missing run of ``tasks`` (the first ``seeds`` registered seeds), seed by seed, each
    seed's arms together; the results rewritten after every seed."""
    import torch

    from recipes.r2d2.train import train

    torch.set_num_threads(1)
    for task in tasks:
        for seed in protocol["tasks"][task]["seeds"][:seeds]:
            for arm in protocol["arms"]:
                config = run_config(protocol, task, arm, seed, runs)
                if Path(config.out).exists():
                    continue
                record = train(dataclasses.replace(config, out=config.out + ".partial"))
                Path(config.out + ".partial").rename(config.out)
                print(f"{task} {arm} seed {seed}: AUC {rl_metrics.auc(record['returns']):.2f}", flush=True)
            report(protocol, task, runs, out_dir, command)


def main(argv: list[str]) -> None:
    """``python -m recipes.r2d2 study run|report [options]``; no command prints the usage."""
    parser = PlainHelpParser(prog=PROG, description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "command", choices=("run", "report"), help="run: train the missing runs; report: rewrite the results"
    )
    parser.add_argument("--tasks", default=None, help="comma list of registered tasks (default: all)")
    parser.add_argument("--seeds", type=int, default=None, help="only the first this many registered seeds")
    parser.add_argument("--runs", default="runs/r2d2_study", help="folder of the runs' JSON")
    parser.add_argument("--out_dir", default="docs/results", help="folder of r2d2_<task>.json and .png")
    if not argv:
        parser.print_help()
        raise SystemExit(0)
    yes, options = launch.take_yes(argv)
    args = parser.parse_args(options)
    protocol = load_protocol()
    tasks = list(protocol["tasks"]) if args.tasks is None else [t.strip() for t in args.tasks.split(",")]
    unknown = [t for t in tasks if t not in protocol["tasks"]]
    if unknown or (args.seeds is not None and args.seeds < 1):
        bad = f"--tasks should name registered tasks ({', '.join(protocol['tasks'])}), but got {args.tasks}"
        print(
            f"error: {bad if unknown else f'--seeds should be >= 1, but got {args.seeds}'}", file=sys.stderr
        )
        raise SystemExit(2)
    runs, out_dir = Path(args.runs), Path(args.out_dir)
    command = outputs.argv_command(f"{PROG}", argv)
    if args.command == "report":
        for task in tasks:
            if report(protocol, task, runs, out_dir, command) is None:
                print(f"{task}: fewer than 2 seeds finished by every arm; nothing written")
        return
    missing = [
        (t, a, s)
        for t in tasks
        for s in protocol["tasks"][t]["seeds"][: args.seeds]
        for a in protocol["arms"]
        if not run_path(runs, t, a, s).exists()
    ]
    steps = sum(protocol["tasks"][t]["set"]["total_steps"] for t, _, _ in missing)
    rate = launch.Measured(
        protocol["budget"]["steps_per_s"],
        str(PROTOCOL.relative_to(launch.ROOT)),
        protocol["budget"]["measured"],
    )
    plan = launch.RunPlan(
        command=f"{PROG} run",
        what=f"{len(missing)} R2D2 runs (finished ones under {runs} are skipped)",
        steps=steps,
        out_dir=f"{runs}/<task>/<arm>/seed<k>.json and {out_dir}/r2d2_<task>.json, .png",
        short="--seeds 2 (whole seeds of every arm)",
        rate=rate,
        exact=True,
    )
    launch.confirm(plan, yes)
    run(protocol, tasks, args.seeds, runs, out_dir, command)
