"""DQN replay step through TorchRL's ``ReplayBuffer``: TorchRL's ``PrioritizedSampler`` against
``prisample.torchrl.PrioritizedSampler`` (proportional and rank), side by side in one run.

One *replay step* is what a DQN learner with a vector env of ``--extend`` environments does per
update: ``rb.extend`` one vector step of transitions (a ``TensorDict`` of ``obs`` and
``("next", "obs")`` of 4 float32 each, ``action``, ``reward``, ``done``), ``rb.sample(return_info=
True)`` a batch, ``rb.update_priority(info["index"], |δ|)`` with random ``|δ|``.  Every sampler sits
in the same ``ReplayBuffer(storage=LazyTensorStorage(N), sampler=..., batch_size=B)``, filled to
``N`` with random priorities before timing, with α = 0.6, β = 0.4, ε = 1e-8 (TorchRL's default):

* ``TorchRL``: ``torchrl.data.replay_buffers.samplers.PrioritizedSampler(N, 0.6, 0.4)`` (its
  compiled float32 sum and min trees; draws from ``np.random``, seeded);
* ``prisample``: ``prisample.torchrl.PrioritizedSampler(N, 0.6, 0.4)`` (proportional);
* ``prisample-rank``: the same with ``backend="rank"``.

Timing: every step is timed alone (``perf_counter_ns``), with the garbage collector off; the
samplers take turns in rounds of ``block`` steps, the order rotating each round, after a warm-up.
Per sampler: the median and the 99th percentile of the step times in µs, and the ratios
``TorchRL / sampler`` of both (above 1: faster than TorchRL).  The CPU time other processes used
during each case is recorded (``others_cpus``, :class:`benchmarks.timing.CpuMonitor`).

Full run (a few minutes, under 1 GB of RAM; alone on the machine)::

    OMP_NUM_THREADS=1 python -m benchmarks.torchrl_sampler

writes ``benchmarks/measurements/torchrl_sampler.json``.  Smoke run: ``python -m
benchmarks.torchrl_sampler --quick`` (tiny sizes, prints the table, writes only with ``--out``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

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

from benchmarks.timing import CpuMonitor

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "measurements" / "torchrl_sampler.json"
ALPHA, BETA, EPS = 0.6, 0.4, 1e-8
OBS = 4  # floats per observation (CartPole's)
PERIOD = 64  # distinct vector steps and |δ| batches, replayed in turn
SAMPLERS = ("TorchRL", "prisample", "prisample-rank")
DESCRIPTIONS = {
    "TorchRL": "torchrl.data.replay_buffers.samplers.PrioritizedSampler(N, alpha=0.6, beta=0.4) "
    "(float32 C++ sum/min trees, i.i.d. draws from np.random)",
    "prisample": 'prisample.torchrl.PrioritizedSampler(N, alpha=0.6, beta=0.4) (backend="proportional")',
    "prisample-rank": 'prisample.torchrl.PrioritizedSampler(N, alpha=0.6, beta=0.4, backend="rank")',
}

FULL: dict[str, Any] = {
    "sizes": [1 << 17, 1 << 20],
    "batches": [32, 256],
    "extend": 8,
    "rounds": 30,
    "block": 300,
    "warmup": 200,
}
QUICK: dict[str, Any] = {
    "sizes": [1 << 10, 1 << 12],
    "batches": [32, 256],
    "extend": 8,
    "rounds": 2,
    "block": 20,
    "warmup": 5,
}


def log(message: str) -> None:
    print(message, flush=True)


def make_sampler(name: str, capacity: int) -> Any:
    if name == "TorchRL":
        from torchrl.data.replay_buffers.samplers import PrioritizedSampler as TorchRLSampler

        np.random.seed(0)  # TorchRL draws its masses from np.random when the buffer has no generator
        return TorchRLSampler(capacity, ALPHA, BETA, EPS)
    from prisample.torchrl import PrioritizedSampler

    backend = "rank" if name == "prisample-rank" else "proportional"
    return PrioritizedSampler(capacity, ALPHA, BETA, EPS, backend=backend, seed=0)


class Stream:
    """``PERIOD`` vector steps of ``extend`` transitions and ``PERIOD`` batches of ``|δ|``."""

    def __init__(self, extend: int, batch: int, seed: int = 0) -> None:
        import torch
        from tensordict import TensorDict

        gen = torch.Generator().manual_seed(seed)
        n = PERIOD * extend
        obs = torch.randn(n + extend, OBS, generator=gen)
        data = TensorDict(
            {
                "obs": obs[:n],
                "action": torch.randint(0, 2, (n,), generator=gen),
                "reward": torch.ones(n),
                "done": torch.rand(n, generator=gen) < 0.02,
                "next": TensorDict({"obs": obs[extend:]}, batch_size=[n]),
            },
            batch_size=[n],
        )
        self.data = data
        self.steps = [data[s * extend : (s + 1) * extend] for s in range(PERIOD)]
        self.deltas = torch.empty(PERIOD, batch).exponential_(generator=gen)


class Contender:
    """One sampler in its own ``ReplayBuffer``, fed the same stream as the others."""

    def __init__(self, name: str, capacity: int, batch: int, stream: Stream) -> None:
        from torchrl.data import LazyTensorStorage, ReplayBuffer

        self.name = name
        self.stream = stream
        self.rb = ReplayBuffer(
            storage=LazyTensorStorage(capacity), sampler=make_sampler(name, capacity), batch_size=batch
        )
        self.capacity = capacity
        self.step_count = 0

    def fill(self, seed: int = 0) -> None:
        """``capacity`` transitions (the stream repeated), then random priorities for all."""
        import torch

        chunk = self.stream.data
        written = 0
        while written < self.capacity:
            part = chunk[: min(chunk.shape[0], self.capacity - written)]
            self.rb.extend(part)
            written += part.shape[0]
        gen = torch.Generator().manual_seed(seed)
        self.rb.update_priority(
            torch.arange(self.capacity), torch.empty(self.capacity).exponential_(generator=gen)
        )

    def step(self) -> None:
        s = self.step_count % PERIOD
        self.rb.extend(self.stream.steps[s])
        _, info = self.rb.sample(return_info=True)
        self.rb.update_priority(info["index"], self.stream.deltas[s])
        self.step_count += 1


def _timed_block(step: Callable[[], None], count: int, out: list[float]) -> None:
    clock = time.perf_counter_ns
    for _ in range(count):
        start = clock()
        step()
        out.append((clock() - start) / 1e3)


def time_case(
    contenders: dict[str, Contender], config: dict[str, Any]
) -> tuple[dict[str, list[float]], float, float]:
    """Per contender, the µs of every timed step (interleaved rounds); the others' CPU use."""
    for contender in contenders.values():
        for _ in range(config["warmup"]):
            contender.step()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        with CpuMonitor() as monitor:
            for r in range(config["rounds"]):
                shift = r % len(names)
                for name in names[shift:] + names[:shift]:
                    _timed_block(contenders[name].step, config["block"], times[name])
    finally:
        if enabled:
            gc.enable()
    return times, monitor.others, monitor.steal


