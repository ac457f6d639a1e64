"""Where prisample's DQN step (sample 32 + weights + update 32) spends its time.

Four views.  The public calls timed alone (uninstrumented).  The same calls and their phases on a
small sampler (``components_n`` slots, all in cache): the backend's draw, the weights, the
backend's write (:func:`step_components`), where the difference between a public call and its
phases is the fixed cost of the sampler's Python layer.  A ``cProfile`` run over many steps,
reported as self time per step of each function (instrumentation inflates every Python-level call
by roughly its own overhead, so the profiled total exceeds the real one).  The fixed costs any
implementation in Python pays per call, for scale (an empty numba kernel call with five array
arguments, a 32-element numpy operation, a Python method call).  Timings are the lowest of three
interleaved measurements: slow spells of a shared machine hit one, not all.
"""

from __future__ import annotations

import cProfile
import os
import pstats
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from benchmarks.peers import Prisample
from benchmarks.timing import QUIET, CpuMonitor, QuietPolicy, measure, measure_quiet
from prisample import PrioritizedSampler

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@numba.njit(cache=False)
def _empty_kernel(a: Any, b: Any, c: Any, d: Any, e: Any) -> int:
    return 0


class _Obj:
    def method(self) -> None:
        return None


@dataclass
class ProfileResult:
    n: int
    backend: str
    calls: dict[str, float] = field(default_factory=dict)  # µs, uninstrumented
    # µs, uninstrumented: step_components on a sampler of ``components_n`` slots (all in cache)
    components: dict[str, float] = field(default_factory=dict)
    components_n: int = 0
    profiled_total_us: float = 0.0
    others_cpu: float = 0.0
    functions: list[dict[str, Any]] = field(default_factory=list)  # self time per step
    floors: dict[str, float] = field(default_factory=dict)


