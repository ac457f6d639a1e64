"""Atari-shaped replay memory: time per add and per sampled batch, bytes per transition.

Stacks of four 84x84 ``uint8`` frames, one stream, episodes of 500 steps on average, a memory of
``capacity`` transitions filled first.  Per pass and library: the mean time of an ``add`` and of
``sample(32)`` followed by a priority update of the batch, and a DQN step's replay cost
(4 adds + 1 batch, the paper's one update per 4 agent steps).  The Nature CNN's update on a batch
of 32 (forward of online and target networks, backward, Adam; CPU, one thread) is timed in the
same passes, so the replay's share of an update is a ratio measured side by side.  Libraries:

* ``prisample``: :class:`prisample.replay.PrioritizedReplay` (proportional, α = 0.6);
* ``cpprb``: ``PrioritizedReplayBuffer`` with ``next_of="obs"`` and ``stack_compress="obs"``
  (its frame-sharing mode), α = 0.6, β = 0.4.

Run under the heavy-job lock:
``flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 python -m benchmarks.measurements.replay_memory``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from prisample.replay import PrioritizedReplay

STACK, BATCH = 4, 32
Step = tuple[np.ndarray, np.ndarray, bool]


def transitions(n: int, seed: int) -> list[Step]:
    """``(obs, next_obs, episode_end)`` of one stream; a reset repeats its first frame."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, size=(256, 84, 84), dtype=np.uint8)
    current = np.stack([pool[0]] * STACK)
    out = []
    for t in range(n):
        following = np.concatenate([current[1:], pool[(7 * t) % 256][None]])
        end = bool(rng.random() < 1 / 500)
        out.append((current, following, end))
        current = np.stack([pool[(3 * t) % 256]] * STACK) if end else following
    return out


def run_prisample(fill: list[Step], timed: list[Step], updates: int) -> dict[str, float]:
    replay = PrioritizedReplay(len(fill), (84, 84), frame_stack=STACK, alpha=0.6, beta=0.4, seed=0)
    rng = np.random.default_rng(0)
    for obs, following, end in fill:
        replay.add(obs, 1, 1.0, 1.0, following, episode_end=end)
    start = time.perf_counter()
    for obs, following, end in timed:
        replay.add(obs, 1, 1.0, 1.0, following, episode_end=end)
    add = (time.perf_counter() - start) / len(timed)
    start = time.perf_counter()
    for _ in range(updates):
        _, draw = replay.sample(BATCH)
        replay.update_priorities(draw.indices, rng.random(BATCH))
    batch = (time.perf_counter() - start) / updates
    return {"add": add, "batch": batch, "bytes": replay.memory.nbytes / replay.capacity}


def run_cpprb(fill: list[Step], timed: list[Step], updates: int) -> dict[str, float]:
    from cpprb import PrioritizedReplayBuffer

    spec = {
        "obs": {"shape": (STACK, 84, 84), "dtype": np.ubyte},
        "act": {"dtype": np.int64},
        "rew": {},
        "done": {},
    }
    buffer = PrioritizedReplayBuffer(len(fill), spec, next_of="obs", stack_compress="obs", alpha=0.6)
    rng = np.random.default_rng(0)

    def add(obs: np.ndarray, following: np.ndarray, end: bool) -> None:
        buffer.add(obs=obs, act=1, rew=1.0, next_obs=following, done=float(end))
        if end:
            buffer.on_episode_end()

    for step in fill:
        add(*step)
    start = time.perf_counter()
    for step in timed:
        add(*step)
    add_s = (time.perf_counter() - start) / len(timed)
    start = time.perf_counter()
    for _ in range(updates):
        sample = buffer.sample(BATCH, beta=0.4)
        buffer.update_priorities(sample["indexes"], rng.random(BATCH))
    batch = (time.perf_counter() - start) / updates
    return {"add": add_s, "batch": batch, "bytes": float("nan")}  # cpprb does not report its bytes


def nature_cnn_update(repeats: int) -> float:
    """Seconds of one Double DQN update of the Nature CNN on a batch of 32 (CPU)."""
    torch.manual_seed(0)

    def cnn() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Conv2d(STACK, 32, 8, 4),
            torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 4, 2),
            torch.nn.ReLU(),
            torch.nn.Conv2d(64, 64, 3, 1),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(3136, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 6),
        )

    online, target = cnn(), cnn()
    optimizer = torch.optim.Adam(online.parameters(), lr=6.25e-5)
    x = torch.rand(BATCH, STACK, 84, 84)
    action = torch.zeros(BATCH, dtype=torch.int64)

    def update() -> None:
        with torch.no_grad():
            best = online(x).argmax(1, keepdim=True)
            bootstrap = target(x).gather(1, best).squeeze(1)
        q = online(x).gather(1, action[:, None]).squeeze(1)
        loss = (q - bootstrap).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    update()
    start = time.perf_counter()
    for _ in range(repeats):
        update()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=50_000)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps = transitions(args.capacity + 4000, seed=0)
    fill, timed = steps[: args.capacity], steps[args.capacity :]
    runs: dict[str, Callable[[list[Step], list[Step], int], dict[str, float]]] = {
        "prisample": run_prisample,
        "cpprb": run_cpprb,
    }
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in runs}
    for _ in range(args.passes):
        cnn = nature_cnn_update(10)
        for name, run in runs.items():
            result = run(fill, timed, 1000)
            result["share"] = (4 * result["add"] + result["batch"]) / cnn
            result["cnn"] = cnn
            rows[name].append(result)
    print(f"capacity {args.capacity}, {args.passes} passes, medians over passes")
    print("| library | add (µs) | sample 32 + update (µs) | replay / CNN update | bytes/transition |")
    print("|---|---|---|---|---|")
    for name, results in rows.items():
        med = {key: statistics.median(r[key] for r in results) for key in results[0]}
        size = "—" if np.isnan(med["bytes"]) else f"{med['bytes']:.0f}"
        times = f"{1e6 * med['add']:.1f} | {1e6 * med['batch']:.1f} | {100 * med['share']:.2f}%"
        print(f"| {name} | {times} | {size} |")
    cnn_ms = 1e3 * statistics.median(r["cnn"] for r in rows["prisample"])
    print(f"Nature CNN update (CPU, one thread): {cnn_ms:.1f} ms")


if __name__ == "__main__":
    main()
