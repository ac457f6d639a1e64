"""DistributedPrioritizedSampler under DDP: two CPU processes on gloo (torch.distributed directly,
and a Lightning ddp_spawn run) hold identical priorities, and the union of their slices of each
batch is what one process draws with the same seed."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning")

import lightning.pytorch as pl
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional
from torch.utils.data import DataLoader, TensorDataset

from prisample import IndexedDataset, PrioritizedSampler
from prisample.distributed import DistributedPrioritizedSampler
from prisample.lightning import PrioritizedSamplingCallback

CAPACITY, BATCH, EPOCHS, WORLD = 37, 3, 3, 2  # 19 indices per rank per epoch: batches 3,3,3,3,3,3,1


def loss_of(indices: np.ndarray, step: int) -> np.ndarray:
    """A per-sample 'loss' that every process can recompute: any deterministic function works."""
    return ((indices * 7 + step * 3) % 11) / 4.0 + 0.01


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        # Different seeds on purpose: the sampler gives every rank rank 0's state at first use.
        base = PrioritizedSampler(CAPACITY, alpha=0.8, beta=0.5, batch_size=BATCH, seed=1234 + rank)
        sampler = DistributedPrioritizedSampler(base)
        loader = DataLoader(IndexedDataset(list(range(CAPACITY))), batch_size=BATCH, sampler=sampler)
        record: dict[str, list[list[float]]] = {"indices": [], "weights": []}
        step = 0
        for epoch in range(EPOCHS):
            sampler.set_epoch(epoch)
            for indices, _ in loader:
                draw = sampler.take(indices)
                record["indices"].append(indices.tolist())
                record["weights"].append(draw.weights.tolist())
                sampler.update_priorities(indices, loss_of(indices.numpy(), step))
                step += 1
        record["priorities"] = [base.priorities.tolist()]
        record["len"] = [[len(sampler)]]
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(record))
        # The same two processes then run Lightning's DDP strategy on this process group.
        os.environ.update(WORLD_SIZE=str(WORLD), RANK=str(rank), LOCAL_RANK=str(rank), NODE_RANK="0")
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="1")  # unused: the group exists
        trainer = pl.Trainer(
            strategy="ddp",
            devices=WORLD,
            accelerator="cpu",
            max_steps=12,
            logger=False,
            callbacks=[PrioritizedSamplingCallback()],
            use_distributed_sampler=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(_DDPModel(out_dir), datamodule=_DDPData())
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("ddp")
    # fork: the children reuse the loaded torch and Lightning (spawn re-imports them: ~10 s more).
    mp.start_processes(_worker, args=(str(tmp / "init"), str(tmp)), nprocs=WORLD, start_method="fork")
    return tmp


@pytest.fixture(scope="module")
def ranks(out_dir: Path) -> list[dict[str, list[list[float]]]]:
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(WORLD)]


def test_ranks_hold_identical_priorities(ranks: list[dict[str, list[list[float]]]]) -> None:
    np.testing.assert_array_equal(ranks[0]["priorities"][0], ranks[1]["priorities"][0])
    assert not np.allclose(ranks[0]["priorities"][0], 1.0)  # updates did arrive


def test_union_of_slices_is_the_single_process_draw(ranks: list[dict[str, list[list[float]]]]) -> None:
    per_rank = math.ceil(CAPACITY / WORLD)
    assert ranks[0]["len"] == ranks[1]["len"] == [[per_rank]]
    reference = PrioritizedSampler(CAPACITY, alpha=0.8, beta=0.5, batch_size=BATCH, seed=1234)
    sizes = [min(BATCH, per_rank - start) for start in range(0, per_rank, BATCH)] * EPOCHS
    assert len(ranks[0]["indices"]) == len(ranks[1]["indices"]) == len(sizes)
    for step, k in enumerate(sizes):
        draw = reference.sample(k * WORLD)
        slices = [np.asarray(r["indices"][step]) for r in ranks]
        # Rank r keeps positions r, r + 2, ...: disjoint positions whose union is the whole draw.
        for r in range(WORLD):
            np.testing.assert_array_equal(slices[r], draw.indices[r::WORLD])
            weights = np.asarray(ranks[r]["weights"][step], np.float32)
            np.testing.assert_array_equal(weights, draw.weights[r::WORLD])
        merged = np.empty(k * WORLD, dtype=np.int64)
        for r in range(WORLD):
            merged[r::WORLD] = slices[r]
        np.testing.assert_array_equal(np.sort(merged), np.sort(draw.indices))
        # Updates are applied in rank order on every rank (last write wins for a repeated slot).
        reference.update_priorities(
            np.concatenate(slices), np.concatenate([loss_of(s, step) for s in slices])
        )
    np.testing.assert_array_equal(reference.priorities, ranks[0]["priorities"][0])


def test_single_process_is_the_wrapped_sampler() -> None:
    base = PrioritizedSampler(CAPACITY, alpha=0.8, beta=0.5, batch_size=BATCH, seed=5)
    twin = PrioritizedSampler(CAPACITY, alpha=0.8, beta=0.5, batch_size=BATCH, seed=5)
    sampler = DistributedPrioritizedSampler(base)
    assert (sampler.num_replicas, sampler.rank, len(sampler)) == (1, 0, CAPACITY)
    drawn = list(sampler)
    sizes = [min(BATCH, CAPACITY - start) for start in range(0, CAPACITY, BATCH)]
    expected = np.concatenate([twin.sample(k).indices for k in sizes])
    np.testing.assert_array_equal(drawn, expected)


def test_explicit_replicas_slice_without_communication() -> None:
    slices = []
    for rank in range(3):
        base = PrioritizedSampler(CAPACITY, alpha=0.8, batch_size=BATCH, seed=9)
        slices.append(list(DistributedPrioritizedSampler(base, num_replicas=3, rank=rank)))
    twin = PrioritizedSampler(CAPACITY, alpha=0.8, batch_size=BATCH, seed=9)
    per_rank = math.ceil(CAPACITY / 3)
    for i, start in enumerate(range(0, per_rank, BATCH)):
        k = min(BATCH, per_rank - start)
        draw = twin.sample(3 * k)
        for rank in range(3):
            np.testing.assert_array_equal(slices[rank][i * BATCH : i * BATCH + k], draw.indices[rank::3])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"num_replicas": 0}, "num_replicas"), ({"rank": -1}, "rank"), ({"num_replicas": 2, "rank": 2}, "rank")],
)
def test_bad_arguments_raise(kwargs: dict[str, int], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        DistributedPrioritizedSampler(PrioritizedSampler(4, seed=0), **kwargs)
    with pytest.raises(TypeError, match="sampler"):
        DistributedPrioritizedSampler([1, 2, 3])  # type: ignore[arg-type]


def test_take_rejects_a_batch_that_was_not_drawn_next() -> None:
    sampler = DistributedPrioritizedSampler(PrioritizedSampler(10, batch_size=2, seed=0))
    it = iter(sampler)
    first = [next(it), next(it)]
    second = [next(it), next(it)]
    with pytest.raises(ValueError, match="next drawn batch"):
        sampler.take(second if second != first else [99, 98])
    assert sampler.pending == 2  # nothing claimed
    sampler.take(first)
    sampler.take(second)
    with pytest.raises(ValueError, match="none is pending"):
        sampler.take(first)


class _DDPData(pl.LightningDataModule):
    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(CAPACITY, 5, generator=g), torch.randint(0, 3, (CAPACITY,), generator=g)
        self.data = TensorDataset(x, y)
        self.sampler = DistributedPrioritizedSampler(
            PrioritizedSampler(CAPACITY, alpha=0.8, beta=0.5, batch_size=BATCH, seed=1234)
        )

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(IndexedDataset(self.data), batch_size=BATCH, sampler=self.sampler)


class _DDPModel(pl.LightningModule):
    def __init__(self, out_dir: str) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(5, 3)
        self.out_dir = out_dir
        self.steps: list[dict[str, list[float]]] = []

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        indices, x, y = batch
        per_sample = functional.cross_entropy(self.layer(x), y, reduction="none")
        self.steps.append({"indices": indices.tolist(), "losses": per_sample.double().tolist()})
        return {"loss": per_sample.mean(), "per_sample_loss": per_sample.detach()}

    def on_train_end(self) -> None:
        sampler = self.trainer.datamodule.sampler  # type: ignore[attr-defined]
        record = {"steps": self.steps, "priorities": sampler.sampler.priorities.tolist()}
        Path(self.out_dir, f"lightning{self.global_rank}.json").write_text(json.dumps(record))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def test_lightning_ddp_ranks_stay_identical(out_dir: Path) -> None:
    """Lightning's DDP strategy with the callback: identical priorities, slices that make up one draw."""
    ranks = [json.loads((out_dir / f"lightning{r}.json").read_text()) for r in range(WORLD)]
    np.testing.assert_array_equal(ranks[0]["priorities"], ranks[1]["priorities"])
    reference = PrioritizedSampler(CAPACITY, alpha=0.8, beta=0.5, batch_size=BATCH, seed=1234)
    assert len(ranks[0]["steps"]) == len(ranks[1]["steps"]) == 12
    for step in range(12):
        slices = [np.asarray(r["steps"][step]["indices"]) for r in ranks]
        draw = reference.sample(slices[0].shape[0] * WORLD)
        for r in range(WORLD):
            np.testing.assert_array_equal(slices[r], draw.indices[r::WORLD])
        reference.update_priorities(
            np.concatenate(slices), np.concatenate([r["steps"][step]["losses"] for r in ranks])
        )
    np.testing.assert_array_equal(reference.priorities, ranks[0]["priorities"])
