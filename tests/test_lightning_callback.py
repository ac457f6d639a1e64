"""PrioritizedSamplingCallback: priorities of exactly the drawn examples, draw-time weights, β
annealing, and checkpoint/resume that draws what the uninterrupted run draws."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning")

import lightning.pytorch as pl
import numpy as np
import torch
from torch.nn import functional
from torch.utils.data import DataLoader, TensorDataset

from prisample import IndexedDataset, PrioritizedSampler
from prisample.distributed import DistributedPrioritizedSampler
from prisample.ledger import DrawLedger
from prisample.lightning import PrioritizedSamplingCallback, batch_weights
from prisample.sampler import Draw

N, BATCH = 40, 4  # 10 batches per epoch

warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*resuming from a checkpoint that ended before the epoch ended.*")


class RecordingSampler(DrawLedger):
    """Records every draw and every priority update."""

    def __init__(self, sampler: PrioritizedSampler) -> None:
        super().__init__(sampler)
        self.draws: list[Draw] = []
        self.updates: list[tuple[np.ndarray, np.ndarray]] = []

    def sample(self, k: int) -> Draw:
        draw = super().sample(k)
        self.draws.append(draw)
        return draw

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        self.updates.append((np.asarray(indices).copy(), np.asarray(priorities).copy()))
        super().update_priorities(indices, priorities)


class TinyData(pl.LightningDataModule):
    def __init__(
        self,
        beta: float = 0.0,
        loader_batch: int = BATCH,
        num_workers: int = 0,
        early: bool = True,
        plain: bool = False,
    ) -> None:
        super().__init__()
        self.plain = plain
        g = torch.Generator().manual_seed(0)
        self.data = TensorDataset(torch.randn(N, 5, generator=g), torch.randint(0, 3, (N,), generator=g))
        self.beta, self.loader_batch, self.num_workers = beta, loader_batch, num_workers
        self.early = early
        self.sampler: RecordingSampler | PrioritizedSampler | None = None

    def make_sampler(self) -> None:
        base = PrioritizedSampler(N, alpha=1.0, beta=self.beta, batch_size=BATCH, seed=7)
        self.sampler = base if self.plain else RecordingSampler(base)

    def priorities(self) -> np.ndarray:
        sampler = self.sampler
        assert sampler is not None
        return (sampler if isinstance(sampler, PrioritizedSampler) else sampler.sampler).priorities

    def setup(self, stage: str) -> None:
        if self.early:  # the callback finds it before restoring a checkpoint
            self.make_sampler()

    def train_dataloader(self) -> DataLoader[Any]:
        if not self.early:  # the callback finds it behind the DataLoader, at train start
            self.make_sampler()
        return DataLoader(
            IndexedDataset(self.data),
            batch_size=self.loader_batch,
            sampler=self.sampler,
            num_workers=self.num_workers,
            multiprocessing_context="fork" if self.num_workers else None,
        )


class TinyModel(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(5, 3)
        self.batches: list[torch.Tensor] = []
        self.losses: list[torch.Tensor] = []
        self.weights: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        indices, x, y = batch
        per_sample = functional.cross_entropy(self.layer(x), y, reduction="none")
        w = batch_weights(self.trainer)
        assert w is not None
        self.batches.append(indices.clone())
        self.losses.append(per_sample.detach().clone())
        self.weights.append(w.clone())
        return {"loss": (w * per_sample).mean(), "per_sample_loss": per_sample.detach()}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def fit(
    model: TinyModel,
    data: TinyData,
    max_steps: int,
    callback: PrioritizedSamplingCallback | None = None,
    ckpt_path: str | None = None,
    logger: Any = False,
    log_every_n_steps: int = 1,
) -> pl.Trainer:
    trainer = pl.Trainer(
        max_steps=max_steps,
        callbacks=[callback or PrioritizedSamplingCallback()],
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        accelerator="cpu",
        log_every_n_steps=log_every_n_steps,
    )
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    return trainer


def test_callback_updates_exactly_the_drawn_indices_with_their_losses() -> None:
    pl.seed_everything(0, verbose=False)
    model, data = TinyModel(), TinyData(beta=0.7)
    fit(model, data, max_steps=13)
    sampler = data.sampler
    assert sampler is not None
    assert len(sampler.updates) == 13
    for (idx, prio), batch, loss in zip(sampler.updates, model.batches, model.losses, strict=True):
        np.testing.assert_array_equal(idx, batch.numpy())
        np.testing.assert_allclose(prio, loss.double().numpy(), rtol=0, atol=0)
    # Each trained batch is a drawn batch, with the weights computed when it was drawn.
    for draw, batch, w in zip(sampler.draws, model.batches, model.weights, strict=False):
        np.testing.assert_array_equal(draw.indices, batch.numpy())
        np.testing.assert_array_equal(draw.weights, w.numpy())
    assert not np.all(np.concatenate([w.numpy() for w in model.weights]) == 1.0)  # β = 0.7 reweights
    # The priorities hold the last loss of every example trained on; the others are untouched (1).
    last: dict[int, float] = {}
    for batch, loss in zip(model.batches, model.losses, strict=True):
        last.update(zip(batch.tolist(), loss.double().tolist(), strict=True))
    priorities = data.priorities()
    for i in range(N):
        assert priorities[i] == last.get(i, 1.0)


@pytest.mark.parametrize("every", [1, 5])  # logged on the steps the logger writes
def test_beta_is_annealed_per_step_and_logged(tmp_path: Path, every: int) -> None:
    pl.seed_everything(0, verbose=False)
    model, data = TinyModel(), TinyData(beta=0.0)
    logger = pl.loggers.CSVLogger(tmp_path, name="run")
    callback = PrioritizedSamplingCallback(beta_start=0.4, beta_end=1.0)
    fit(model, data, max_steps=20, callback=callback, logger=logger, log_every_n_steps=every)
    logger.save()
    lines = (Path(logger.log_dir) / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=True)) for line in lines[1:]]
    betas = [float(r["per/beta"]) for r in rows if r.get("per/beta")]
    assert [int(r["step"]) for r in rows if r.get("per/beta")] == list(range(every - 1, 20, every))
    # β of the draw of step t (0-based): 0.4 + 0.6 t / 20, annealed over the 20 batches of the run.
    np.testing.assert_allclose(betas, 0.4 + 0.6 * np.arange(every - 1, 20, every) / 20, atol=1e-6)
    for key in ("per/weight_mean", "per/weight_max", "per/max_priority"):
        assert all(r[key] for r in rows if r.get("per/beta")), key
    assert float(rows[-1]["per/weight_max"]) <= 1.0


def test_loader_batch_size_must_match_the_sampler() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        fit(TinyModel(), TinyData(loader_batch=BATCH + 1), max_steps=2)


# Mid-epoch, at an epoch's end, and mid-epoch with a worker whose prefetched batches were drawn
# before the checkpoint but not trained on: the resumed run must replay them.
@pytest.mark.parametrize(
    ("stop", "workers", "early", "plain"),
    [
        (5, 0, False, False),
        (10, 0, True, False),
        (6, 1, True, False),
        (5, 0, True, True),
        (7, 0, False, True),
    ],
)
def test_resume_draws_what_the_uninterrupted_run_draws(
    tmp_path: Path, stop: int, workers: int, early: bool, plain: bool
) -> None:
    total = 23
    pl.seed_everything(0, verbose=False)
    straight = TinyModel()
    fit(straight, TinyData(beta=0.5, num_workers=workers, plain=plain), max_steps=total)

    pl.seed_everything(0, verbose=False)
    first, first_data = TinyModel(), TinyData(beta=0.5, num_workers=workers, plain=plain)
    trainer = fit(first, first_data, max_steps=stop)
    path = str(tmp_path / "run.ckpt")
    trainer.save_checkpoint(path)
    state = torch.load(path, weights_only=True)["callbacks"]["PrioritizedSamplingCallback"]
    assert (len(state["sampler"]["pending"]) > 0) == (workers > 0)

    pl.seed_everything(123, verbose=False)  # the checkpoint, not the global seed, decides
    resumed = TinyModel()
    resumed_data = TinyData(beta=0.5, num_workers=workers, early=early, plain=plain)
    fit(resumed, resumed_data, max_steps=total, ckpt_path=path)
    assert len(resumed.batches) == total - stop
    for a, b in zip(straight.batches[stop:], resumed.batches, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(straight.weights[stop:], resumed.weights, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    np.testing.assert_array_equal(resumed_data.priorities(), TinyDataPriorities.of(straight, total))


class TinyDataPriorities:
    """Priorities implied by a run's trained batches and losses (1 for examples never trained on)."""

    @staticmethod
    def of(model: TinyModel, steps: int) -> np.ndarray:
        out = np.ones(N)
        for batch, loss in zip(model.batches[:steps], model.losses[:steps], strict=True):
            out[batch.numpy()] = loss.double().numpy()
        return out