def summarize(times: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, values in times.items():
        out[name] = {
            "median_us": statistics.median(values),
            "p99_us": float(np.percentile(values, 99)),
            "mean_us": statistics.fmean(values),
            "steps": len(values),
        }
    base = out.get("TorchRL")
    if base is not None:
        for name, entry in out.items():
            if name != "TorchRL":
                entry["torchrl_over_this"] = {
                    "median": base["median_us"] / entry["median_us"],
                    "p99": base["p99_us"] / entry["p99_us"],
                }
    return out


def run_case(capacity: int, batch: int, config: dict[str, Any], samplers: tuple[str, ...]) -> dict[str, Any]:
    stream = Stream(config["extend"], batch)
    result: dict[str, Any] = {
        "capacity": capacity,
        "batch": batch,
        "extend": config["extend"],
        "samplers": {},
    }
    contenders: dict[str, Contender] = {}
    for name in samplers:
        started = time.perf_counter()
        try:
            contender = Contender(name, capacity, batch, stream)
            contender.fill()
        except Exception as error:  # a sampler that fails is recorded, the run goes on
            result["samplers"][name] = {"error": f"{type(error).__name__}: {error}"}
            log(f"  {name}: {result['samplers'][name]['error']}")
            continue
        contenders[name] = contender
        result["samplers"][name] = {"fill_s": time.perf_counter() - started}
    if contenders:
        times, others, steal = time_case(contenders, config)
        for name, summary in summarize(times).items():
            result["samplers"][name].update(summary)
        result["load"] = {"others_cpus": others, "steal_cpus": steal}
    contenders.clear()
    gc.collect()
    return result


def run(config: dict[str, Any], command: str, samplers: tuple[str, ...] = SAMPLERS) -> dict[str, Any]:
    import logging

    import torch
    import torchrl  # noqa: F401  # first: the import sets up its logger, quietened next

    from benchmarks.run_all import machine, torchrl_extension

    logging.getLogger("torchrl").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "benchmark": "torchrl_sampler",
        "command": command,
        "config": config,
        "machine": machine(),
        "torchrl_extension": torchrl_extension(),
        "loadavg_start": os.getloadavg(),
        "workload": {
            "alpha": ALPHA,
            "beta": BETA,
            "eps": EPS,
            "obs_floats": OBS,
            "step": f"rb.extend({config['extend']} transitions), rb.sample(return_info=True) of the batch, "
            "rb.update_priority(info['index'], random |δ|), through torchrl.data.ReplayBuffer over "
            "LazyTensorStorage(N) filled to N",
            "samplers": {name: DESCRIPTIONS[name] for name in samplers},
        },
        "cases": [],
    }
    m = results["machine"]
    log(f"machine: {m['cpu']}, torch {m['versions']['torch']}, torchrl {m['versions']['torchrl']}")
    for capacity in config["sizes"]:
        for batch in config["batches"]:
            log(f"N = {capacity}, batch = {batch}")
            results["cases"].append(run_case(capacity, batch, config, samplers))
    results["loadavg_end"] = os.getloadavg()
    results["elapsed_s"] = time.perf_counter() - started
    return results


