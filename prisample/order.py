"""``SortedOrder``: slots kept exactly sorted by priority, with rank and select in ``O(log N)``.

Rank-based prioritization needs two queries on the memory sorted by ``|δ|`` (descending, ties
to the newer write): *select* (the slot at rank ``r``, to draw) and *rank* (the rank of slot ``i``,
for its probability).  A binary heap used as an approximately sorted array (the paper's choice,
App. B.2.1) answers both in ``O(1)`` but misplaces items by up to a factor of two in rank, which
moves the sampling distribution by more than 0.02 in total variation within a few thousand
writes.  This structure is exact at all times instead: a B+-tree of three fixed levels.

* *Blocks* hold the sorted ``(key, code)`` pairs, a row of room ``ROOM`` each.  Every block has a
  *bound*, the last pair it may hold (``(-inf, 0)`` for the last block).
* *Nodes* hold up to ``FAN`` blocks each, in order: the blocks' ids, bounds and pair counts.
* The *root* holds the nodes in order, packed: their ids, bounds (the bound of their last
  block), pair totals and a Fenwick tree over those totals.

A write finds its block by binary search over the root's bounds, then over the node's, and its
place in the row by a third; rank and select go through the Fenwick tree, a node's counts and a
row.  A block that fills splits in two halves; a block below ``HALF`` pairs merges with a
neighbour, or evens out with one when the two would not fit in one block; nodes do the same
with ``FAN`` (a full node first evens out with a neighbour that has room).  So every block but
the only one holds ``HALF`` to ``ROOM - 1`` pairs and every node but the only one ``FAN / 2`` to
``FAN - 1`` blocks, the pools (sized for that) never run out, and a write costs at most
``O(log N + ROOM + FAN + R)`` with ``R <= N / (HALF · FAN / 2) + 1`` nodes in the root (root
entries move only when a node splits or merges): nothing is re-laid as a whole except by
:meth:`SortedOrder.rebuild`.

Sizes shrunk for the drawing::

    root:   node 3                          node 0                  (bounds, pair totals, Fenwick)
            (3.0, 2), 5 pairs               (-inf, 0), 4 pairs
    nodes:  [block 7      block 2  ]        [block 5      block 1]  (bounds and counts per block)
             (5.0, 8), 3  (3.0, 2), 2        (2.2, 4), 2  (-inf, 0), 2
    rows:   [9.1 6.5 5.0] [3.0 3.0]         [2.2 2.2]    [1.0 0.5]  keys descending, ties by code
                                                                    → rank 5 is block 5, offset 0

Keys are read from the sampler's raw-priority array; they are finite (``±inf`` serve as
sentinels), and ``NaN`` (empty) slots are never held.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from prisample._cache_hints import prefetch
from prisample._row_move import move
from prisample._validation import _first_problem

__all__ = ["FAN", "FAN_LOAD", "HALF", "LOAD", "ROOM", "SortedOrder", "stamp_limit"]


ROOM = 64  # pairs a block can hold; a block that fills splits into two halves of HALF
HALF = ROOM // 2  # pairs every block holds at least, unless it is the only one
LOAD = 48  # pairs per block after a rebuild
FAN = 64  # blocks a node can hold; a node that fills evens out with a neighbour or splits
FAN_LOAD = 48  # blocks per node after a rebuild, and the most a neighbour may hold to even out
_INT64_MAX = 2**63 - 1

# The layout, one tuple for the rarer operations (``_State``): row_key, row_code, block_free,
# node_blk, node_key, node_code, node_cnt, node_len, node_free, root_node, root_key, root_code,
# root_cnt, root_fen, meta; see ``SortedOrder.__init__``.  ``meta`` = [free blocks, pairs held,
# free nodes, nodes in the root].


@numba.njit(cache=True, inline="always")
def _before(key_a: float, code_a: int, key_b: float, code_b: int) -> bool:
    """Sorted order: larger key first, ties to the larger tie code (the newer write)."""
    return key_a > key_b or (key_a == key_b and code_a > code_b)


@numba.njit(cache=True)
def _count_before(row_key: np.ndarray, row_code: np.ndarray, size: int, key: float, code: int) -> int:
    """Entries of a sorted row (or bound list) strictly before ``(key, code)``."""
    lo, hi = 0, size
    while lo < hi:
        mid = (lo + hi) >> 1
        if _before(row_key[mid], row_code[mid], key, code):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def _find(
    root_key: np.ndarray,
    root_code: np.ndarray,
    roots: int,
    root_node: np.ndarray,
    node_key: np.ndarray,
    node_code: np.ndarray,
    node_len: np.ndarray,
    key: float,
    code: int,
) -> tuple[int, int]:
    """``(root index, index in the node)`` of the block that holds (or would hold) the pair: the
    first whose bound is not before it.  The last bound of all is ``(-inf, 0)``."""
    r = _count_before(root_key, root_code, roots - 1, key, code)
    j = root_node[r]
    return r, _count_before(node_key[j], node_code[j], node_len[j] - 1, key, code)


# The root's Fenwick tree: ``fen[i]`` (``1 <= i <= R``) sums the pair totals of root entries
# ``i - (i & -i) .. i - 1``.


@numba.njit(cache=True, inline="always")
def _fen_add(fen: np.ndarray, roots: int, r: int, delta: int) -> None:
    i = r + 1
    while i <= roots:
        fen[i] += delta
        i += i & -i


@numba.njit(cache=True)
def _fen_prefix(fen: np.ndarray, r: int) -> int:
    """Pairs in the nodes at root indices ``0 .. r - 1``."""
    total = 0
    while r > 0:
        total += fen[r]
        r -= r & -r
    return total


@numba.njit(cache=True)
def _fen_build(fen: np.ndarray, root_cnt: np.ndarray, roots: int) -> None:
    fen[0] = 0
    fen[1 : roots + 1] = root_cnt[:roots]
    for i in range(1, roots + 1):
        j = i + (i & -i)
        if j <= roots:
            fen[j] += fen[i]


@numba.njit(cache=True)
def _locate(
    root_fen: np.ndarray, roots: int, root_node: np.ndarray, node_cnt: np.ndarray, rank: int
) -> tuple[int, int, int]:
    """``(node, index in the node, offset in the block)`` of the pair at 0-based ``rank``."""
    r = 0
    step = 1
    while step * 2 <= roots:
        step *= 2
    while step > 0:
        nxt = r + step
        if nxt <= roots and root_fen[nxt] <= rank:
            r = nxt
            rank -= root_fen[nxt]
        step >>= 1
    j = root_node[r]
    i = 0
    while node_cnt[j, i] <= rank:
        rank -= node_cnt[j, i]
        i += 1
    return j, i, rank


@numba.njit(cache=True)
def _layout(keys: np.ndarray, codes: np.ndarray, state: Any) -> None:
    """Lay sorted pairs into blocks of about ``LOAD`` pairs, the blocks into nodes of about
    ``FAN_LOAD``, in ``O(N)``.  Fewer than ``ROOM`` pairs make one block and more make
    ``ceil(n / LOAD)`` of near-equal size, each then holding ``HALF`` or more; likewise nodes."""
    row_key, row_code, block_free, node_blk, node_key, node_code, node_cnt, node_len = state[:8]
    node_free, root_node, root_key, root_code, root_cnt, root_fen, meta = state[8:]
    n = keys.shape[0]
    blocks = 1 if n < ROOM else -(-n // LOAD)
    nodes = 1 if blocks < FAN else -(-blocks // FAN_LOAD)
    start = 0
    b = 0
    for j in range(nodes):
        length = blocks // nodes + (1 if j < blocks % nodes else 0)
        for i in range(length):
            stop = start + n // blocks + (1 if b < n % blocks else 0)
            for q in range(stop - start):
                row_key[b, q] = keys[start + q]
                row_code[b, q] = codes[start + q]
            node_blk[j, i] = b
            node_cnt[j, i] = stop - start
            if b == blocks - 1:
                node_key[j, i], node_code[j, i] = -np.inf, 0
            else:
                node_key[j, i], node_code[j, i] = keys[stop - 1], codes[stop - 1]
            start = stop
            b += 1
        node_len[j] = length
        root_node[j] = j
        root_key[j], root_code[j] = node_key[j, length - 1], node_code[j, length - 1]
        root_cnt[j] = node_cnt[j, :length].sum()
    _fen_build(root_fen, root_cnt, nodes)
    pool, node_pool = block_free.shape[0], node_free.shape[0]
    meta[0], meta[2], meta[3] = pool - blocks, node_pool - nodes, nodes
    for i in range(pool - blocks):
        block_free[i] = pool - 1 - i
    for i in range(node_pool - nodes):
        node_free[i] = node_pool - 1 - i


@numba.njit(cache=True)
def _move_entries(state: Any, j: int, start: int, k: int, to: int, count: int) -> None:
    """Copy ``count`` block entries of node ``j`` from ``start`` to node ``k`` at ``to``
    (overlapping ranges of one node are fine in either direction)."""
    node_blk, node_key, node_code, node_cnt = state[3], state[4], state[5], state[6]
    order = range(count - 1, -1, -1) if (j == k and to > start) else range(count)
    for t in order:
        node_blk[k, to + t] = node_blk[j, start + t]
        node_key[k, to + t] = node_key[j, start + t]
        node_code[k, to + t] = node_code[j, start + t]
        node_cnt[k, to + t] = node_cnt[j, start + t]


@numba.njit(cache=True)
def _move_roots(state: Any, start: int, to: int, count: int) -> None:
    """Copy ``count`` root entries from ``start`` to ``to`` (overlap fine either way)."""
    root_node, root_key, root_code, root_cnt = state[9], state[10], state[11], state[12]
    order = range(count - 1, -1, -1) if to > start else range(count)
    for t in order:
        root_node[to + t] = root_node[start + t]
        root_key[to + t] = root_key[start + t]
        root_code[to + t] = root_code[start + t]
        root_cnt[to + t] = root_cnt[start + t]


@numba.njit(cache=True)
def _node_total(node_cnt: np.ndarray, j: int, length: int) -> int:
    total = 0
    for i in range(length):
        total += node_cnt[j, i]
    return total


@numba.njit(cache=True)
def _merge_nodes(state: Any, r: int) -> None:
    """The node at root index ``r + 1`` joins the one at ``r`` (fewer than ``FAN`` blocks in
    all); its root entry goes, in ``O(R)``."""
    node_len, node_free, root_node, root_key, root_code = state[7], state[8], state[9], state[10], state[11]
    root_cnt, root_fen, meta = state[12], state[13], state[14]
    j, k = root_node[r], root_node[r + 1]
    _move_entries(state, k, 0, j, node_len[j], node_len[k])
    node_len[j] += node_len[k]
    root_key[r], root_code[r] = root_key[r + 1], root_code[r + 1]
    root_cnt[r] += root_cnt[r + 1]
    roots = meta[3]
    _move_roots(state, r + 2, r + 1, roots - r - 2)
    meta[3] = roots - 1
    node_free[meta[2]] = k
    meta[2] += 1
    _fen_build(root_fen, root_cnt, roots - 1)


@numba.njit(cache=True)
def _even_nodes(state: Any, r: int) -> None:
    """Share the blocks of the nodes at root indices ``r`` and ``r + 1`` evenly."""
    node_key, node_code, node_cnt, node_len = state[4], state[5], state[6], state[7]
    root_node, root_key, root_code, root_cnt, root_fen, meta = state[9:]
    j, k = root_node[r], root_node[r + 1]
    la, lb = node_len[j], node_len[k]
    keep = (la + lb) // 2
    if la > keep:  # j's last blocks go to the front of k
        d = la - keep
        _move_entries(state, k, 0, k, d, lb)
        _move_entries(state, j, keep, k, 0, d)
    else:  # k's first blocks go to the end of j
        d = keep - la
        _move_entries(state, k, 0, j, la, d)
        _move_entries(state, k, d, k, 0, lb - d)
    node_len[j], node_len[k] = keep, la + lb - keep
    moved = _node_total(node_cnt, j, keep) - root_cnt[r]
    root_cnt[r] += moved
    root_cnt[r + 1] -= moved
    _fen_add(root_fen, meta[3], r, moved)
    _fen_add(root_fen, meta[3], r + 1, -moved)
    root_key[r], root_code[r] = node_key[j, keep - 1], node_code[j, keep - 1]


@numba.njit(cache=True)
def _split_node(state: Any, r: int) -> None:
    """The node at root index ``r`` is full: even it out with a neighbour that holds at most
    ``FAN_LOAD`` blocks, else split it in two, inserting a root entry in ``O(R)``."""
    node_key, node_code, node_cnt, node_len, node_free = state[4], state[5], state[6], state[7], state[8]
    root_node, root_key, root_code, root_cnt, root_fen, meta = state[9:]
    roots = meta[3]
    if r + 1 < roots and node_len[root_node[r + 1]] <= FAN_LOAD:
        _even_nodes(state, r)
        return
    if r > 0 and node_len[root_node[r - 1]] <= FAN_LOAD:
        _even_nodes(state, r - 1)
        return
    if meta[2] == 0:  # (not assert: pytest rewrites the asserts of a module named on its command line)
        raise AssertionError("SortedOrder: no free node (every node but one holds FAN / 2 blocks or more)")
    meta[2] -= 1
    k = node_free[meta[2]]
    j = root_node[r]
    half = FAN // 2
    _move_entries(state, j, half, k, 0, FAN - half)
    node_len[j], node_len[k] = half, FAN - half
    _move_roots(state, r + 1, r + 2, roots - r - 1)
    root_node[r + 1] = k
    root_key[r + 1], root_code[r + 1] = root_key[r], root_code[r]
    root_cnt[r + 1] = _node_total(node_cnt, k, FAN - half)
    root_cnt[r] -= root_cnt[r + 1]
    root_key[r], root_code[r] = node_key[j, half - 1], node_code[j, half - 1]
    meta[3] = roots + 1
    _fen_build(root_fen, root_cnt, roots + 1)


@numba.njit(cache=True)
def _rebalance_node(state: Any, r: int) -> None:
    """The node at root index ``r`` fell below ``FAN / 2`` blocks (and is not the only one):
    merge it with a neighbour when they fit in one node, else even it out with one."""
    node_len, root_node, meta = state[7], state[9], state[14]
    roots = meta[3]
    here = node_len[root_node[r]]
    if r > 0 and node_len[root_node[r - 1]] + here < FAN:
        _merge_nodes(state, r - 1)
    elif r + 1 < roots and here + node_len[root_node[r + 1]] < FAN:
        _merge_nodes(state, r)
    elif r > 0:
        _even_nodes(state, r - 1)
    else:
        _even_nodes(state, r)


@numba.njit(cache=True)
def _split_block(state: Any, r: int, i: int) -> None:
    """The block at ``(r, i)`` is full: its later half moves to a fresh block entered after it."""
    row_key, row_code, block_free, node_blk, node_key, node_code, node_cnt, node_len = state[:8]
    root_node, meta = state[9], state[14]
    if meta[0] == 0:
        raise AssertionError("SortedOrder: no free block (every block but one holds HALF pairs or more)")
    meta[0] -= 1
    fresh = block_free[meta[0]]
    j = root_node[r]
    b = node_blk[j, i]
    for q in range(HALF, ROOM):
        row_key[fresh, q - HALF] = row_key[b, q]
        row_code[fresh, q - HALF] = row_code[b, q]
    length = node_len[j]
    _move_entries(state, j, i + 1, j, i + 2, length - i - 1)
    node_blk[j, i + 1] = fresh
    node_key[j, i + 1], node_code[j, i + 1] = node_key[j, i], node_code[j, i]
    node_cnt[j, i + 1] = ROOM - HALF
    node_key[j, i], node_code[j, i] = row_key[b, HALF - 1], row_code[b, HALF - 1]
    node_cnt[j, i] = HALF
    node_len[j] = length + 1
    if length + 1 == FAN:
        _split_node(state, r)


@numba.njit(cache=True)
def _merge_blocks(state: Any, ra: int, ia: int, rb: int, ib: int) -> None:
    """The block at ``(rb, ib)`` joins the one before it at ``(ra, ia)`` (fewer than ``ROOM``
    pairs in all); its entry leaves its node, which may then need rebalancing."""
    row_key, row_code, block_free, node_blk, node_key, node_code, node_cnt, node_len = state[:8]
    root_node, root_key, root_code, root_cnt, root_fen, meta = state[9:]
    ja, jb = root_node[ra], root_node[rb]
    a, b = node_blk[ja, ia], node_blk[jb, ib]
    na, nb = node_cnt[ja, ia], node_cnt[jb, ib]
    for q in range(nb):
        row_key[a, na + q] = row_key[b, q]
        row_code[a, na + q] = row_code[b, q]
    node_cnt[ja, ia] = na + nb
    node_key[ja, ia], node_code[ja, ia] = node_key[jb, ib], node_code[jb, ib]
    if ra != rb:  # a is the last block of its node, b the first of the next
        root_cnt[ra] += nb
        root_cnt[rb] -= nb
        _fen_add(root_fen, meta[3], ra, nb)
        _fen_add(root_fen, meta[3], rb, -nb)
        root_key[ra], root_code[ra] = node_key[ja, ia], node_code[ja, ia]
    length = node_len[jb] - 1
    _move_entries(state, jb, ib + 1, jb, ib, length - ib)
    node_len[jb] = length
    root_key[rb], root_code[rb] = node_key[jb, length - 1], node_code[jb, length - 1]
    block_free[meta[0]] = b
    meta[0] += 1
    if length < FAN // 2 and meta[3] > 1:
        _rebalance_node(state, rb)


@numba.njit(cache=True)
def _even_blocks(state: Any, ra: int, ia: int, rb: int, ib: int) -> None:
    """Share the pairs of the block at ``(ra, ia)`` and the next one at ``(rb, ib)`` (``ROOM``
    or more) evenly; only the first block's bound changes."""
    row_key, row_code, node_blk, node_key, node_code, node_cnt = (
        state[0],
        state[1],
        state[3],
        state[4],
        state[5],
        state[6],
    )
    root_node, root_key, root_code, root_cnt, root_fen, meta = state[9:]
    ja, jb = root_node[ra], root_node[rb]
    a, b = node_blk[ja, ia], node_blk[jb, ib]
    na, nb = node_cnt[ja, ia], node_cnt[jb, ib]
    keep = (na + nb) // 2
    if na > keep:  # a's last pairs go to the front of b
        d = na - keep
        for q in range(nb - 1, -1, -1):
            row_key[b, q + d] = row_key[b, q]
            row_code[b, q + d] = row_code[b, q]
        for q in range(d):
            row_key[b, q] = row_key[a, keep + q]
            row_code[b, q] = row_code[a, keep + q]
    else:  # b's first pairs go to the end of a
        d = keep - na
        for q in range(d):
            row_key[a, na + q] = row_key[b, q]
            row_code[a, na + q] = row_code[b, q]
        for q in range(nb - d):
            row_key[b, q] = row_key[b, q + d]
            row_code[b, q] = row_code[b, q + d]
        d = -d
    node_cnt[ja, ia], node_cnt[jb, ib] = keep, na + nb - keep
    node_key[ja, ia], node_code[ja, ia] = row_key[a, keep - 1], row_code[a, keep - 1]
    if ra != rb:
        root_cnt[ra] -= d
        root_cnt[rb] += d
        _fen_add(root_fen, meta[3], ra, -d)
        _fen_add(root_fen, meta[3], rb, d)
        root_key[ra], root_code[ra] = node_key[ja, ia], node_code[ja, ia]


