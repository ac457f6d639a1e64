"""Time one stage of ``make demo`` and add it to a JSON: its wall time and the machine's load around it.

``make demo`` runs each of its stages (the install, the tour, Cliffwalk, the data, the imbalanced-MNIST
comparison) through this script::

    python3 recipes/demo/timing.py --out runs/demo_timing.json [--fresh] NAME -- COMMAND [ARG ...]

which runs ``COMMAND``, then adds ``{"name", "command", "wall_s", "returncode", "load_before",
"load_after"}`` to the ``stages`` of ``--out`` (``--fresh``: a new file, with the machine's cores, CPU
model and the date) and updates ``total_s``; it exits with the command's status.  ``load_*`` are the
1, 5 and 15-minute load averages (``os.getloadavg``): a stage timed on a loaded machine says so.  The
script needs the standard library only, so that it times the install of the virtual environment too.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["machine", "main", "record"]


def machine() -> dict[str, Any]:
    """The cores, CPU model, OS and Python of this machine, and the date."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "os": platform.platform(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not available on this platform
        return []


def record(out: Path, name: str, command: list[str], *, fresh: bool = False) -> int:
    """Run ``command``, add its stage to the JSON ``out`` (a new one when ``fresh`` or missing) and
    return its exit status."""
    if not command:
        raise ValueError(f"command should name a program to run, but got command={command!r}")
    load_before, started = _load(), time.perf_counter()
    returncode = subprocess.call(command)
    wall_s = time.perf_counter() - started
    data: dict[str, Any] = (
        json.loads(out.read_text())
        if out.is_file() and not fresh
        else {"command": "make demo", "machine": machine(), "stages": []}
    )
    data["stages"].append(
        {
            "name": name,
            "command": shlex.join(command),
            "wall_s": round(wall_s, 1),
            "returncode": returncode,
            "load_before": load_before,
            "load_after": _load(),
        }
    )
    data["total_s"] = round(sum(stage["wall_s"] for stage in data["stages"]), 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    return returncode


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(
        prog="python3 recipes/demo/timing.py",
        description="Run one stage of make demo and add its wall time and the load average to a JSON.",
    )
    parser.add_argument("--out", default="runs/demo_timing.json", help="the JSON (default: %(default)s)")
    parser.add_argument("--fresh", action="store_true", help="start a new JSON (the first stage)")
    parser.add_argument("name", help="the stage's name")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run should follow --")
    return record(Path(args.out), args.name, command, fresh=args.fresh)


if __name__ == "__main__":
    sys.exit(main())
