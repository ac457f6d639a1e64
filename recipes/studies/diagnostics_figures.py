"""The paper's replay diagnostics on two short runs (Schaul et al. 2016, Sec. 5, Figs. 10-11).

1. Double DQN on MinAtar Breakout (``python -m recipes.dqn train`` with ``--diagnostics``), one run per
   arm: replay counts ``M_i`` (how many transitions leave the sliding window never replayed),
   the sorted last-seen ``|δ|`` of the memory over training (Fig. 10), the effective replay
   probability ``P(i)`` against ``|δ_i|`` (Fig. 11) and the importance weights.
2. Prioritized supervised learning on class-imbalanced MNIST (``recipes/imbalanced_mnist/experiment.py``'s
   prioritized arm, α = 1, β = 0) with the Lightning callback's ``diagnostics=``: the same
   figures for a dataset (every example present from the start, priorities = last-seen losses).

Each run writes ``<name>_diagnostics.json`` and ``<name>_{td_sorted,probability_vs_error,weights,
replay_counts}.png`` under ``--out``; ``--out docs/results/diagnostics`` writes the committed
copies.  The DQN memory is ``--memory_size`` transitions (default 10,000, smaller than the run,
so that the window slides and items are evicted, as in the paper's 10^6-of-50M setting)::

    python -m recipes.studies diagnostics-figures --steps 40000 --mnist_steps 2000 --out runs/diagnostics
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from prisample.diagnostics import Diagnostics
from recipes.common import launch, outputs
from recipes.studies.diagnostics_figures_config import (
    DQN_ARMS,
    PARTS,
    PROG,
    FiguresConfig,
    parse,
    run_plan,
)

__all__ = ["DQN_ARMS", "PARTS", "FiguresConfig", "main", "run_dqn", "run_mnist"]


def _copy_outputs(source: Path, prefix: str, out: Path) -> list[Path]:
    """``source/diagnostics*`` copied to ``out/<prefix>_*``."""
    written = []
    for path in sorted(source.glob("diagnostics*")):
        target = out / path.name.replace("diagnostics", prefix, 1)
        if path.suffix == ".json":
            target = out / f"{prefix}_diagnostics.json"
        shutil.copyfile(path, target)
        written.append(target)
    return written


def run_dqn(config: FiguresConfig, arm: str, out: Path) -> dict[str, Any]:
    """One DQN run of ``arm`` with ``--diagnostics``; its outputs copied under ``out``."""
    from recipes.dqn.config import load_config, run_dir
    from recipes.dqn.run import train

    name = f"{config.env.split('/')[-1].split('-')[0].lower()}_{arm}"
    cfg = load_config(
        config.env,
        arm,
        total_steps=config.steps,
        learning_starts=config.learning_starts,
        memory_size=config.memory_size,
        replay_period=config.replay_period,
        log_every=config.log_every,
        eval_every=config.steps,
        eval_steps=min(5_000, config.steps),
        eval_episodes=10,
        eps_decay_steps=max(1, min(100_000, config.steps - config.learning_starts) // 2),
        seed=config.seed,
        threads=config.threads,
        log_dir=str(out / "runs"),
        run_name=name,
        progress=False,
        tensorboard=False,
        diagnostics=True,
    )
    result = train(cfg)
    files = _copy_outputs(run_dir(cfg), name, out)
    summary = json.loads((run_dir(cfg) / "diagnostics.json").read_text())["replay_counts"]["summary"]
    return {
        "name": name,
        "files": [str(f) for f in files],
        "steps": result.steps,
        "updates": result.updates,
        "wall_s": None if result.wall_s is None else round(result.wall_s, 1),
        "replay_counts": summary,
    }


def run_mnist(config: FiguresConfig, out: Path) -> dict[str, Any]:
    """The prioritized imbalanced-MNIST arm (α = 1, β = 0) with the callback's ``diagnostics=``."""
    import lightning.pytorch as pl
    import torch

    from prisample.lightning import PrioritizedSamplingCallback
    from recipes.imbalanced_mnist.config import TRAINER_DEFAULTS
    from recipes.imbalanced_mnist.experiment import ImbalancedClassifier, ImbalancedMNISTDataModule

    class DiagnosedClassifier(ImbalancedClassifier):
        """The recipe's classifier whose callback also records diagnostics."""

        diagnosed: PrioritizedSamplingCallback | None = None

        def configure_callbacks(self) -> list[pl.Callback]:
            return [] if self.diagnosed is None else [self.diagnosed]

    torch.set_num_threads(config.threads)
    pl.seed_everything(config.seed, verbose=False)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    name = "mnist_prioritized"
    data = ImbalancedMNISTDataModule(
        root=config.root, dataset=config.dataset, sampler="prioritized", alpha=1.0, beta=0.0
    )
    model = DiagnosedClassifier(lr=0.1)
    diagnostics = Diagnostics()
    model.diagnosed = PrioritizedSamplingCallback(diagnostics=diagnostics)
    trainer = pl.Trainer(
        **{**TRAINER_DEFAULTS, "check_val_every_n_epoch": 1},
        limit_val_batches=0,
        max_steps=config.mnist_steps,
        log_every_n_steps=config.mnist_log_every,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    started = time.perf_counter()
    trainer.fit(model, datamodule=data)
    title = f"imbalanced {data.dataset_name}, prioritized (α = 1, β = 0)"
    files = [
        diagnostics.save_json(out / f"{name}_diagnostics.json"),
        *diagnostics.plot(out / name, title=title),
    ]
    assert diagnostics.counter is not None
    return {
        "name": name,
        "dataset": data.dataset_name,
        "files": [str(f) for f in files],
        "updates": int(trainer.global_step),
        "wall_s": round(time.perf_counter() - started, 1),
        "replay_counts": diagnostics.counter.summary(),
    }


def _no_nan(obj: Any) -> Any:
    """NaN (the summary of nothing) as JSON's null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: _no_nan(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_no_nan(value) for value in obj]
    return obj


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``python -m recipes.studies diagnostics-figures [options]``; ``--help`` lists them.  What it
    runs and its estimated time are printed first (and asked about on a terminal when over an hour;
    ``--yes`` does not ask)."""
    yes, options = launch.take_yes(sys.argv[1:] if argv is None else argv)
    config = parse(options)
    launch.confirm(run_plan(config), yes)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs = []
    if "dqn" in config.parts:
        runs += [run_dqn(config, arm, out) for arm in config.arms]
    if "mnist" in config.parts:
        runs.append(run_mnist(config, out))
    command = outputs.command_line(PROG, config, FiguresConfig())
    report = {"command": command, "runs": runs, "wall_s": round(time.perf_counter() - started, 1)}
    outputs.write_json(out / "diagnostics_figures.json", _no_nan(report))
    for run in runs:
        print(f"{run['name']}: {len(run['files'])} files in {run['wall_s']} s")
    print(f"wrote {out}/diagnostics_figures.json in {report['wall_s']} s")
    return report