def _short(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~":  # a builtin
        return func
    parts = filename.split(os.sep)
    for root in ("prisample", "numpy", "numba", "benchmarks"):
        if root in parts:
            rel = "/".join(parts[len(parts) - parts[::-1].index(root) - 1 :])
            return f"{rel}:{line}({func})"
    return f"{parts[-1]}:{line}({func})"


def _least_of(
    cases: dict[str, Callable[[], object]],
    *,
    reps: int,
    block_s: float,
    repeats: int = 3,
    policy: QuietPolicy = QUIET,
) -> dict[str, float]:
    """Per case, the lowest of ``repeats`` interleaved measurements (slow spells of the machine
    hit one measurement, not all)."""
    best: dict[str, float] = {}
    for _ in range(repeats):
        times, _, _ = measure_quiet(cases, reps=reps, block_s=block_s, policy=policy)
        for key, value in times.items():
            best[key] = min(best.get(key, float("inf")), value)
    return best


def step_components(
    sampler: PrioritizedSampler,
    slots: list[IntArray],
    priorities: list[FloatArray],
    *,
    reps: int,
    block_s: float,
    repeats: int = 3,
    policy: QuietPolicy = QUIET,
) -> dict[str, float]:
    """The phases of one DQN step on ``sampler``, each timed alone beside the public calls they
    make up (µs; 32 slots a call, ``slots[j]`` written with ``priorities[j]`` in turn).

    The phases: the draw (``sampler.backend.sample``), the importance weights of the drawn slots
    (the sampler's ``_weights`` hook, ``w_i = (N · P(i))^-β / max_j w_j``, Sec. 3.4) and the write
    of the new priorities (``sampler.backend.write``).  A public call less its phases is the
    sampler's own layer: argument checks and conversion, the lock, β, ``Draw``.

    The draws here use a generator of their own (a draw costs the same whoever's generator it
    advances) and the writes go to the backend directly, as only a benchmark may: the raw
    priorities it shares with the sampler stay in step, and a ``PrioritizedSampler``'s
    ``_written`` hook does nothing.
    """
    backend = sampler.backend
    rng = np.random.default_rng(2)
    drawn, probabilities = backend.sample(32, rng)
    counter = [0]

    def backend_write() -> None:
        counter[0] = (counter[0] + 1) & 4095
        backend.write(slots[counter[0]], priorities[counter[0]])

    def update() -> None:
        counter[0] = (counter[0] + 1) & 4095
        sampler.update_priorities(slots[counter[0]], priorities[counter[0]])

    def step() -> None:
        counter[0] = (counter[0] + 1) & 4095
        draw = sampler.sample(32)
        sampler.update_priorities(draw.indices, priorities[counter[0]])

    t = _least_of(
        {
            "DQN step": step,
            "sample(32)": lambda: sampler.sample(32),
            "backend.sample(32)": lambda: backend.sample(32, rng),
            "_weights(32)": lambda: sampler._weights(drawn, probabilities),
            "update_priorities(32)": update,
            "backend.write(32)": backend_write,
        },
        reps=reps,
        block_s=block_s,
        repeats=repeats,
        policy=policy,
    )
    t["sample: rest (checks, lock, β, Draw)"] = t["sample(32)"] - t["backend.sample(32)"] - t["_weights(32)"]
    t["update: rest (conversion, checks, lock)"] = t["update_priorities(32)"] - t["backend.write(32)"]
    t["DQN step: outside the backend"] = t["DQN step"] - t["backend.sample(32)"] - t["backend.write(32)"]
    return t


def profile_dqn(
    n: int,
    *,
    backend: str = "proportional",
    steps: int,
    reps: int,
    block_s: float,
    log: Callable[[str], None],
    components_n: int = 1 << 10,
    repeats: int = 3,
    policy: QuietPolicy = QUIET,
) -> ProfileResult:
    rng = np.random.default_rng(1)
    peer = Prisample(n, backend=backend, seed=1)
    peer.fill(np.abs(rng.standard_normal(n)))
    sampler = peer.sampler
    new = [np.abs(rng.standard_normal(32)) for _ in range(4096)]
    idx = [rng.integers(0, n, 32) for _ in range(4096)]
    counter = [0]

    def step() -> None:
        counter[0] = (counter[0] + 1) & 4095
        draw = sampler.sample(32)
        sampler.update_priorities(draw.indices, new[counter[0]])

    def sample_only() -> None:
        sampler.sample(32)

    def update_only() -> None:
        counter[0] = (counter[0] + 1) & 4095
        sampler.update_priorities(idx[counter[0]], new[counter[0]])

    result = ProfileResult(n=n, backend=backend, components_n=components_n)
    small_peer = Prisample(components_n, backend=backend, seed=1)
    small_peer.fill(np.abs(rng.standard_normal(components_n)))
    small_idx = [rng.integers(0, components_n, 32) for _ in range(4096)]
    result.components = step_components(
        small_peer.sampler, small_idx, new, reps=reps, block_s=block_s, repeats=repeats, policy=policy
    )
    arrays = [np.zeros(8) for _ in range(5)]
    small = np.random.default_rng(0).random(32)
    obj = _Obj()
    with CpuMonitor() as monitor:
        result.calls = _least_of(
            {"DQN step": step, "sample(32)": sample_only, "update_priorities(32)": update_only},
            reps=reps,
            block_s=block_s,
            repeats=repeats,
            policy=policy,
        )
    result.others_cpu = monitor.others
    result.floors = measure(
        {
            "empty numba kernel, 5 array args": lambda: _empty_kernel(*arrays),
            "np.minimum(x32, 1.0) ** 0.4": lambda: np.minimum(small, 1.0) ** 0.4,
            "Python method call": obj.method,
        },
        reps=reps,
        block_s=block_s,
    )
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    profiler.disable()
    stats = pstats.Stats(profiler)
    entries = []
    total = 0.0
    # The raw table: get_stats_profile() rounds times to ms.  Not in typeshed, hence the ignore.
    for key, (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        total += tottime
        entries.append(
            {
                "function": _short(key),
                "calls_per_step": ncalls / steps,
                "self_us_per_step": tottime / steps * 1e6,
                "cum_us_per_step": cumtime / steps * 1e6,
            }
        )
    entries.sort(key=lambda e: -e["self_us_per_step"])
    result.functions = [e for e in entries if "breakdown.py" not in e["function"]][:16]
    result.profiled_total_us = total / steps * 1e6
    log(
        f"  profile {backend} N=2^{n.bit_length() - 1}: "
        + ", ".join(f"{k} {v:.1f} µs" for k, v in result.calls.items())
        + f"; under cProfile {result.profiled_total_us:.1f} µs/step"
    )
    for e in result.functions[:8]:
        log(f"    {e['self_us_per_step']:7.2f} µs self  {e['calls_per_step']:4.1f}×  {e['function']}")
    return result
