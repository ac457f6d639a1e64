"""TV distance between rank-based sampling over a binary max-heap (array order used as the rank,
Schaul et al. 2016 App. B.2.1) and the exact rank distribution, under a DQN-like workload.
Usage: heap_tv.py N SEEDS CHECKPOINTS (fractions of N, comma-separated)."""

import sys

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

N = int(sys.argv[1]) if len(sys.argv) > 1 else 65536
ALPHA = 0.7
SEEDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
CHECKPOINTS = [float(x) for x in sys.argv[3].split(",")] if len(sys.argv) > 3 else [0.002, 0.01, 0.1]

power = np.arange(1, N + 1, dtype=np.float64) ** -ALPHA
power /= power.sum()
cdf = np.cumsum(power)


def tie_average(p: FloatArray, keys: FloatArray) -> FloatArray:
    """Average p within groups of equal keys (tie-breaking must not count)."""
    _, inv = np.unique(keys, return_inverse=True)
    sums = np.bincount(inv, weights=p)
    counts = np.bincount(inv)
    return sums[inv] / counts[inv]


def tv(heap_slot_at: IntArray, prio: FloatArray) -> float:
    # heap distribution: slot at heap position h gets power[h]
    p_heap = np.empty(N)
    p_heap[heap_slot_at] = power
    order = np.lexsort((np.arange(N), -prio))
    p_exact = np.empty(N)
    p_exact[order] = power
    return float(0.5 * np.abs(tie_average(p_heap, prio) - tie_average(p_exact, prio)).sum())


def run(seed: int) -> dict[float, tuple[int, float]]:
    """``(writes, TV)`` just after a sort (key 0.0) and at each checkpoint (a fraction of N)."""
    rng = np.random.default_rng(seed)
    prio = np.abs(rng.standard_normal(N))
    slot_at = np.lexsort((np.arange(N), -prio))  # sorted array = valid heap (after a re-sort)
    pos = np.empty(N, dtype=np.int64)
    pos[slot_at] = np.arange(N)

    def swap(a: int, b: int) -> None:
        sa, sb = slot_at[a], slot_at[b]
        slot_at[a], slot_at[b] = sb, sa
        pos[sb], pos[sa] = a, b

    def sift(h: int) -> None:
        while h > 0 and prio[slot_at[(h - 1) // 2]] < prio[slot_at[h]]:
            swap(h, (h - 1) // 2)
            h = (h - 1) // 2
        while True:
            left, right, big = 2 * h + 1, 2 * h + 2, h
            if left < N and prio[slot_at[left]] > prio[slot_at[big]]:
                big = left
            if right < N and prio[slot_at[right]] > prio[slot_at[big]]:
                big = right
            if big == h:
                return
            swap(h, big)
            h = big

    def write(slot: int, value: float) -> None:
        prio[slot] = value
        sift(pos[slot])

    out = {0.0: (0, tv(slot_at, prio))}
    writes, cursor = 0, 0
    for frac in CHECKPOINTS:
        target = round(frac * N)
        while writes < target:  # a step = sample 32, update them, add 8 (stops exactly at target)
            positions = np.searchsorted(cdf, rng.random(32) * cdf[-1], side="right")
            positions = np.minimum(positions, N - 1)
            drawn = slot_at[positions].copy()
            for s, v in zip(drawn, np.abs(rng.standard_normal(32)), strict=False):
                if writes < target:
                    write(s, v)
                    writes += 1
            top = prio[slot_at[0]]  # new items enter at the memory's maximum priority
            for _j in range(8):
                if writes < target:
                    write(cursor, top)
                    writes += 1
                    cursor = (cursor + 1) % N
        out[frac] = (writes, tv(slot_at, prio))
    return out


results = [run(s) for s in range(SEEDS)]
print(f"N={N} alpha={ALPHA} seeds={SEEDS}; TV(heap order, exact ranks), ties averaged")
print(f"  0 writes (just sorted): {np.mean([r[0.0][1] for r in results]):.4f}")
for frac in CHECKPOINTS:
    vals = [r[frac][1] for r in results]
    print(
        f"  {frac}N = {results[0][frac][0]} writes: mean {np.mean(vals):.4f}  "
        f"(min {min(vals):.4f}, max {max(vals):.4f})"
    )
