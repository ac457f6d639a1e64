"""Tensor operations per device-replay call, counted on CPU tensors: a measure that machine load
does not change, and the number of kernels a CUDA graph of the same call launches.

:class:`OpCounter` is a ``TorchDispatchMode`` that counts every ATen operation dispatched while it
is active; an operation that only makes a view (``view``, ``slice``, ``select``, ``detach``, ...)
or allocates (``empty``) launches no kernel and is counted apart, so ``kernels`` is what a graph
replays.
:func:`replay_step_counts` counts, for the tensor-operation path (what runs on CPU, and on CUDA
without Triton) and for the fused path (``prisample/_device_kernels.py``'s kernels, each counted
as the one launch it is on CUDA; run here by the tensor path, uncounted, as they compute the
same), a prioritized replay with its priorities on the device (the
``device_proportional`` backend, on CPU tensors): one ``sample(32)``, one
``update_priorities(32)`` of that draw (generations checked), and one ``add_many`` of a vector
step of ``streams`` environments, in a memory not yet full and in a full one (whose add also
evicts).

:func:`sequence_step_counts` counts the same for a sequence replay with its priorities on the
device (:class:`~prisample.replay.SequenceReplay`, R2D2's item shape: ``burn_in`` 40, ``length``
80, ``period`` 40, frame stacks of 4, a recurrent state): one ``sample(64)`` and one
``update_from_td(64)`` of that draw (the R2D2 mix over the learn steps, generations checked).

Usage: ``python -m benchmarks.op_count --n 1000000`` prints the counts as JSON
(``--sequence``: the sequence replay's).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "FULL_N",
    "OpCounter",
    "count_ops",
    "kernels_as_launches",
    "replay_step_counts",
    "sequence_step_counts",
    "step_counts",
]

FULL_N = 1024
"""The capacity of the full memory whose ``add_many`` (with evictions) is counted."""


COUNTED = "ATen operations on CPU tensors (TorchDispatchMode); kernels: all but views, allocations"

# Operations that allocate and launch nothing.
_ALLOCATIONS = (torch.ops.aten.empty, torch.ops.aten.empty_strided, torch.ops.aten.empty_like)


class OpCounter(TorchDispatchMode):  # type: ignore[no-untyped-call,unused-ignore]
    """Counts the ATen operations dispatched while active: :attr:`ops` all of them by name,
    :attr:`kernels` those that compute (every operation but the view-making ones and the
    allocations, ``empty``)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call,unused-ignore]
        self.ops: collections.Counter[str] = collections.Counter()
        self.kernels = 0
        self._paused = False

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if not self._paused:
            self.ops[str(func.overloadpacket.__name__)] += 1
            self.kernels += not func.is_view and func.overloadpacket not in _ALLOCATIONS
        return func(*args, **(kwargs or {}))

    def launch(self, name: str) -> None:
        """Count one kernel launched outside ATen (a Triton kernel)."""
        self.ops[name] += 1
        self.kernels += 1

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Count nothing inside."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    @property
    def total(self) -> int:
        """Every operation counted, views included."""
        return sum(self.ops.values())


_counters: list[OpCounter] = []


def count_ops(fn: Callable[[], Any]) -> dict[str, int]:
    """``{"ops", "kernels"}`` of one call of ``fn``."""
    with OpCounter() as counter:
        _counters.append(counter)
        try:
            fn()
        finally:
            _counters.pop()
    return {"ops": counter.total, "kernels": counter.kernels}


