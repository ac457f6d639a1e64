"""What a first run of the device replay on a GPU needs to tell, phase by phase, as JSON.

Each phase prints one JSON line as it finishes (and ``--out`` is rewritten after each), so a run
cut short still reports what it reached; a phase that raises records its error and the next
one runs:

* ``devices``: the devices of the memory, the sampler and a draw's tensors, and whether they
  compare equal (a memory made with ``device="cuda"`` must hold the ``cuda:0`` its draws report);
* ``device_update``: whether :meth:`~prisample.replay.PrioritizedReplay.update_priorities` of a
  draw's tensors took the device path, and on CUDA whether the step ran with no host
  synchronisation (``torch.cuda.set_sync_debug_mode("error")``);
* ``captured_vs_eager``: from one saved state, ``--steps`` eager steps (``sample`` and
  ``update_priorities``) against as many replays of the step captured once (a CUDA graph on a
  GPU; elsewhere the step run as a capture records it, host staging skipped), β annealed at
  every draw: the same indices, weights, priorities, dropped counts and random stream's state
  after every step, the same β schedule step at the end, and the random stream's state advanced
  by exactly ``k`` SplitMix64 increments per draw;
* ``cpu_vs_cuda``: the same adds and updates on CPU tensors and on CUDA, then one draw from the
  same stream: the share of identical indices and the largest difference, in ulps, between the
  two trees' sums (skipped without CUDA);
* ``fused_vs_tensor_ops``: the same adds, updates and learner steps on two replays of one device,
  one whose tree draws and writes with the fused Triton kernels (``prisample/_device_kernels.py``)
  and one with tensor operations: whether every draw, weight and tree value is identical (skipped
  where the kernels do not run: without CUDA or Triton).

Usage::

    python -m benchmarks.gpu_diagnose --device cuda --out $OUT/gpu_diagnose.json
    python -m benchmarks.gpu_diagnose --device cpu   # the same phases on CPU tensors
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from prisample import DeviceDraw, LinearSchedule, _device_kernels
from prisample._capture import recording
from prisample.replay import PrioritizedReplay
from prisample.replay.write_back import DeviceWriteBackGuard

__all__ = ["compare_devices", "compare_paths", "diagnose", "main"]

CAPACITY = 512
STREAMS = 4
FRAME = (8, 8)
STACK = 4
BATCH = 32
STALE_EVERY = 4
_MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment: one per random number drawn


def build(device: str) -> PrioritizedReplay:
    return PrioritizedReplay(
        CAPACITY, FRAME, obs_dtype=np.uint8, frame_stack=STACK, num_streams=STREAMS, device=device,
        backend="device_proportional", alpha=0.6, beta=LinearSchedule(0.4, 1.0, 100), seed=0,
    )  # fmt: skip


def fill(replay: PrioritizedReplay, steps: int, seed: int = 0) -> None:
    """``steps`` vector steps of random frames (each ``next_obs`` its ``obs`` moved on by one)
    and, every fifth step, a priority update of 16 live slots (host arrays, fixed values)."""
    rng = np.random.default_rng(seed)
    last = rng.integers(0, 255, (STREAMS, STACK, *FRAME), dtype=np.uint8)
    for t in range(steps):
        new = rng.integers(0, 255, (STREAMS, 1, *FRAME), dtype=np.uint8)
        nxt = np.concatenate([last[:, 1:], new], axis=1)
        replay.add_many(last, np.arange(STREAMS), rng.normal(size=STREAMS), np.full(STREAMS, 0.99), nxt)
        last = nxt
        if t % 5 == 4:
            slots = rng.choice(len(replay), 16, replace=False)
            replay.update_priorities(slots, rng.exponential(size=16))


def sample(replay: PrioritizedReplay, k: int) -> tuple[Any, DeviceDraw]:
    """``replay.sample(k)``, its draw typed as the device's."""
    batch, draw = replay.sample(k)
    return batch, cast(DeviceDraw, draw)


def step(replay: PrioritizedReplay) -> dict[str, torch.Tensor]:
    """One learner step on the device: a draw, a |δ| made from the batch there, its write, with
    every fourth entry sent under an older generation (a stale update: dropped)."""
    batch, draw = sample(replay, BATCH)
    reward = torch.as_tensor(batch.reward)
    td = reward.double().abs() + 0.01 * draw.indices.double()
    generation = torch.as_tensor(batch.generation)
    older = torch.arange(BATCH, device=generation.device) % STALE_EVERY == 0
    replay.update_priorities(draw.indices, td, generations=generation - CAPACITY * older)
    return {"indices": draw.indices, "weights": draw.weights}


