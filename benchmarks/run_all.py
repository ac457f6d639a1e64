"""Entry point: ``python -m benchmarks.run_all [--quick] [--out PATH]`` (``make bench``).

The full run (N ∈ {2^14, 2^17, 2^20}, k ∈ {32, 256, 4096}) writes the raw numbers to
``benchmarks/results.json`` and renders ``docs/benchmarks.md`` (:func:`benchmarks.report.render`:
the hand-written sections of ``benchmarks/sections/`` with their tables filled in from that JSON
and from the JSON files of the other benchmarks); ``--quick`` (small N, few repetitions) prints the
report only.  ``--from-json PATH`` re-renders a report from saved results without timing (to
stdout unless ``--out``), so re-rendering the docs after any benchmark run is::

    python -m benchmarks.run_all --from-json benchmarks/results.json --out docs/benchmarks.md
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import dataclasses
import datetime
import json
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.speed import SpeedResult

ROOT = Path(__file__).resolve().parent.parent

FULL = {
    "sizes": [1 << 14, 1 << 17, 1 << 20],
    "ks": [32, 256, 4096],
    "reps": 9,
    "passes": 5,
    "block_s": 0.02,
    "tv_sizes": [1 << 14, 1 << 17, 1 << 20],
    "tv_multiples": [0, 1 / 256, 1 / 64, 1 / 16, 1 / 4, 1 / 2, 1, 2, 4],
    "profile_steps": 20000,
    "memory_n": 1 << 20,
}
QUICK = {
    "sizes": [1 << 10, 1 << 12],
    "ks": [32, 256],
    "reps": 3,
    "passes": 2,
    "block_s": 0.003,
    "tv_sizes": [1 << 10, 1 << 12],
    "tv_multiples": [0, 1 / 64, 1 / 4, 1, 2],
    "profile_steps": 2000,
    "memory_n": 1 << 14,
}


def log(message: str) -> None:
    print(message, flush=True)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            mem_gib = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    caches = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            if kind != "Instruction":
                caches.append(
                    f"L{(index / 'level').read_text().strip()} {(index / 'size').read_text().strip()}"
                )
        except OSError:
            pass
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    import torch

    return {
        "cpu": model,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": affinity,
        "memory_gib": mem_gib,
        "caches": ", ".join(caches),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": {
            p: _version(p) for p in ("prisample", "numpy", "numba", "torch", "cpprb", "torchrl", "tensordict")
        },
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "prisample_commit": _git("rev-parse", "--short", "HEAD"),
        "prisample_dirty": bool(_git("status", "--porcelain", "--", "prisample")),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def torchrl_extension() -> dict[str, Any]:
    try:
        import torchrl._torchrl as ext  # noqa: F401

        return {"ok": True, "error": None}
    except Exception as error:  # record, do not fail
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}


def speed_block(r: SpeedResult) -> dict[str, Any]:
    """One N's :class:`~benchmarks.speed.SpeedResult` as ``results.json`` holds it: the
    ``(op, k) -> peer -> µs`` maps as lists of ``{"op", "k", "us"}``."""
    d = dataclasses.asdict(r)
    d["times"] = [{"op": op, "k": k, "us": t} for (op, k), t in r.times.items()]
    d["passes"] = [[{"op": op, "k": k, "us": t} for (op, k), t in times.items()] for times in r.passes]
    return d


def dqn_step_summary(speed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per N, the DQN step's µs per peer and the ratios its targets name: rank-based over
    proportional, each peer over prisample (above 1: prisample is faster), and prisample over the
    compiled floor (:mod:`benchmarks.compiled_floor`; at least 1)."""
    rows = []
    for d in speed:
        us: dict[str, float] = next((t["us"] for t in d["times"] if t["op"] == "DQN step"), {})
        base = us.get("prisample")
        row: dict[str, Any] = {"n": d["n"], "us": us}
        if base:
            if "prisample-rank" in us:
                row["rank_over_proportional"] = us["prisample-rank"] / base
            for peer in ("cpprb", "TorchRL"):
                if peer in us:
                    row[f"{peer}_over_prisample"] = us[peer] / base
            if us.get("compiled floor"):
                row["prisample_over_floor"] = base / us["compiled floor"]
        rows.append(row)
    return rows