@numba.njit(cache=True)
def _rebalance_block(state: Any, r: int, i: int) -> None:
    """The block at ``(r, i)`` fell below ``HALF`` pairs: merge it with a neighbour when the two
    fit in one block, else even it out with one.  The only block may hold anything."""
    node_cnt, node_len, root_node, meta = state[6], state[7], state[9], state[14]
    j = root_node[r]
    n = node_cnt[j, i]
    rl, il = (r, i - 1) if i > 0 else (r - 1, node_len[root_node[r - 1]] - 1 if r > 0 else -1)
    rr, ir = (r, i + 1) if i + 1 < node_len[j] else (r + 1, 0)
    has_left, has_right = rl >= 0, rr < meta[3]
    if has_left and node_cnt[root_node[rl], il] + n < ROOM:
        _merge_blocks(state, rl, il, r, i)
    elif has_right and n + node_cnt[root_node[rr], ir] < ROOM:
        _merge_blocks(state, r, i, rr, ir)
    elif has_left:
        _even_blocks(state, rl, il, r, i)
    elif has_right:
        _even_blocks(state, r, i, rr, ir)


@numba.njit(cache=True, inline="always")
def _write_pair(
    keys: np.ndarray,
    stamps: np.ndarray,
    row_key: np.ndarray,
    row_code: np.ndarray,
    node_blk: np.ndarray,
    node_key: np.ndarray,
    node_code: np.ndarray,
    node_cnt: np.ndarray,
    node_len: np.ndarray,
    root_node: np.ndarray,
    root_key: np.ndarray,
    root_code: np.ndarray,
    root_cnt: np.ndarray,
    root_fen: np.ndarray,
    meta: np.ndarray,
    state: Any,
    slot: int,
    value: float,
    new_stamp: int,
) -> None:
    """``keys[slot] = value``, ``stamps[slot] = new_stamp`` (-1 when ``value`` is NaN: removed),
    the slot's pair moved to its place in the order."""
    capacity = keys.shape[0]
    old = keys[slot]
    if not np.isnan(old):
        code = stamps[slot] * capacity + slot
        r, i = _find(root_key, root_code, meta[3], root_node, node_key, node_code, node_len, old, code)
        g = root_node[r]
        b, n = node_blk[g, i], node_cnt[g, i] - 1
        at = _count_before(row_key[b], row_code[b], n + 1, old, code)
        move(row_key, b, at, at + 1, n - at)
        move(row_code, b, at, at + 1, n - at)
        node_cnt[g, i] = n
        root_cnt[r] -= 1
        _fen_add(root_fen, meta[3], r, -1)
        meta[1] -= 1
        if n < HALF and (meta[3] > 1 or node_len[g] > 1):
            _rebalance_block(state, r, i)
    keys[slot] = value
    if np.isnan(value):
        stamps[slot] = -1
        return
    stamps[slot] = new_stamp
    key, code = value, new_stamp * capacity + slot
    r, i = _find(root_key, root_code, meta[3], root_node, node_key, node_code, node_len, key, code)
    g = root_node[r]
    b, n = node_blk[g, i], node_cnt[g, i]
    at = _count_before(row_key[b], row_code[b], n, key, code)
    move(row_key, b, at + 1, at, n - at)
    move(row_code, b, at + 1, at, n - at)
    row_key[b, at] = key
    row_code[b, at] = code
    node_cnt[g, i] = n + 1
    root_cnt[r] += 1
    _fen_add(root_fen, meta[3], r, 1)
    meta[1] += 1
    if n + 1 == ROOM:
        _split_block(state, r, i)