@contextlib.contextmanager
def kernels_as_launches() -> Iterator[None]:
    """Inside, the fused draw and write of ``prisample/_device_kernels.py`` run as the tensor
    path (the same results) and each counts as one launch in the active :func:`count_ops`."""
    from prisample import _device_kernels
    from prisample._device_rng import uniform

    def draw(tree: Any, state: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        with _counters[-1].paused() if _counters else contextlib.nullcontext():
            out = tree.stratified(uniform(state, k))
        if _counters:
            _counters[-1].launch("triton_draw")
        return cast(tuple[torch.Tensor, torch.Tensor], out)

    def write(tree: Any, slots: torch.Tensor, values: torch.Tensor, masses: Any, keep: Any) -> None:
        with _counters[-1].paused() if _counters else contextlib.nullcontext():
            tree.fused = False
            try:
                tree.write(slots, values, keep)
            finally:
                tree.fused = True
        if _counters:
            _counters[-1].launch("triton_write")

    saved = _device_kernels.draw, _device_kernels.write
    _device_kernels.draw, _device_kernels.write = draw, write
    try:
        yield
    finally:
        _device_kernels.draw, _device_kernels.write = saved


def replay_step_counts(
    n: int = 10**6, streams: int = 8, batch: int = 32, *, fused: bool = False
) -> dict[str, Any]:
    """Operations of a device replay's calls at capacity ``n`` on CPU tensors (frames ``8 × 8``,
    stacks of 4: the tree's work depends on the capacity alone, the frames' on the batch), on the
    tensor-operation path or (``fused``) the fused one, each kernel counted as one launch.

    ``sample``, ``update`` and their sum ``sample_update`` are counted in a memory holding 400
    transitions; ``add_many`` there (no eviction) and ``add_many_full`` in a full memory of
    capacity ``full_n`` (each of its adds evicts ``streams`` transitions)."""
    from prisample.replay import PrioritizedReplay  # the benchmark's subject, imported when run

    def build(capacity: int) -> tuple[PrioritizedReplay, Callable[[], None]]:
        replay = PrioritizedReplay(
            capacity, (8, 8), frame_stack=4, num_streams=streams, device="cpu",
            backend="device_proportional", alpha=0.6, beta=0.4, seed=0,
        )  # fmt: skip
        replay.steps.sampler_on_device().tree.fused = fused
        rng = np.random.default_rng(0)
        last = rng.integers(0, 255, (streams, 4, 8, 8), dtype=np.uint8)

        def add() -> None:
            nonlocal last
            nxt = np.concatenate([last[:, 1:], rng.integers(0, 255, (streams, 1, 8, 8), dtype=np.uint8)], 1)
            replay.add_many(last, np.arange(streams), rng.normal(size=streams), np.full(streams, 0.99), nxt)
            last = nxt

        return replay, add

    with warnings.catch_warnings(), kernels_as_launches() if fused else contextlib.nullcontext():
        warnings.simplefilter("ignore")  # the random frames do not continue their stacks
        replay, add = build(n)
        for _ in range(400 // streams):
            add()
        tds = torch.rand(batch, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        drawn: list[Any] = []

        def sample() -> None:
            drawn[:] = replay.sample(batch)

        def update() -> None:
            replay.update_priorities(drawn[1].indices, tds, generations=drawn[0].generation)

        sample()
        update()  # first calls allocate what later ones reuse
        counts: dict[str, Any] = {"sample": count_ops(sample), "update": count_ops(update)}
        counts["sample_update"] = {
            key: counts["sample"][key] + counts["update"][key] for key in ("ops", "kernels")
        }
        add()
        counts["add_many"] = count_ops(add)
        _, add_full = build(FULL_N)
        for _ in range(FULL_N // streams + 2):
            add_full()
        counts["add_many_full"] = count_ops(add_full)
    return counts


def step_counts(n: int = 10**6, streams: int = 8, batch: int = 32) -> dict[str, Any]:
    """:func:`replay_step_counts` of both paths, with what was counted."""
    return {
        "n": n,
        "streams": streams,
        "batch": batch,
        "full_n": FULL_N,
        "counted": COUNTED,
        "tensor_ops": replay_step_counts(n, streams, batch),
        "fused": replay_step_counts(n, streams, batch, fused=True),
    }


def sequence_step_counts(
    capacity: int = 10**6, batch: int = 64, streams: int = 8, *, fused: bool = False
) -> dict[str, Any]:
    """Operations of a device sequence replay's learner step at ``capacity`` on CPU tensors
    (frames ``8 × 8``, stacks of 4, an LSTM-like state of two ``(16,)`` arrays; items of 40 + 80
    steps every 40): ``sample`` (``batch`` items), ``update`` (``update_from_td`` of that draw) and
    their sum ``sample_update``, each kernel of the fused path counted as one launch."""
    from prisample.replay import SequenceReplay  # the benchmark's subject, imported when run

    replay = SequenceReplay(
        capacity, (8, 8), frame_stack=4, obs_dtype=np.uint8, num_streams=streams, device="cpu",
        backend="device_proportional", seed=0, state={"h": ((16,), np.float32), "c": ((16,), np.float32)},
    )  # fmt: skip
    assert replay.device_steps is not None
    replay.device_steps.sampler.tree.fused = fused
    rng = np.random.default_rng(0)
    last = rng.integers(0, 255, (streams, 4, 8, 8), dtype=np.uint8)
    state = {"h": np.zeros((streams, 16), np.float32), "c": np.zeros((streams, 16), np.float32)}
    with warnings.catch_warnings(), kernels_as_launches() if fused else contextlib.nullcontext():
        warnings.simplefilter("ignore")
        for _ in range(3 * replay.window):  # items complete on every stream
            nxt = np.concatenate([last[:, 1:], rng.integers(0, 255, (streams, 1, 8, 8), dtype=np.uint8)], 1)
            replay.add_many(last, np.arange(streams), rng.normal(size=streams), np.full(streams, 0.99), nxt,
                            state=state)  # fmt: skip
            last = nxt
        drawn: list[Any] = []
        td = torch.rand(batch, replay.window, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

        def sample() -> None:
            drawn[:] = replay.sample(batch)

        def update() -> None:
            batch_, draw = drawn
            replay.update_from_td(draw.indices, td, batch_.learn, generations=batch_.generation)

        sample()
        update()  # first calls allocate what later ones reuse
        counts: dict[str, Any] = {"sample": count_ops(sample), "update": count_ops(update)}
    counts["sample_update"] = {
        key: counts["sample"][key] + counts["update"][key] for key in ("ops", "kernels")
    }
    return {"capacity": capacity, "batch": batch, "window": replay.window, **counts}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--n", type=int, default=10**6, help="the memory's capacity")
    parser.add_argument("--sequence", action="store_true", help="count the device sequence replay's step")
    args = parser.parse_args(argv)
    if args.sequence:
        counts = {
            "counted": COUNTED,
            "tensor_ops": sequence_step_counts(args.n),
            "fused": sequence_step_counts(args.n, fused=True),
        }
    else:
        counts = step_counts(args.n)
    print(json.dumps(counts))
    return counts


if __name__ == "__main__":
    main()
