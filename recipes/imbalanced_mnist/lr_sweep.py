"""The step-size selection of the imbalanced-MNIST recipe (Schaul et al. 2016, Sec. 6).

The paper tried the step sizes 0.3, 0.1, 0.03, 0.01, 0.003 and 0.001 and kept, for each arm, the
one with the best balanced validation performance.  At demo scale::

    for each step size η of the grid:
        run every arm for seeds 0..S-1 (``max_steps`` updates each) with step size η
        e(arm, η) = median over seeds of the validation errors after the last update
    η*(arm) = argmin_η e(arm, η)      (ties: the step size listed first in the grid)

The median over the comparison's seeds, not one seed: with one seed a step size on the edge of
divergence can win the sweep and then diverge on another seed of the comparison.

and compare η* with the step size in the arm's config (``recipes/imbalanced_mnist/configs``).
Each run is one ``python -m recipes.imbalanced_mnist compare`` run with ``--lr η``, so it uses one
torch thread and derived seeds, and the same command on the same kind of machine writes the same
numbers.

    python -m recipes.imbalanced_mnist lr-sweep                       # -> runs/imbalanced_mnist_lr_sweep/
    python -m recipes.imbalanced_mnist lr-sweep --out_dir docs/results  # the committed sweep
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import yaml

from recipes.common import launch, outputs
from recipes.imbalanced_mnist.config import (
    ARMS,
    CONFIG_DIR,
    CompareConfig,
    SweepConfig,
    parse_sweep,
    sweep_plan,
)
from recipes.imbalanced_mnist.experiment import compare


def configured_step_size(arm: str) -> float:
    """The step size in ``recipes/imbalanced_mnist/configs/<arm>.yaml``."""
    return float(yaml.safe_load((CONFIG_DIR / f"{arm}.yaml").read_text())["model"]["lr"])


def best_step_sizes(runs: Sequence[dict[str, Any]], step_sizes: Sequence[float]) -> dict[str, float]:
    """``η*(arm) = argmin_η`` median validation errors; ties go to the step size listed first."""
    order = {lr: i for i, lr in enumerate(step_sizes)}
    best: dict[str, float] = {}
    for arm in dict.fromkeys(r["arm"] for r in runs):
        mine = [r for r in runs if r["arm"] == arm]
        best[arm] = min(mine, key=lambda r: (r["val_errors_median"], order[r["lr"]]))["lr"]
    return best


def sweep(config: SweepConfig) -> dict[str, Any]:
    """Every arm at every step size; the JSON: dataset, criterion, runs, best and configured η."""
    runs: list[dict[str, Any]] = []
    dataset = ""
    for lr in config.step_sizes:
        results = compare(
            CompareConfig(
                arms=config.arms,
                seeds=config.seeds,
                max_steps=config.max_steps,
                eval_every=config.eval_every,
                lr=lr,
                root=config.root,
                dataset=config.dataset,
                workers=config.workers,
                overrides=config.overrides,
            )
        )
        dataset = results["dataset"]
        for arm, curves in results["arms"].items():
            errors, losses = curves["val_errors"][-1], curves["val_loss"][-1]  # one value per seed
            runs.append(
                {
                    "arm": arm,
                    "lr": lr,
                    "val_errors_median": float(np.median(errors)),
                    "val_errors_final": [float(e) for e in errors],
                    "val_loss_final": [loss if math.isfinite(loss) else None for loss in losses],
                }
            )
    return {
        "dataset": dataset,
        "criterion": (
            f"median over {config.seeds} seed(s) of the validation errors (balanced) "
            f"after {config.max_steps:,} updates"
        ),
        "runs": runs,
        "best": best_step_sizes(runs, config.step_sizes),
        "configured": {arm: configured_step_size(arm) for arm in config.arms},
    }


def table(results: dict[str, Any], step_sizes: Sequence[float]) -> str:
    """Median validation errors (min-max over seeds) per arm and step size, the best in bold, then
    the configured step size."""
    rows = []
    for arm in results["best"]:
        mine = {r["lr"]: r for r in results["runs"] if r["arm"] == arm}
        cells = [
            f"{mine[lr]['val_errors_median']:.0f} ({min(mine[lr]['val_errors_final']):.0f}-"
            f"{max(mine[lr]['val_errors_final']):.0f})"
            for lr in step_sizes
        ]
        cells = [
            f"**{c}**" if lr == results["best"][arm] else c for c, lr in zip(cells, step_sizes, strict=True)
        ]
        rows.append([arm, *cells, results["configured"][arm]])
    return outputs.markdown_table(["arm", *map(str, step_sizes), "configured"], rows)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    prog = "python -m recipes.imbalanced_mnist lr-sweep"
    yes, argv = launch.take_yes(sys.argv[1:] if argv is None else argv)
    config = parse_sweep(argv)
    launch.confirm(sweep_plan(config), yes)
    start = time.perf_counter()
    results = sweep(config)
    runtime = time.perf_counter() - start
    command = outputs.command_line(prog, config, SweepConfig())
    results = {"command": command, **results, "runtime_s": round(runtime, 1)}
    text = "\n".join(
        [
            f"# Imbalanced {results['dataset']}: step-size sweep",
            "",
            f"- command: `{command}`",
            f"- runtime: {runtime:.0f} s; {outputs.machine_description()}",
            f"- {results['criterion']}; the best step size per arm in bold",
            "",
            table(results, config.step_sizes),
            "",
        ]
    )
    outputs.write_results(config.out_dir, "imbalanced_mnist_lr_sweep", results, text)
    mismatched = {a: b for a, b in results["best"].items() if b != results["configured"][a]}
    print(f"wrote {config.out_dir}/imbalanced_mnist_lr_sweep.{{json,md}} in {runtime:.0f} s; ", end="")
    print(f"configs differ from the sweep for {mismatched}" if mismatched else "configs agree with the sweep")
    return results


__all__ = ["ARMS", "SweepConfig", "best_step_sizes", "configured_step_size", "main", "sweep", "table"]