@numba.njit(cache=True, inline="always")
def _prefetch_row(row_key: np.ndarray, row_code: np.ndarray, b: int) -> None:
    """Ask for every cache line of block ``b``'s row (its binary search and shift touch most)."""
    keys, codes = row_key[b], row_code[b]
    for q in range(0, ROOM, 8):
        prefetch(keys, q)
        prefetch(codes, q)
    prefetch(keys, ROOM - 1)  # a row need not start on a line
    prefetch(codes, ROOM - 1)


@numba.njit(cache=True)
def _prefetch_writes(
    keys: np.ndarray,
    stamps: np.ndarray,
    row_key: np.ndarray,
    row_code: np.ndarray,
    node_blk: np.ndarray,
    node_key: np.ndarray,
    node_code: np.ndarray,
    node_len: np.ndarray,
    root_node: np.ndarray,
    root_key: np.ndarray,
    root_code: np.ndarray,
    roots: int,
    slots: np.ndarray,
    values: np.ndarray,
    new_stamps: np.ndarray,
) -> None:
    """Ask for the rows a batch of writes will search and shift: the block each slot leaves and
    the block its new pair enters, as the order stands before the batch (a hint only: a split
    or merge on the way moves a few pairs, never the correctness).  At a million slots the rows
    are far larger than the caches and each write's two rows are misses; asked for together,
    they overlap instead of coming one after the other."""
    capacity = keys.shape[0]
    for j in range(slots.shape[0]):
        prefetch(keys, slots[j])
        prefetch(stamps, slots[j])
    for j in range(slots.shape[0]):
        slot = slots[j]
        old = keys[slot]
        if not np.isnan(old):
            r, i = _find(
                root_key, root_code, roots, root_node, node_key, node_code, node_len, old,
                stamps[slot] * capacity + slot,
            )  # fmt: skip
            _prefetch_row(row_key, row_code, node_blk[root_node[r], i])
        value = values[j]
        if not np.isnan(value):
            r, i = _find(
                root_key, root_code, roots, root_node, node_key, node_code, node_len, value,
                new_stamps[j] * capacity + slot,
            )  # fmt: skip
            _prefetch_row(row_key, row_code, node_blk[root_node[r], i])


