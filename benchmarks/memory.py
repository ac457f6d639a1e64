"""Bytes per slot of each sampling structure.

Two measures:

* ``nbytes``: the sum of ``.nbytes`` of every numpy array reachable from the object's attributes
  (views counted once, through their base array), divided by ``N``.  For prisample that is the
  raw priorities, the max-priority index and the backend's trees/arrays.
* ``rss``: growth of the resident set of a fresh process while the structure is built and filled
  to ``N`` slots with random priorities (libraries imported and warmed up first), divided by ``N``.
  This is the only measure for the C++ structures of cpprb and TorchRL.  cpprb cannot be built
  without a payload: its one-float ``obs`` column (4 bytes per slot) is subtracted.

Run as ``python -m benchmarks.memory PEER N`` to print one RSS measurement as JSON.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np

from benchmarks.peers import ALPHA, BETA, EPS

PAYLOAD_BYTES = {"cpprb": 4}  # per slot, subtracted from the RSS growth
RSS_PEERS = ("prisample", "prisample-rank", "cpprb", "TorchRL", "numpy")


def array_nbytes(obj: Any, buffers: dict[int, int] | None = None) -> int:
    """Bytes of all numpy arrays reachable from ``obj`` (each underlying buffer once).

    ``buffers`` (id of base array -> bytes) carries buffers already counted across calls.
    """
    seen_objects: set[int] = set()
    counted = dict(buffers) if buffers is not None else {}
    buffers = buffers if buffers is not None else {}

    def visit(o: Any) -> None:
        if id(o) in seen_objects:
            return
        seen_objects.add(id(o))
        if isinstance(o, np.ndarray):
            root = o
            while isinstance(root.base, np.ndarray):
                root = root.base
            buffers[id(root)] = root.nbytes
        elif isinstance(o, dict):
            for value in o.values():
                visit(value)
        elif isinstance(o, (list, tuple, set)):
            for value in o:
                visit(value)
        elif hasattr(o, "__dict__") and not isinstance(o, type) and not isinstance(o, np.random.Generator):
            for value in vars(o).values():
                visit(value)

    visit(obj)
    return sum(size for key, size in buffers.items() if key not in counted)


def prisample_arrays(sampler: Any) -> dict[str, int]:
    """``.nbytes`` of each distinct array the sampler holds, by dotted attribute path (≥ 1 KiB)."""
    out: dict[str, int] = {}
    seen_objects: set[int] = set()
    buffers: set[int] = set()

    def visit(o: Any, path: str) -> None:
        if id(o) in seen_objects:
            return
        seen_objects.add(id(o))
        if isinstance(o, np.ndarray):
            root = o
            while isinstance(root.base, np.ndarray):
                root = root.base
            if id(root) not in buffers:
                buffers.add(id(root))
                if root.nbytes >= 1024:
                    out[path] = root.nbytes
        elif hasattr(o, "__dict__") and not isinstance(o, (type, np.random.Generator)):
            for attr, value in vars(o).items():
                visit(value, f"{path}.{attr}" if path else attr)

    visit(sampler, "")
    return out


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _inputs(name: str, n: int) -> dict[str, Any]:
    """Everything the build reads, made before the measurement starts (touched, so resident)."""
    priorities = np.abs(np.random.default_rng(0).standard_normal(n))
    inputs: dict[str, Any] = {"priorities": priorities, "slots": np.arange(n)}
    if name == "cpprb":
        inputs["obs"] = np.ones((n, 1), dtype=np.float32)
    if name == "TorchRL":
        import torch

        inputs["index"] = torch.arange(n)
        inputs["priority"] = torch.as_tensor(priorities, dtype=torch.float32)
    return inputs


def _build(name: str, n: int, inputs: dict[str, Any]) -> Any:
    slots, priorities = inputs["slots"], inputs["priorities"]
    if name in ("prisample", "prisample-rank"):
        from prisample import PrioritizedSampler

        backend = "rank" if name == "prisample-rank" else "proportional"
        s = PrioritizedSampler(n, alpha=ALPHA, beta=BETA, eps=EPS, backend=backend, size=0, seed=0)
        s.add(slots)
        s.update_priorities(slots, priorities)
        return s
    if name == "cpprb":
        import cpprb

        rb = cpprb.PrioritizedReplayBuffer(n, {"obs": {"shape": 1}}, alpha=ALPHA, eps=EPS)
        rb.add(obs=inputs["obs"], priorities=priorities)
        return rb
    if name == "TorchRL":
        import logging

        logging.getLogger("torchrl").setLevel(logging.WARNING)
        from torchrl.data.replay_buffers.samplers import PrioritizedSampler as TorchRLSampler

        sampler = TorchRLSampler(max_capacity=n, alpha=ALPHA, beta=BETA, eps=EPS)
        sampler.update_priority(inputs["index"], inputs["priority"])
        return sampler
    if name == "numpy":
        from benchmarks.numpy_reference import NumpySumTree

        tree = NumpySumTree(n, alpha=ALPHA, beta=BETA, eps=EPS)
        tree.add(slots)
        tree.update(slots, priorities)
        return tree
    raise ValueError(f"unknown peer {name!r}")


def rss_child(name: str, n: int) -> dict[str, float]:
    """In this process: resident bytes per slot that freeing the filled structure gives back.

    Measured as RSS after building minus RSS after deleting it, so temporaries of the build that
    stay resident do not count; ``grown`` is the plain growth over the build, for reference.
    """
    warm = _build(name, 1024, _inputs(name, 1024))  # imports, numba compilation, lazy init
    del warm
    inputs = _inputs(name, n)
    gc.collect()
    before = _rss()
    structure = _build(name, n, inputs)
    gc.collect()
    built = _rss()
    del structure
    gc.collect()
    freed = _rss()
    payload = PAYLOAD_BYTES.get(name, 0)
    return {
        "rss_bytes_per_slot": (built - freed) / n - payload,
        "grown_bytes_per_slot": (built - before) / n - payload,
        "payload_subtracted": payload,
    }


def rss_bytes_per_slot(name: str, n: int, timeout: float = 300.0) -> dict[str, Any]:
    """Run :func:`rss_child` in a fresh interpreter."""
    # Fixed mmap threshold: freed temporaries go back to the OS instead of staying resident.
    env = dict(
        os.environ, OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="65536"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", name, str(n)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    if proc.returncode != 0:
        return {
            "error": proc.stderr.strip().splitlines()[-1]
            if proc.stderr.strip()
            else f"exit {proc.returncode}"
        }
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def nbytes_per_slot(name: str, n: int) -> dict[str, Any]:
    structure = _build(name, n, _inputs(name, n))
    out: dict[str, Any] = {"nbytes_per_slot": array_nbytes(structure) / n}
    if name.startswith("prisample"):
        out["arrays"] = prisample_arrays(structure)
        if hasattr(structure, "nbytes"):  # the sampler's own account, when it has one
            out["sampler_nbytes_per_slot"] = int(structure.nbytes) / n
    return out


if __name__ == "__main__":
    print(json.dumps(rss_child(sys.argv[1], int(sys.argv[2]))))
