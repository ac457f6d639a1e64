"""Tail latency of rank-backend priority updates: p50, p99, p99.9 and max µs per call.

The rank backend keeps the memory exactly sorted (:class:`prisample.order.SortedOrder`); most
updates cost ``O(log N)``, and the ones that re-lay the structure cost more.  A mean hides those;
this benchmark times every call alone.  For each capacity ``N`` and batch ``k`` (32, 256), two
workloads on a :class:`~prisample.PrioritizedSampler` with ``backend="rank"``, ``α = 0.7``:

* ``fresh``: right after construction (every slot filled at the initial maximum priority 1,
  tied), ``update_priorities`` of ``k`` random slots with ``|N(0, 1)|`` priorities, call after
  call.  New priorities fall above or below the block of ties, so the writes pile up at the two
  ends of the order;
* ``steady``: filled with ``|N(0, 1)|`` priorities first, then per call ``update_priorities`` of
  ``k`` random slots (timed) and ``add`` of 8 consecutive ring slots (untimed; they enter on top,
  at the maximum priority), as in a DQN loop.

Each call is timed alone, the garbage collector off: wall time (``perf_counter_ns``, what a
training loop waits) and the thread's CPU time (``thread_time_ns``: the structure's own work, which
a process scheduled in between does not inflate; on a busy machine the wall-time tail shows the
scheduler's slices, a few ms).  Slots are drawn with replacement (``update_priorities`` keeps the
last of duplicates).  Each case runs in a fresh subprocess, ``calls`` calls or ``budget_s``
seconds, whichever ends first (the JSON says how many were timed).  ``--baseline REF`` runs the
same cases on the ``prisample/`` of git revision ``REF`` (extracted to a temporary folder) right
after the current code's, so that both sides of a change are measured on the same machine in one
run.

Full run (alone on the machine: check ``uptime``; about 10-20 minutes with the baseline, ~1.5 GB
RAM at ``N = 2^24``)::

    flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.order_latency \\
        --baseline ee0da2f

Smoke run: ``python -m benchmarks.order_latency --quick`` (``N = 2^10, 2^12``; prints, writes
nothing unless ``--out`` is given).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import gc
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "measurements" / "order_latency.json"
ALPHA = 0.7
ADDS = 8  # ring slots added per call in the steady workload
WORKLOADS = ("fresh", "steady")

FULL: dict[str, Any] = {"sizes": [1 << 20, 1 << 24], "ks": [32, 256], "calls": 3000, "budget_s": 120.0}
QUICK: dict[str, Any] = {"sizes": [1 << 10, 1 << 12], "ks": [32, 256], "calls": 200, "budget_s": 10.0}


def time_case(n: int, k: int, workload: str, calls: int, budget_s: float, seed: int = 0) -> dict[str, Any]:
    """Build the sampler for one case and time up to ``calls`` updates, one by one."""
    from prisample import PrioritizedSampler

    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    sampler = PrioritizedSampler(n, alpha=ALPHA, backend="rank", seed=seed)
    if workload == "steady":
        sampler.update_priorities(np.arange(n), np.abs(rng.standard_normal(n)))
    build_s = time.perf_counter() - started
    sampler.update_priorities(rng.integers(0, n, size=k), np.abs(rng.standard_normal(k)))  # numba loads
    wall = np.empty(calls, dtype=np.int64)
    cpu = np.empty(calls, dtype=np.int64)
    head = 0
    done = 0
    enabled = gc.isenabled()
    gc.disable()
    deadline = time.perf_counter() + budget_s
    try:
        while done < calls and time.perf_counter() < deadline:
            batch, new = rng.integers(0, n, size=k), np.abs(rng.standard_normal(k))
            start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
            sampler.update_priorities(batch, new)
            cpu[done] = time.thread_time_ns() - start_cpu
            wall[done] = time.perf_counter_ns() - start
            done += 1
            if workload == "steady":
                sampler.add((head + np.arange(ADDS)) % n)
                head += ADDS
    finally:
        if enabled:
            gc.enable()
    result: dict[str, Any] = {"calls": done, "build_s": build_s}
    for prefix, times in (("", wall), ("cpu_", cpu)):
        us = times[:done] / 1e3
        result[f"{prefix}p50_us"] = float(np.percentile(us, 50))
        result[f"{prefix}p99_us"] = float(np.percentile(us, 99))
        result[f"{prefix}p999_us"] = float(np.percentile(us, 99.9))
        result[f"{prefix}max_us"] = float(us.max())
        result[f"{prefix}mean_us"] = float(us.mean())
        result[f"{prefix}over_1ms"] = int((us > 1000.0).sum())
    return result


def _worker(args: argparse.Namespace) -> None:
    from benchmarks.timing import CpuMonitor

    with CpuMonitor() as monitor:
        result = time_case(args.n, args.k, args.workload, args.calls, args.budget_s)
    result["others_cpu"] = monitor.others
    import prisample

    result["prisample_path"] = str(Path(prisample.__file__).resolve().parent)
    print(json.dumps(result))


def _run_case(code: Path | None, n: int, k: int, workload: str, config: dict[str, Any]) -> dict[str, Any]:
    """One case in a fresh process; ``code``: a folder whose ``prisample/`` replaces the current."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (code, ROOT) if p is not None)
    command = [
        sys.executable,
        "-m",
        "benchmarks.order_latency",
        "--worker",
        "--n",
        str(n),
        "--k",
        str(k),
        "--workload",
        workload,
        "--calls",
        str(config["calls"]),
        "--budget-s",
        str(config["budget_s"]),
    ]
    # ``-m`` puts the working folder first on the path: run where the measured prisample/ is
    done = subprocess.run(command, env=env, cwd=code or ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _extract(ref: str, folder: Path) -> str:
    """``prisample/`` of git revision ``ref`` into ``folder``; returns the full commit id."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    archive = folder / "code.tar"
    subprocess.run(["git", "archive", "-o", str(archive), commit, "prisample"], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    archive.unlink()
    return commit


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(config: dict[str, Any], baseline: str | None, command: str) -> dict[str, Any]:
    from benchmarks.run_all import machine

    results: dict[str, Any] = {
        "benchmark": "order_latency",
        "command": command,
        "config": config,
        "machine": machine(),
        "loadavg_start": os.getloadavg(),
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--", "prisample")),
        "baseline": None,
        "workloads": {
            "fresh": "update_priorities(k random slots) right after construction (all slots tied at 1)",
            "steady": f"filled with |N(0,1)|; per call update_priorities(k random slots), then add {ADDS}",
        },
        "cases": [],
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="order_latency_") as scratch:
        sides: list[tuple[str, Path | None]] = [("current", None)]
        if baseline:
            results["baseline"] = {"ref": baseline, "commit": _extract(baseline, Path(scratch))}
            sides.append(("baseline", Path(scratch)))
        for n in config["sizes"]:
            for k in config["ks"]:
                for workload in WORKLOADS:
                    case: dict[str, Any] = {"n": n, "k": k, "workload": workload}
                    for side, code in sides:
                        case[side] = _run_case(code, n, k, workload, config)
                        log(f"N=2^{n.bit_length() - 1} k={k} {workload} {side}: {_brief(case[side])}")
                    results["cases"].append(case)
    results["loadavg_end"] = os.getloadavg()
    results["elapsed_s"] = time.perf_counter() - started
    return results


def _brief(entry: dict[str, Any]) -> str:
    if "error" in entry:
        return f"error: {entry['error']}"
    return (
        f"p50 {entry['p50_us']:.1f} p99 {entry['p99_us']:.1f} p99.9 {entry['p999_us']:.1f} "
        f"max {entry['max_us']:.1f} µs (CPU: max {entry['cpu_max_us']:.1f}) over {entry['calls']} calls"
    )


def table(results: dict[str, Any]) -> list[str]:
    """Markdown rows: wall-time percentiles, then the CPU-time p99.9 and maximum."""
    lines = [
        "| N | k | workload | code | calls | p50 µs | p99 µs | p99.9 µs | max µs | calls > 1 ms "
        "| CPU p99.9 µs | CPU max µs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in results["cases"]:
        for side in ("current", "baseline"):
            entry = case.get(side)
            if entry is None:
                continue
            head = f"| 2^{case['n'].bit_length() - 1} | {case['k']} | {case['workload']} | {side} |"
            if "error" in entry:
                lines.append(f"{head} error: {entry['error']} | | | | | | | |")
                continue
            lines.append(
                f"{head} {entry['calls']} | {entry['p50_us']:,.1f} | {entry['p99_us']:,.1f} | "
                f"{entry['p999_us']:,.1f} | {entry['max_us']:,.1f} | {entry['over_1ms']} | "
                f"{entry['cpu_p999_us']:,.1f} | {entry['cpu_max_us']:,.1f} |"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few calls (smoke run)")
    parser.add_argument("--sizes", type=int, nargs="+", help="capacities N")
    parser.add_argument("--ks", type=int, nargs="+", help="slots per update")
    parser.add_argument("--calls", type=int, help="updates timed per case")
    parser.add_argument("--budget-s", type=float, help="seconds per case at most")
    parser.add_argument("--baseline", help="also time the prisample/ of this git revision (e.g. main)")
    parser.add_argument(
        "--out", type=Path, help=f"JSON results (default: {OUT.relative_to(ROOT)}, none with --quick)"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--k", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workload", choices=WORKLOADS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return
    config = dict(QUICK if args.quick else FULL)
    for key in ("sizes", "ks", "calls", "budget_s"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    command = "OMP_NUM_THREADS=1 python -m benchmarks.order_latency " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    results = run(config, args.baseline, command.strip())
    out = args.out if args.out is not None or args.quick else OUT
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1) + "\n")
        log(f"wrote {out}")
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
