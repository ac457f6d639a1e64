"""How many tensor operations (kernels, in a CUDA graph) a device replay's step issues, counted on
CPU tensors with ``benchmarks/op_count.py``'s ``TorchDispatchMode``: budgets a regression must not
pass, for the tensor-operation path and for the fused one (Triton kernels, each one launch); and an
empty write issues none."""

from __future__ import annotations

import pytest
import torch

from benchmarks.op_count import count_ops, step_counts
from prisample import DevicePrioritizedSampler
from prisample.device_tree import DevicePriorityTree

# Kernels (ATen operations but views and allocations) at capacity 10^6, batch 32, 8 streams.
# Counted when these were set: the tensor path 124 + 81 per sample and update (179 + 130 before the
# tree's levels became one (nodes, 4) tensor), 77 per add_many (124 before); the fused path
# 19 + 14 and 14.
BUDGETS = {
    "tensor_ops": {"sample_update": 215, "add_many": 85, "add_many_full": 90},
    "fused": {"sample_update": 36, "add_many": 16, "add_many_full": 46},
}


@pytest.fixture(scope="module")
def counts() -> dict[str, object]:
    return step_counts(10**6)


@pytest.mark.parametrize("path", sorted(BUDGETS))
def test_a_device_replay_step_stays_within_its_kernel_budget(counts: dict[str, object], path: str) -> None:
    measured = counts[path]
    assert isinstance(measured, dict)
    for call, budget in BUDGETS[path].items():
        assert 0 < measured[call]["kernels"] <= budget, (path, call, measured[call])


def test_the_fused_path_launches_a_fraction_of_the_tensor_paths_kernels(counts: dict[str, object]) -> None:
    tensors, fused = counts["tensor_ops"], counts["fused"]
    assert isinstance(tensors, dict) and isinstance(fused, dict)
    assert fused["sample_update"]["kernels"] * 5 <= tensors["sample_update"]["kernels"]


def test_an_empty_write_issues_no_operation() -> None:
    tree = DevicePriorityTree(1000, alpha=0.6, eps=1e-6)
    none, nothing = torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.float64)
    assert count_ops(lambda: tree.write(none, nothing)) == {"ops": 0, "kernels": 0}
    sampler = DevicePrioritizedSampler(1000, seed=0)
    sampler.add(range(10))
    before = [t.clone() for t in sampler.tree.state_tensors()]
    for call in (
        lambda: sampler.add(none, checked=False),
        lambda: sampler.remove(none, checked=False),
        lambda: sampler.update_priorities(none, nothing, checked=False),
    ):
        assert count_ops(call)["kernels"] == 0  # a view of the input at most
    for a, b in zip(sampler.tree.state_tensors(), before, strict=True):
        assert torch.equal(a.nan_to_num(-1.0), b.nan_to_num(-1.0))