def _n(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else f"{n:,}"


def table(results: dict[str, Any]) -> str:
    """One row per case and sampler: µs per step (median, p99), TorchRL's over it, the load.

    The table of ``docs/benchmarks.md`` (``benchmarks.report.TABLES``): every number is a value of
    ``results``.
    """
    lines = [
        "| N | batch | sampler | median µs per step | p99 µs | TorchRL / this (median) "
        "| TorchRL / this (p99) | other processes' CPUs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in results["cases"]:
        others = case.get("load", {}).get("others_cpus")
        load = "–" if others is None else f"{others:.2f}"
        for name, r in case["samplers"].items():
            head = f"| {_n(case['capacity'])} | {case['batch']} | {name} |"
            if "median_us" not in r:
                lines.append(f"{head} {r.get('error', 'not measured')} | | | | {load} |")
                continue
            ratio = r.get("torchrl_over_this")
            median = "–" if ratio is None else f"{ratio['median']:.2f}×"
            p99 = "–" if ratio is None else f"{ratio['p99']:.2f}×"
            lines.append(f"{head} {r['median_us']:,.1f} | {r['p99_us']:,.0f} | {median} | {p99} | {load} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few steps (smoke run)")
    parser.add_argument("--sizes", type=int, nargs="+", help="buffer capacities N")
    parser.add_argument("--batches", type=int, nargs="+", help="batch sizes")
    parser.add_argument("--extend", type=int, help="transitions per step (vector env size)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds")
    parser.add_argument("--block", type=int, help="steps per sampler per round")
    parser.add_argument("--samplers", nargs="+", choices=SAMPLERS, help="samplers to time (default: all)")
    parser.add_argument(
        "--out",
        type=Path,
        help="JSON results (default: benchmarks/measurements/torchrl_sampler.json; --quick: none)",
    )
    args = parser.parse_args(argv)
    config = dict(QUICK if args.quick else FULL)
    for key in ("sizes", "batches", "extend", "rounds", "block"):
        value = getattr(args, key)
        if value is not None:
            config[key] = value
    command = "OMP_NUM_THREADS=1 python -m benchmarks.torchrl_sampler " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    samplers = SAMPLERS if args.samplers is None else tuple(args.samplers)
    results = run(config, command.strip(), samplers)
    out = args.out if args.out is not None else (None if args.quick else DEFAULT_OUT)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, default=float) + "\n")
        log(f"wrote {out}")
    print(table(results))


if __name__ == "__main__":
    main()
