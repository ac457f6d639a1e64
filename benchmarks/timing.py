"""Interleaved timing: every case runs in the same process and the same loop, in turn.

Each case is a zero-argument callable doing one operation.  After a warm-up (numba compiles on
first use), each case gets a block size so that one block lasts about ``block_s``; then for
``reps`` rounds every case runs one block (the order rotates each round so that no case always
follows the same neighbour).  The result per case is the median over rounds of the mean time
per call in a block, in microseconds.  The garbage collector is off while timing.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable


def _block(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return time.perf_counter() - start


def measure(
    cases: dict[str, Callable[[], object]],
    *,
    reps: int,
    block_s: float,
    warmup: int = 5,
    max_calls: int = 5000,
) -> dict[str, float]:
    """Median µs per call of each case, the cases interleaved."""
    calls: dict[str, int] = {}
    for name, fn in cases.items():
        for _ in range(warmup):
            fn()
        once = _block(fn, 3) / 3
        calls[name] = max(1, min(max_calls, int(block_s / max(once, 1e-7))))
    samples: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(reps):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(_block(cases[name], calls[name]) / calls[name])
    finally:
        if enabled:
            gc.enable()
    return {name: statistics.median(values) * 1e6 for name, values in samples.items()}


def time_once(fn: Callable[[], object], reps: int = 3) -> float:
    """Best of ``reps`` single runs, in seconds (for slow one-off operations such as a re-sort)."""
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
