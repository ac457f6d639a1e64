"""µs per operation of every peer, side by side, for each capacity ``N`` and batch size ``k``.

All peers are built and pre-filled to ``N`` valid slots with the same random priorities
``|N(0, 1)|`` before any timing.  Arguments (slot arrays, new priorities) are drawn beforehand
from a pool of 64 random batches per case, converted to each library's own type (numpy or
torch), and cycled through, so that successive calls touch different slots as in training.

Operations:

* ``sample k``: draw ``k`` slots with their importance weights;
* ``update k``: set ``k`` raw priorities of random valid slots;
* ``add k``: write ``k`` consecutive ring slots (new items at the max priority); ``add 1``: one;
* ``DQN step``: sample 32 (+ weights) then update those 32 with given new ``|δ|``; also timed for
  prisample fed a torch tensor and for the compiled floor (:mod:`benchmarks.compiled_floor`), which
  have no other operation.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.peers import FLOOR, Peer, make_peer
from benchmarks.timing import measure_quiet

POOL = 64


def update_pool(k: int) -> int:
    """Random batches prepared for ``update k``: enough that the slots they touch are not all cached."""
    return max(POOL, min(4096, (1 << 20) // k))


@dataclass
class SpeedResult:
    n: int
    peers: list[str]
    errors: dict[str, str] = field(default_factory=dict)
    # (operation, k) -> peer -> µs per call
    times: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)
    fill_s: dict[str, float] = field(default_factory=dict)
    # "op k" -> CPUs kept busy by other processes / stolen by the hypervisor while timing that case
    others_cpu: dict[str, float] = field(default_factory=dict)
    steal_cpu: dict[str, float] = field(default_factory=dict)
    # one entry per pass when several passes were combined: (operation, k) -> peer -> µs
    passes: list[dict[tuple[str, int], dict[str, float]]] = field(default_factory=list)


def combine(results: list[SpeedResult]) -> SpeedResult:
    """Several passes over the same N: the median per case, the worst interference, every pass kept."""
    import statistics

    first = results[0]
    out = SpeedResult(n=first.n, peers=first.peers, errors=dict(first.errors))
    for r in results[1:]:
        out.errors.update(r.errors)
    for key in first.times:
        peers = set.intersection(*(set(r.times.get(key, {})) for r in results))
        out.times[key] = {
            p: statistics.median(r.times[key][p] for r in results) for p in first.times[key] if p in peers
        }
    for name in ("others_cpu", "steal_cpu"):
        merged: dict[str, float] = {}
        for r in results:
            for group, value in getattr(r, name).items():
                merged[group] = max(merged.get(group, 0.0), value)
        setattr(out, name, merged)
    out.fill_s = first.fill_s
    out.passes = [r.times for r in results]
    return out


def build_peers(
    n: int, names: list[str], priorities: np.ndarray, seed: int
) -> tuple[dict[str, Peer], dict[str, str]]:
    """Construct and pre-fill every peer; a peer that fails is recorded, not fatal."""
    import time

    peers: dict[str, Peer] = {}
    errors: dict[str, str] = {}
    for name in names:
        try:
            peer = make_peer(name, n, seed=seed)
            start = time.perf_counter()
            peer.fill(priorities)
            peer.fill_s = time.perf_counter() - start
            peers[name] = peer
        except Exception as error:  # an optional peer that will not import or run
            errors[name] = f"{type(error).__name__}: {error}"
    return peers, errors


def _cycle(pool: list[tuple[Any, ...]], fn: Callable[..., object]) -> Callable[[], object]:
    it = itertools.cycle(pool)
    return lambda: fn(*next(it))


def _sampling(peer: Peer, k: int) -> Callable[[], object]:
    return lambda: peer.sample(k)


def run_speed(
    n: int,
    ks: list[int],
    names: list[str],
    *,
    reps: int,
    block_s: float,
    seed: int = 0,
    log: Callable[[str], None],
) -> SpeedResult:
    rng = np.random.default_rng(seed)
    priorities = np.abs(rng.standard_normal(n))
    peers, errors = build_peers(n, names, priorities, seed)
    result = SpeedResult(n=n, peers=list(peers), errors=errors)
    result.fill_s = {name: peer.fill_s for name, peer in peers.items()}

    def record(op: str, k: int, cases: dict[str, Callable[[], object]]) -> None:
        times, others, steal = measure_quiet(cases, reps=reps, block_s=block_s)
        result.times[(op, k)] = times
        result.others_cpu[f"{op} {k}"] = others
        result.steal_cpu[f"{op} {k}"] = steal
        base = times.get("prisample")
        cells = ", ".join(
            f"{name} {t:.1f}" + (f" ({t / base:.2f}×)" if base and name != "prisample" else "")
            for name, t in times.items()
        )
        log(f"  N=2^{n.bit_length() - 1} {op} k={k}: {cells} µs")

    for k in ks:
        idx = [rng.integers(0, n, k) for _ in range(update_pool(k))]
        new = [np.abs(rng.standard_normal(k)) for _ in range(update_pool(k))]
        start = rng.integers(0, n, POOL)
        ring = [(s + np.arange(k)) % n for s in start]
        record("sample", k, {name: _sampling(p, k) for name, p in peers.items()})
        record(
            "update",
            k,
            {
                name: _cycle(
                    [(p.indices(i), p.priorities(v)) for i, v in zip(idx, new, strict=True)], p.update
                )
                for name, p in peers.items()
            },
        )
        record("add", k, {name: _cycle([(p.indices(r),) for r in ring], p.add) for name, p in peers.items()})

    slots = [(int(s),) for s in rng.integers(0, n, POOL)]
    record("add", 1, {name: _cycle(slots, p.add_one) for name, p in peers.items()})

    # DQN-step-only peers: prisample fed a torch tensor, and the compiled floor.
    extras = [*(["prisample (torch |δ|)"] if "prisample" in peers else []), FLOOR]
    for name in extras:
        try:
            extra = make_peer(name, n, seed=seed)
            extra.fill(priorities)
            peers[name] = extra
        except Exception as error:
            result.errors[name] = f"{type(error).__name__}: {error}"
    dqn_names = [name for name in [*result.peers, *extras] if name in peers]
    new32 = [np.abs(rng.standard_normal(32)) for _ in range(POOL)]
    record(
        "DQN step",
        32,
        {
            name: _cycle([(peers[name].priorities(v),) for v in new32], peers[name].dqn_call)
            for name in dqn_names
        },
    )
    return result
