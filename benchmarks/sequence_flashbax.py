"""The Flashbax arm of ``benchmarks/sequence_replay.py``, run in a process of its own.

Flashbax (JAX) is not a dependency of prisample: the parent runs this module with the folder that
holds Flashbax and JAX on ``PYTHONPATH`` only for this process, and talks to it over a pipe, one
JSON object per line.  On start it builds Flashbax's prioritised trajectory buffer
(``fbx.make_prioritised_trajectory_buffer``: a ``[streams, T]`` ring, items every ``period`` steps
of one stream, one sum-tree leaf per item), fills it from the benchmark's stream, and answers
``ready``; then per command:

* ``{"cmd": "pass", "reps": R, "block_s": S, "attempts": A}``: one timing pass of the batch
  (:func:`benchmarks.timing.measure_quiet`): ``sample`` 64 sequences (jitted), wait for them,
  write 64 priorities back (jitted ``set_priorities`` after the R2D2 mix of the batch's |δ|, the
  buffer donated so it is updated in place), wait; answers ``{"us": ..., "others_cpus": ...}``;
* ``{"cmd": "exact"}``: whether a sampled batch holds the stream's stacks at the slots it names;
* ``{"cmd": "quit"}``.

Stray prints (Flashbax prints when it rounds the ring down to a multiple of ``period``) go to
stderr: the replies have stdout to themselves.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
# one XLA thread: the comparison is single-threaded, as torch's and prisample's arms are
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import gc
import json
import sys
import time
from importlib import metadata
from typing import Any

import numpy as np

from benchmarks.replay_step import make_stream
from benchmarks.timing import QuietPolicy, measure_quiet

__all__ = ["main"]


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


class FlashbaxArm:
    """Flashbax's prioritised trajectory buffer filled with ``n`` steps of ``streams`` streams."""

    def __init__(self, n: int, streams: int, cfg: dict[str, Any]) -> None:
        import flashbax as fbx  # type: ignore[import-not-found,unused-ignore]
        import jax  # type: ignore[import-not-found,unused-ignore]
        import jax.numpy as jnp  # type: ignore[import-not-found,unused-ignore]

        self.jax = jax
        self.cfg = cfg
        self.streams = streams
        burn_in, length, period, batch = cfg["burn_in"], cfg["length"], cfg["period"], cfg["batch"]
        self.window = burn_in + length + 1  # W steps and the last step's next observation
        self.stream = make_stream(cfg["stream_period"], seed=cfg["seed"], envs=streams)
        gc.collect()
        rss0 = _status_bytes("RssAnon")
        self.buffer = fbx.make_prioritised_trajectory_buffer(
            add_batch_size=streams,
            sample_batch_size=batch,
            sample_sequence_length=self.window,
            period=period,
            min_length_time_axis=self.window,
            max_length_time_axis=n // streams,
            priority_exponent=cfg["alpha"],
            device="cpu",
        )
        self.rows = (n // streams) // period * period  # Flashbax rounds the ring down to the period grid
        st = self.stream
        example = {
            "obs": jnp.zeros(st.obs.shape[2:], jnp.uint8),
            "action": jnp.zeros((), jnp.int32),
            "reward": jnp.zeros((), jnp.float32),
            "discount": jnp.zeros((), jnp.float32),
        }
        self.state = self.buffer.init(example)
        self.add = jax.jit(self.buffer.add, donate_argnums=0)
        self.sample = jax.jit(self.buffer.sample)
        eta, lo, hi = cfg["eta"], burn_in, burn_in + length
        set_priorities = self.buffer.set_priorities

        def write_back(state: Any, indices: Any, td: Any) -> Any:
            mag = jnp.abs(td[:, lo:hi])  # the learn steps (R2D2: η·max + (1 − η)·mean of |δ|)
            return set_priorities(state, indices, eta * mag.max(axis=1) + (1 - eta) * mag.mean(axis=1))

        self.write_back = jax.jit(write_back, donate_argnums=0)
        self.td = [
            jnp.asarray(t)
            for t in np.random.default_rng(cfg["seed"] + 1).random(
                (cfg["td_batches"], batch, self.window), dtype=np.float32
            )
        ]
        self.key = jax.random.PRNGKey(cfg["seed"])
        self.cursor, self.k = 0, 0
        started = time.perf_counter()
        self.fill(self.rows)
        self.fill_s = time.perf_counter() - started
        gc.collect()
        leaves = jax.tree_util.tree_leaves(self.state)
        self.nbytes = int(sum(leaf.nbytes for leaf in leaves))
        self.rss_anon = _status_bytes("RssAnon") - rss0

    def fill(self, steps: int) -> None:
        """Add ``steps`` time steps of every stream, in chunks of up to 256 (as a rollout would)."""
        st, p = self.stream, self.stream.period
        while self.cursor < steps:
            s = self.cursor % p
            k = min(256, p - s, steps - self.cursor)
            part = slice(s, s + k)
            chunk = {  # [streams, time, ...]: Flashbax's add layout
                "obs": np.ascontiguousarray(st.obs[part].swapaxes(0, 1)),
                "action": np.ascontiguousarray(st.action[part].T.astype(np.int32)),
                "reward": np.ascontiguousarray(st.reward[part].T),
                "discount": np.ascontiguousarray(st.discount[part].T),
            }
            self.state = self.add(self.state, chunk)
            self.cursor += k
        self.jax.block_until_ready(self.state)

    def step(self) -> None:
        self.key, key = self.jax.random.split(self.key)
        batch = self.sample(self.state, key)
        self.jax.block_until_ready(batch.experience)
        self.state = self.write_back(self.state, batch.indices, self.td[self.k])
        self.k = (self.k + 1) % len(self.td)
        self.jax.block_until_ready(self.state.sum_tree_state)

    def exact(self) -> bool:
        """The sampled windows are the stream's consecutive stacks at the items' ring positions
        (Flashbax's windows may cross episodes: that is its semantics, not an error)."""
        self.key, key = self.jax.random.split(self.key)
        batch = self.sample(self.state, key)
        items = np.asarray(batch.indices)
        per_row = self.rows // self.cfg["period"]
        env, start = items // per_row, (items % per_row) * self.cfg["period"]
        tau = (start[:, None] + np.arange(self.window)) % self.rows  # ring positions
        step = tau + self.rows * ((self.cursor - 1 - tau) // self.rows)  # the step written there
        want = self.stream.obs[step % self.stream.period, env[:, None]]
        return bool(np.array_equal(np.asarray(batch.experience["obs"]), want))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, required=True, help="stored steps, all streams together")
    parser.add_argument("--streams", type=int, required=True)
    parser.add_argument("--config", required=True, help="JSON: burn_in, length, period, batch, alpha, ...")
    args = parser.parse_args(argv)
    reply = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr

    def say(obj: dict[str, Any]) -> None:
        reply.write(json.dumps(obj) + "\n")
        reply.flush()

    cfg = json.loads(args.config)
    try:
        arm = FlashbaxArm(args.n, args.streams, cfg)
    except Exception as error:  # the parent records it and goes on
        say({"error": f"{type(error).__name__}: {error}"})
        return
    import jax  # type: ignore[import-not-found,unused-ignore]

    say(
        {
            "ready": True,
            "n_measured": arm.rows * arm.streams,
            "fill_s": arm.fill_s,
            "nbytes_per_step": arm.nbytes / (arm.rows * arm.streams),
            "rss_anon_bytes_per_step": arm.rss_anon / (arm.rows * arm.streams),
            "versions": {p: _version(p) for p in ("flashbax", "jax", "jaxlib", "chex", "flax")},
            "jax_devices": [str(d) for d in jax.devices()],
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
        }
    )
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "pass":
            policy = QuietPolicy(attempts=int(cmd.get("attempts", 1)))
            times, others, steal = measure_quiet(
                {"Flashbax": arm.step}, reps=int(cmd["reps"]), block_s=float(cmd["block_s"]), policy=policy
            )
            say({"us": times["Flashbax"], "others_cpus": others, "steal_cpus": steal})
        elif cmd["cmd"] == "exact":
            say({"exact": arm.exact()})
        else:
            break


if __name__ == "__main__":
    main()