def run(config: dict[str, Any], quick: bool) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from benchmarks.breakdown import profile_dqn
    from benchmarks.memory import RSS_PEERS, nbytes_per_slot, rss_bytes_per_slot
    from benchmarks.peers import PEERS
    from benchmarks.rank_accuracy import measure_accuracy
    from benchmarks.speed import combine, run_speed

    started = time.perf_counter()
    results: dict[str, Any] = {
        "quick": quick,
        "config": config,
        "command": "OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.run_all" + (" --quick" if quick else ""),
        "machine": machine(),
        "loadavg_start": os.getloadavg(),
        "torchrl_extension": torchrl_extension(),
    }
    log(f"machine: {results['machine']}")
    log(f"load average at start: {results['loadavg_start']}")

    results["speed"] = []
    per_size: dict[int, list[Any]] = {n: [] for n in config["sizes"]}
    for p in range(config["passes"]):  # passes spread over time: a slow spell hits one pass, not all
        for n in config["sizes"]:
            log(f"speed, pass {p + 1}/{config['passes']}, N = {n}")
            r = run_speed(
                n, config["ks"], list(PEERS), reps=config["reps"], block_s=config["block_s"], seed=p, log=log
            )
            per_size[n].append(r)
            if r.errors:
                log(f"  errors: {r.errors}")
    for n in config["sizes"]:
        results["speed"].append(speed_block(combine(per_size[n])))

    results["dqn_step"] = dqn_step_summary(results["speed"])
    for row in results["dqn_step"]:
        log(f"DQN step at N = {row['n']}: {row}")

    log("profile of prisample's DQN step")
    big = config["sizes"][-1]
    results["profile"] = [
        dataclasses.asdict(
            profile_dqn(
                big,
                backend=b,
                steps=config["profile_steps"],
                reps=config["reps"],
                block_s=config["block_s"],
                log=log,
                components_n=config["sizes"][0],
            )
        )
        for b in ("proportional", "rank")
    ]

    log("rank accuracy")
    results["rank_tv"] = [
        dataclasses.asdict(measure_accuracy(n, config["tv_multiples"], log=log)) for n in config["tv_sizes"]
    ]

    log("bytes per slot")
    n = config["memory_n"]
    memory: dict[str, Any] = {"n": n}
    for name in RSS_PEERS:
        entry = rss_bytes_per_slot(name, n)
        if name in ("prisample", "prisample-rank", "numpy"):
            entry.update(nbytes_per_slot(name, n))
        memory[name] = entry
        log(f"  {name}: {entry}")
    results["memory"] = memory

    from benchmarks.timing import QUIET

    results["quiet_policy"] = {
        "max_others": QUIET.max_others,
        "attempts": QUIET.attempts,
        "wait_s": QUIET.wait_s,
        "retries": QUIET.retries,
        "waited_s": QUIET.waited_s,
    }
    results["loadavg_end"] = os.getloadavg()
    results["elapsed_s"] = time.perf_counter() - started
    log(f"done in {results['elapsed_s']:.0f} s, load average at end: {results['loadavg_end']}")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes and few repetitions (smoke run)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="markdown report (default: docs/benchmarks.md, none with --quick)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="raw results (default: benchmarks/results.json, none with --quick)",
    )
    parser.add_argument(
        "--from-json", type=Path, default=None, help="render the report from saved results, no timing"
    )
    parser.add_argument(
        "--note", default="", help="free text added under the machine description (e.g. load)"
    )
    args = parser.parse_args(argv)

    from benchmarks.report import render

    if args.from_json:
        results = json.loads(args.from_json.read_text())
    else:
        results = run(QUICK if args.quick else FULL, args.quick)
        results["note"] = args.note
        out_json = args.json or (None if args.quick else ROOT / "benchmarks" / "results.json")
        if out_json:
            out_json.write_text(json.dumps(results, indent=1, default=float) + "\n")
            log(f"wrote {out_json}")
    if args.note:
        results["note"] = args.note
    out = args.out or (None if args.quick or args.from_json else ROOT / "docs" / "benchmarks.md")
    text = render(results)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        log(f"wrote {out}")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
