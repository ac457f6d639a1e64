"""``DevicePriorityTree``: the proportional and uniform distributions over slots as torch tensors on
one device (Schaul et al. 2016, Sec. 3.3 and App. B.2.1), written and drawn from without a host
synchronisation.

Raw priorities ``p_i`` are stored (float64, ``NaN`` = empty slot); the leaf masses
``m_i = (p_i + ε)^α`` (proportional, Eq. 1) or ``m_i = 1`` (uniform) are derived from them in one
place, :meth:`DevicePriorityTree.masses_of`.  Above the leaves an 8-ary tree keeps, for every
subtree, the float64 sum of the masses, the number of non-empty slots, the largest raw priority
and the smallest *positive* mass (the maximum new slots enter at, and ``P_min`` of the
memory-wide weight normalisation, Sec. 3.4).

Layout: every level, the leaves included, is one ``(nodes, 4)`` float64 tensor whose columns are
``[mass sum, live count, max raw, -min positive mass]`` (a leaf: ``[m_i, 1, p_i, -m_i]``, an empty
slot ``[0, 0, -inf, -inf]``, a zero mass ``-inf`` in the last column), so that a node is
recomputed from its 8 children by one gather of ``8 × 4`` values, three elementwise additions
and one maximum whatever the level.  Level 0 is the leaves, padded with empty slots to a multiple
of 8; level ``l`` holds one node per 8 nodes of level ``l - 1``, padded to a multiple of 8, up to
a top level of exactly 8 nodes, whose reduction is the root (:attr:`~DevicePriorityTree.total`,
:attr:`~DevicePriorityTree.max_raw`, :attr:`~DevicePriorityTree.min_mass`,
:attr:`~DevicePriorityTree.count`).  The children of node ``j`` of level ``l`` are nodes
``8j .. 8j+7`` of level ``l - 1``, so slot order is leaf order for any capacity.

A write of ``k`` slots and a draw of ``k`` targets cost ``O(k log N)`` work in a fixed number of
tensor operations (a handful per level; the number of levels depends only on the capacity), with
no data-dependent shape and nothing read back to the host, so both can be captured in a CUDA
graph.  Every parent is recomputed from its children after a write, never delta-propagated, so
sums do not drift; the 8-way sum is a fixed pairwise order of elementwise additions, so a node
holds the same bits whether it was written incrementally or rebuilt, on any device.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, cast

import torch

from prisample import _device_kernels
from prisample._device_rng import SplitMix64
from prisample._devices import concrete_device

__all__ = ["BRANCH", "DevicePriorityTree"]

BRANCH = 8


def _round8(n: int) -> int:
    return -(-n // BRANCH) * BRANCH


def _reduce8(children: torch.Tensor, summed: torch.Tensor) -> torch.Tensor:
    """Parents of ``(rows, 8, 4)`` children: the columns where ``summed`` is true summed as
    ``((c0+c1)+(c2+c3))+((c4+c5)+(c6+c7))`` (elementwise additions, whose rounding does not depend
    on the number of rows or on the device, as a reduction kernel's order may), the others their
    maximum (the max raw priority, and the min positive mass negated)."""
    pairs = children[:, 0::2] + children[:, 1::2]
    quads = pairs[:, 0::2] + pairs[:, 1::2]
    return torch.where(summed, quads[:, 0] + quads[:, 1], children.amax(1))


def _elementwise_pow(base: torch.Tensor, exponent: float) -> torch.Tensor:
    """``base ** exponent`` with each element's rounding a function of that element alone.

    On CPU, torch's vectorised ``pow`` rounds differently (by an ulp) from the scalar one it uses
    for the tail of a contiguous tensor, so a slot's mass would depend on the length of the write
    that set it and an incremental tree would differ from a rebuilt one.  A strided operand takes
    the scalar path for every element (libm's ``pow``, as numpy's); CUDA computes per element
    anyway.
    """
    spread = torch.empty((base.shape[0], 2), dtype=base.dtype, device=base.device)[:, 0]
    spread.copy_(base)
    return spread**exponent


class DevicePriorityTree:
    """Sum / max-raw / min-positive-mass tree over raw priorities on ``device``.

    ``uniform=False``: ``m_i = (p_i + ε)^α`` for a non-empty slot (proportional, Eq. 1);
    ``uniform=True``: ``m_i = 1`` (``P(i) = 1/N``); an empty slot has mass 0.  With ``ε = 0`` a zero
    priority has mass 0 and is never drawn.

    :meth:`write` takes device tensors and trusts them (indices in range, values NaN or finite
    and ``>= 0``): the caller validates.  Every node is recomputed from its children, the
    number of non-empty slots too (an exact integer in float64).

    >>> tree = DevicePriorityTree(3, alpha=1.0, eps=0.0)
    >>> tree.write(torch.tensor([0, 2]), torch.tensor([1.0, 3.0], dtype=torch.float64))
    >>> float(tree.total), tree.find(torch.tensor([0.5, 1.5], dtype=torch.float64)).tolist()
    (4.0, [0, 2])
    """

    def __init__(
        self,
        capacity: int,
        *,
        alpha: float,
        eps: float,
        uniform: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        self.capacity = int(capacity)
        self.alpha = float(alpha)
        self.eps = float(eps)
        self.uniform = bool(uniform)
        self.device = concrete_device("cpu" if device is None else device)
        sizes = [_round8(self.capacity)]
        while sizes[-1] > BRANCH:
            sizes.append(_round8(sizes[-1] // BRANCH))
        self.sizes = tuple(sizes)
        """Length of each level: the leaves first, the top level (8 nodes) last."""
        self.raw = torch.full((sizes[0],), math.nan, dtype=torch.float64, device=self.device)
        empty = torch.tensor([0.0, 0.0, -math.inf, -math.inf], dtype=torch.float64, device=self.device)
        starts = [0]
        for n in sizes:
            starts.append(starts[-1] + n)
        self.flat = empty.repeat(starts[-1] + 1, 1)
        """Every level's nodes, the leaves first, then the root: one ``(nodes + 1, 4)`` tensor."""
        self.nodes = [self.flat[start : start + n] for start, n in zip(starts, sizes, strict=False)]
        """Each level's ``(nodes, 4)`` columns ``[mass sum, live count, max raw, -min positive
        mass]`` (views of :attr:`flat`), the leaves first."""
        self.root = self.flat[-1]
        """The reduction of the top level, in the same four columns (a view of :attr:`flat`)."""
        self.starts = tuple(starts)
        """The first row of each level in :attr:`flat`, the leaves first, then the root's."""
        self.starts_tensor = torch.tensor(starts, dtype=torch.int64, device=self.device)
        self.fused = _device_kernels.available(self.device)
        """Whether draws and writes run as one kernel each (``prisample/_device_kernels.py``:
        Triton, on CUDA) instead of a few tensor operations per level; the results are the same."""
        self.total = self.root[0]
        """``Σ_i m_i`` over non-empty slots (0-d float64, a view of :attr:`root`)."""
        self.max_raw = self.root[2]
        """Largest raw priority of a non-empty slot; ``-inf`` when all are empty (0-d)."""
        self.masses = self.nodes[0][:, 0]
        """The leaf masses ``m_i`` (0 for an empty slot; a view of the leaves)."""
        self._summed = torch.tensor([True, True, False, False], device=self.device)
        self._last = torch.zeros(sizes[0], dtype=torch.int64, device=self.device)  # write scratch
        self._shifts = torch.arange(3, 3 * len(sizes), 3, dtype=torch.int64, device=self.device)
        self._steps = torch.arange(BRANCH, dtype=torch.int64, device=self.device)

    @property
    def sums(self) -> list[torch.Tensor]:
        """Each level's mass sums (views), the leaf masses first."""
        return [level[:, 0] for level in self.nodes]

    @property
    def maxs(self) -> list[torch.Tensor]:
        """Each level's largest raw priority (views; ``-inf`` where none), the raw priorities
        (NaN = empty) first."""
        return [self.raw] + [level[:, 2] for level in self.nodes[1:]]

    @property
    def mins(self) -> list[torch.Tensor]:
        """Each level's smallest positive mass (``inf`` where none), the leaf masses first."""
        return [self.masses] + [-level[:, 3] for level in self.nodes[1:]]

    @property
    def min_mass(self) -> torch.Tensor:
        """Smallest positive mass; ``inf`` when none is positive (0-d)."""
        return -self.root[3]

    @property
    def count(self) -> torch.Tensor:
        """Number of non-empty slots (0-d int64; the root's exact float64 count)."""
        return self.root[1].to(torch.int64)

    def state_tensors(self) -> list[torch.Tensor]:
        """Every tensor a write changes (in place), e.g. to save and restore around warm-up steps
        before a CUDA graph capture."""
        return [self.raw, self.flat]

    @property
    def nbytes(self) -> int:
        """Bytes of the tree's tensors (on its device)."""
        return sum(t.numel() * t.element_size() for t in (self.raw, self.flat, self._last))

    @property
    def levels(self) -> int:
        """Number of internal levels above the leaves (0 for ``capacity <= 8``)."""
        return len(self.sizes) - 1

    # -- masses ---------------------------------------------------------------------------------
    def masses_of(self, raw: torch.Tensor) -> torch.Tensor:
        """The leaf masses of raw priorities: 0 for NaN (empty), else ``(p + ε)^α`` or 1 (uniform)."""
        return self._leaves(raw, torch.isnan(raw))[:, 0]

    def _leaves(self, raw: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
        """Leaf rows ``[m_i, 1, p_i, -m_i]`` of raw priorities (``empty``: their NaN mask), with
        ``[0, 0, -inf, -inf]`` for an empty slot and ``-inf`` last for a zero mass."""
        live = empty.logical_not().to(torch.float64)
        mass = live if self.uniform else _elementwise_pow(raw + self.eps, self.alpha).masked_fill_(empty, 0.0)
        return torch.stack(
            [mass, live, raw.masked_fill(empty, -math.inf), mass.neg().masked_fill_(mass <= 0.0, -math.inf)],
            1,
        )

    def _refresh(self, level: int, rows: torch.Tensor | None) -> None:
        """Recompute nodes ``rows`` of ``level`` (``None``: the root) from their children;
        duplicates get equal values."""
        if rows is None:
            self.root.copy_(_reduce8(self.nodes[-1].view(1, BRANCH, 4), self._summed)[0])
        else:
            children = self.nodes[level - 1].view(-1, BRANCH, 4)[rows]
            self.nodes[level].index_put_((rows,), _reduce8(children, self._summed))

    # -- writes ---------------------------------------------------------------------------------
    def write(self, slots: torch.Tensor, values: torch.Tensor, keep: torch.Tensor | None = None) -> None:
        """``raw[slots] = values`` as one ordered write (last duplicate wins; NaN empties a slot),
        then every ancestor of a written slot recomputed from its children, level by level.

        ``slots``: int64, ``values``: float64, both 1-d on the device, trusted (in range, NaN or
        finite ``>= 0``).  ``keep`` (bool, same length): entries where it is ``False`` are not
        written and change nothing; a slot named twice keeps its last *kept* entry, and a slot
        none of whose entries is kept keeps its value (decided on the device: no host read).
        """
        k = slots.shape[0]
        if k == 0:  # known from the shape: nothing to write, no operation issued
            return
        if self.fused and k <= _device_kernels.MAX_BATCH:
            # masses of every entry, before the kernel picks each slot's: elementwise, so the
            # picked one has the bits of the tensor path's
            masses = None if self.uniform else _elementwise_pow(values + self.eps, self.alpha)
            if self._fused(_device_kernels.write, slots, values, masses, keep):
                return
        # Give every entry the value of its slot's last kept entry (its current value if none):
        # the scatters below then write equal values at equal indices, whatever order the device
        # applies them in.  An entry not kept counts as position j - k, below every kept one, so
        # a slot's largest position is its last kept entry's, or (none kept) its last entry's
        # minus k, which indexes (from the end) that entry's current value, appended to values.
        position = torch.arange(k, dtype=torch.int64, device=self.device)
        if keep is not None:
            position = torch.where(keep, position, position - k)
            values = torch.cat([values, self.raw[slots]])
        self._last.scatter_reduce_(0, slots, position, reduce="amax", include_self=False)
        self.settle(slots, values[self._last[slots]])

    def settle(self, slots: torch.Tensor, values: torch.Tensor) -> None:
        """``raw[slots] = values`` for values already resolved per slot (a slot named twice gets
        equal values), their leaf rows, and every ancestor recomputed, on tensor operations."""
        self.raw.index_put_((slots,), values)
        self.climb(slots, self._leaves(values, torch.isnan(values)))

    def climb(self, slots: torch.Tensor, leaves: torch.Tensor) -> None:
        """Store the ``(k, 4)`` leaf rows ``leaves`` at ``slots`` (duplicates hold equal rows) and
        recompute every ancestor of them, up to the root: a few tensor operations per level."""
        self.nodes[0].index_put_((slots,), leaves)
        rows = slots >> self._shifts[:, None]  # every level's row of every slot
        for level in range(1, len(self.sizes)):
            self._refresh(level, rows[level - 1])
        self._refresh(len(self.sizes), None)

    def rebuild(self) -> None:
        """Recompute every node from ``raw`` in ``O(N)``."""
        self.nodes[0].copy_(self._leaves(self.raw, torch.isnan(self.raw)))
        for level in range(1, len(self.sizes)):
            self.nodes[level][:, :2] = 0.0
            self.nodes[level][:, 2:] = -math.inf
            self._refresh(level, torch.arange(self.sizes[level - 1] // BRANCH, device=self.device))
        self._refresh(len(self.sizes), None)

    def load(self, raw: torch.Tensor) -> None:
        """Replace every raw priority by ``raw`` (``capacity`` float64 values, NaN = empty) and
        rebuild."""
        self.raw[: self.capacity].copy_(raw)
        self.raw[self.capacity :].fill_(math.nan)
        self.rebuild()

    def max_without(self, slots: torch.Tensor) -> torch.Tensor:
        """Largest raw priority of a non-empty slot outside ``slots`` (``-inf`` if none): what
        :attr:`max_raw` would be once ``slots`` were emptied, without writing them (0-d).

        One pass up the tree, reading the max column only: a node's maximum without ``slots`` is
        the largest, over its 8 children, of the child's own maximum, or of the child's maximum
        without ``slots`` where the child holds one of them (``O(k² log N)`` work for ``k``
        slots, a fixed number of tensor operations).  ``slots``: int64, 1-d, non-empty, trusted.
        """
        node = slots
        # each entry's subtree maximum without ``slots``; a leaf in ``slots`` has none
        without = torch.full(slots.shape, -math.inf, dtype=torch.float64, device=self.device)
        rows = slots >> self._shifts[:, None]
        for level in range(len(self.sizes)):
            row = rows[level] if level < len(self.sizes) - 1 else torch.zeros_like(node)
            children = self.nodes[level].view(-1, BRANCH, 4)[row][:, :, 2]
            # (entry, child, other entry): the child is the other entry's node at this level; a
            # maximum without some slots is at most the child's own, so the smallest candidate
            # is the child's maximum without them where it holds one, its own maximum elsewhere
            match = torch.add(self._steps, row[:, None], alpha=BRANCH)[:, :, None] == node
            without = torch.where(match, without, children[:, :, None]).amin(2).amax(1)
            node = row
        return without.amax()

    # -- draws ----------------------------------------------------------------------------------
    def find(self, targets: torch.Tensor) -> torch.Tensor:
        """Prefix-sum search: for each target ``t`` the slot ``i`` with
        ``Σ_{j<i} m_j <= t < Σ_{j<=i} m_j`` (App. B.2.1), one level at a time.

        Only children of positive mass are entered: rounding can leave ``t`` at or past a node's
        sum, and then the last child of positive mass is taken, so a slot of mass 0 (empty, or a
        zero priority with ``ε = 0``) is never returned while ``total > 0``.  At each level the
        child taken is the last of positive mass whose preceding siblings' sum is at most ``t``
        (the first past ``t``, or the last of positive mass when none is past it), and ``t``
        loses that sum, which is at most ``t``.
        """
        t = targets.to(torch.float64)
        node = torch.zeros(t.shape[0], dtype=torch.int64, device=self.device)
        for level in range(len(self.sizes) - 1, -1, -1):
            children = self.nodes[level].view(-1, BRANCH, 4)[node][:, :, 0]
            before = torch.nn.functional.pad(children, (1, 0)).cumsum(1)[:, :BRANCH]
            entered = (children > 0.0) & (before <= t[:, None])
            child = (entered * self._steps).amax(1)
            t = t - before.gather(1, child[:, None]).squeeze(1)
            node = torch.add(child, node, alpha=BRANCH)
        return node

    def draw(self, rng: SplitMix64, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`stratified` of ``k`` uniforms of ``rng`` (advanced by ``k``): the slots and
        their ``P(i)``; one kernel when :attr:`fused`."""
        if self.fused and k <= _device_kernels.MAX_BATCH:
            drawn = self._fused(_device_kernels.draw, rng.state, k)
            if drawn is not None:
                return cast(tuple[torch.Tensor, torch.Tensor], drawn)
        return self.stratified(rng.uniform(k))

    def _fused(self, kernel: Callable[..., Any], *args: Any) -> Any:
        """``kernel(self, *args)``'s result (``True`` for none); ``None`` and :attr:`fused` off,
        with a warning, when Triton cannot build or launch it here (an unsupported GPU or
        version): the tensor path, which computes the same, then takes over."""
        try:
            out = kernel(self, *args)
        except Exception as error:  # Triton's compiler and launcher raise many kinds
            warnings.warn(
                f"the device tree's fused kernels failed ({error!r:.300}); drawing and writing with "
                "tensor operations instead (the same results, more kernel launches)",
                RuntimeWarning,
                stacklevel=3,
            )
            self.fused = False
            return None
        return True if out is None else out

    def stratified(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Slots for ``k = len(u)`` uniforms in ``[0, 1)``, one in each of ``k`` equal-mass ranges:
        target ``t_j = (j + u_j) · total / k`` (App. B.2.1); with their per-draw probabilities
        ``P(i) = m_i / Σ_k m_k`` (0 for every draw while ``total`` is 0)."""
        k = u.shape[0]
        j = torch.arange(k, dtype=torch.float64, device=self.device)
        slots = self.find((j + u) * (self.total / k))
        return slots, self.probabilities(slots)

    def probabilities(self, slots: torch.Tensor) -> torch.Tensor:
        """``P(i) = m_i / Σ_k m_k`` of ``slots`` (0 while ``total`` is 0)."""
        return torch.where(self.total > 0.0, self.masses[slots] / self.total, 0.0)

    def min_probability(self) -> torch.Tensor:
        """Smallest positive ``P(i)`` (0-d; 0 while no mass is positive)."""
        low = self.root[3]
        return torch.where(low > -math.inf, low.neg() / self.total, 0.0)
