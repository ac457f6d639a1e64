"""``DevicePriorityTree``: the proportional and uniform distributions over slots as torch tensors on
one device (Schaul et al. 2016, Sec. 3.3 and App. B.2.1), written and drawn from without a host
synchronisation.

Raw priorities ``p_i`` are stored (float64, ``NaN`` = empty slot); the leaf masses
``m_i = (p_i + ε)^α`` (proportional, Eq. 1) or ``m_i = 1`` (uniform) are derived from them in one
place, :meth:`DevicePriorityTree.masses_of`.  Above the leaves an 8-ary tree keeps, for every
subtree, the float64 sum of the masses, the largest raw priority and the smallest *positive* mass
(the maximum new slots enter at, and ``P_min`` of the memory-wide weight normalisation, Sec. 3.4).

Layout: level 0 is the leaves (``raw`` and ``masses``, padded with empty slots to a multiple of 8);
level ``l`` holds one node per 8 nodes of level ``l - 1``, padded to a multiple of 8, up to a top
level of exactly 8 nodes, whose reduction is the root (:attr:`~DevicePriorityTree.total`,
:attr:`~DevicePriorityTree.max_raw`, :attr:`~DevicePriorityTree.min_mass`).  The children of node
``j`` of level ``l`` are nodes ``8j .. 8j+7`` of level ``l - 1``, so slot order is leaf order for
any capacity.

A write of ``k`` slots and a draw of ``k`` targets cost ``O(k log N)`` work in a fixed number of
tensor operations (one pass per level; the number of levels depends only on the capacity), with
no data-dependent shape and nothing read back to the host, so both can be captured in a CUDA
graph.  Every parent is recomputed from its children after a write, never delta-propagated, so
sums do not drift; the 8-way sum is a fixed pairwise order of elementwise additions, so a node
holds the same bits whether it was written incrementally or rebuilt, on any device.
"""

from __future__ import annotations

import math

import torch

from prisample._devices import concrete_device

__all__ = ["BRANCH", "DevicePriorityTree"]

BRANCH = 8


