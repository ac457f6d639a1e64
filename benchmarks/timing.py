"""Interleaved timing: every case runs in the same process and the same loop, in turn.

Each case is a zero-argument callable doing one operation.  After a warm-up (numba compiles on
first use), each case gets a block size so that one block lasts about ``block_s``; then for
``reps`` rounds every case runs one block (the order rotates each round so that no case always
follows the same neighbour).  The result per case is the median over rounds of the mean time
per call in a block, in microseconds.  The garbage collector is off while timing.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable
from typing import Any, TypeVar


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


class CpuMonitor:
    """CPUs used by *other* processes (and stolen by the hypervisor) during a ``with`` block.

    From ``/proc/stat`` (all busy time) minus ``/proc/self/stat`` (this process), in CPUs on
    average: 0.0 means the machine was otherwise idle, 1.0 one other core fully busy.
    """

    others = float("nan")
    steal = float("nan")

    @staticmethod
    def _read() -> tuple[float, int, int, int]:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6]  # user nice system irq softirq
        steal = fields[7] if len(fields) > 7 else 0
        with open("/proc/self/stat") as f:
            stat = f.read().rsplit(")", 1)[1].split()
        own = int(stat[11]) + int(stat[12])  # utime + stime
        return time.perf_counter(), busy, steal, own

    def __enter__(self) -> CpuMonitor:
        try:
            self._start: tuple[float, int, int, int] | None = self._read()
        except (OSError, ValueError, IndexError):
            self._start = None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._start is None:
            return
        try:
            end = self._read()
        except (OSError, ValueError, IndexError):
            return
        hz = os.sysconf("SC_CLK_TCK")
        wall = max(end[0] - self._start[0], 1e-9)
        self.others = max(0.0, ((end[1] - self._start[1]) - (end[3] - self._start[3])) / hz / wall)
        self.steal = (end[2] - self._start[2]) / hz / wall


class QuietPolicy:
    """Re-time a group when other processes used more than ``max_others`` CPUs during it.

    Up to ``attempts`` tries per group, ``wait_s`` apart, within a total waiting ``budget_s`` for the
    whole run; the try with the least interference is kept.
    """

    def __init__(
        self, max_others: float = 0.25, attempts: int = 3, wait_s: float = 10.0, budget_s: float = 240.0
    ):
        self.max_others, self.attempts, self.wait_s, self.budget_s = max_others, attempts, wait_s, budget_s
        self.waited_s = 0.0
        self.retries = 0


QUIET = QuietPolicy()
_T = TypeVar("_T")


def quietest(fn: Callable[[], _T], policy: QuietPolicy = QUIET) -> tuple[_T, float, float]:
    """``fn()`` under :class:`CpuMonitor`, retried per ``policy`` while other processes use the
    CPUs: ``(result, others, steal)`` of the quietest try."""
    best: tuple[_T, float, float] | None = None
    for attempt in range(policy.attempts):
        with CpuMonitor() as monitor:
            result = fn()
        others = monitor.others if monitor.others == monitor.others else 0.0  # NaN: unknown
        if best is None or others < best[1]:
            best = (result, others, monitor.steal)
        if others <= policy.max_others or attempt == policy.attempts - 1:
            break
        if policy.waited_s + policy.wait_s > policy.budget_s:
            break
        time.sleep(policy.wait_s)
        policy.waited_s += policy.wait_s
        policy.retries += 1
    assert best is not None
    return best


def measure_quiet(
    cases: dict[str, Callable[[], object]], *, reps: int, block_s: float, policy: QuietPolicy = QUIET
) -> tuple[dict[str, float], float, float]:
    """:func:`measure` under :class:`CpuMonitor`, retried per ``policy``: ``(times, others, steal)``."""
    return quietest(lambda: measure(cases, reps=reps, block_s=block_s), policy)