def test_lightning_distributed_wrapper_is_refused() -> None:
    """Lightning's DistributedSamplerWrapper (use_distributed_sampler=True under DDP) materialises
    the epoch's indices when the epoch starts: priority updates would wait for the next epoch."""
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper

    from prisample.lightning import _find_sampler

    sampler = DistributedPrioritizedSampler(PrioritizedSampler(N, batch_size=BATCH, seed=0))
    wrapped = DistributedSamplerWrapper(sampler, num_replicas=2, rank=0)
    loader = DataLoader(IndexedDataset(list(range(N))), batch_size=BATCH, sampler=wrapped)
    with pytest.raises(ValueError, match="use_distributed_sampler=False"):
        _find_sampler(loader)
    plain = DataLoader(IndexedDataset(list(range(N))), sampler=sampler)
    assert _find_sampler([plain]) == (sampler, plain)


def test_plain_sampler_on_one_process_trains_like_a_ledger() -> None:
    """Bug: following the README, a plain PrioritizedSampler with the callback raised "TypeError:
    wrap the PrioritizedSampler in prisample.distributed.DistributedPrioritizedSampler"."""
    runs = []
    for plain in (True, False):
        pl.seed_everything(0, verbose=False)
        model, data = TinyModel(), TinyData(beta=0.6, plain=plain)
        fit(model, data, max_steps=12, callback=PrioritizedSamplingCallback(beta_start=0.2, beta_end=0.8))
        runs.append((model, data.priorities()))
    (plain_model, plain_priorities), (ledger_model, ledger_priorities) = runs
    plain_run, ledger_run = (
        plain_model.batches + plain_model.weights,
        ledger_model.batches + ledger_model.weights,
    )
    for a, b in zip(plain_run, ledger_run, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.all(torch.cat(plain_model.weights) == 1.0)  # draw-time weights, β > 0
    np.testing.assert_array_equal(plain_priorities, ledger_priorities)
    assert not np.all(plain_priorities == 1.0)


def test_plain_sampler_with_workers_is_refused_naming_the_ledger() -> None:
    with pytest.raises(ValueError, match="DrawLedger"):
        fit(TinyModel(), TinyData(plain=True, num_workers=1), max_steps=2)


def test_missing_indexed_dataset_names_the_fix() -> None:
    """Bug: forgetting IndexedDataset gave "indices should be one-dimensional, but got shape (4, 5)"."""

    class Unindexed(TinyData):
        def train_dataloader(self) -> DataLoader[Any]:
            return DataLoader(self.data, batch_size=BATCH, sampler=self.sampler)

    with pytest.raises(TypeError, match=r"wrap the dataset in prisample\.IndexedDataset"):
        fit(TinyModel(), Unindexed(), max_steps=2)


def test_plain_loss_from_training_step_names_the_fix() -> None:
    """Bug: returning a tensor from training_step said "... but got dict" (Lightning wraps it)."""

    class PlainLoss(TinyModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            _, x, y = batch
            return functional.cross_entropy(self.layer(x), y)

    with pytest.raises(
        ValueError, match=r'return \{"loss": \.\.\., "per_sample_loss": \.\.\.\}.*keys \[\'loss\'\]'
    ):
        fit(PlainLoss(), TinyData(), max_steps=2)


def test_sampler_built_in_train_dataloader_with_workers_is_refused_at_the_first_fit() -> None:
    """Bug: a sampler built in train_dataloader() with num_workers=2 trained and checkpointed, then
    failed only at resume: the DataLoader's iterator is created (and its workers' first
    prefetch_factor × num_workers batches drawn) before on_train_start, where the callback first
    saw the sampler, so a checkpoint could not be restored into it before it drew."""
    for plain in (False, True):
        with pytest.raises(ValueError, match=r"setup\(\)"):
            fit(TinyModel(), TinyData(num_workers=2, early=False, plain=plain), max_steps=2)


def test_callback_beta_defaults_do_not_anneal_to_one() -> None:
    """Bug: the callback's default beta_end=1.0 annealed β to 1, which undoes the rebalancing of
    prioritized supervised learning (worse than uniform in the recipe supervised_beta)."""
    pl.seed_everything(0, verbose=False)
    data = TinyData(beta=0.0)
    fit(TinyModel(), data, max_steps=12, callback=PrioritizedSamplingCallback())
    assert data.sampler is not None and data.sampler.beta == 0.0  # the sampler's own β
    pl.seed_everything(0, verbose=False)
    data = TinyData(beta=0.0)
    callback = PrioritizedSamplingCallback(beta_start=0.3)
    fit(TinyModel(), data, max_steps=12, callback=callback)
    assert data.sampler is not None and data.sampler.beta == 0.3  # held, not annealed
    with pytest.raises(ValueError, match="beta_end"):
        PrioritizedSamplingCallback(beta_start=0.0, beta_end=5.0)
