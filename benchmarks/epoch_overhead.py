"""The prioritized sampler's share of a training epoch of the imbalanced-MNIST recipe.

One epoch of ``recipes/imbalanced_mnist/experiment.py`` (same data, LeNet-5-like model, SGD, minibatch 60,
Lightning ``Trainer``, no evaluation, no logger) with torch's ``RandomSampler`` and with the
prioritized arm (``PrioritizedSampler`` α = 1 behind ``DistributedPrioritizedSampler`` and the
``PrioritizedSamplingCallback``), alternated ``repeats`` times.  Two measures of the overhead:

* end to end: median over pairs of (prioritized epoch / uniform epoch) - 1;
* inside the epoch: time spent drawing (``sample``), claiming each batch's draw and writing the
  losses back (the callback's hooks, logging included), as a fraction of the prioritized epoch.

Run ``python -m benchmarks.epoch_overhead`` (about two minutes); it writes
``docs/results/imbalanced_mnist_epoch_overhead.json``, whose numbers ``python -m benchmarks.run_all
--from-json benchmarks/results.json --out docs/benchmarks.md`` puts into the tables of
``benchmarks/sections/imbalanced_mnist.md`` (:func:`run_facts`, :func:`table`, :func:`targets`).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from prisample.distributed import DistributedPrioritizedSampler
from prisample.lightning import PrioritizedSamplingCallback
from prisample.sampler import Draw
from recipes.imbalanced_mnist.experiment import ImbalancedClassifier, ImbalancedMNISTDataModule

TARGET = 0.05

Arm = Literal["uniform", "prioritized"]
"""The data module's ``sampler``: torch's ``RandomSampler`` or the prioritized one."""
ARMS: tuple[Arm, ...] = ("uniform", "prioritized")


@dataclass(frozen=True)
class EpochOverheadConfig:
    """One epoch per arm, alternated."""

    repeats: int = 3
    """Epoch pairs (uniform, prioritized)."""
    root: str = "data"
    """Where MNIST's IDX files are (Fashion-MNIST is used where MNIST is unavailable)."""
    json_out: str = "docs/results/imbalanced_mnist_epoch_overhead.json"
    """Raw timings."""
    limit_batches: int | None = None
    """Stop each epoch after this many batches (a quick check of the script; None: whole epochs)."""


class TimedSampler(DistributedPrioritizedSampler):
    """Accumulates the seconds spent drawing."""

    seconds = 0.0

    def sample(self, k: int) -> Draw:
        start = time.perf_counter()
        draw = super().sample(k)
        self.seconds += time.perf_counter() - start
        return draw


class TimedCallback(PrioritizedSamplingCallback):
    """Accumulates the seconds spent in the per-batch hooks (claim, priority update, logging)."""

    seconds = 0.0

    def on_train_batch_start(self, *args: Any) -> None:
        start = time.perf_counter()
        super().on_train_batch_start(*args)
        self.seconds += time.perf_counter() - start

    def on_train_batch_end(self, *args: Any) -> None:
        start = time.perf_counter()
        super().on_train_batch_end(*args)
        self.seconds += time.perf_counter() - start


class EpochTimer(Callback):
    seconds = 0.0
    batches = 0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.seconds = time.perf_counter() - self._start
        self.batches = trainer.fit_loop.epoch_loop.batch_progress.current.completed


class Model(ImbalancedClassifier):
    def configure_callbacks(self) -> list[Callback]:
        return []  # the timed callback is passed to the Trainer


def epoch(arm: Arm, root: str, seed: int, limit_batches: int | None = None) -> dict[str, Any]:
    """Seconds of one training epoch, and for the prioritized arm the seconds inside prisample."""
    pl.seed_everything(seed, verbose=False)
    data = ImbalancedMNISTDataModule(root=root, sampler=arm, download=False)
    data.setup("fit")
    callbacks: list[Callback] = [timer := EpochTimer()]
    if data.prioritized_sampler is not None:
        data.prioritized_sampler = TimedSampler(data.prioritized_sampler.sampler)
        callbacks.append(hooks := TimedCallback())
    trainer = pl.Trainer(
        max_epochs=1,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        accelerator="cpu",
        callbacks=callbacks,
        limit_train_batches=limit_batches,
    )
    trainer.fit(Model(lr=0.1), datamodule=data)
    out = {"arm": arm, "seconds": timer.seconds, "batches": timer.batches, "dataset": data.dataset_name}
    if data.prioritized_sampler is not None:
        assert isinstance(data.prioritized_sampler, TimedSampler)
        out |= {"draw_seconds": data.prioritized_sampler.seconds, "callback_seconds": hooks.seconds}
    return out


