"""Triton kernels for :class:`~prisample.device_tree.DevicePriorityTree` on CUDA: a whole draw
and a whole write each as one kernel, where the tensor-operation path launches a handful
of kernels per tree level.

* :func:`draw`: ``k`` SplitMix64 uniforms from the stream's state (which it advances by ``k``),
  the stratified targets ``t_j = (j + u_j) · total / k``, the descent through every level and the
  per-draw probabilities ``P(i) = m_i / total``: :meth:`DevicePriorityTree.stratified
  <prisample.device_tree.DevicePriorityTree.stratified>` of
  :meth:`SplitMix64.uniform <prisample._device_rng.SplitMix64.uniform>`, in one program.
* :func:`write`: :meth:`DevicePriorityTree.write <prisample.device_tree.DevicePriorityTree.write>`
  in one program: each slot's last kept entry found (a pass over the entries), its raw priority
  and leaf row ``[m_i, 1, p_i, -m_i]`` stored (the masses ``m_i = (p_i + ε)^α`` of every entry
  come in, computed by torch's ``pow`` as on the tensor path), then every ancestor recomputed
  from its 8 children level by level (a barrier between levels), up to the root.

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

__all__ = ["MAX_BATCH", "available", "draw", "write"]

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
    def write_kernel(  # type: ignore[no-untyped-def]
        raw,
        flat,
        starts,
        slots,
        values,
        masses,
        keep,
        k,
        UNIFORM: tl.constexpr,
        KEEP: tl.constexpr,
        LEVELS: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        i = tl.arange(0, BLOCK)
        live = i < k
        row = tl.load(slots + i, mask=live, other=0)
        # each entry's slot's last kept entry (-1: none kept, the slot keeps its value)
        last = tl.full([BLOCK], -1, tl.int32)
        for j in range(0, k):
            hit = row == tl.load(slots + j)
            if KEEP:
                hit = hit & (tl.load(keep + j) != 0)
            last = tl.where(hit, j, last)
        written = live & (last >= 0)
        value = tl.load(values + last, mask=written, other=0.0)
        tl.store(raw + row, value, mask=written)
        empty = value != value  # NaN
        filled = tl.where(empty, 0.0, 1.0).to(tl.float64)
        if UNIFORM:  # noqa: SIM108 (a compile-time branch: Triton drops the other)
            mass = filled
        else:
            mass = tl.where(empty, 0.0, tl.load(masses + last, mask=written, other=0.0))
        tl.store(flat + row * 4, mass, mask=written)
        tl.store(flat + row * 4 + 1, filled, mask=written)
        tl.store(flat + row * 4 + 2, tl.where(empty, float("-inf"), value), mask=written)
        tl.store(flat + row * 4 + 3, tl.where(mass > 0.0, -mass, float("-inf")), mask=written)
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

    return SimpleNamespace(draw=draw_kernel, write=write_kernel)


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


def write(
    tree: DevicePriorityTree,
    slots: torch.Tensor,
    values: torch.Tensor,
    masses: torch.Tensor | None,
    keep: torch.Tensor | None,
) -> None:
    """:meth:`DevicePriorityTree.write <prisample.device_tree.DevicePriorityTree.write>` of
    ``values`` at ``slots`` (entries where ``keep`` is false skipped) as one kernel, given every
    entry's mass ``(values + ε)^α`` (``None`` for the uniform tree, whose masses are 1)."""
    k = slots.shape[0]
    _kernels().write[(1,)](
        tree.raw, tree.flat, tree.starts_tensor, slots, values, values if masses is None else masses,
        slots if keep is None else keep, k,
        UNIFORM=masses is None, KEEP=keep is not None, LEVELS=len(tree.sizes), BLOCK=_block(k),
    )  # fmt: skip