@numba.njit(cache=True)
def _write(
    keys: np.ndarray,
    stamps: np.ndarray,
    row_key: np.ndarray,
    row_code: np.ndarray,
    block_free: np.ndarray,
    node_blk: np.ndarray,
    node_key: np.ndarray,
    node_code: np.ndarray,
    node_cnt: np.ndarray,
    node_len: np.ndarray,
    node_free: np.ndarray,
    root_node: np.ndarray,
    root_key: np.ndarray,
    root_code: np.ndarray,
    root_cnt: np.ndarray,
    root_fen: np.ndarray,
    meta: np.ndarray,
    slots: np.ndarray,
    values: np.ndarray,
    new_stamps: np.ndarray,
) -> None:
    # The arrays come one by one and the common path uses them directly; the tuple is for the
    # rarer splits and rebalances (a tuple argument costs more to dispatch from Python, and one
    # taken apart on every pair costs reference counts).
    state = (
        row_key,
        row_code,
        block_free,
        node_blk,
        node_key,
        node_code,
        node_cnt,
        node_len,
        node_free,
        root_node,
        root_key,
        root_code,
        root_cnt,
        root_fen,
        meta,
    )
    _prefetch_writes(
        keys, stamps, row_key, row_code, node_blk, node_key, node_code, node_len, root_node, root_key,
        root_code, meta[3], slots, values, new_stamps,
    )  # fmt: skip
    for j in range(slots.shape[0]):
        _write_pair(
            keys, stamps, row_key, row_code, node_blk, node_key, node_code, node_cnt, node_len,
            root_node, root_key, root_code, root_cnt, root_fen, meta, state,
            slots[j], values[j], new_stamps[j],
        )  # fmt: skip


