"""Triton kernels for :class:`~prisample.device_tree.DevicePriorityTree` on CUDA: a whole draw
and a whole write's climb each as one kernel, where the tensor-operation path launches a handful
of kernels per tree level.

* :func:`draw`: ``k`` SplitMix64 uniforms from the stream's state (which it advances by ``k``),
  the stratified targets ``t_j = (j + u_j) · total / k``, the descent through every level and the
  per-draw probabilities ``P(i) = m_i / total``: :meth:`DevicePriorityTree.stratified
  <prisample.device_tree.DevicePriorityTree.stratified>` of
  :meth:`SplitMix64.uniform <prisample._device_rng.SplitMix64.uniform>`, in one program.
* :func:`climb`: the leaf rows of a write stored, then every ancestor recomputed from its 8
  children level by level (a barrier between levels), up to the root, in one program.

Both do the tensor path's floating-point operations in its order (sequential prefix sums of 8
children, the pairwise 8-way sum, IEEE division), so they return the same bits; with
``TRITON_INTERPRET=1`` set before the kernels are first built they run on CPU tensors, which is
how the tests compare them with the tensor path.  :func:`available` says whether they are used:
on a CUDA device with Triton installed, unless the environment sets
``PRISAMPLE_DEVICE_KERNELS=0``.  One program holds the whole batch, so batches and writes above
:data:`MAX_BATCH` entries take the tensor path.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from prisample.device_tree import DevicePriorityTree

__all__ = ["MAX_BATCH", "available", "climb", "draw"]

MAX_BATCH = 1024
"""The largest draw or write one program handles."""


def available(device: torch.device) -> bool:
    """Whether the kernels run on ``device``: a CUDA device, with Triton installed, and
    ``PRISAMPLE_DEVICE_KERNELS`` not ``"0"``."""
    return (
        device.type == "cuda"
        and os.environ.get("PRISAMPLE_DEVICE_KERNELS") != "0"
        and importlib.util.find_spec("triton") is not None
    )


def _block(k: int) -> int:
    return max(16, 1 << (k - 1).bit_length())


@functools.cache
def _build(interpret: bool) -> SimpleNamespace:
    """The kernels, compiled by Triton on first use (``interpret``: built for Triton's CPU
    interpreter, read from ``TRITON_INTERPRET`` when they are built)."""
    import triton  # type: ignore[import-untyped,import-not-found,unused-ignore]
    import triton.language as tl  # type: ignore[import-untyped,import-not-found,unused-ignore]

    @triton.jit  # type: ignore[untyped-decorator,misc,unused-ignore]
    def draw_kernel(flat, starts, state, slots_out, p_out, k, LEVELS: tl.constexpr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        j = tl.arange(0, BLOCK)
        live = j < k
        total = tl.load(flat + tl.load(starts + LEVELS) * 4)
        # SplitMix64 (prisample/_device_rng.py) in unsigned arithmetic: wrapping products and
        # logical shifts, the bits of the int64 tensor version
        s = tl.load(state).to(tl.uint64, bitcast=True)
        z = s + (j + 1).to(tl.uint64) * 0x9E3779B97F4A7C15
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB
        z = z ^ (z >> 31)
        u = (z >> 11).to(tl.float64) * 1.1102230246251565e-16  # 2^-53
        t = (j.to(tl.float64) + u) * (total / k)
        node = tl.full([BLOCK], 0, tl.int64)
        for i in tl.static_range(LEVELS):
            base = (tl.load(starts + (LEVELS - 1 - i)) + node * 8) * 4
            # the last child of positive mass whose preceding siblings sum to at most t
            acc = tl.full([BLOCK], 0.0, tl.float64)
            before = tl.full([BLOCK], 0.0, tl.float64)
            child = tl.full([BLOCK], 0, tl.int64)
            for c in tl.static_range(8):
                m = tl.load(flat + base + c * 4, mask=live, other=0.0)
                entered = (m > 0.0) & (acc <= t)
                child = tl.where(entered, c, child)
                before = tl.where(entered, acc, before)
                acc = acc + m
            t = t - before
            node = node * 8 + child
        mass = tl.load(flat + node * 4, mask=live, other=0.0)
        tl.store(slots_out + j, node, mask=live)
        tl.store(p_out + j, tl.where(total > 0.0, mass / total, 0.0), mask=live)
        tl.debug_barrier()  # every lane has read the state before it moves on
        advanced = s + k.to(tl.uint64) * 0x9E3779B97F4A7C15
        tl.store(state, advanced.to(tl.int64, bitcast=True))

    @triton.jit  # type: ignore[untyped-decorator,misc,unused-ignore]
    def climb_kernel(flat, starts, slots, leaves, k, LEVELS: tl.constexpr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        i = tl.arange(0, BLOCK)
        live = i < k
        row = tl.load(slots + i, mask=live, other=0)
        for c in tl.static_range(4):
            tl.store(flat + row * 4 + c, tl.load(leaves + i * 4 + c, mask=live, other=0.0), mask=live)
        for level in tl.static_range(1, LEVELS + 1):  # the last: the root
            tl.debug_barrier()  # the level below is written
            row = row >> 3
            base = (tl.load(starts + (level - 1)) + row * 8) * 4
            m0 = tl.load(flat + base, mask=live, other=0.0, cache_modifier=".cg")
            m1 = tl.load(flat + base + 4, mask=live, other=0.0, cache_modifier=".cg")
            m2 = tl.load(flat + base + 8, mask=live, other=0.0, cache_modifier=".cg")
            m3 = tl.load(flat + base + 12, mask=live, other=0.0, cache_modifier=".cg")
            m4 = tl.load(flat + base + 16, mask=live, other=0.0, cache_modifier=".cg")
            m5 = tl.load(flat + base + 20, mask=live, other=0.0, cache_modifier=".cg")
            m6 = tl.load(flat + base + 24, mask=live, other=0.0, cache_modifier=".cg")
            m7 = tl.load(flat + base + 28, mask=live, other=0.0, cache_modifier=".cg")
            n0 = tl.load(flat + base + 1, mask=live, other=0.0, cache_modifier=".cg")
            n1 = tl.load(flat + base + 5, mask=live, other=0.0, cache_modifier=".cg")
            n2 = tl.load(flat + base + 9, mask=live, other=0.0, cache_modifier=".cg")
            n3 = tl.load(flat + base + 13, mask=live, other=0.0, cache_modifier=".cg")
            n4 = tl.load(flat + base + 17, mask=live, other=0.0, cache_modifier=".cg")
            n5 = tl.load(flat + base + 21, mask=live, other=0.0, cache_modifier=".cg")
            n6 = tl.load(flat + base + 25, mask=live, other=0.0, cache_modifier=".cg")
            n7 = tl.load(flat + base + 29, mask=live, other=0.0, cache_modifier=".cg")
            high = tl.load(flat + base + 2, mask=live, other=0.0, cache_modifier=".cg")
            low = tl.load(flat + base + 3, mask=live, other=0.0, cache_modifier=".cg")
            for c in tl.static_range(1, 8):
                high = tl.maximum(
                    high, tl.load(flat + base + c * 4 + 2, mask=live, other=0.0, cache_modifier=".cg")
                )
                low = tl.maximum(
                    low, tl.load(flat + base + c * 4 + 3, mask=live, other=0.0, cache_modifier=".cg")
                )
            out = (tl.load(starts + level) + row) * 4
            tl.store(flat + out, ((m0 + m1) + (m2 + m3)) + ((m4 + m5) + (m6 + m7)), mask=live)
            tl.store(flat + out + 1, ((n0 + n1) + (n2 + n3)) + ((n4 + n5) + (n6 + n7)), mask=live)
            tl.store(flat + out + 2, high, mask=live)
            tl.store(flat + out + 3, low, mask=live)

    return SimpleNamespace(draw=draw_kernel, climb=climb_kernel)


def _kernels() -> Any:
    return _build(os.environ.get("TRITON_INTERPRET") == "1")


def draw(tree: DevicePriorityTree, state: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:meth:`~prisample.device_tree.DevicePriorityTree.stratified` of ``k`` SplitMix64 uniforms
    drawn from ``state`` (advanced by ``k`` in place) as one kernel: the slots and their ``P(i)``."""
    slots = torch.empty(k, dtype=torch.int64, device=tree.device)
    p = torch.empty(k, dtype=torch.float64, device=tree.device)
    _kernels().draw[(1,)](
        tree.flat, tree.starts_tensor, state, slots, p, k, LEVELS=len(tree.sizes), BLOCK=_block(k)
    )
    return slots, p


def climb(tree: DevicePriorityTree, slots: torch.Tensor, leaves: torch.Tensor) -> None:
    """Store the ``(k, 4)`` leaf rows ``leaves`` at ``slots`` (duplicates hold equal rows) and
    recompute every ancestor of them, up to the root, as one kernel."""
    k = slots.shape[0]
    _kernels().climb[(1,)](
        tree.flat, tree.starts_tensor, slots, leaves.contiguous(), k, LEVELS=len(tree.sizes), BLOCK=_block(k)
    )
