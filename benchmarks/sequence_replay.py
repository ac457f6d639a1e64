"""Prioritized sequence replay on Atari shapes, side by side: prisample, TorchRL and Flashbax.

One *batch* is what an R2D2 learner does per update: sample 64 sequences of ``burn_in + length =
40 + 80`` steps of one stream (observations: stacks of four 84x84 ``uint8`` frames, ``W + 1 =
121`` per sequence: each step's and the last step's next one), with their importance weights and
masks, and write the 64 sequences' priorities back from the batch's |δ| (a pre-drawn ``(64, 121)``
array per batch).  α = 0.9, β = 0.6, η = 0.9 (R2D2's).  The memory holds ``N`` steps of 4 streams
(episodes of ~500 steps), filled before timing.  Libraries:

* ``prisample``: :class:`prisample.replay.SequenceReplay` (proportional, ``period=40``,
  ``frame_stack=4``: frames stored once, items overlapping share them); ``sample(64)`` and
  ``update_from_td`` (the R2D2 mix ``η·max + (1 − η)·mean`` of |δ| over the learn steps).
* ``TorchRL``: ``TensorDictPrioritizedReplayBuffer`` with the ``Sequence`` sample unit
  (``sample_units.py``: every stored step is an anchor; ``burn_in=40, length=80, bootstrap=1`` for
  the last next observation; ``episode_boundary="pad"``) over ``LazyMemmapStorage(ndim=2)``, time
  by stream (so windows stay in one stream), the storage of TorchRL's Atari examples; the stacks
  are stored per step, as its ``CatFrames`` environment transform gives them.
  ``update_tensordict_priority`` writes the max of the valid records' |δ| to each anchor.
* ``Flashbax``: ``make_prioritised_trajectory_buffer`` (``sample_sequence_length=121, period=40``)
  on JAX's CPU backend, jitted, the state donated; stacks stored per step.  Run in a process of its
  own (``benchmarks/sequence_flashbax.py``, ``--flashbax-path`` on its ``PYTHONPATH`` only).
* the copy floor: the frames a stack-deduplicated store must gather for the batch, ``64 x (W +
  1 + 3)`` rows of 84x84 (a sequence's 121 stacks share all but 124 frames), with one ``np.take``
  from a pool of ``N`` frames (prisample's own frame pool when it exists) into a preallocated array;
  a stream's frames sit ``STREAMS`` rows apart, as 4 streams adding in turn leave them.

A peer that stores a stack per step needs ~28 kB per step: both peers together cannot hold 10^6
steps next to prisample in this machine's RAM, so each is measured at the largest ``N`` that fits
(``n_measured``, ``capacity_note`` in the JSON); their batch's cost is the gather of 64 scattered
windows, which does not shrink with ``N`` once ``N`` is far past the caches.

Timing as ``benchmarks/replay_step.py`` does it: every library gets the same seeded stream and the
same |δ|; per pass the in-process libraries and the floor are interleaved
(:func:`benchmarks.timing.measure_quiet`, the order rotating per block), then Flashbax's process
takes its pass; results are medians over passes, ratios are taken per pass; one torch thread, one
XLA thread; load average and machine recorded.  Bytes per stored step: ``nbytes / capacity``, the
anonymous resident memory building and filling added, and the memmap's bytes on disk.

Full run (alone on the machine: ~20 GB RAM at N = 10^6, ~10 GB of memmap on the scratch disk)::

    flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 python -m benchmarks.sequence_replay \\
        --flashbax-path /path/to/flashbax-target --out docs/results/sequence_replay.json

Smoke run: ``python -m benchmarks.sequence_replay --quick`` (N = 2^12, prints, writes nothing).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import contextlib
import gc
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.replay_step import Stream, make_stream
from benchmarks.timing import QuietPolicy, measure_quiet

__all__ = ["TARGETS", "main"]

ROOT = Path(__file__).resolve().parent.parent
STREAMS, STACK, FRAME, BATCH = 4, 4, (84, 84), 64
BURN_IN, LENGTH, PERIOD = 40, 80, 40
W = BURN_IN + LENGTH
ALPHA, BETA, ETA = 0.9, 0.6, 0.9
TD_BATCHES = 16  # pre-drawn |δ| arrays the batches cycle through
STACK_STEP_BYTES = STACK * FRAME[0] * FRAME[1] + 8 + 4 + 4 + 1  # a peer's step: stack, action, reward, ...
TARGETS: dict[str, float] = {
    "peer_over_prisample": 3.0,  # the faster peer's batch over prisample's, at least
    "prisample_over_copy_floor": 2.0,  # prisample's batch over the copy floor, at most
    "bytes_per_step": 7500.0,  # prisample's bytes per stored step, at most
}
FULL: dict[str, Any] = {
    "sizes": [1 << 18, 10**6],
    "passes": 7,
    "reps": 3,
    "block_s": 1.0,
    "stream_period": 1000,
    "quiet_attempts": 3,
    "ram_margin_gb": 3.0,
}
QUICK: dict[str, Any] = {
    "sizes": [1 << 12],
    "passes": 2,
    "reps": 1,
    "block_s": 0.01,
    "stream_period": 128,
    "quiet_attempts": 1,
    "ram_margin_gb": 1.0,
}


def log(message: str) -> None:
    print(message, flush=True)


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _disk_bytes(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(folder, name)).st_blocks * 512
    return total


def td_errors(seed: int = 1) -> npt.NDArray[np.float32]:
    """The |δ| of each batch: ``(TD_BATCHES, BATCH, W + 1)``, the same for every library."""
    return np.random.default_rng(seed).random((TD_BATCHES, BATCH, W + 1), dtype=np.float32)


def peer_capacity(n: int, available: int, peers: int, margin: int) -> tuple[int, str]:
    """Steps each of ``peers`` stack-per-step peers can hold in ``available`` bytes less ``margin``
    (and their batches), rounded down to the streams' period grid; ``(n, "")`` when ``n`` fits."""
    if peers <= 0:
        return n, ""
    batches = 3 * BATCH * (W + 1) * STACK_STEP_BYTES  # a sampled batch and its copies, per peer
    fits = max(0, (available - margin) // peers - batches) // STACK_STEP_BYTES
    if fits >= n:
        return n, ""
    fits = fits // (STREAMS * PERIOD) * (STREAMS * PERIOD)
    return int(fits), (
        f"a stack per step is {STACK_STEP_BYTES} B: {peers} peers at N = {n} need "
        f"{peers * n * STACK_STEP_BYTES / 1e9:.1f} GB; {available / 1e9:.1f} GB were available after "
        f"prisample's fill, less a {margin / 2**30:g} GiB margin, which holds {fits} steps each"
    )


def _transition_of_slot(slot: npt.NDArray[np.int64], written: int, capacity: int) -> npt.NDArray[np.int64]:
    """Number of the row a ring of ``capacity`` rows holds at ``slot`` after ``written`` rows."""
    return slot + capacity * ((written - 1 - slot) // capacity)


# -- the libraries -----------------------------------------------------------------------------
class Prisample:
    name = "prisample"

    def __init__(self, stream: Stream, n: int, td: npt.NDArray[np.float32]) -> None:
        from prisample.replay import SequenceReplay

        self.stream, self.td, self.k, self.cursor = stream, td[:, :, :W], 0, 0
        self.streams = np.arange(STREAMS)
        self.replay = SequenceReplay(
            n,
            FRAME,
            burn_in=BURN_IN,
            length=LENGTH,
            period=PERIOD,
            frame_stack=STACK,
            obs_dtype=np.uint8,
            num_streams=STREAMS,
            alpha=ALPHA,
            beta=BETA,
            eta=ETA,
            seed=0,
        )

    def fill(self, n: int) -> None:
        st = self.stream
        while self.cursor * STREAMS < n:
            s = self.cursor % st.period
            self.replay.add_many(
                st.obs[s],
                st.action[s],
                st.reward[s],
                st.discount[s],
                st.next_obs[s],
                episode_end=st.end[s],
                streams=self.streams,
            )
            self.cursor += 1

    def step(self) -> None:
        batch, draw = self.replay.sample(BATCH)
        self.replay.update_from_td(
            draw.indices, self.td[self.k], batch.learn, eta=ETA, generations=batch.generation
        )
        self.k = (self.k + 1) % len(self.td)

    def exact(self) -> bool:
        """Every valid step's stack, and the next stack after the last one, are the stream's."""
        batch, _ = self.replay.sample(BATCH)
        obs, t0 = np.asarray(batch.obs), np.asarray(batch.generation)
        st = self.stream
        for b in range(BATCH):
            env, v, steps = t0[b] % STREAMS, t0[b] // STREAMS, int(batch.length[b])
            rows = (v + np.arange(steps)) % st.period
            if not np.array_equal(obs[b, :steps], st.obs[rows, env]):
                return False
            if not np.array_equal(obs[b, steps], st.next_obs[rows[-1], env]):
                return False
        return True

    def frames(self) -> npt.NDArray[np.uint8] | None:
        """prisample's frame pool, the floor's source, where the memory exposes it."""
        pool = getattr(getattr(self.replay, "memory", None), "frame_pool", None)
        return None if pool is None else np.asarray(pool.storage.to_numpy())

    def info(self) -> dict[str, Any]:
        return {"nbytes_per_step": self.replay.nbytes / self.replay.capacity}

    def close(self) -> None:
        del self.replay
        gc.collect()


class TorchRL:
    name = "TorchRL"

    def __init__(self, stream: Stream, n: int, td: npt.NDArray[np.float32], scratch: str | None) -> None:
        import logging
        import warnings

        import torch
        from tensordict import TensorDict
        from torchrl.data import LazyMemmapStorage, TensorDictPrioritizedReplayBuffer
        from torchrl.data.replay_buffers import Sequence

        logging.getLogger("torchrl").setLevel(logging.WARNING)
        # numpy 2's note on torch tensors' __array__, raised inside TorchRL's sampler: noise here
        warnings.filterwarnings("ignore", message="__array__ implementation", category=DeprecationWarning)
        self.stream, self.capacity, self.cursor, self.k = stream, n, 0, 0
        self.rows = n // STREAMS  # time capacity of the [time, stream] storage
        self.scratch = tempfile.mkdtemp(prefix="sequence_replay_torchrl_", dir=scratch)
        self.buffer = TensorDictPrioritizedReplayBuffer(
            alpha=ALPHA,
            beta=BETA,
            priority_key="td_error",
            batch_size=BATCH,
            storage=LazyMemmapStorage(self.rows * STREAMS, ndim=2, scratch_dir=self.scratch),
            sample_unit=Sequence(length=LENGTH, burn_in=BURN_IN, bootstrap=1, episode_boundary="pad"),
        )
        p = stream.period
        # what a collector hands over: [streams, time] (TorchRL's batch layout), views of the stream
        self.steps = TensorDict(
            {
                "pixels": torch.from_numpy(stream.obs),
                "action": torch.from_numpy(stream.action),
                "next": TensorDict(
                    {
                        "reward": torch.from_numpy(stream.reward),
                        "done": torch.from_numpy(stream.end),
                        "terminated": torch.from_numpy(stream.end),
                    },
                    batch_size=[p, STREAMS],
                ),
            },
            batch_size=[p, STREAMS],
        )
        self.td = [torch.from_numpy(np.ascontiguousarray(t.reshape(-1))) for t in td]

    def fill(self, n: int) -> None:
        while self.cursor * STREAMS < n:
            s = self.cursor % self.stream.period
            k = min(256, self.stream.period - s, -(-(n - self.cursor * STREAMS) // STREAMS))
            self.buffer.extend(self.steps[s : s + k].transpose(0, 1))
            self.cursor += k

    def step(self) -> None:
        sample = self.buffer.sample()
        sample.set("td_error", self.td[self.k])
        self.buffer.update_tensordict_priority(sample)
        self.k = (self.k + 1) % len(self.td)

    def exact(self) -> bool:
        """Every valid record's stack is the stream's stack at the record's (time, stream)."""
        sample = self.buffer.sample()
        index = sample["index"].numpy()
        valid = sample["validity_mask"].numpy().astype(bool)
        v = _transition_of_slot(index[:, 0], self.cursor, self.rows)
        want = self.stream.obs[v % self.stream.period, index[:, 1]]
        return bool(np.array_equal(sample["pixels"].numpy()[valid], want[valid]))

    def info(self) -> dict[str, Any]:
        return {"disk_bytes_per_step": _disk_bytes(self.scratch) / (self.rows * STREAMS)}

    def close(self) -> None:
        del self.buffer, self.steps
        gc.collect()
        shutil.rmtree(self.scratch, ignore_errors=True)


class Flashbax:
    """Flashbax's buffer in its own process (:mod:`benchmarks.sequence_flashbax`), driven by line."""

    name = "Flashbax"

    def __init__(self, n: int, path: str, stream_period: int) -> None:
        cfg = {
            "burn_in": BURN_IN,
            "length": LENGTH,
            "period": PERIOD,
            "batch": BATCH,
            "alpha": ALPHA,
            "eta": ETA,
            "seed": 0,
            "stream_period": stream_period,
            "td_batches": TD_BATCHES,
        }
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)
        cmd = [sys.executable, "-m", "benchmarks.sequence_flashbax", "--n", str(n), "--streams", str(STREAMS)]
        self.proc = subprocess.Popen(
            [*cmd, "--config", json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.ready = self._reply()
        if "error" in self.ready:
            self.close()
            raise RuntimeError(self.ready["error"])

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the Flashbax process ended (exit {self.proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ask(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def exact(self) -> bool:
        return bool(self.ask({"cmd": "exact"})["exact"])

    def info(self) -> dict[str, Any]:
        keys = ("nbytes_per_step", "rss_anon_bytes_per_step", "versions", "jax_devices", "xla_flags")
        return {key: self.ready[key] for key in keys}

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class CopyFloor:
    """One batch's frames for a stack-deduplicated store: ``BATCH x (W + STACK)`` rows (a window of
    ``W + 1`` stacks spans ``W + STACK`` frames), a stream's frames ``STREAMS`` rows apart, from a
    pool of ``pool_rows`` frames, with one ``np.take`` into a preallocated array; each call copies
    the next of ``batches`` pre-drawn batches of random window starts."""

    def __init__(self, frames: npt.NDArray[np.uint8], batches: int = 64, seed: int = 3) -> None:
        self.frames = frames
        rng = np.random.default_rng(seed)
        span = STREAMS * (W + STACK - 1)
        starts = rng.integers(0, frames.shape[0] - span, size=(batches, BATCH))
        self.rows = starts[:, :, None] + STREAMS * np.arange(W + STACK)  # (batches, BATCH, W + STACK)
        self.out = np.empty((BATCH, W + STACK, *frames.shape[1:]), dtype=frames.dtype)
        self.i = 0

    def __call__(self) -> None:
        # mode="clip": numpy buffers `out` under the default mode="raise"; the rows are in range
        np.take(self.frames, self.rows[self.i], axis=0, out=self.out, mode="clip")
        self.i = (self.i + 1) % len(self.rows)

    def info(self) -> dict[str, Any]:
        return {
            "frames_per_batch": int(self.rows[0].size),
            "batch_shape": list(self.out.shape),
            "bytes_per_batch": int(self.out.nbytes),
            "pool_frames": int(self.frames.shape[0]),
            "how": "np.take(pool, rows (64, 124), axis=0, out=preallocated, mode='clip')",
        }


# -- run ---------------------------------------------------------------------------------------
def available(flashbax_path: str | None) -> tuple[list[str], dict[str, str]]:
    """The libraries this run can measure, and why the others cannot."""
    found, missing = [], {}
    try:
        from prisample.replay import SequenceReplay  # noqa: F401

        found.append("prisample")
    except ImportError as error:
        missing["prisample"] = f"{type(error).__name__}: {error}"
    try:
        from torchrl.data.replay_buffers import Sequence  # noqa: F401

        found.append("TorchRL")
    except ImportError as error:
        missing["TorchRL"] = f"{type(error).__name__}: {error}"
    if flashbax_path is None:
        missing["Flashbax"] = "no --flashbax-path given (Flashbax and JAX are installed apart from the venv)"
    elif not (Path(flashbax_path) / "flashbax").is_dir():
        missing["Flashbax"] = f"no flashbax package under --flashbax-path {flashbax_path}"
    else:
        found.append("Flashbax")
    return found, missing


def _summary(passes: list[dict[str, float]], name: str) -> dict[str, Any]:
    mine = [p[name] for p in passes]
    out: dict[str, Any] = {"us_per_batch": statistics.median(mine), "us_per_pass": mine}
    out["ms_per_batch"], out["ms_per_pass"] = (
        out["us_per_batch"] / 1e3,
        [t / 1e3 for t in mine],
    )  # the docs' unit
    for base, key in (("prisample", "ratio_to_prisample"), ("copy_floor", "ratio_to_copy_floor")):
        if base != name and all(base in p for p in passes):
            ratios = [p[name] / p[base] for p in passes]
            out[key] = {"median": statistics.median(ratios), "per_pass": ratios}
    return out


def run_size(
    n: int, config: dict[str, Any], libraries: list[str], policy: QuietPolicy, td: npt.NDArray[np.float32]
) -> dict[str, Any]:
    result: dict[str, Any] = {"n": n, "loadavg_start": os.getloadavg(), "libraries": {}}
    libs = result["libraries"]
    stream = make_stream(config["stream_period"], seed=0, envs=STREAMS)
    inproc: dict[str, Any] = {}
    flashbax: Flashbax | None = None
    floor: CopyFloor | None = None
    try:
        if "prisample" in libraries:
            libs["prisample"] = {"n_measured": n}
            try:
                gc.collect()
                rss, started = _status_bytes("RssAnon"), time.perf_counter()
                mine = Prisample(stream, n, td)
                mine.fill(n)
                gc.collect()
                libs["prisample"].update(
                    fill_s=time.perf_counter() - started,
                    rss_anon_bytes_per_step=(_status_bytes("RssAnon") - rss) / n,
                )
                inproc["prisample"] = mine
            except Exception as error:  # recorded, the run goes on
                libs["prisample"]["error"] = f"{type(error).__name__}: {error}"
        peers = [p for p in ("TorchRL", "Flashbax") if p in libraries]
        margin = int(config["ram_margin_gb"] * 2**30)
        n_peer, note = peer_capacity(n, _mem_available(), len(peers), margin)
        for name in peers:
            libs[name] = {"n_measured": n_peer, **({"capacity_note": note} if note else {})}
            try:
                gc.collect()
                rss, started = _status_bytes("RssAnon"), time.perf_counter()
                if name == "TorchRL":
                    theirs = TorchRL(stream, n_peer, td, config.get("scratch"))
                    theirs.fill(n_peer)
                    gc.collect()
                    libs[name]["rss_anon_bytes_per_step"] = (_status_bytes("RssAnon") - rss) / n_peer
                    inproc[name] = theirs
                else:
                    flashbax = Flashbax(n_peer, config["flashbax_path"], config["stream_period"])
                    libs[name]["n_measured"] = flashbax.ready["n_measured"]
                libs[name]["fill_s"] = time.perf_counter() - started
            except Exception as error:  # recorded, the run goes on
                libs[name]["error"] = f"{type(error).__name__}: {error}"
            log(f"  {name}: {libs[name]}")
        pool = inproc["prisample"].frames() if "prisample" in inproc else None
        if pool is None:
            pool = np.random.default_rng(2).integers(
                0, 256, (max(n, 2 * STREAMS * W), *FRAME), dtype=np.uint8
            )
        floor = CopyFloor(pool)
        cases: dict[str, Callable[[], object]] = {name: c.step for name, c in inproc.items()}
        cases["copy_floor"] = floor
        passes: list[dict[str, float]] = []
        load: list[dict[str, Any]] = []
        for _ in range(config["passes"]):
            times, others, steal = measure_quiet(
                cases, reps=config["reps"], block_s=config["block_s"], policy=policy
            )
            row: dict[str, Any] = {"others_cpus": others, "steal_cpus": steal}
            if flashbax is not None:
                got = flashbax.ask(
                    {
                        "cmd": "pass",
                        "reps": config["reps"],
                        "block_s": config["block_s"],
                        "attempts": config["quiet_attempts"],
                    }
                )
                times["Flashbax"] = got["us"]
                row["flashbax_others_cpus"] = got["others_cpus"]
            passes.append(times)
            load.append(row)
        result["load"] = load
        contenders: dict[str, Any] = dict(inproc, **({"Flashbax": flashbax} if flashbax else {}))
        for lib, c in contenders.items():
            libs[lib].update(_summary(passes, lib))
            libs[lib]["windows_exact"] = c.exact()
            libs[lib].update(c.info())
        result["copy_floor"] = {**_summary(passes, "copy_floor"), **floor.info()}
        result["copy_floor"]["us"] = result["copy_floor"].pop("us_per_batch")
        log(f"  copy floor: {result['copy_floor']['us']:,.0f} µs")
        for lib in contenders:
            log(f"  {lib}: {libs[lib]['us_per_batch']:,.0f} µs per batch")
    finally:
        for c in (*inproc.values(), *([flashbax] if flashbax else [])):
            c.close()
        del inproc, floor
        gc.collect()
    result["targets"] = size_targets(result)
    result["loadavg_end"] = os.getloadavg()
    return result


def size_targets(block: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """:data:`TARGETS` at one size, from the per-pass median ratios: measured, met."""
    libs = block["libraries"]
    mine = libs.get("prisample", {})
    peers = [p for p in ("TorchRL", "Flashbax") if "ratio_to_prisample" in libs.get(p, {})]
    measured: dict[str, tuple[float | None, str]] = {
        "peer_over_prisample": (
            min((libs[p]["ratio_to_prisample"]["median"] for p in peers), default=None),
            min(peers, key=lambda p: libs[p]["ratio_to_prisample"]["median"]) if peers else "",
        ),
        "prisample_over_copy_floor": (mine.get("ratio_to_copy_floor", {}).get("median"), "copy floor"),
        "bytes_per_step": (mine.get("nbytes_per_step"), "nbytes / capacity"),
    }
    out: dict[str, dict[str, Any]] = {}
    for key, (value, against) in measured.items():
        if value is not None:
            bound = TARGETS[key]
            met = value >= bound if key == "peer_over_prisample" else value <= bound
            out[key] = {"bound": bound, "measured": value, "against": against, "met": bool(met)}
    return out


def run(config: dict[str, Any], command: str) -> dict[str, Any]:
    import torch

    from benchmarks.run_all import machine

    torch.set_num_threads(1)
    policy = QuietPolicy(attempts=config["quiet_attempts"])
    started = time.perf_counter()
    found, missing = available(config.get("flashbax_path"))
    libraries = [name for name in found if name in config.get("libraries", found)]
    results: dict[str, Any] = {
        "benchmark": "sequence_replay",
        "command": command,
        "config": config,
        "machine": machine(),
        "loadavg_start": os.getloadavg(),
        "torch_threads": torch.get_num_threads(),
        "workload": {
            "streams": STREAMS,
            "frame_stack": STACK,
            "frame": list(FRAME),
            "dtype": "uint8",
            "batch": BATCH,
            "burn_in": BURN_IN,
            "length": LENGTH,
            "period": PERIOD,
            "observations_per_sequence": W + 1,
            "alpha": ALPHA,
            "beta": BETA,
            "eta": ETA,
            "batch_op": "sample 64 sequences (obs windows, masks, weights), write 64 priorities back from "
            "the batch's |delta|; no add in the timed batch",
        },
        "targets_bounds": TARGETS,
        "libraries_missing": missing,
        "sizes": [],
    }
    log(f"machine: {results['machine']['cpu']}, load average {results['loadavg_start']}; {missing or ''}")
    td = td_errors()
    for n in config["sizes"]:
        log(f"N = {n}")
        results["sizes"].append(run_size(n, config, libraries, policy, td))
    results["quiet_policy"] = {
        "max_others": policy.max_others,
        "retries": policy.retries,
        "waited_s": policy.waited_s,
    }
    results["loadavg_end"] = os.getloadavg()
    results["elapsed_s"] = time.perf_counter() - started
    return results


# -- tables ------------------------------------------------------------------------------------
def _n(n: int) -> str:
    if n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    return f"10^{len(str(n)) - 1}" if str(n).strip("0") == "1" else f"{n:,}"


def _times(ratio: dict[str, Any] | None) -> str:
    if ratio is None:
        return "–"
    per = ratio["per_pass"]
    return f"{ratio['median']:.2f}× ({min(per):.2f}–{max(per):.2f})"


def run_facts(results: dict[str, Any]) -> str:
    """The run behind the docs' tables: machine, versions, date, duration."""
    from benchmarks.report import facts

    m, v = results["machine"], results["machine"]["versions"]
    fbx = next(
        (
            lib["versions"]
            for b in results["sizes"]
            for k, lib in b["libraries"].items()
            if k == "Flashbax" and "versions" in lib
        ),
        None,
    )
    peers = f"torchrl {v['torchrl']}, tensordict {v['tensordict']}"
    if fbx:
        peers += f", flashbax {fbx['flashbax']}, jax {fbx['jax']}"
    items = [
        ("Machine", f"{m['cpu']}, numpy {v['numpy']}, torch {v['torch']}, {peers}"),
        ("Run", f"{m['date'][:10]}, {results['elapsed_s'] / 60:.0f} min"),
    ]
    items += [(f"{name} not measured", why) for name, why in results.get("libraries_missing", {}).items()]
    return facts(items)


def libraries_table(results: dict[str, Any]) -> str:
    """One row per size and library, and the copy floor: ms per batch, spread, ratios, bytes."""
    lines = [
        "| N | library | N measured | ms per batch | per pass | prisample faster by | × copy floor "
        "| bytes per stored step | windows exact |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for block in results["sizes"]:
        n = _n(block["n"])
        for name, r in block["libraries"].items():
            measured = _n(r["n_measured"]) if r["n_measured"] == block["n"] else f"{r['n_measured']:,}"
            if "us_per_batch" not in r:
                lines.append(f"| {n} | {name} | {measured} | {r.get('error', 'not measured')} | | | | | |")
                continue
            per = r["ms_per_pass"]
            size = r.get("nbytes_per_step", r.get("rss_anon_bytes_per_step", 0.0)) + r.get(
                "disk_bytes_per_step", 0.0
            )
            lines.append(
                f"| {n} | {name} | {measured} | {r['ms_per_batch']:,.1f} "
                f"| {min(per):,.1f}–{max(per):,.1f} | {_times(r.get('ratio_to_prisample'))} "
                f"| {_times(r.get('ratio_to_copy_floor'))} | {size:,.0f} "
                f"| {'yes' if r['windows_exact'] else 'no'} |"
            )
        floor = block.get("copy_floor")
        if floor:
            per = floor["ms_per_pass"]
            lines.append(
                f"| {n} | copy floor ({floor['frames_per_batch']:,} frames, one take) | "
                f"{_n(floor['pool_frames']) if floor['pool_frames'] == block['n'] else floor['pool_frames']} "
                f"| {floor['ms_per_batch']:,.1f} | {min(per):,.1f}–{max(per):,.1f} | – | – | – | – |"
            )
    return "\n".join(lines)


def targets(results: dict[str, Any]) -> str:
    """One row per size and target, met or not."""
    lines = ["| N | target | measured | met |", "|---|---|---|---|"]
    shown = {
        "peer_over_prisample": lambda t: (
            f"prisample ≥ {t['bound']:g}× faster than the faster peer",
            f"{t['measured']:.2f}× ({t['against']})",
        ),
        "prisample_over_copy_floor": lambda t: (
            f"prisample ≤ {t['bound']:g}× the copy floor",
            f"{t['measured']:.2f}×",
        ),
        "bytes_per_step": lambda t: (f"≤ {t['bound']:,.0f} bytes per stored step", f"{t['measured']:,.0f}"),
    }
    for block in results["sizes"]:
        for key, t in block["targets"].items():
            bound, measured = shown[key](t)
            lines.append(f"| {_n(block['n'])} | {bound} | {measured} | {'yes' if t['met'] else '**no**'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small size, few passes (smoke run)")
    parser.add_argument("--full", action="store_true", help="the full run (sizes 2^18 and 10^6; alone!)")
    parser.add_argument("--sizes", type=int, nargs="+", help="stored steps N")
    parser.add_argument("--passes", type=int, help="interleaved passes")
    parser.add_argument("--libraries", nargs="+", help="measure only these (prisample TorchRL Flashbax)")
    parser.add_argument("--flashbax-path", help="folder holding flashbax and jax (pip install --target)")
    parser.add_argument("--scratch", help="folder for TorchRL's memmap (default: the temp folder)")
    parser.add_argument("--out", type=Path, help="JSON results (default: none)")
    parser.add_argument("--from-json", type=Path, help="print the tables of saved results, no timing")
    args = parser.parse_args(argv)
    if args.from_json:
        results = json.loads(args.from_json.read_text())
    elif not (args.quick or args.full or args.sizes):
        parser.print_usage()
        print("say --quick (smoke run), --full, or --sizes; --from-json FILE prints saved results")
        return
    else:
        config = dict(QUICK if args.quick else FULL)
        for key in ("sizes", "passes", "libraries", "scratch", "flashbax_path"):
            if getattr(args, key) is not None:
                config[key] = getattr(args, key)
        command = "OMP_NUM_THREADS=1 python -m benchmarks.sequence_replay " + " ".join(
            sys.argv[1:] if argv is None else argv
        )
        results = run(config, command.strip())
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=1, default=float) + "\n")
            log(f"wrote {args.out}")
    print(libraries_table(results) + "\n\n" + targets(results))


if __name__ == "__main__":
    main()