@numba.njit(cache=True)
def _checked_write(
    keys: np.ndarray,
    stamps: np.ndarray,
    row_key: np.ndarray,
    row_code: np.ndarray,
    block_free: np.ndarray,
    node_blk: np.ndarray,
    node_key: np.ndarray,
    node_code: np.ndarray,
    node_cnt: np.ndarray,
    node_len: np.ndarray,
    node_free: np.ndarray,
    root_node: np.ndarray,
    root_key: np.ndarray,
    root_code: np.ndarray,
    root_cnt: np.ndarray,
    root_fen: np.ndarray,
    meta: np.ndarray,
    slots: np.ndarray,
    values: np.ndarray,
    first_stamp: int,
) -> tuple[int, int]:
    """``_first_problem(keys, slots, values, True)``; only if it finds none, :func:`_write` with
    the stamps ``first_stamp + j``.  Returns the problem's ``(code, j)``, ``(0, 0)`` when written."""
    problem, at = _first_problem(keys, slots, values, True)
    if problem != 0:
        return problem, at
    new_stamps = np.arange(first_stamp, first_stamp + slots.shape[0], dtype=np.int64)
    _write(
        keys, stamps, row_key, row_code, block_free, node_blk, node_key, node_code, node_cnt,
        node_len, node_free, root_node, root_key, root_code, root_cnt, root_fen, meta,
        slots, values, new_stamps,
    )  # fmt: skip
    return 0, 0