def _round8(n: int) -> int:
    return -(-n // BRANCH) * BRANCH


def _sum8(children: torch.Tensor) -> torch.Tensor:
    """Row sums of a ``(rows, 8)`` tensor as ``((c0+c1)+(c2+c3))+((c4+c5)+(c6+c7))``: elementwise
    additions, whose rounding does not depend on the number of rows or on the device (a reduction
    kernel's order may)."""
    pairs = children[:, 0::2] + children[:, 1::2]
    quads = pairs[:, 0::2] + pairs[:, 1::2]
    return quads[:, 0] + quads[:, 1]


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
    and ``>= 0``): the caller validates.  ``count`` (the number of non-empty slots) is an exact
    integer kept by differences; every float node is recomputed from its children.

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
        self.raw = self._full(sizes[0], math.nan)
        self.masses = self._full(sizes[0], 0.0)
        # Level 0 of each reduction is the leaves: raw priorities (max) and masses (sum, min).
        self.sums = [self.masses] + [self._full(n, 0.0) for n in sizes[1:]]
        self.maxs = [self.raw] + [self._full(n, -math.inf) for n in sizes[1:]]
        self.mins = [self.masses] + [self._full(n, math.inf) for n in sizes[1:]]
        self.total = self._full((), 0.0)
        """``Σ_i m_i`` over non-empty slots (0-d float64)."""
        self.max_raw = self._full((), -math.inf)
        """Largest raw priority of a non-empty slot; ``-inf`` when all are empty (0-d)."""
        self.min_mass = self._full((), math.inf)
        """Smallest positive mass; ``inf`` when none is positive (0-d)."""
        self.count = torch.zeros((), dtype=torch.int64, device=self.device)
        """Number of non-empty slots (0-d int64)."""
        self._last = torch.zeros(sizes[0], dtype=torch.int64, device=self.device)  # write scratch
        self._top = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._steps = torch.arange(1, BRANCH + 1, dtype=torch.int64, device=self.device)

    def state_tensors(self) -> list[torch.Tensor]:
        """Every tensor a write changes (in place), e.g. to save and restore around warm-up steps
        before a CUDA graph capture."""
        levels = [*self.sums[1:], *self.maxs[1:], *self.mins[1:]]
        return [self.raw, self.masses, *levels, self.total, self.max_raw, self.min_mass, self.count]

    def _full(self, shape: int | tuple[int, ...], value: float) -> torch.Tensor:
        return torch.full(
            shape if isinstance(shape, tuple) else (shape,), value, dtype=torch.float64, device=self.device
        )

    @property
    def nbytes(self) -> int:
        """Bytes of the tree's tensors (on its device)."""
        arrays = {id(t): t for t in (*self.sums, *self.maxs, *self.mins, self._last)}
        return sum(t.numel() * t.element_size() for t in arrays.values())

    @property
    def levels(self) -> int:
        """Number of internal levels above the leaves (0 for ``capacity <= 8``)."""
        return len(self.sizes) - 1

    # -- masses ---------------------------------------------------------------------------------
    def masses_of(self, raw: torch.Tensor) -> torch.Tensor:
        """The leaf masses of raw priorities: 0 for NaN (empty), else ``(p + ε)^α`` or 1 (uniform)."""
        empty = torch.isnan(raw)
        if self.uniform:
            return (~empty).to(torch.float64)
        return torch.where(empty, 0.0, _elementwise_pow(raw + self.eps, self.alpha))

    def _children(self, level: int, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sum, max raw and min positive mass of the 8 children (on ``level - 1``) of each node
        ``rows`` of ``level``."""
        below = level - 1
        sums = self.sums[below].view(-1, BRANCH)[rows]
        maxs = self.maxs[below].view(-1, BRANCH)[rows]
        mins = self.mins[below].view(-1, BRANCH)[rows]
        if below == 0:  # leaves: an empty slot takes part in no max, a zero mass in no min
            maxs = torch.where(torch.isnan(maxs), -math.inf, maxs)
            mins = torch.where(mins > 0.0, mins, math.inf)
        return _sum8(sums), maxs.amax(1), mins.amin(1)

    def _refresh(self, level: int, rows: torch.Tensor) -> None:
        """Recompute nodes ``rows`` of ``level`` from their children (duplicates get equal values)."""
        total, high, low = self._children(level, rows)
        if level == len(self.sizes):  # the root
            self.total.copy_(total[0])
            self.max_raw.copy_(high[0])
            self.min_mass.copy_(low[0])
            return
        self.sums[level].index_put_((rows,), total)
        self.maxs[level].index_put_((rows,), high)
        self.mins[level].index_put_((rows,), low)

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
        position = torch.arange(k, dtype=torch.int64, device=self.device)
        # Give every entry the value of its slot's last kept entry (its current value if none):
        # the scatters below then write equal values at equal indices, whatever order the device
        # applies them in.
        kept = position if keep is None else torch.where(keep, position, -1)
        self._last.scatter_reduce_(0, slots, kept, reduce="amax", include_self=False)
        last = self._last[slots]
        if keep is None:
            values = values[last]
        else:
            values = torch.where(last >= 0, values[last.clamp(min=0)], self.raw[slots])
        was_live = ~torch.isnan(self.raw[slots])
        live = ~torch.isnan(values)
        change = torch.where(last == position, live.to(torch.int64) - was_live.to(torch.int64), 0)
        self.count.add_(change.sum())
        self.raw.index_put_((slots,), values)
        self.masses.index_put_((slots,), self.masses_of(values))
        rows = slots
        for level in range(1, len(self.sizes)):
            rows = torch.div(rows, BRANCH, rounding_mode="floor")
            self._refresh(level, rows)
        self._refresh(len(self.sizes), self._top)

    def rebuild(self) -> None:
        """Recompute the masses, every node and ``count`` from ``raw`` in ``O(N)``."""
        self.masses.copy_(self.masses_of(self.raw))
        for level in range(1, len(self.sizes)):
            rows = torch.arange(self.sizes[level - 1] // BRANCH, device=self.device)
            self.sums[level].fill_(0.0)
            self.maxs[level].fill_(-math.inf)
            self.mins[level].fill_(math.inf)
            self._refresh(level, rows)
        self._refresh(len(self.sizes), self._top)
        self.count.copy_((~torch.isnan(self.raw)).sum())

    def load(self, raw: torch.Tensor) -> None:
        """Replace every raw priority by ``raw`` (``capacity`` float64 values, NaN = empty) and
        rebuild."""
        self.raw[: self.capacity].copy_(raw)
        self.raw[self.capacity :].fill_(math.nan)
        self.rebuild()

    def max_without(self, slots: torch.Tensor) -> torch.Tensor:
        """Largest raw priority of a non-empty slot outside ``slots`` (``-inf`` if none): what
        :attr:`max_raw` would be once ``slots`` were emptied, without writing them (0-d).

        One pass up the tree, reading the max level only: a node's maximum without ``slots`` is
        the largest, over its 8 children, of the child's own maximum, or of the child's maximum
        without ``slots`` where the child holds one of them (``O(k² log N)`` work for ``k``
        slots, a fixed number of tensor operations).  ``slots``: int64, 1-d, non-empty, trusted.
        """
        node = slots
        # each entry's subtree maximum without ``slots``; a leaf in ``slots`` has none
        without = torch.full(slots.shape, -math.inf, dtype=torch.float64, device=self.device)
        for level in range(len(self.sizes)):
            row = torch.div(node, BRANCH, rounding_mode="floor")
            children = self.maxs[level].view(-1, BRANCH)[row]
            if level == 0:  # leaves: an empty slot takes part in no max
                children = torch.where(torch.isnan(children), -math.inf, children)
            # (entry, child, other entry): the child is the other entry's node at this level
            ids = row[:, None] * BRANCH + (self._steps - 1)
            match = ids[:, :, None] == node[None, None, :]
            replaced = torch.where(match, without[None, None, :], -math.inf).amax(2)
            without = torch.where(match.any(2), replaced, children).amax(1)
            node = row
        return without.amax()

    # -- draws ----------------------------------------------------------------------------------
    def find(self, targets: torch.Tensor) -> torch.Tensor:
        """Prefix-sum search: for each target ``t`` the slot ``i`` with
        ``Σ_{j<i} m_j <= t < Σ_{j<=i} m_j`` (App. B.2.1), one level at a time.

        Only children of positive mass are entered: rounding can leave ``t`` at or past a node's
        sum, and then the last child of positive mass is taken, so a slot of mass 0 (empty, or a
        zero priority with ``ε = 0``) is never returned while ``total > 0``.
        """
        t = targets.to(torch.float64)
        node = torch.zeros(t.shape[0], dtype=torch.int64, device=self.device)
        for level in range(len(self.sizes) - 1, -1, -1):
            children = self.sums[level].view(-1, BRANCH)[node]
            cums = children.cumsum(1)
            positive = children > 0.0
            after = positive & (cums > t[:, None])
            first = (after.cumsum(1) == 0).sum(1)  # the first positive child past t; 8 if none
            last = (positive * self._steps).amax(1) - 1  # the last positive child; -1 if none
            child = torch.minimum(first, last).clamp_(min=0)
            before = torch.nn.functional.pad(cums[:, :-1], (1, 0))
            t = (t - before.gather(1, child[:, None]).squeeze(1)).clamp_(min=0.0)
            node = node * BRANCH + child
        return node

    def stratified(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Slots for ``k = len(u)`` uniforms in ``[0, 1)``, one in each of ``k`` equal-mass ranges:
        target ``t_j = (j + u_j) · total / k`` (App. B.2.1); with their per-draw probabilities
        ``P(i) = m_i / Σ_k m_k`` (0 for every draw while ``total`` is 0)."""
        k = u.shape[0]
        j = torch.arange(k, dtype=torch.float64, device=self.device)
        slots = self.find((j + u) * (self.total / k))
        drawn = self.masses[slots]
        return slots, torch.where(self.total > 0.0, drawn / self.total, 0.0)

    def probabilities(self, slots: torch.Tensor) -> torch.Tensor:
        """``P(i) = m_i / Σ_k m_k`` of ``slots`` (0 while ``total`` is 0)."""
        return torch.where(self.total > 0.0, self.masses[slots] / self.total, 0.0)

    def min_probability(self) -> torch.Tensor:
        """Smallest positive ``P(i)`` (0-d; 0 while no mass is positive)."""
        return torch.where(self.min_mass < math.inf, self.min_mass / self.total, 0.0)
