"""What the Ray memory costs: the calls of an Ape-X actor and learner on ``prisample.ray.RemoteReplay``
(one and two shards) against the same calls on a local ``PrioritizedReplay``, side by side in one run.

Cases, each on a memory of ``N`` transitions filled with random priorities (CartPole-sized
observations, 4 float32, unless ``--obs``), α = 0.6, proportional:

* ``add``: an actor's batch of ``--chunk`` transitions with its priorities, waited for
  (``ray.get``): the round trip an actor pays when it waits, the memory's ingest rate otherwise;
* ``sample``: a learner's batch of ``k`` with weights (two shards: the mass round trip first);
* ``update``: ``|δ|`` of a batch, waited for;
* ``prefetched``: what the learner waits for a batch from :meth:`RemoteReplay.prefetch`
  (depth 1) while a simulated update of ``train_ms`` runs between batches (a sleep: like a GPU
  update, it leaves the GIL free): the cost that is left once the draw overlaps training.

Every call is timed alone (``perf_counter_ns``, garbage collector off), the cases take turns in
rounds, after a warm-up; per case the median and the 99th percentile in µs, and the ratio to the
local memory.  Also: seconds to start Ray and to bring up a shard actor.

Full run (about two minutes; alone on the machine)::

    OMP_NUM_THREADS=1 python -m benchmarks.ray_replay

writes ``benchmarks/measurements/ray_replay.json``; ``--quick`` for a smoke run (prints only,
unless ``--out``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "measurements" / "ray_replay.json"
FULL: dict[str, Any] = {"size": 1 << 17, "k": 256, "chunk": 50, "rounds": 20, "block": 50, "train_ms": 5.0}
QUICK: dict[str, Any] = {"size": 1 << 10, "k": 32, "chunk": 16, "rounds": 2, "block": 5, "train_ms": 0.5}


def transitions(rng: np.random.Generator, n: int, obs: int) -> dict[str, np.ndarray]:
    o = rng.standard_normal((n, obs)).astype(np.float32)
    return {
        "obs": o,
        "action": rng.integers(0, 2, n),
        "reward": np.ones(n, np.float32),
        "discount": np.full(n, 0.99, np.float32),
        "next_obs": o,
    }


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1e3


def measure(cases: dict[str, Callable[[], object]], rounds: int, block: int) -> dict[str, list[float]]:
    """µs of every call, the cases interleaved in rounds of ``block`` calls (order rotating)."""
    names = list(cases)
    for fn in cases.values():
        for _ in range(3):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc.disable()
    try:
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].extend(timed(cases[name]) for _ in range(block))
    finally:
        gc.enable()
    return samples


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median_us": statistics.median(values),
        "p99_us": float(np.percentile(values, 99)),
        "calls": len(values),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--obs", type=int, default=4, help="float32 entries per observation")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    config = dict(QUICK if args.quick else FULL, obs=args.obs)
    out = args.out if args.out is not None else (None if args.quick else DEFAULT_OUT)

    import ray
    import torch

    from benchmarks.run_all import machine
    from prisample import PrioritizedReplay
    from prisample.ray import RemoteReplay

    load_start = list(os.getloadavg())
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray_start_s = time.perf_counter() - started
    rng = np.random.default_rng(0)
    options: dict[str, Any] = dict(obs_dtype=np.float32, alpha=0.6, eps=1e-6, seed=0)
    size, k, chunk = config["size"], config["k"], config["chunk"]

    local = PrioritizedReplay(size, (args.obs,), **options)
    started = time.perf_counter()
    remotes = {s: RemoteReplay(size, (args.obs,), shards=s, **options) for s in (1, 2)}
    actor_start_s = (time.perf_counter() - started) / 3
    fill = transitions(rng, 4096, args.obs)
    for begin in range(0, size, 4096):
        n = min(4096, size - begin)
        part = {key: value[:n] for key, value in fill.items()}
        values = rng.uniform(0, 2, n)
        local.add_many(
            *(part[key] for key in ("obs", "action", "reward", "discount", "next_obs")),
            streams=np.zeros(n, np.int64),
            priorities=values,
        )
        ray.get([remote.add(part, values, shard=(begin // 4096) % s) for s, remote in remotes.items()])
    batch_chunk = transitions(rng, chunk, args.obs)
    chunk_values = rng.uniform(0, 2, chunk)
    errors = rng.uniform(0, 2, k)

    def local_add() -> None:
        local.add_many(
            *(batch_chunk[key] for key in ("obs", "action", "reward", "discount", "next_obs")),
            streams=np.zeros(chunk, np.int64),
            priorities=chunk_values,
        )

    def local_update() -> None:
        _, draw = local.sample(k)
        local.update_priorities(draw.indices, errors)

    cases: dict[str, Callable[[], object]] = {
        "local add": local_add,
        "local sample": lambda: local.sample(k),
        "local sample+update": local_update,
    }

    def remote_cases(remote: RemoteReplay) -> dict[str, Callable[[], object]]:
        return {
            "add": lambda: ray.get(remote.add(batch_chunk, chunk_values)),
            "sample": lambda: remote.sample(k),
            "sample+update": lambda: ray.get(remote.update_priorities(remote.sample(k), errors)),
        }

    for s, remote in remotes.items():
        for what, case in remote_cases(remote).items():
            cases[f"ray {s} shard {what}"] = case
    samples = measure(cases, config["rounds"], config["block"])

    # the learner's wait for a prefetched batch while a simulated update runs between batches
    waits: dict[str, list[float]] = {}
    steps = config["rounds"] * config["block"]
    for s, remote in remotes.items():
        waits[f"ray {s} shard prefetched"] = []
        with remote.prefetch(k, depth=1, total=steps + 5) as batches:
            for j in range(steps + 5):
                wait = timed(lambda: next(batches))
                time.sleep(config["train_ms"] / 1e3)  # a GPU update: the GIL is free meanwhile
                if j >= 5:
                    waits[f"ray {s} shard prefetched"].append(wait)
    samples.update(waits)
    results = {name: summary(values) for name, values in samples.items()}
    for name, result in results.items():
        if name.startswith("ray"):
            kind = name.split(" shard ")[1].replace("prefetched", "sample")
            base = results[f"local {kind}"]
            result["ratio_median_to_local"] = result["median_us"] / base["median_us"]
    report = {
        "benchmark": "ray_replay",
        "command": "python -m benchmarks.ray_replay " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine(),
        "versions": {"ray": ray.__version__, "torch": torch.__version__, "numpy": np.__version__},
        "config": config,
        "ray_start_s": ray_start_s,
        "shard_actor_start_s": actor_start_s,
        "results": results,
        "loadavg_start": load_start,
        "loadavg_end": list(os.getloadavg()),
    }
    ray.shutdown()
    print(f"{'case':32s} {'median µs':>10s} {'p99 µs':>10s} {'× local':>8s}")
    for name, result in results.items():
        ratio = result.get("ratio_median_to_local")
        print(f"{name:32s} {result['median_us']:10.1f} {result['p99_us']:10.1f} {ratio or 1.0:8.1f}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {out}")
    return report


if __name__ == "__main__":
    main()