def _state(replay: PrioritizedReplay, out: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A step's outputs and the state it left, copied."""
    sampler = replay.steps.sampler_on_device()
    return {
        **{k: v.clone() for k, v in out.items()},
        "priorities": sampler.tree.raw.clone(),
        "dropped": cast(DeviceWriteBackGuard, replay.guard).dropped_on_device.clone(),
        "rng": sampler.rng_state.clone(),
    }


class Captured:
    """:func:`step` captured once: a CUDA graph on a GPU (warmed up on a side stream first, the
    replay's state put back after), elsewhere the step run as a capture records it."""

    def __init__(self, replay: PrioritizedReplay, body: Callable[[], dict[str, torch.Tensor]]) -> None:
        self.replay, self.body = replay, body
        self.device = replay.memory.device
        assert self.device is not None
        self.graph: Any = None
        if self.device.type != "cuda":
            return
        saved = replay.save_device_step()
        side = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(3):
                body()
        torch.cuda.current_stream(self.device).wait_stream(side)
        replay.restore_device_step(saved)
        replay.stage_device_step()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = body()
        replay.restore_device_step(saved)

    def replay_step(self) -> dict[str, torch.Tensor]:
        """Stage the host side, then replay the step's kernels."""
        self.replay.stage_device_step()
        if self.graph is not None:
            self.graph.replay()
            return self.outputs
        with recording():
            return self.body()


def _phase_devices(device: str) -> dict[str, Any]:
    replay = build(device)
    fill(replay, 20)
    batch, draw = sample(replay, BATCH)
    memory = replay.memory.device
    return {
        "requested": device,
        "memory": str(memory),
        "sampler": str(replay.steps.sampler_on_device().device),
        "draw_indices": str(draw.indices.device),
        "draw_weights": str(draw.weights.device),
        "generation": str(torch.as_tensor(batch.generation).device),
        "draw_on_memory_device": draw.indices.device == memory,
    }


def _phase_device_update(device: str) -> dict[str, Any]:
    replay = build(device)
    fill(replay, 20)
    calls = []
    original = replay.steps.update_on_device  # type: ignore[attr-defined]

    def spied(*args: Any) -> None:
        calls.append(1)
        original(*args)

    replay.steps.update_on_device = spied  # type: ignore[attr-defined]
    step(replay)
    result: dict[str, Any] = {"device_update_ran": calls == [1], "sync_free": None}
    if torch.device(device).type == "cuda":
        step(replay)  # warm: first-call allocations are not the step's
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            step(replay)
            result["sync_free"] = True
        except RuntimeError as error:
            result["sync_free"] = False
            result["sync_error"] = str(error).splitlines()[0]
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return result


def _phase_captured(device: str, steps: int) -> dict[str, Any]:
    replay = build(device)
    fill(replay, 3 * CAPACITY // STREAMS // 2)  # past the capacity: the ring has wrapped
    saved = replay.save_device_step()
    rng0 = int(replay.steps.sampler_on_device().rng_state.item())
    eager = [_state(replay, step(replay)) for _ in range(steps)]
    eager_beta_step = replay.steps.sampler_on_device().step
    replay.restore_device_step(saved)
    captured = Captured(replay, lambda: step(replay))
    replays = [_state(replay, captured.replay_step()) for _ in range(steps)]
    same = {
        key: all(bool(torch.equal(a[key], b[key])) for a, b in zip(eager, replays, strict=True))
        for key in ("indices", "weights", "priorities", "dropped", "rng")
    }
    same["beta_step"] = replay.steps.sampler_on_device().step == eager_beta_step
    expected = [(rng0 + (j + 1) * BATCH * GAMMA) & _MASK for j in range(steps)]
    advanced = [int(r["rng"].item()) & _MASK for r in replays]
    return {
        "graph": captured.graph is not None,
        "steps": steps,
        "same": same,
        "all_same": all(same.values()),
        "rng_advanced_as_expected": advanced == expected,
        "dropped": int(replays[-1]["dropped"].item()),
        "dropped_expected": steps * len(range(0, BATCH, STALE_EVERY)),
        "distinct_slots_drawn": int(torch.unique(torch.cat([r["indices"] for r in replays])).numel()),
    }


def _ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance in ulps between two float64 tensors of finite, non-negative values."""
    if a.numel() == 0:
        return 0
    return int((a.view(torch.int64) - b.view(torch.int64)).abs().max().item())


def compare_devices(first: str, second: str) -> dict[str, Any]:
    """The same adds and updates on two devices, then one draw of 256 from the same stream
    state: the share of identical indices, the largest distance in ulps between the trees' sums
    (per level, the leaves first, the root last), and whether the raw priorities are equal."""
    replays = {name: build(name) for name in (first, second)}
    for replay in replays.values():
        fill(replay, 200, seed=1)
    a, b = (sample(replays[name], 256)[1].indices.cpu() for name in (first, second))
    x, y = (replays[name].steps.sampler_on_device().tree for name in (first, second))
    sums = [_ulps(u, v.cpu()) for u, v in zip([*x.sums, x.total], [*y.sums, y.total], strict=True)]
    return {
        "identical_indices_share": float((a == b).double().mean()),
        "sums_max_ulp": max(sums),
        "sums_max_ulp_per_level": sums,
        "priorities_equal": bool(
            np.array_equal(replays[first].sampler.priorities, replays[second].sampler.priorities)
        ),
    }


def compare_paths(device: str, steps: int = 20) -> dict[str, Any]:
    """Two replays on ``device``, the first's tree fused (its Triton kernels), the second's on
    tensor operations, given the same adds and updates, then ``steps`` learner steps
    (:func:`step`): whether every step's indices and weights, and the trees' nodes and raw
    priorities after, are identical."""
    fused, tensors = build(device), build(device)
    fused.steps.sampler_on_device().tree.fused = True
    tensors.steps.sampler_on_device().tree.fused = False
    for replay in (fused, tensors):
        fill(replay, 200, seed=2)
    same = {"indices": True, "weights": True}
    for _ in range(steps):
        a, b = step(fused), step(tensors)
        for key in same:
            same[key] &= bool(torch.equal(a[key], b[key]))
    x, y = (r.steps.sampler_on_device().tree for r in (fused, tensors))
    same["nodes"] = bool(torch.equal(x.flat, y.flat))
    same["raw"] = bool(torch.equal(x.raw.nan_to_num(-1.0), y.raw.nan_to_num(-1.0)))
    return {"steps": steps, "same": same, "identical": all(same.values())}


def _phase_fused_vs_tensor_ops(device: str) -> dict[str, Any]:
    if not _device_kernels.available(torch.device(device)):
        return {"skipped": "the fused kernels need CUDA and Triton"}
    return compare_paths(device)


def _phase_cpu_vs_cuda() -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA"}
    return compare_devices("cpu", "cuda")


def diagnose(device: str, out: Path | None = None, steps: int = 20) -> dict[str, Any]:
    """Run every phase on ``device``; print each phase's JSON line as it finishes and rewrite
    ``out`` after each.  Returns ``{phase: result}`` (a failed phase: ``{"error", "traceback"}``)."""
    phases: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("devices", lambda: _phase_devices(device)),
        ("device_update", lambda: _phase_device_update(device)),
        ("captured_vs_eager", lambda: _phase_captured(device, steps)),
        ("cpu_vs_cuda", _phase_cpu_vs_cuda),
        ("fused_vs_tensor_ops", lambda: _phase_fused_vs_tensor_ops(device)),
    ]
    results: dict[str, Any] = {"device": device, "torch": torch.__version__}
    for name, phase in phases:
        try:
            results[name] = phase()
        except Exception as error:  # reported, and the next phase still runs
            results[name] = {"error": repr(error), "traceback": traceback.format_exc()}
        print(json.dumps({name: results[name]}, default=str), flush=True)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    """Exit status 1 when a phase failed or found a difference, 0 otherwise."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=20, help="captured replays against eager steps")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    results = diagnose(args.device, args.out, args.steps)
    ok = (
        all(
            "error" not in results[p]
            for p in ("devices", "device_update", "captured_vs_eager", "cpu_vs_cuda", "fused_vs_tensor_ops")
        )
        and results["fused_vs_tensor_ops"].get("identical", True)
        and results["devices"]["draw_on_memory_device"]
        and results["device_update"]["device_update_ran"]
        and results["device_update"]["sync_free"] is not False
        and results["captured_vs_eager"]["all_same"]
        and results["captured_vs_eager"]["rng_advanced_as_expected"]
        and results["captured_vs_eager"]["dropped"] == results["captured_vs_eager"]["dropped_expected"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
