"""Prioritized supervised learning on class-imbalanced MNIST (Schaul et al. 2016, Sec. 6, App. B.3).

The training set keeps 1% of the examples of each of the classes 0-4 (drawn with a fixed seed) and
all examples of 5-9; the test set is untouched and a balanced validation split is held out of the
examples the training set does not use.  A LeNet-5-like network is trained by SGD without momentum
on minibatches of 60 under three arms:

* ``uniform``: uniform minibatches (uninformed);
* ``informed``: uniform minibatches, the loss of classes 0-4 weighted ×100;
* ``prioritized``: each example drawn with ``P(i) = p_i^α / Σ_k p_k^α``, ``p_i`` its last-seen loss,
  α = 1, β = 0 (uninformed).  β = 0 is the paper's supervised setting (Sec. 6): here the skew of
  ``P`` is the point, it rebalances the classes, and importance weights ``(N·P(i))^-β`` annealed to
  β = 1 would undo that rebalancing (a measured example: docs/concepts.md, "Which β: supervised
  learning versus RL").

One run, through LightningCLI (the arms are config files, the prioritized arm's the defaults; every
option can be overridden)::

    python -m recipes.imbalanced_mnist fit --config recipes/imbalanced_mnist/configs/prioritized.yaml
    python -m recipes.imbalanced_mnist fit --config recipes/imbalanced_mnist/configs/prioritized.yaml \\
        --data.alpha 0.6 --data.beta 0.4 --data.beta_end 1.0 --data.backend rank

The comparison (three arms × seeds; Fig. 5's curves, a table and the raw numbers, written to
``runs/imbalanced_mnist/``; ``--out_dir docs/results`` rewrites the committed results)::

    python -m recipes.imbalanced_mnist compare --seeds 3 --max_steps 1000

Every run of the comparison uses one torch thread whatever ``OMP_NUM_THREADS`` says, and derives its
sampler seeds from its own seed, so the same command on the same kind of machine gives the same
numbers.

Data: MNIST from ``--data.root``, downloaded when the network allows, else Fashion-MNIST
(``recipes/imbalanced_mnist/data.py``); every output names the dataset used.  ``python -m
recipes.imbalanced_mnist prepare`` fetches the data and exits non-zero when neither is available.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import numpy as np
import numpy.typing as npt
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.cli import LightningCLI
from torch import nn
from torch.nn import functional
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, Sampler, TensorDataset

from prisample import IndexedDataset, PrioritizedSampler
from prisample.distributed import DistributedPrioritizedSampler
from prisample.lightning import PrioritizedSamplingCallback, batch_weights
from recipes.common import outputs
from recipes.common.lightning_cli import (
    derived_seed,
    lightning_cli,
    unattended_logging,
    unattended_trainer_args,
)
from recipes.imbalanced_mnist import data as mnist_data
from recipes.imbalanced_mnist import report as imbalanced_mnist_report
from recipes.imbalanced_mnist.config import ARMS as ARMS  # importable from the recipe, as before
from recipes.imbalanced_mnist.config import CONFIG_DIR, CompareConfig, fit_defaults, start_compare
from recipes.imbalanced_mnist.data import (
    DATASET_NAMES,
    Dataset,
    imbalanced_split,
    load_idx_dir,
    locate_dataset,
)

# -- data ---------------------------------------------------------------------------------------


class ImbalancedMNISTDataModule(pl.LightningDataModule):
    """Class-imbalanced MNIST (App. B.3), and the train sampler of the arm.

    Args:
        root: directory with MNIST's IDX files (also where MNIST is downloaded to).
        dataset: ``"auto"`` (MNIST, else Fashion-MNIST when MNIST is neither in ``root`` nor
            downloadable), ``"mnist"`` or ``"fashion-mnist"``.
        download: try to download MNIST when it is not in ``root``.
        rare_classes: the classes cut down to ``keep_fraction`` (the paper: digits 0-4).
        keep_fraction: fraction of each rare class kept (the paper: 1%).
        val_per_class: balanced validation examples per class, from examples training does not use.
        split_seed: seed of the imbalanced subset and the validation split.
        batch_size: minibatch size (the paper: 60).
        sampler: ``"prioritized"`` (the default, the prioritized arm) or ``"uniform"`` (random order,
            each example once per epoch; the uniform and informed arms).
        alpha: prioritized: α in ``P(i) = p_i^α / Σ_k p_k^α`` (the paper: 1).
        beta: prioritized: β of the importance weights ``(N · P(i))^-β``.  0 (the default, and the
            paper's value for supervised learning): prioritization is meant to change which
            examples are learned from (here it rebalances the classes), and weights annealed to
            β = 1 undo that change (docs/concepts.md, "Which β: supervised learning versus RL").
        beta_end: prioritized: anneal β linearly from ``beta`` to this over the run (None: fixed).
            Annealing to 1 is the RL schedule; on an imbalanced problem it made prioritization
            worse than uniform sampling (``recipes/studies/supervised_beta.py``).
        eps: prioritized, proportional: ``p_i = loss_i + ε``.
        backend: prioritized: ``"proportional"``, ``"rank"``, ``"greedy"`` or ``"uniform"``.
        eval_batch_size: batch size of the validation and test passes.
        num_workers: ``DataLoader`` workers (with a prioritized sampler each prefetched batch is
            drawn before the latest priority updates: a lag of about ``2 · num_workers`` batches).
    """

    def __init__(
        self,
        root: str = "data",
        dataset: Dataset = "auto",
        download: bool = True,
        rare_classes: tuple[int, ...] = (0, 1, 2, 3, 4),
        keep_fraction: float = 0.01,
        val_per_class: int = 100,
        split_seed: int = 0,
        batch_size: int = 60,
        sampler: Literal["uniform", "prioritized"] = "prioritized",
        alpha: float = 1.0,
        beta: float = 0.0,
        beta_end: float | None = None,
        eps: float = 1e-6,
        backend: Literal["proportional", "rank", "greedy", "uniform"] = "proportional",
        eval_batch_size: int = 1000,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if sampler not in ("uniform", "prioritized"):
            raise ValueError(f"sampler should be 'uniform' or 'prioritized', but got sampler={sampler!r}")
        self.save_hyperparameters()
        self.root, self.dataset, self.download = root, dataset, download
        self.rare_classes, self.keep_fraction = tuple(rare_classes), keep_fraction
        self.val_per_class, self.split_seed = val_per_class, split_seed
        self.batch_size, self.sampler, self.eval_batch_size = batch_size, sampler, eval_batch_size
        self.alpha, self.beta, self.beta_end, self.eps, self.backend = alpha, beta, beta_end, eps, backend
        self.num_workers = num_workers
        self.dataset_name = ""
        self.train_set: TensorDataset | None = None
        self.prioritized_sampler: DistributedPrioritizedSampler | None = None

    def prepare_data(self) -> None:
        locate_dataset(self.root, self.dataset, self.download)

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        name, directory = locate_dataset(self.root, self.dataset, download=False)
        self.dataset_name = DATASET_NAMES[name]
        if name != "mnist" and self.dataset == "auto":  # a fallback; a run of the comparison is told
            print(f"MNIST is not available here: using {self.dataset_name} from {directory}", file=sys.stderr)
        arrays = load_idx_dir(directory)
        images, labels = arrays["train_images"], arrays["train_labels"].astype(np.int64)
        train_idx, val_idx = imbalanced_split(
            labels,
            rare_classes=self.rare_classes,
            keep_fraction=self.keep_fraction,
            val_per_class=self.val_per_class,
            seed=self.split_seed,
        )
        mean, std = float(images.mean()) / 255, float(images.std()) / 255

        def tensors(x: npt.NDArray[Any], y: npt.NDArray[Any]) -> TensorDataset:
            pixels = (torch.from_numpy(x.astype(np.float32)).unsqueeze(1) / 255 - mean) / std
            return TensorDataset(pixels, torch.from_numpy(y.astype(np.int64)))

        self.train_set = tensors(images[train_idx], labels[train_idx])
        self.val_set = tensors(images[val_idx], labels[val_idx])
        self.test_set = tensors(arrays["test_images"], arrays["test_labels"])
        self.class_counts = np.bincount(labels[train_idx], minlength=10)
        if self.sampler == "prioritized":
            # PER: one priority per training example, all starting at the max priority (1). Built
            # here so that the callback restores a checkpoint into it before any DataLoader draws.
            base = PrioritizedSampler(
                len(self.train_set),
                alpha=self.alpha,
                beta=self.beta,
                eps=self.eps,
                backend=self.backend,
                batch_size=self.batch_size,
                seed=derived_seed("prioritized sampler"),
            )
            self.prioritized_sampler = DistributedPrioritizedSampler(base)
        print(
            f"{self.dataset_name}: {len(self.train_set)} training examples (per class "
            f"{self.class_counts.tolist()}), {len(self.val_set)} validation, {len(self.test_set)} test",
            file=sys.stderr,
        )

    def train_dataloader(self) -> DataLoader[Any]:
        assert self.train_set is not None
        world = self.trainer.world_size if self.trainer is not None else 1
        sampler: Sampler[int]
        if self.prioritized_sampler is not None:
            sampler = self.prioritized_sampler
        elif world > 1:
            sampler = DistributedSampler(self.train_set, seed=derived_seed("distributed sampler"))
        else:
            generator = torch.Generator().manual_seed(derived_seed("random sampler"))
            sampler = RandomSampler(self.train_set, generator=generator)
        return DataLoader(
            IndexedDataset(self.train_set),
            batch_size=self.batch_size,
            sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def val_dataloader(self) -> list[DataLoader[Any]]:
        return [DataLoader(ds, batch_size=self.eval_batch_size) for ds in (self.val_set, self.test_set)]

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.test_set, batch_size=self.eval_batch_size)


# -- model --------------------------------------------------------------------------------------


class LeNet5(nn.Module):
    """Two conv layers (convolution, ReLU, 2×2 max-pool), two fully connected layers separated by a
    ReLU (App. B.3); widths of LeNet-5 (LeCun et al. 1998): 6 and 16 5×5 filters, 120 hidden units."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits; the softmax is in the loss (negative log-likelihood of ``log_softmax``)."""
        return self.classifier(self.features(x))  # type: ignore[no-any-return]


class ImbalancedClassifier(pl.LightningModule):
    """LeNet-5-like classifier trained by plain SGD; records test errors and loss against updates.

    Args:
        lr: SGD step size (the paper picks from 0.3, 0.1, 0.03, 0.01, 0.003, 0.001 on validation).
        informed_weight: factor on the loss of ``rare_classes`` (informed arm: 100; else 1).
        rare_classes: the under-represented classes.
        num_classes: output classes.
    """

    class_weights: torch.Tensor
    """``c_y``: ``informed_weight`` for the rare classes, else 1 (a buffer: it moves with the model)."""

    def __init__(
        self,
        lr: float = 0.1,
        informed_weight: float = 1.0,
        rare_classes: tuple[int, ...] = (0, 1, 2, 3, 4),
        num_classes: int = 10,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = LeNet5(num_classes)
        class_weights = torch.ones(num_classes)
        class_weights[list(rare_classes)] = informed_weight
        self.register_buffer("class_weights", class_weights)
        self.rare = torch.zeros(num_classes, dtype=torch.bool)
        self.rare[list(rare_classes)] = True
        self.history: list[dict[str, float]] = []
        self._sums: dict[int, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def objective(
        self, x: torch.Tensor, y: torch.Tensor, is_weights: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean_i c_{y_i} w_i ℓ_i, ℓ)``: per-sample negative log-likelihoods ``ℓ``, class factors
        ``c`` (``informed_weight`` for the rare classes, else 1) and importance weights ``w``."""
        per_sample = functional.cross_entropy(self(x), y, reduction="none")
        weights = self.class_weights[y]
        if is_weights is not None:
            weights = weights * is_weights
        return (weights * per_sample).mean(), per_sample

    def training_step(self, batch: Sequence[torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        _, x, y = batch
        # PER: importance weights of the batch's draw (all 1 at β = 0; None for the uniform arms).
        loss, per_sample = self.objective(x, y, batch_weights(self.trainer))
        self.log("train/loss", loss, prog_bar=True)
        # PER: the unweighted per-sample losses become the drawn examples' priorities.
        return {"loss": loss, "per_sample_loss": per_sample.detach()}

    def validation_step(self, batch: Sequence[torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        logits = self(x)
        wrong = (logits.argmax(1) != y).double()
        rare = self.rare.to(y.device)[y].double()
        stats = torch.stack(
            [
                functional.cross_entropy(logits, y, reduction="sum").double(),
                wrong.sum(),
                (wrong * rare).sum(),
                torch.tensor(float(y.shape[0]), dtype=torch.float64, device=y.device),
            ]
        )
        self._sums[dataloader_idx] = self._sums.get(dataloader_idx, torch.zeros_like(stats)) + stats

    def on_validation_epoch_end(self) -> None:
        point: dict[str, float] = {"updates": float(self.global_step)}
        for idx, name in enumerate(("val", "test")):
            if idx not in self._sums:
                continue
            loss, errors, rare_errors, n = self._sums[idx].tolist()
            point |= {f"{name}/loss": loss / n, f"{name}/errors": errors, f"{name}/rare_errors": rare_errors}
        self._sums = {}
        # Under DDP every rank evaluates the whole sets (use_distributed_sampler=False), so the
        # values agree and their mean across ranks is the value.
        self.log_dict({k: v for k, v in point.items() if k != "updates"}, sync_dist=True)
        if not self.trainer.sanity_checking:
            self.history.append(point)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams["lr"], momentum=0.0)

    def configure_callbacks(self) -> list[Callback]:
        datamodule = getattr(self.trainer, "datamodule", None)
        if getattr(datamodule, "sampler", None) != "prioritized":
            return []
        assert isinstance(datamodule, ImbalancedMNISTDataModule)
        beta_start = datamodule.beta if datamodule.beta_end is not None else None
        return [PrioritizedSamplingCallback(beta_start=beta_start, beta_end=datamodule.beta_end)]


def cli_main(args: list[str] | None = None, run: bool = True, threads: int | None = None) -> LightningCLI:
    """``python -m recipes.imbalanced_mnist fit [--config …]``: one run of one arm (without
    ``--config``, the prioritized arm), with ``threads`` torch threads (default ``OMP_NUM_THREADS``,
    else 1).  The numbers depend on the thread count: the order of a convolution's floating-point
    sums does, and lr = 0.3 amplifies the difference."""
    prog = "python -m recipes.imbalanced_mnist"
    model, data = ImbalancedClassifier, ImbalancedMNISTDataModule
    return lightning_cli(model, data, fit_defaults(), args, run, threads, prog=prog)


# -- comparison (Fig. 5) ------------------------------------------------------------------------


def run_arm(arm: str, seed: int, args: Sequence[str]) -> dict[str, Any]:
    """Fit one arm with one seed through the CLI; its evaluation history and the dataset used."""
    unattended_logging()  # Lightning's per-run messages, once per run × 9 runs: warnings only
    with warnings.catch_warnings():  # the comparison's own argv is not meant for LightningCLI
        warnings.filterwarnings("ignore", ".*LightningCLI's args parameter.*")
        # One thread whatever OMP_NUM_THREADS says: with 2 or 16 the uniform arm (lr 0.3) ended
        # hundreds of test errors away after 100 updates, so the committed numbers did not reproduce.
        run = cli_main(
            ["fit", "--config", str(CONFIG_DIR / f"{arm}.yaml"), "--seed_everything", str(seed), *args],
            threads=1,
        )
    model, data = run.model, run.datamodule
    assert isinstance(model, ImbalancedClassifier) and isinstance(data, ImbalancedMNISTDataModule)
    return {
        "arm": arm,
        "seed": seed,
        "history": model.history,
        "dataset": data.dataset_name,
        "lr": float(model.hparams["lr"]),
        "train_counts": data.class_counts.tolist(),
    }


def compare(config: CompareConfig) -> dict[str, Any]:
    """Run every (arm, seed) and collect the curves: ``{"dataset", "arms": {arm: {...}}, ...}``."""
    from tqdm import tqdm

    # Download once, not per worker; the runs are told the dataset, the fallback is said once.
    name, directory = locate_dataset(config.root, config.dataset, download=True)
    if name != "mnist" and config.dataset == "auto":
        print(f"MNIST is not available here: using {DATASET_NAMES[name]} from {directory}", file=sys.stderr)
    args = [
        *unattended_trainer_args(config.max_steps, config.eval_every),
        "--data.root",
        config.root,
        "--data.dataset",
        name,
        "--data.download",
        "false",
        *(["--model.lr", str(config.lr)] if config.lr is not None else []),
        *config.overrides,
    ]
    tasks = [(arm, seed) for arm in config.arms for seed in range(config.seeds)]
    runs: list[dict[str, Any]] = []
    bar = tqdm(total=len(tasks), desc="imbalanced_mnist", unit="run")
    with ProcessPoolExecutor(config.workers) as pool, bar:
        for result in pool.map(run_arm, *zip(*tasks, strict=True), [args] * len(tasks)):
            runs.append(result)
            bar.update()
    datasets = {r["dataset"] for r in runs}
    assert len(datasets) == 1, datasets
    arms: dict[str, Any] = {}
    for arm in config.arms:
        mine = sorted((r for r in runs if r["arm"] == arm), key=lambda r: r["seed"])
        updates = [int(p["updates"]) for p in mine[0]["history"]]
        arms[arm] = {"updates": updates, "lr": mine[0]["lr"]} | {
            key.replace("/", "_"): [[r["history"][i][key] for r in mine] for i in range(len(updates))]
            for key in ("test/errors", "test/loss", "test/rare_errors", "val/errors", "val/loss")
        }
    return {
        "dataset": datasets.pop(),
        "train_counts": runs[0]["train_counts"],
        "seeds": config.seeds,
        "config": asdict(config),
        "torch": torch.__version__,
        "torch_threads": 1,
        "arms": arms,
    }


def compare_main(config: CompareConfig) -> dict[str, Any]:
    """``python -m recipes.imbalanced_mnist compare``: run the arms, write JSON, PNGs and table."""
    out_dir = Path(config.out_dir)
    start = time.perf_counter()
    results = compare(config)
    runtime = time.perf_counter() - start
    results["runtime_s"] = round(runtime, 1)
    command = outputs.command_line("python -m recipes.imbalanced_mnist compare", config, CompareConfig())
    imbalanced_mnist_report.write(results, out_dir, config.name, runtime, command)
    print(f"{results['dataset']}: wrote {out_dir}/{config.name}.md, .json, PNGs in {runtime:.0f} s")
    return results


def main(argv: list[str] | None = None) -> None:
    """``python -m recipes.imbalanced_mnist fit|validate|test|predict|compare|prepare [options]``."""
    from_shell = argv is None or list(argv) == sys.argv[1:]  # LightningCLI warns when given it twice
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["compare"], ["prepare"]):
        if argv[0] == "compare":
            compare_main(start_compare(argv))
            return
        mnist_data.prepare(argv[1:], prog="python -m recipes.imbalanced_mnist prepare")
        return
    cli_main(None if from_shell else argv)
