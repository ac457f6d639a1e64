"""Instructions per DQN step, counted by valgrind's callgrind: a measure load does not change.

``python -m benchmarks.step_instructions [--n 1048576] [--calls 200] [--peers ...] [--out PATH]``

Each peer of :mod:`benchmarks.peers` (default: ``prisample``, ``prisample-rank`` and the
``compiled floor``) is built and filled to ``N`` slots in a process of its own under
``valgrind --tool=callgrind --instr-atstart=no`` (the imports and the fill run uninstrumented),
warmed up (numba compiles, caches fill), then runs each part of the DQN step twice: 0 calls, then
``--calls`` calls, with the same prepared arguments as ``benchmarks.speed`` (new priorities
``|N(0, 1)|``, random slots for ``update 32``).  Each run is bracketed by callgrind's client
requests (a three-function C helper built with ``cc`` and called through ``ctypes``): zero the
counters before, write them out after; the instructions per call are ``(I(calls) - I(0)) /
calls``, so the loop and the brackets cancel.

Parts: ``DQN step`` (``sample(32)`` with weights, then ``update_priorities`` of those 32),
``sample 32`` and ``update 32`` alone (random filled slots); the compiled floor has only the
step.  Per part the JSON gives the instructions per call, the crossings into numba-compiled code
per call (calls of numba's ``Dispatcher_call``) and the instructions by where they run (self
cost per shared object; ``compiled code`` is numba's, which has no symbols).  Instruction
counts are not times (a cache miss costs no instruction, and at ``N = 2^20`` the trees outgrow
the caches), but they are exact and do not move with the machine's load: they show where the
work is and whether a change removed some.  Needs ``valgrind`` and a C compiler
(``cc``) with valgrind's headers.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PARTS = ("DQN step", "sample 32", "update 32")
DEFAULT_PEERS = ("prisample", "prisample-rank", "compiled floor")
POOL = 64
WARM = 64


def parts_of(peer: str) -> tuple[str, ...]:
    """The parts counted for ``peer``: the compiled floor has only the DQN step."""
    return PARTS[:1] if peer == "compiled floor" else PARTS


_HELPER = """
#include <valgrind/callgrind.h>
void start(void) { CALLGRIND_START_INSTRUMENTATION; }
void zero(void) { CALLGRIND_ZERO_STATS; }
void dump(void) { CALLGRIND_DUMP_STATS; }
"""


def build_helper(directory: Path, cc: str = "cc") -> Path:
    """Compile the client-request helper (``start``, ``zero``, ``dump``) into ``directory``."""
    source, library = directory / "callgrind_requests.c", directory / "callgrind_requests.so"
    source.write_text(_HELPER)
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def workload(peer_name: str, n: int, calls: int, helper: str | None, seed: int = 0) -> None:
    """Build and fill ``peer_name``, start instrumenting, then per part warm up and run it with
    0 and ``calls`` calls, each run between a zero and a dump of callgrind's counters (no-ops
    without ``helper``, or outside valgrind)."""
    import ctypes
    import gc

    from benchmarks.peers import make_peer

    peer = make_peer(peer_name, n, seed=seed)
    rng = np.random.default_rng(seed)
    peer.fill(np.abs(rng.standard_normal(n)))
    new = [peer.priorities(np.abs(rng.standard_normal(32))) for _ in range(POOL)]
    slots = [peer.indices(rng.integers(0, n, 32)) for _ in range(POOL)]
    step = peer.dqn_call
    cases: dict[str, Callable[[int], object]] = {
        "DQN step": lambda j: step(new[j % POOL]),
        "sample 32": lambda j: peer.sample(32),
        "update 32": lambda j: peer.update(slots[j % POOL], new[j % POOL]),
    }
    requests = ctypes.CDLL(helper) if helper else None
    start, zero, dump = (
        (requests.start, requests.zero, requests.dump) if requests else (lambda: 0, lambda: 0, lambda: 0)
    )
    gc.collect()
    gc.disable()  # as in the timings: a collection's cost is not the step's
    start()
    for part in parts_of(peer_name):
        call = cases[part]
        for j in range(WARM):
            call(j)
        for count in (0, calls):
            zero()
            for j in range(count):
                call(j)
            dump()


_COST = re.compile(r"^[0-9+\-*]")


def parse_callgrind(path: Path) -> dict[str, Any]:
    """Total instructions, self instructions per object, and calls per function of one dump."""
    names: dict[str, dict[str, str]] = {"ob": {}, "fn": {}}

    def name(kind: str, value: str) -> str:
        match = re.match(r"\((\d+)\)(?: (.*))?", value)
        if not match:
            return value
        ident, text = match.groups()
        if text is not None:
            names[kind][ident] = text
        return names[kind].get(ident, value)

    total = 0
    by_object: dict[str, int] = defaultdict(int)
    calls: dict[str, int] = defaultdict(int)
    ob = fn = cfn = ""
    skip_next = False
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            total = max(total, int(line.split()[1]))
        elif line.startswith("ob="):
            ob = name("ob", line[3:])
        elif line.startswith("fn="):
            fn = name("fn", line[3:])
        elif line.startswith("cob="):
            name("ob", line[4:])
        elif line.startswith(("cfn=", "cfi=", "cfl=")):
            if line.startswith("cfn="):
                cfn = name("fn", line[4:])
        elif line.startswith("calls="):
            calls[cfn] += int(line[6:].split()[0])
            skip_next = True
        elif _COST.match(line):
            if skip_next:  # the inclusive cost of the call just named
                skip_next = False
                continue
            fields = line.split()
            if len(fields) > 1:
                by_object[Path(ob).name or "?"] += int(fields[1])
    del fn
    return {"total": total, "by_object": dict(by_object), "calls": dict(calls)}


def _object_group(obj: str) -> str:
    if obj in ("???", "?"):
        return "compiled code"
    for prefix, group in (
        ("libpython", "Python interpreter"),
        ("python3", "Python interpreter"),
        ("_multiarray", "numpy"),
        ("_generator", "numpy random"),
        ("_bounded", "numpy random"),
        ("_common", "numpy random"),
        ("_pcg64", "numpy random"),
        ("bit_generator", "numpy random"),
        ("_dispatcher", "numba dispatch"),
        ("_helperlib", "numba helpers"),
        ("_dynfunc", "numba helpers"),
        ("libc", "libc"),
        ("libm", "libm"),
        ("ld-linux", "loader"),
        ("libtorch", "torch"),
        ("libc10", "torch"),
    ):
        if obj.startswith(prefix):
            return group
    return obj


def count(
    peer: str, n: int, calls: int, valgrind: str = "valgrind", keep: Path | None = None
) -> dict[str, Any]:
    """Run :func:`workload` for ``peer`` under callgrind; per part, what one call costs."""
    with tempfile.TemporaryDirectory(prefix="step_instructions_") as tmp:
        helper = build_helper(Path(tmp))
        out = Path(tmp) / "cg.out"
        command = [
            valgrind,
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "benchmarks.step_instructions",
            "--inner",
            peer,
            "--helper",
            str(helper),
            "--n",
            str(n),
            "--calls",
            str(calls),
        ]
        env = dict(os.environ, PYTHONHASHSEED="0")
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"valgrind failed ({done.returncode}): {done.stderr[-2000:]}")
        dumps = sorted(Path(tmp).glob("cg.out.*"), key=lambda p: int(p.suffix[1:]))
        parsed = [parse_callgrind(p) for p in dumps]
        if keep is not None:  # for callgrind_annotate
            keep.mkdir(parents=True, exist_ok=True)
            for p in dumps:
                shutil.copy(p, keep / f"{peer.replace(' ', '_')}.{p.suffix[1:]}")
    parts = parts_of(peer)
    # Pairs of dumps (0 calls, `calls` calls) per part, each run zeroed before.
    windows = parsed[-2 * len(parts) :]
    if len(windows) != 2 * len(parts):
        raise RuntimeError(f"expected {2 * len(parts)} dumps, got {len(parsed)}")
    result: dict[str, Any] = {}
    for index, part in enumerate(parts):
        empty, full = windows[2 * index], windows[2 * index + 1]
        groups: dict[str, float] = defaultdict(float)
        for obj in set(full["by_object"]) | set(empty["by_object"]):
            diff = full["by_object"].get(obj, 0) - empty["by_object"].get(obj, 0)
            groups[_object_group(obj)] += diff / calls
        crossings = (full["calls"].get("Dispatcher_call(Dispatcher*, _object*, _object*)", 0)
                     - empty["calls"].get("Dispatcher_call(Dispatcher*, _object*, _object*)", 0))  # fmt: skip
        result[part] = {
            "instructions_per_call": (full["total"] - empty["total"]) / calls,
            "compiled_calls_per_call": crossings / calls,
            "instructions_by_group": {
                k: round(v, 1) for k, v in sorted(groups.items(), key=lambda kv: -kv[1]) if abs(v) >= 0.5
            },
        }
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1 << 20, help="slots, all filled (default 2^20)")
    parser.add_argument("--calls", type=int, default=200, help="calls counted per part")
    parser.add_argument("--peers", nargs="+", default=list(DEFAULT_PEERS))
    parser.add_argument("--out", type=Path, default=None, help="JSON to write (default: print only)")
    parser.add_argument("--keep", type=Path, default=None, help="copy callgrind's dumps to this folder")
    parser.add_argument("--inner", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--helper", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner is not None:
        workload(args.inner, args.n, args.calls, args.helper)
        return
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not on the PATH")
    results: dict[str, Any] = {
        "command": "python -m benchmarks.step_instructions " + " ".join(argv or sys.argv[1:]),
        "n": args.n,
        "calls": args.calls,
        "peers": {},
    }
    for peer in args.peers:
        results["peers"][peer] = count(peer, args.n, args.calls, valgrind, args.keep)
        for part, entry in results["peers"][peer].items():
            print(
                f"{peer:>16} {part:>10}: {entry['instructions_per_call']:10.0f} instructions, "
                f"{entry['compiled_calls_per_call']:.2f} compiled calls; {entry['instructions_by_group']}",
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
