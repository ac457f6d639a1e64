"""A plain ``PrioritizedSampler`` behind a ``DataLoader`` whose ``batch_size`` differs from its own.

The sampler yields its indices one by one; the loader groups them ``batch_size`` at a time.  Any
other size than the sampler's splits its draws across batches (their strata and the update after
each no longer line up, and late batches are no longer recognised), so ``update_priorities`` warns
once, naming both sizes, when a reported batch shows the loader's size.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from prisample import IndexedDataset, PrioritizedSampler
from prisample.sampler import loader_batch_size_problem


def size_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "DataLoader's batch_size should equal" in str(w.message)]


def train(sampler: PrioritizedSampler, epochs: int = 1, **loader: Any) -> list[str]:
    """The documented plain loop; the batch-size warnings it raised."""
    n = len(sampler)
    data = DataLoader(IndexedDataset(list(range(n))), sampler=sampler, **loader)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(epochs):
            for indices, x in data:
                sampler.update_priorities(indices, x.double() / n + 0.5)
    return size_warnings(caught)


def test_larger_loader_batch_behind_workers_warns_once_naming_both() -> None:
    """Bug: PrioritizedSampler(1000) (batch_size 32) behind DataLoader(batch_size=50, num_workers=2)
    ran silently: batches of 50 split the draws of 32 and the lag warning never fired."""
    sampler = PrioritizedSampler(1000, seed=0)
    got = train(sampler, epochs=2, batch_size=50, num_workers=2, multiprocessing_context="fork")
    assert len(got) == 1
    for words in ("sampler.batch_size=32", "got batch_size=50", "DataLoader(batch_size=32)", "batch_size=50"):
        assert words in got[0]


@pytest.mark.parametrize(
    ("k", "loader", "seen"),
    [
        (8, {"batch_size": 3}, 3),
        (8, {"batch_size": 16}, 16),
        (8, {}, 1),
        (8, {"batch_size": 5, "drop_last": True}, 5),
    ],
)
def test_other_loader_batch_sizes_warn(k: int, loader: dict[str, Any], seen: int) -> None:
    """Smaller, a multiple (two whole draws per batch), the DataLoader's default of 1, drop_last."""
    (message,) = train(PrioritizedSampler(40, batch_size=k, seed=0), epochs=2, **loader)
    assert f"sampler.batch_size={k}" in message and f"got batch_size={seen}" in message


@pytest.mark.parametrize(
    "loader",
    [
        {"batch_size": 8},  # 45 slots: the epoch's last batch has 5
        {"batch_size": 8, "drop_last": True},
        {"batch_size": 8, "num_workers": 2, "multiprocessing_context": "fork"},  # prefetching
    ],
)
def test_matching_loader_never_warns_about_the_batch_size(loader: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the prefetching loader's lag warning is another matter
        got = train(PrioritizedSampler(45, batch_size=8, seed=0), epochs=3, **loader)
    assert got == []


def test_updates_of_other_slots_beside_the_loop_pass() -> None:
    """Updates that are not a loader's batch (all slots, single slots, a draw's subset) are no sign."""
    sampler = PrioritizedSampler(40, batch_size=8, seed=0)
    it = iter(sampler)
    head = [next(it) for _ in range(8)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler.update_priorities(np.arange(40), np.ones(40))
        sampler.update_priorities([head[1]], [2.0])
        sampler.update_priorities(head[2:5], [2.0, 1.0, 3.0])
        sampler.update_priorities(head, np.ones(8))  # the first batch is the first draw: lined up
        sampler.update_priorities(head[:3], np.ones(3))  # not looked at again this epoch


def test_a_loader_batch_of_the_whole_epoch_is_not_judged() -> None:
    """A batch holding the whole epoch does not show the loader's size (it may be anything larger)."""
    assert train(PrioritizedSampler(20, batch_size=8, seed=0), batch_size=20) == []
    assert train(PrioritizedSampler(20, batch_size=32, seed=0), batch_size=32) == []  # one draw of 20


def test_the_lightning_callback_and_the_sampler_share_the_check() -> None:
    assert loader_batch_size_problem(32, 32) is None
    assert loader_batch_size_problem(None, 32) is None  # a batch_sampler: no batch_size to compare
    assert loader_batch_size_problem(True, 1) is None
    problem = loader_batch_size_problem(50, 32)
    assert problem is not None and "sampler.batch_size=32" in problem and "batch_size=50" in problem


def test_state_load_and_pickle_forget_the_epoch() -> None:
    """A loaded or unpickled sampler starts afresh: the old iteration's first draws are not its own."""
    sampler = PrioritizedSampler(40, batch_size=8, seed=0)
    it = iter(sampler)
    head = [next(it) for _ in range(3)]
    sampler.load_state_dict(PrioritizedSampler(40, batch_size=8, seed=1).state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler.update_priorities(head, torch.ones(3))
    older = PrioritizedSampler(40, batch_size=8, seed=0).__getstate__()
    for key in ("_head", "_head_length", "_size_warned"):  # attributes a pickle of an older version lacks
        del older[key]
    restored = object.__new__(PrioritizedSampler)
    restored.__setstate__(older)
    assert train(restored, batch_size=4) != []  # an older pickle's sampler still checks
