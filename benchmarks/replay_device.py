"""Replay step with batches on a device: ``PrioritizedReplay(..., device="cuda")`` at Atari scale.

One *replay step* (as in ``benchmarks/replay_step.py``): ``add_many`` of one vector step of 4
environments (stacks of four 84x84 ``uint8`` frames), ``sample(32)`` (a batch of tensors on the
device and ``batch.weights`` there), ``update_priorities`` of the 32 slots with a tensor on the
device (the implicit copy to the host waits for the step's device work, so the time includes it).
The memory of capacity ``--n`` is filled with ``--fill`` transitions first (default ``--n``;
frames on the device: ~7.3 GB at 10^6).  A step's tree work depends on the capacity (the number
of levels), not on how full the memory is, so ``--fill`` well below ``--n`` keeps a short run's
fill short (each ``add_many`` is one eager replay write) and times the same tree.

Timing: ``--blocks`` blocks of ``--block`` steps, ``torch.cuda.synchronize()`` before and after
each block; per-step milliseconds, median and quartiles over blocks; the three parts are timed
the same way on their own.  With a device backend on CUDA, ``captured`` first: ``sample(32)`` and
``update_priorities`` captured as one CUDA graph, timed with CUDA events (target
``CAPTURED_TARGET_MS`` at 10^6).  ``operation_counts``: the tensor operations (kernels) of a
device replay's ``sample`` + ``update_priorities`` and ``add_many`` at capacity ``--n``, counted
on CPU tensors for the tensor-operation and the fused paths (``benchmarks/op_count.py``).
Checks: batches drawn from the filled memory equal the transitions
added (known from the stream), and a small memory fed identically on the numpy path and on the
device returns equal batches for the same seed.

GPU run (a lent H100/H200; about 2-4 minutes)::

    python -m benchmarks.replay_device --out $OUT/replay_device.json

Smoke run on the CPU: ``python -m benchmarks.replay_device --device cpu --n 4096 --out /tmp/r.json``.
Each measurement is printed as it finishes and ``--out`` rewritten with the results so far.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from benchmarks.op_count import step_counts
from benchmarks.replay_step import BATCH, ENVS, FRAME, STACK, Stream, make_stream
from prisample.replay import PrioritizedReplay

TARGET_MS = 0.15  # the target of the CUDA replay step at N = 10^6
CAPTURED_TARGET_MS = 0.1  # the target of a captured device sample + update at N = 10^6 (device time)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(n: int, device: str | None, seed: int = 0, backend: str = "proportional") -> PrioritizedReplay:
    return PrioritizedReplay(
        n, FRAME, frame_stack=STACK, num_streams=ENVS, alpha=0.6, beta=0.4, seed=seed, device=device,
        backend=backend,
    )  # fmt: skip


def captured_step_ms(replay: PrioritizedReplay, tds: torch.Tensor, replays: int) -> dict[str, float]:
    """With the priorities on a CUDA device: ``sample(32)`` and ``update_priorities`` captured as
    one CUDA graph (what the Double DQN recipe captures around its update), timed with CUDA events
    over ``replays`` replays, each after :meth:`~PrioritizedReplay.stage_device_step` (nothing
    added in between: the device-side cost alone), next to the physical floor, one
    ``index_select`` of the 256 frames a batch of 32 stacks of 4 (obs and next_obs) needs."""
    device = tds.device

    def body() -> None:
        batch, draw = replay.sample(BATCH)
        replay.update_priorities(draw.indices, tds[0], generations=batch.generation)

    saved = replay.save_device_step()
    side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            body()
    torch.cuda.current_stream(device).wait_stream(side)
    replay.restore_device_step(saved)
    replay.stage_device_step()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    replay.restore_device_step(saved)
    frames = cast(Any, replay.memory._store).pool.storage.data  # the frames on the device
    rows = torch.randint(0, frames.shape[0], (2 * STACK * BATCH,), device=device)
    floor = torch.cuda.CUDAGraph()
    with torch.cuda.graph(floor):
        frames.index_select(0, rows)

    def timed(fn: Any) -> tuple[float, float]:
        """Milliseconds per call: wall clock (the host's staging and launches included) and the
        device's own time between two events."""
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        torch.cuda.synchronize(device)
        begin = time.perf_counter()
        start.record()
        for _ in range(replays):
            fn()
        end.record()
        torch.cuda.synchronize(device)
        wall = (time.perf_counter() - begin) * 1e3 / replays
        return wall, float(start.elapsed_time(end)) / replays

    def staged() -> None:
        replay.stage_device_step()
        graph.replay()

    step, step_device = timed(staged)
    floor_ms, floor_device = timed(floor.replay)
    return {
        "captured_step_ms": step,
        "captured_step_device_ms": step_device,
        "floor_ms": floor_ms,
        "floor_device_ms": floor_device,
        "over_floor": step / floor_ms,
        "replays": replays,
    }


def add_step(replay: PrioritizedReplay, stream: Stream, step: int) -> None:
    s = step % stream.period
    replay.add_many(
        stream.obs[s],
        stream.action[s],
        stream.reward[s],
        stream.discount[s],
        stream.next_obs[s],
        episode_end=stream.end[s],
    )


def batch_exact(stream: Stream, batch: Any) -> bool:
    """The batch's stacks, actions and rewards are those of the transitions it names."""
    t = batch.generation.cpu().numpy()
    step, env = (t // ENVS) % stream.period, t % ENVS
    obs, next_obs = stream.transition(t)
    return bool(
        np.array_equal(batch.obs.cpu().numpy(), obs)
        and np.array_equal(batch.next_obs.cpu().numpy(), next_obs)
        and np.array_equal(batch.action.cpu().numpy(), stream.action[step, env])
        and np.array_equal(batch.reward.cpu().numpy(), stream.reward[step, env])
    )


def equal_to_numpy(device: str, stream: Stream, n: int = 1 << 12, steps: int = 3000) -> bool:
    """Same adds, same seed, numpy path and device path: equal batches, weights and priorities."""
    a, b = build(n, None, seed=7), build(n, device, seed=7)
    ok = True
    for step in range(steps):
        add_step(a, stream, step)
        add_step(b, stream, step)
        if step % 100 == 99:
            batch_a, draw_a = a.sample(BATCH)
            batch_b, draw_b = b.sample(BATCH)
            for key in ("obs", "action", "reward", "discount", "next_obs", "generation", "weights"):
                ok &= bool(np.array_equal(getattr(batch_a, key), getattr(batch_b, key).cpu().numpy()))
            td = torch.from_numpy(stream.priorities[step % stream.period]).to(device)
            a.update_priorities(draw_a.indices, td.cpu().numpy(), generations=batch_a.generation)
            b.update_priorities(draw_b.indices, td, generations=batch_b.generation)
    return ok and bool(np.array_equal(a.sampler.priorities, b.sampler.priorities))


def _blocks(fn: Any, device: torch.device, blocks: int, block: int) -> list[float]:
    """Milliseconds per call of ``fn(i)``, one value per block, synchronised around each block."""
    times = []
    i = 0
    for _ in range(blocks):
        _sync(device)
        start = time.perf_counter()
        for _ in range(block):
            fn(i)
            i += 1
        _sync(device)
        times.append((time.perf_counter() - start) * 1e3 / block)
    return times


def _summary(times: list[float]) -> dict[str, float]:
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return {"median": statistics.median(times), "q1": q[0], "q3": q[2], "min": min(times)}


def run(
    device_name: str,
    n: int,
    steps: int,
    blocks: int,
    period: int,
    backend: str = "proportional",
    fill: int | None = None,
    emit: Any = None,
) -> dict[str, Any]:
    """Every measurement into one dict; ``emit(key, results)`` is called as each one finishes."""
    device = torch.device(device_name)
    stream = make_stream(period, seed=0)
    results: dict[str, Any] = {
        "device": device_name,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "n": n,
        "torch": torch.__version__,
        "workload": f"add_many of {ENVS} stacks of {STACK}x{FRAME[0]}x{FRAME[1]} uint8, sample {BATCH}, "
        f"update {BATCH} priorities from a {device_name} tensor",
        "target_ms": TARGET_MS,
        "backend": backend,
        "fill": n if fill is None else fill,
    }

    def done(key: str) -> None:
        if emit is not None:
            emit(key, results)

    results["operation_counts"] = step_counts(n, streams=ENVS, batch=BATCH)
    done("operation_counts")
    start = time.perf_counter()
    results["equal_to_numpy"] = equal_to_numpy(device_name, stream) if backend == "proportional" else None
    results["equality_s"] = time.perf_counter() - start
    done("equal_to_numpy")
    replay = build(n, device_name, backend=backend)
    start = time.perf_counter()
    fill_steps = -(-results["fill"] // ENVS)
    for fill_step in range(fill_steps):
        add_step(replay, stream, fill_step)
    _sync(device)
    results["fill_s"] = time.perf_counter() - start
    results["nbytes"] = replay.nbytes
    if device.type == "cuda":
        results["cuda_memory_allocated"] = torch.cuda.memory_allocated(device)
    done("fill_s")
    exact = all(batch_exact(stream, replay.sample(BATCH)[0]) for _ in range(5))
    results["batches_exact"] = exact
    done("batches_exact")
    tds = torch.from_numpy(stream.priorities).to(device)  # (period, BATCH) |δ| on the device
    if backend.startswith("device_") and device.type == "cuda":  # first: the measurement that matters
        results["captured"] = captured_step_ms(replay, tds, replays=steps)
        results["captured"]["target_device_ms"] = CAPTURED_TARGET_MS
        results["captured"]["meets_target"] = (
            results["captured"]["captured_step_device_ms"] <= CAPTURED_TARGET_MS
        )
        results["captured"]["fused"] = replay.steps.sampler_on_device().tree.fused
        done("captured")
    counter = [fill_steps]

    def step(i: int) -> None:
        add_step(replay, stream, counter[0])
        counter[0] += 1
        batch, draw = replay.sample(BATCH)
        replay.update_priorities(draw.indices, tds[i % stream.period], generations=batch.generation)

    def add(i: int) -> None:
        add_step(replay, stream, counter[0])
        counter[0] += 1

    def sample(i: int) -> None:
        replay.sample(BATCH)

    drawn = [replay.sample(BATCH) for _ in range(stream.period)]

    def update(i: int) -> None:
        _, draw = drawn[i % len(drawn)]
        replay.update_priorities(draw.indices, tds[i % stream.period])

    block = max(1, steps // blocks)
    for fn in (step, add, sample, update):  # warm-up: compilation, allocator, pinned buffers
        _blocks(fn, device, 1, min(block, 50))
    for key, fn in (("step_ms", step), ("add_ms", add), ("sample_ms", sample), ("update_ms", update)):
        results[key] = _summary(_blocks(fn, device, blocks, block))
        done(key)
    results["meets_target"] = results["step_ms"]["median"] <= TARGET_MS
    results["blocks"], results["block"] = blocks, block
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--n", type=int, default=10**6, help="the memory's capacity")
    parser.add_argument(
        "--fill", type=int, default=None, help="transitions added before timing (default --n)"
    )
    parser.add_argument("--steps", type=int, default=4000, help="timed replay steps (and per part)")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--period", type=int, default=1000, help="vector steps before the stream repeats")
    parser.add_argument(
        "--backend", default="proportional", choices=("proportional", "device_proportional", "device_uniform")
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    blocks = min(args.blocks, args.steps)
    fill = args.n if args.fill is None else min(args.fill, args.n)
    period = min(args.period, max(2, fill // ENVS))

    def emit(key: str, results: dict[str, Any]) -> None:
        print(json.dumps({key: results[key]}), flush=True)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2) + "\n")

    results = run(args.device, args.n, args.steps, blocks, period, args.backend, fill, emit)
    results["load_average"] = list(os.getloadavg())
    emit("load_average", results)
    return results


if __name__ == "__main__":
    main()
