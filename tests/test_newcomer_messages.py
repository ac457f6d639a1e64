"""Messages a newcomer meets: errors that name their fix, the DataLoader prefetch lag warned about, the
README's replay snippet runnable without a GPU, and replay updates of never-filled slots refused."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from prisample import IndexedDataset, PrioritizedReplay, PrioritizedSampler
from prisample.ledger import DrawLedger

README = Path(__file__).resolve().parents[1] / "README.md"
N, BATCH = 48, 8


def dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(N, 3, generator=g), torch.randint(0, 2, (N,), generator=g))


def lag_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "drawn" in str(w.message) and "num_workers" in str(w.message)]


# -- 5: messages that name the fix ------------------------------------------------------------------
def test_ledger_built_in_train_dataloader_names_where_to_build_it() -> None:
    """Bug: "the callback's sampler is not the one behind the train DataLoader", no fix named."""
    pytest.importorskip("lightning")
    import lightning.pytorch as pl

    from prisample.lightning import PrioritizedSamplingCallback

    class Data(pl.LightningDataModule):
        def setup(self, stage: str) -> None:
            self.sampler = PrioritizedSampler(N, alpha=1.0, beta=0.0, batch_size=BATCH, seed=0)

        def train_dataloader(self) -> DataLoader[Any]:
            return DataLoader(IndexedDataset(dataset()), sampler=DrawLedger(self.sampler), batch_size=BATCH)

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 2)

        def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
            _, x, y = batch
            per_sample = torch.nn.functional.cross_entropy(self.layer(x), y, reduction="none")
            return {"loss": per_sample.mean(), "per_sample_loss": per_sample.detach()}

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = pl.Trainer(
        max_steps=2,
        callbacks=[PrioritizedSamplingCallback()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        accelerator="cpu",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(
            ValueError, match=r"setup\(\).*PrioritizedSamplingCallback\(sampler=\.\.\.\)"
        ) as info:
            trainer.fit(Model(), datamodule=Data())
    assert "train_dataloader()" in str(info.value) and "DrawLedger" in str(info.value)


def test_unindexed_batch_outside_lightning_names_indexed_dataset() -> None:
    """Bug: forgetting IndexedDataset gave "indices should be one-dimensional, but got shape (8, 3)"
    (or "should hold integers") with no hint."""
    sampler = PrioritizedSampler(N, batch_size=BATCH, seed=0)
    ledger = DrawLedger(sampler)
    x, _ = next(iter(DataLoader(dataset(), sampler=ledger, batch_size=BATCH)))  # not indexed
    tokens = torch.zeros(BATCH, 3, dtype=torch.int64)  # integer data of the wrong shape
    hint = r"wrap the dataset in prisample\.IndexedDataset so each batch carries its indices"
    with pytest.raises(ValueError, match=r"one-dimensional, but got shape \(8, 3\).*" + hint):
        ledger.take(tokens)
    with pytest.raises(TypeError, match=r"should hold integers.*" + hint):
        ledger.take(x[:, 0])
    with pytest.raises(ValueError, match=hint):
        sampler.update_priorities(tokens, torch.ones(BATCH))
    assert ledger.pending == 1 and np.all(sampler.priorities == 1.0)  # nothing changed


# -- 5: the num_workers lag -------------------------------------------------------------------------
def train(loader: Iterator[Any], sampler: PrioritizedSampler | DrawLedger, ledger: bool = False) -> None:
    for indices, x, _ in loader:
        if ledger:
            assert isinstance(sampler, DrawLedger)
            sampler.take(indices)
        sampler.update_priorities(indices, x[:, 0].abs())


def test_prefetching_dataloader_over_a_plain_sampler_warns_once() -> None:
    """Bug: a plain PrioritizedSampler behind DataLoader(num_workers=2) trained on batches drawn
    four updates earlier (weights from the train-time distribution), silently."""
    sampler = PrioritizedSampler(N, alpha=1.0, batch_size=BATCH, seed=0)
    loader = DataLoader(
        IndexedDataset(dataset()),
        sampler=sampler,
        batch_size=BATCH,
        num_workers=2,
        prefetch_factor=2,
        multiprocessing_context="fork",
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(iter(loader), sampler)
        train(iter(loader), sampler)  # a second epoch: still one warning
    (message,) = lag_warnings(caught)
    for words in ("num_workers", "prefetch", "DrawLedger", "PrioritizedSamplingCallback", "num_workers=0"):
        assert words in message
    assert [w.category for w in caught if str(w.message) == message] == [UserWarning]


def test_updates_one_batch_late_warn_without_workers() -> None:
    """The signal itself: updating a batch after the sampler's iteration drew the next one."""
    sampler = PrioritizedSampler(N, batch_size=4, seed=0)
    it = iter(sampler)
    first = [next(it) for _ in range(4)]
    second = [next(it) for _ in range(4)]
    with pytest.warns(UserWarning, match=r"drawn 1 batch\(es\) before.*DrawLedger"):
        sampler.update_priorities(first, np.ones(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler.update_priorities(first, np.ones(4))  # once only
        sampler.update_priorities(second, np.ones(4))


def test_no_lag_warning_without_workers_nor_with_a_ledger() -> None:
    sampler = PrioritizedSampler(N, alpha=1.0, batch_size=BATCH, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):  # the documented plain loop, num_workers=0
            train(iter(DataLoader(IndexedDataset(dataset()), sampler=sampler, batch_size=BATCH)), sampler)
        ledger = DrawLedger(PrioritizedSampler(N, alpha=1.0, batch_size=BATCH, seed=0))
        loader = DataLoader(
            IndexedDataset(dataset()),
            sampler=ledger,
            batch_size=BATCH,
            num_workers=2,
            multiprocessing_context="fork",
        )
        train(iter(loader), ledger, ledger=True)
        direct = PrioritizedSampler(N, batch_size=BATCH, seed=0)  # sample() outside a DataLoader
        draws = [direct.sample(BATCH) for _ in range(3)]
        for draw in draws:
            direct.update_priorities(draw.indices, np.ones(BATCH))
    assert lag_warnings(caught) == []


def test_no_lag_warning_under_the_lightning_callback() -> None:
    pytest.importorskip("lightning")
    from tests.test_lightning_callback import TinyData, TinyModel, fit

    for plain in (True, False):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit(TinyModel(), TinyData(plain=plain), max_steps=12)
        assert lag_warnings(caught) == []


# -- 6: the README's replay snippet -----------------------------------------------------------------
def test_readme_replay_snippet_runs_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: the snippet passed device="cuda" (fails without one) and did not say that frame_stack=4
    takes stacked observations.  Run as written, with the capacity cut from 10**6 (7 GB of frames)
    to 1000: a 2-env step of 4-frame stacks."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    code = next(block for block in blocks if "PrioritizedReplay(" in block)
    assert "FrameStackObservation" in README.read_text() and "10**6" in code
    namespace: dict[str, Any] = {}
    exec(compile(code.replace("10**6", "1000"), "README.md", "exec"), namespace)
    replay, batch = namespace["replay"], namespace["batch"]
    assert replay.memory.device == torch.device("cpu") and batch.obs.shape == (32, 4, 84, 84)
    assert replay.memory.num_frames == 10  # 5 distinct frames per env, each stored once
    assert np.all(replay.sampler.priorities[:2] == 0.5)


# -- 7: replay updates of never-filled slots --------------------------------------------------------
def test_replay_update_of_a_never_filled_slot_raises_and_changes_nothing() -> None:
    """Bug: PrioritizedReplay.update_priorities([7], ...) on a slot never filled was dropped
    silently (counted as stale), while PrioritizedSampler.update_priorities raised."""
    replay = PrioritizedReplay(8, (1,), obs_dtype=np.float32, alpha=1.0, seed=0)
    for t in range(3):
        replay.add([t], 0, 0.0, 1.0, [t + 1])
    _, draw = replay.sample(4)
    before = replay.sampler.priorities
    with pytest.raises(
        ValueError, match=r"indices should be .*filled.*indices\[1\]=7 .*never filled.*\[5, 7\]"
    ):
        replay.update_priorities(np.r_[draw.indices[:1], 7, 5], [9.0, 9.0, 9.0])
    np.testing.assert_array_equal(replay.sampler.priorities, before)  # no partial write
    assert replay.dropped_updates == 0
    with pytest.raises(ValueError, match=r"indices should be slots that were added"):  # the sampler's
        replay.sampler.update_priorities([7], [9.0])


def test_replay_update_of_a_rewritten_slot_is_still_dropped_silently() -> None:
    replay = PrioritizedReplay(2, (1,), obs_dtype=np.float32, alpha=1.0, seed=0)
    for t in range(2):
        replay.add([t], 0, 0.0, 1.0, [t + 1])
    batch, draw = replay.sample(2)
    replay.add([2], 0, 0.0, 1.0, [3])  # rewrites slot 0
    replay.update_priorities(draw.indices, [5.0, 5.0], generations=batch.generation)
    assert sorted(draw.indices.tolist()) == [0, 1]  # one draw per equal-mass stratum
    assert replay.dropped_updates == 1 and replay.sampler.priorities[1] == 5.0