def main(config: EpochOverheadConfig) -> dict[str, Any]:
    torch.set_num_threads(1)
    runs = []
    for r in range(config.repeats):
        for arm in ARMS:
            runs.append(epoch(arm, config.root, seed=r, limit_batches=config.limit_batches))
            print(f"{arm}: {runs[-1]['seconds']:.2f} s", file=sys.stderr)
    uniform = [x for x in runs if x["arm"] == "uniform"]
    prioritized = [x for x in runs if x["arm"] == "prioritized"]
    ratios = [p["seconds"] / u["seconds"] for u, p in zip(uniform, prioritized, strict=True)]
    inside = [(p["draw_seconds"] + p["callback_seconds"]) / p["seconds"] for p in prioritized]
    result = {
        "config": asdict(config),
        "dataset": runs[0]["dataset"],
        "batches_per_epoch": runs[0]["batches"],
        "runs": runs,
        "end_to_end_overhead_median": statistics.median(ratios) - 1,
        "end_to_end_overhead_range": [min(ratios) - 1, max(ratios) - 1],
        "inside_fraction_median": statistics.median(inside),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, 1 thread",
    }
    Path(config.json_out).write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return result


def run_facts(r: dict[str, Any]) -> str:
    """The run behind the docs' tables (``docs/benchmarks.md``): data, epoch length, machine."""
    from benchmarks.report import facts

    return facts(
        [
            ("Dataset", f"{r['dataset']}, {r['batches_per_epoch']} minibatches per epoch"),
            ("Epochs", f"{r['config']['repeats']} per arm, alternated"),
            ("Machine", r["machine"]),
        ]
    )


def table(r: dict[str, Any]) -> str:
    """Epoch times of both arms and the time spent inside prisample.

    Every number is a value of the JSON, save the per-batch column (median seconds per epoch /
    batches per epoch).
    """
    med = statistics.median
    uni = [x["seconds"] for x in r["runs"] if x["arm"] == "uniform"]
    pri = [x for x in r["runs"] if x["arm"] == "prioritized"]
    lo, hi = r["end_to_end_overhead_range"]

    def row(measure: str, seconds: list[float], digits: int = 2, per_batch: bool = False) -> str:
        ms = f"{1e3 * med(seconds) / r['batches_per_epoch']:.3f}" if per_batch else ""
        low, high = min(seconds), max(seconds)
        return f"| {measure} | {med(seconds):.{digits}f} s | {low:.{digits}f}–{high:.{digits}f} s | {ms} |"

    draws, hooks = [x["draw_seconds"] for x in pri], [x["callback_seconds"] for x in pri]
    share = 100 * r["inside_fraction_median"]
    lines = [
        f"| measure | median | range over the {len(pri)} runs | per batch, ms |",
        "|---|---|---|---|",
        row("uniform epoch", uni),
        row("prioritized epoch", [x["seconds"] for x in pri]),
        f"| end-to-end overhead (prioritized over uniform epoch, per pair) "
        f"| {100 * r['end_to_end_overhead_median']:+.1f}% | {100 * lo:+.1f}% to {100 * hi:+.1f}% | |",
        row("time inside prisample: draws, per epoch", draws, 4, per_batch=True),
        row("time inside prisample: callback (claim, update, logging)", hooks, 3, per_batch=True),
        f"| time inside prisample, share of the prioritized epoch | {share:.1f}% | | |",
    ]
    return "\n".join(lines)


def targets(r: dict[str, Any]) -> str:
    """The target (prisample's share of the epoch at most :data:`TARGET`), met or not."""
    worst = max(r["inside_fraction_median"], r["end_to_end_overhead_median"])
    return "\n".join(
        [
            "| target | time inside prisample | end-to-end overhead | met |",
            "|---|---|---|---|",
            f"| at most {100 * TARGET:.0f}% of the epoch | {100 * r['inside_fraction_median']:.1f}% "
            f"| {100 * r['end_to_end_overhead_median']:+.1f}% | {'yes' if worst <= TARGET else '**no**'} |",
        ]
    )


if __name__ == "__main__":
    from jsonargparse import auto_cli, set_parsing_settings

    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    main(auto_cli(EpochOverheadConfig, as_positional=False))