@numba.njit(cache=True)
def _select(
    row_code: np.ndarray,
    node_blk: np.ndarray,
    node_cnt: np.ndarray,
    root_node: np.ndarray,
    root_fen: np.ndarray,
    roots: int,
    capacity: int,
    ranks: np.ndarray,
    out: np.ndarray,
) -> None:
    # Two passes: every draw's row position first, its line asked for, then the reads, so that
    # the draws' misses overlap (``out`` holds ``block · ROOM + offset`` in between).
    for j in range(ranks.shape[0]):
        g, i, offset = _locate(root_fen, roots, root_node, node_cnt, ranks[j])
        b = node_blk[g, i]
        prefetch(row_code[b], offset)
        out[j] = b * ROOM + offset
    for j in range(ranks.shape[0]):
        out[j] = row_code[out[j] // ROOM, out[j] % ROOM] % capacity


@numba.njit(cache=True)
def _rank(
    keys: np.ndarray,
    stamps: np.ndarray,
    row_key: np.ndarray,
    row_code: np.ndarray,
    node_blk: np.ndarray,
    node_key: np.ndarray,
    node_code: np.ndarray,
    node_cnt: np.ndarray,
    node_len: np.ndarray,
    root_node: np.ndarray,
    root_key: np.ndarray,
    root_code: np.ndarray,
    root_fen: np.ndarray,
    roots: int,
    slots: np.ndarray,
    out: np.ndarray,
) -> None:
    capacity = keys.shape[0]
    for j in range(slots.shape[0]):
        slot = slots[j]
        key, code = keys[slot], stamps[slot] * capacity + slot
        r, i = _find(root_key, root_code, roots, root_node, node_key, node_code, node_len, key, code)
        g = root_node[r]
        total = _fen_prefix(root_fen, r)
        for t in range(i):
            total += node_cnt[g, t]
        b = node_blk[g, i]
        out[j] = total + _count_before(row_key[b], row_code[b], node_cnt[g, i], key, code)


def stamp_limit(capacity: int) -> int:
    """Stamps stay below this, so that every tie code ``stamp · capacity + slot`` fits in int64."""
    return _INT64_MAX // max(int(capacity), 1) - 1


class SortedOrder:
    """Non-empty slots of ``keys`` sorted by key descending; equal keys by *stamp* descending.

    ``stamps`` (int64, one per slot, ``-1`` for an empty slot) says when each slot was last
    written; the owner hands out increasing stamps, so among equal keys the newest write ranks
    first.  Rows hold the tie code ``stamp · capacity + slot``, which orders equal keys by stamp
    (then slot) and gives the slot back as ``code % capacity``.

    A written slot costs ``O(log N + ROOM + FAN)``, and ``O(R)`` more (``R <= N / 1024 + 1``
    nodes) when a node splits or merges; only :meth:`rebuild` re-lays everything.

    >>> keys = np.array([0.5, 2.0, np.nan, 2.0])
    >>> order = SortedOrder(keys, np.array([0, 1, -1, 2]))
    >>> order.select(np.arange(3)).tolist(), order.rank(np.array([0, 1, 3])).tolist()
    ([3, 1, 0], [2, 1, 0])
    """

    def __init__(self, keys: npt.NDArray[np.float64], stamps: npt.NDArray[np.int64]) -> None:
        self.keys = keys
        self.stamps = stamps
        self.capacity = int(keys.shape[0])
        pool = self.capacity // HALF + 2  # every block but one holds HALF pairs or more
        nodes = pool // (FAN // 2) + 2  # every node but one holds FAN / 2 blocks or more
        self.row_key = np.zeros((pool, ROOM), dtype=np.float64)
        self.row_code = np.zeros((pool, ROOM), dtype=np.int64)
        self.block_free = np.zeros(pool, dtype=np.int32)  # blocks not in use: the first meta[0]
        self.node_blk = np.zeros((nodes, FAN), dtype=np.int32)  # each node's blocks, in order
        self.node_key = np.zeros((nodes, FAN), dtype=np.float64)  # their bounds
        self.node_code = np.zeros((nodes, FAN), dtype=np.int64)
        self.node_cnt = np.zeros((nodes, FAN), dtype=np.int32)  # their pair counts
        self.node_len = np.zeros(nodes, dtype=np.int32)  # blocks in each node
        self.node_free = np.zeros(nodes, dtype=np.int32)  # nodes not in use: the first meta[2]
        self.root_node = np.zeros(nodes, dtype=np.int32)  # the nodes in order: the first meta[3]
        self.root_key = np.zeros(nodes, dtype=np.float64)  # their bounds
        self.root_code = np.zeros(nodes, dtype=np.int64)
        self.root_cnt = np.zeros(nodes, dtype=np.int64)  # their pair totals
        self.root_fen = np.zeros(nodes + 1, dtype=np.int64)  # a Fenwick tree over those
        self.meta = np.zeros(4, dtype=np.int64)  # free blocks, pairs held, free nodes, root length
        self.rebuild()

    @property
    def count(self) -> int:
        return int(self.meta[1])

    @property
    def nbytes(self) -> int:
        """Bytes held in the order's arrays (not ``keys`` and ``stamps``, which the owner holds)."""
        return int(sum(a.nbytes for a in self._state()))

    def _state(self) -> tuple[npt.NDArray[Any], ...]:
        return (
            self.row_key,
            self.row_code,
            self.block_free,
            self.node_blk,
            self.node_key,
            self.node_code,
            self.node_cnt,
            self.node_len,
            self.node_free,
            self.root_node,
            self.root_key,
            self.root_code,
            self.root_cnt,
            self.root_fen,
            self.meta,
        )

    def rebuild(self) -> None:
        """Sort every non-empty slot from scratch (after ``keys`` and ``stamps`` were assigned)."""
        valid = np.flatnonzero(~np.isnan(self.keys))
        codes = self.stamps[valid] * self.capacity + valid
        order = np.lexsort((-codes, -self.keys[valid]))
        _layout(self.keys[valid[order]], codes[order], self._state())
        self.meta[1] = valid.shape[0]

    def write(
        self, slots: npt.NDArray[np.int64], values: npt.NDArray[np.float64], stamps: npt.NDArray[np.int64]
    ) -> None:
        """``keys[slots] = values`` and ``stamps[slots] = stamps`` in order (NaN removes a slot,
        its stamp becoming -1), keeping the order exact."""
        _write(self.keys, self.stamps, *self._state(), slots, values, stamps)  # type: ignore[call-arg]

    def checked_write(
        self, slots: npt.NDArray[np.int64], values: npt.NDArray[np.float64], first_stamp: int
    ) -> tuple[int, int]:
        """Check that every slot is in range and filled and every value finite and ``>= 0``
        (:func:`~prisample._validation.check_slots`), then :meth:`write` with the stamps
        ``first_stamp + j``, in one compiled call; nothing changes unless all pass.  Returns
        ``check_slots``'s ``(code, j)`` for the first problem, ``(0, 0)`` when written."""
        code, j = _checked_write(
            self.keys,
            self.stamps,
            self.row_key,
            self.row_code,
            self.block_free,
            self.node_blk,
            self.node_key,
            self.node_code,
            self.node_cnt,
            self.node_len,
            self.node_free,
            self.root_node,
            self.root_key,
            self.root_code,
            self.root_cnt,
            self.root_fen,
            self.meta,
            slots,
            values,
            first_stamp,
        )
        return int(code), int(j)

    def select(self, ranks: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Slots at the given 0-based ranks (each in ``[0, count)``)."""
        out = np.empty(ranks.shape[0], dtype=np.int64)
        _select(
            self.row_code,
            self.node_blk,
            self.node_cnt,
            self.root_node,
            self.root_fen,
            int(self.meta[3]),
            self.capacity,
            ranks,
            out,
        )
        return out

    def rank(self, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """0-based ranks of the given non-empty slots."""
        out = np.empty(slots.shape[0], dtype=np.int64)
        _rank(
            self.keys,
            self.stamps,
            self.row_key,
            self.row_code,
            self.node_blk,
            self.node_key,
            self.node_code,
            self.node_cnt,
            self.node_len,
            self.root_node,
            self.root_key,
            self.root_code,
            self.root_fen,
            int(self.meta[3]),
            slots,
            out,
        )
        return out

    def check_invariants(self) -> None:
        """Raise ``ValueError`` naming the first broken invariant of the layout, in ``O(N)``.

        With ``before`` the sorted order (larger key first, then larger tie code) and ``R`` the
        root's length:

        * *nodes*: ``1 <= R``; the root's first ``R`` node ids and the node free list hold every
          node once; a node holds ``FAN / 2 .. FAN - 1`` blocks, or ``1 .. FAN - 1`` when it is
          the only one;
        * *blocks*: the nodes' block ids and the block free list hold every block once; a block
          holds ``HALF .. ROOM - 1`` pairs, or ``0 .. ROOM - 1`` when it is the only one;
        * *rows*: each row strictly in ``before`` order, and the last pair of each block before
          the first of the next;
        * *slots*: the rows hold exactly the filled (non-NaN) slots, once each, with
          ``key = keys[slot]`` and ``code = stamps[slot] · capacity + slot``, and ``count``
          of them;
        * *bounds*: each block's bound is at or after its last pair and before the next block's
          first; the last block's bound is ``(-inf, 0)``; a root entry's bound is that of its
          node's last block;
        * *counts*: a root entry's total is the sum of its node's counts, and the Fenwick entry
          ``i`` holds the totals of root entries ``i - (i & -i) .. i - 1``.
        """
        pool, node_pool = self.block_free.shape[0], self.node_free.shape[0]
        roots, free_blocks, free_nodes = int(self.meta[3]), int(self.meta[0]), int(self.meta[2])
        cap = self.capacity

        def fail(invariant: str, message: str) -> None:
            raise ValueError(f"SortedOrder {invariant}: {message}")

        def before(ka: float, ca: int, kb: float, cb: int) -> bool:
            return ka > kb or (ka == kb and ca > cb)

        if not 1 <= roots <= node_pool or not 0 <= free_nodes <= node_pool:
            fail(
                "nodes",
                f"the root should hold 1 .. {node_pool} nodes and the free list 0 .. {node_pool}, "
                f"but got meta[3]={roots}, meta[2]={free_nodes}",
            )
        nodes = self.root_node[:roots].astype(np.int64)
        everyone = np.concatenate((nodes, self.node_free[:free_nodes].astype(np.int64)))
        if everyone.shape[0] != node_pool or np.unique(everyone).shape[0] != node_pool or everyone.min() < 0:
            fail(
                "nodes",
                f"the root ({roots}) and the free list ({free_nodes}) should hold the {node_pool} "
                f"nodes, once each",
            )
        lengths = self.node_len[nodes].astype(np.int64)
        low = 1 if roots == 1 else FAN // 2
        bad = np.flatnonzero((lengths < low) | (lengths >= FAN))
        if bad.shape[0]:
            r = int(bad[0])
            fail(
                "nodes",
                f"node {nodes[r]} (root index {r}) should hold {low} .. {FAN - 1} blocks, "
                f"but holds {lengths[r]}",
            )
        blocks = np.concatenate([self.node_blk[j, : self.node_len[j]] for j in nodes]).astype(np.int64)
        counts = np.concatenate([self.node_cnt[j, : self.node_len[j]] for j in nodes]).astype(np.int64)
        bound_key = np.concatenate([self.node_key[j, : self.node_len[j]] for j in nodes])
        bound_code = np.concatenate([self.node_code[j, : self.node_len[j]] for j in nodes])
        if not 0 <= free_blocks <= pool:
            fail("blocks", f"the free count should lie in [0, {pool}], but got meta[0]={free_blocks}")
        everyone = np.concatenate((blocks, self.block_free[:free_blocks].astype(np.int64)))
        if everyone.shape[0] != pool or np.unique(everyone).shape[0] != pool or everyone.min() < 0:
            fail(
                "blocks",
                f"the nodes ({blocks.shape[0]}) and the free list ({free_blocks}) should hold "
                f"the {pool} blocks, once each",
            )
        low = 0 if blocks.shape[0] == 1 else HALF
        bad = np.flatnonzero((counts < low) | (counts >= ROOM))
        if bad.shape[0]:
            j = int(bad[0])
            fail(
                "blocks",
                f"block {blocks[j]} (the {j}-th) should hold {low} .. {ROOM - 1} pairs, but "
                f"holds {counts[j]}",
            )
        keys = np.concatenate([self.row_key[b, :n] for b, n in zip(blocks, counts, strict=True)])
        codes = np.concatenate([self.row_code[b, :n] for b, n in zip(blocks, counts, strict=True)])
        ordered = (keys[:-1] > keys[1:]) | ((keys[:-1] == keys[1:]) & (codes[:-1] > codes[1:]))
        if not ordered.all():
            j = int(np.argmin(ordered))
            owner = int(np.searchsorted(np.cumsum(counts), j, side="right"))
            fail(
                "rows",
                f"pair {j} ({keys[j]}, {codes[j]}) should come before pair {j + 1} "
                f"({keys[j + 1]}, {codes[j + 1]}) (block {blocks[owner]})",
            )
        filled = np.flatnonzero(~np.isnan(self.keys))
        slots = codes % cap
        if int(self.meta[1]) != filled.shape[0]:
            fail("slots", f"count should be {filled.shape[0]} filled slots, but got {int(self.meta[1])}")
        if not np.array_equal(np.sort(slots), filled):
            fail(
                "slots",
                f"rows should hold the {filled.shape[0]} filled slots once each, but hold "
                f"{slots.shape[0]} pairs ({np.unique(slots).shape[0]} distinct slots)",
            )
        wrong = np.flatnonzero((self.keys[slots] != keys) | (self.stamps[slots] * cap + slots != codes))
        if wrong.shape[0]:
            j = int(wrong[0])
            slot = int(slots[j])
            fail(
                "slots",
                f"the pair of slot {slot} should be ({self.keys[slot]}, "
                f"{self.stamps[slot] * cap + slot}), but got ({keys[j]}, {codes[j]})",
            )
        ends = np.cumsum(counts)
        for j in range(blocks.shape[0]):
            key, code = float(bound_key[j]), int(bound_code[j])
            if j == blocks.shape[0] - 1:
                if (key, code) != (-np.inf, 0):
                    fail(
                        "bounds",
                        f"the last block ({blocks[j]}) should have bound (-inf, 0), but got ({key}, {code})",
                    )
                continue
            last = ends[j] - 1
            if counts[j] and before(key, code, float(keys[last]), int(codes[last])):
                fail(
                    "bounds",
                    f"the bound ({key}, {code}) of block {blocks[j]} should not come before its last pair",
                )
            if not before(key, code, float(keys[ends[j]]), int(codes[ends[j]])):
                fail(
                    "bounds",
                    f"the bound ({key}, {code}) of block {blocks[j]} should come before the "
                    f"next block's first pair",
                )
        for r, j in enumerate(nodes.tolist()):
            last = int(self.node_len[j]) - 1
            want = (float(self.node_key[j, last]), int(self.node_code[j, last]))
            if (float(self.root_key[r]), int(self.root_code[r])) != want:
                fail(
                    "bounds",
                    f"root entry {r} should have its node's last bound {want}, but has "
                    f"({self.root_key[r]}, {self.root_code[r]})",
                )
        totals = np.array([self.node_cnt[j, : self.node_len[j]].sum() for j in nodes], dtype=np.int64)
        if not np.array_equal(self.root_cnt[:roots], totals):
            r = int(np.argmax(self.root_cnt[:roots] != totals))
            fail("counts", f"root entry {r} should total {totals[r]} pairs, but has {self.root_cnt[r]}")
        prefix = np.concatenate(([0], np.cumsum(totals)))
        for i in range(1, roots + 1):
            want = prefix[i] - prefix[i - (i & -i)]
            if self.root_fen[i] != want:
                fail(
                    "counts",
                    f"Fenwick entry {i} should hold {want} pairs (root entries {i - (i & -i)} "
                    f".. {i - 1}), but got {self.root_fen[i]}",
                )
