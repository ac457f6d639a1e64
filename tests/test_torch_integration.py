"""The ``torch.utils.data.Sampler`` protocol and ``DataLoader`` use with :class:`IndexedDataset`."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, TensorDataset

from prisample import IndexedDataset, PrioritizedSampler
from tests.reference import BACKENDS


class Squares(Dataset):
    """Item ``i`` is ``(float tensor [i, i²], int label i % 3)``: easy to check against the index."""

    def __len__(self) -> int:
        return 20

    def __getitem__(self, i: int):
        return torch.tensor([float(i), float(i * i)]), i % 3


def test_sampler_is_a_torch_sampler():
    assert isinstance(PrioritizedSampler(3, seed=0), Sampler)


def test_indexed_dataset_prepends_the_index():
    ds = [("a", 0), ("b", 1), ("c", 2)]
    wrapped = IndexedDataset(ds)
    assert len(wrapped) == 3
    assert wrapped[1] == (1, "b", 1)
    assert IndexedDataset(["x", "y"])[1] == (1, "y")  # a non-tuple item
    tensors = IndexedDataset(TensorDataset(torch.arange(4.0), torch.arange(4) * 10))
    index, x, y = tensors[2]
    assert index == 2 and x.item() == 2.0 and y.item() == 20


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(3))


@pytest.mark.parametrize("dataset", [5, 2.5, None, iter([1, 2]), _Stream()])
def test_indexed_dataset_refuses_what_cannot_be_indexed_at_construction(dataset):
    """``IndexedDataset(5)`` was accepted and failed at the first item with "'int' object is not
    subscriptable"; a non-indexable dataset (an IterableDataset included) is refused by name."""
    with pytest.raises(TypeError, match=r"dataset should be a map-style dataset .* but got dataset="):
        IndexedDataset(dataset)


@pytest.mark.parametrize("backend", BACKENDS)
def test_len_and_iteration(backend):
    s = PrioritizedSampler(10, backend=backend, size=6, batch_size=4, seed=0)
    assert len(s) == 6
    drawn = list(s)
    assert len(drawn) == 6 and all(isinstance(i, int) for i in drawn)
    assert set(drawn) <= set(range(6))
    s.add([7, 8])
    assert len(s) == 8 and len(list(s)) == 8
    s.remove([0])
    assert len(s) == 7
    fixed = PrioritizedSampler(10, backend=backend, num_samples=25, batch_size=4, seed=0)
    assert len(fixed) == 25 and len(list(fixed)) == 25


def test_iteration_is_lazy_one_batch_at_a_time():
    """``iter(s)`` draws ``batch_size`` indices per ``sample`` call, only when they are needed."""
    s = PrioritizedSampler(10, batch_size=4, num_samples=1000, seed=0)
    it = iter(s)
    assert s.state_dict()["step"] == 0
    first = list(itertools.islice(it, 4))
    assert len(first) == 4 and s.state_dict()["step"] == 1
    next(it)
    assert s.state_dict()["step"] == 2


def test_priority_updates_between_batches_take_effect_on_the_next_batch():
    s = PrioritizedSampler(10, alpha=1.0, eps=1e-12, batch_size=5, num_samples=50, seed=0)
    it = iter(s)
    first = [next(it) for _ in range(5)]
    assert len(set(first)) > 1
    s.update_priorities(np.arange(10), np.where(np.arange(10) == 7, 1e6, 0.0))
    second = [next(it) for _ in range(5)]
    assert second == [7] * 5


def test_set_epoch_is_recorded():
    s = PrioritizedSampler(5, seed=0)
    s.set_epoch(4)
    assert s.epoch == 4
    assert s.state_dict()["epoch"] == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_none_follows_torch_manual_seed(backend):
    """Like ``RandomSampler``: with no seed, the draws are reproducible under ``torch.manual_seed``."""
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        s = PrioritizedSampler(50, backend=backend)
        s.update_priorities(np.arange(50), np.linspace(0.0, 3.0, 50))
        runs.append([s.sample(16).indices.tolist() for _ in range(5)])
    assert runs[0] == runs[1]
    if backend in ("proportional", "rank", "uniform"):
        torch.manual_seed(1)
        s = PrioritizedSampler(50, backend=backend)
        s.update_priorities(np.arange(50), np.linspace(0.0, 3.0, 50))
        assert [s.sample(16).indices.tolist() for _ in range(5)] != runs[0]


def test_explicit_seed_is_reproducible_and_independent_of_torch():
    def make(seed: int) -> PrioritizedSampler:
        s = PrioritizedSampler(30, batch_size=7, seed=seed)
        s.update_priorities(np.arange(30), np.linspace(0.0, 3.0, 30))
        return s

    torch.manual_seed(0)
    a = make(123)
    torch.manual_seed(1)
    b = make(123)
    assert list(a) == list(b)
    assert list(make(123)) != list(make(124))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_with_indexed_dataset(num_workers):
    """Batches carry the drawn indices, the items belong to them, and only valid slots appear."""
    s = PrioritizedSampler(20, size=0, batch_size=4, num_samples=40, seed=0)
    valid = [0, 2, 3, 5, 8, 13, 19]
    s.add(valid)
    s.update_priorities(valid, [0.1, 5.0, 0.0, 1.0, 2.0, 0.5, 3.0])
    loader = DataLoader(IndexedDataset(Squares()), sampler=s, batch_size=4, num_workers=num_workers)
    assert len(loader) == 10
    seen = []
    for index, x, label in loader:
        assert index.dtype == torch.int64 and index.shape == (4,)
        torch.testing.assert_close(x[:, 0], index.double().float())
        torch.testing.assert_close(x[:, 1], (index * index).float())
        assert torch.equal(label, index % 3)
        seen += index.tolist()
    assert len(seen) == 40
    assert set(seen) <= set(valid)


def test_dataloader_sees_priority_updates_between_batches():
    """With ``num_workers=0`` the sampler is asked for each batch as it is loaded, so priorities
    fed back after a batch steer the next one (a prioritized supervised-learning loop)."""
    s = PrioritizedSampler(20, alpha=1.0, eps=1e-12, batch_size=5, num_samples=40, seed=0)
    loader = DataLoader(IndexedDataset(Squares()), sampler=s, batch_size=5, num_workers=0)
    batches = []
    for step, (index, _x, _label) in enumerate(loader):
        batches.append(index.tolist())
        if step == 1:  # the "loss" now says: only slot 11 matters
            s.update_priorities(np.arange(20), np.where(np.arange(20) == 11, 1.0, 0.0))
    assert len(batches) == 8
    assert any(i != 11 for i in batches[0] + batches[1])
    assert all(batch == [11] * 5 for batch in batches[2:])
