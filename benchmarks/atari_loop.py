"""The Double DQN recipe's full loop on Pong: agent steps/s and the time spent in the replay memory.

For each arm, one run of ``recipes.atari_ddqn.train`` on ``ALE/Pong-v5`` (the Atari preset: Nature
CNN, 4 AtariVectorEnv environments, memory capacity 10^6, one update of 32 per 4 agent steps):
``L`` acting steps (ε = 1 while the memory fills), then ``U`` updates, after a short warm-up run
that compiles the replay's kernels.  The loop records the seconds spent in each of its parts
(acting, environment step, ``replay.add``, ``replay.sample``, the network update,
``replay.update_priorities``) for its acting and learning phases, so the steps/s and shares below
exclude start-up, logging and evaluation.
``replay.sample`` includes the sampler's draw and importance weights and the memory's gathering
of the frame stacks.  All arms run one after the other in one process, so the ratios compare
like with like.

Run under the heavy-job lock:
``flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 python -m benchmarks.atari_loop``
(writes ``benchmarks/sections/atari_ddqn.md``).
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from recipes.atari_ddqn import ARMS, DDQNConfig, train

PARTS = ("act", "env", "add", "sample", "learn", "update_priorities")
SECTION = Path(__file__).parent / "sections" / "atari_ddqn.md"


def measure(arm: str, acting_steps: int, updates: int, log_dir: str, device: str) -> dict[str, Any]:
    """Timings of the acting and learning phases of one arm's run."""
    common: dict[str, Any] = dict(
        env="ALE/Pong-v5", arm=arm, eval_every=10**9, eval_steps=8, log_every=10**9, log_dir=log_dir,
        progress=False, tensorboard=False, device=device, seed=0,
    )  # fmt: skip
    # compiles and loads the replay's kernels, so that the timed run measures steady state
    train(DDQNConfig(total_steps=64, learning_starts=32, run_name=f"{arm}-warmup", **common))
    run = train(DDQNConfig(
        total_steps=acting_steps + 4 * updates, learning_starts=acting_steps, run_name=arm, **common
    ))  # fmt: skip
    assert run.learning_phase is not None
    phase = run.learning_phase["timing_s"]
    done = run.learning_phase["updates"]
    acting = {part: run.timing_s[part] - phase[part] for part in PARTS}
    loop = sum(phase[part] for part in PARTS)
    replay = phase["add"] + phase["sample"] + phase["update_priorities"]
    return {
        "arm": arm,
        "acting_steps_per_s": (run.steps - run.learning_phase["steps"]) / sum(acting.values()),
        "steps_per_s": run.learning_phase["steps"] / loop,
        "update_ms": 1000 * phase["learn"] / done,
        "per_update_ms": {p: 1000 * phase[p] / done for p in PARTS},
        "replay_share_of_loop": replay / loop,
        "replay_over_update": replay / phase["learn"],
        "sampler_over_update": (phase["sample"] + phase["update_priorities"]) / phase["learn"],
    }


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write_section(rows: list[dict[str, Any]], args: argparse.Namespace, wall: float) -> None:
    device = "CPU" if args.device == "cpu" else torch.cuda.get_device_name(0)
    lines = [
        "## Recipe: Double DQN full loop on Pong (`recipes/atari_ddqn.py`)",
        "",
        f"Agent steps per second of the whole training loop on `ALE/Pong-v5` (Atari preset: Nature CNN, "
        f"4 `AtariVectorEnv` environments, memory capacity 10^6, minibatch 32, one update per 4 agent "
        f"steps), measured over {args.updates} updates after {args.acting_steps:,} acting steps, one torch "
        f"thread, networks on {device}; {os.cpu_count()} × {_cpu()}, torch {torch.__version__}, Python "
        f"{platform.python_version()}.  The replay columns are `replay.add` + `replay.sample` (sampler draw, "
        "IS weights, frame-stack gathering) + `replay.update_priorities`, as a share of the loop and "
        f"relative to the network update (target: ≤ 1% of the update time; the paper reports a 2–4% "
        f"run-time overhead for its rank-based agent, App. B.2.1).  Command: `{args.command}` "
        f"({wall:.0f} s).",
        "",
        "| arm | acting only, steps/s | full loop, steps/s | network update, ms | replay.add per update, ms "
        "| replay.sample, ms | update_priorities, ms | replay share of the loop | replay / update "
        "| sampler (sample + update) / update |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per = r["per_update_ms"]
        lines.append(
            f"| {r['arm']} | {r['acting_steps_per_s']:,.0f} | {r['steps_per_s']:,.1f} | {r['update_ms']:.1f} "
            f"| {per['add']:.2f} | {per['sample']:.2f} | {per['update_priorities']:.2f} "
            f"| {100 * r['replay_share_of_loop']:.2f}% | {100 * r['replay_over_update']:.2f}% "
            f"| {100 * r['sampler_over_update']:.2f}% |"
        )
    lines += [
        "",
        "On a CPU the Nature-CNN update dominates the loop, so real Atari training needs a GPU; the "
        "replay's cost per update is the same there, and becomes a larger share as the update gets "
        "faster.",
        "",
    ]
    SECTION.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--acting_steps", type=int, default=2_000, help="steps before the first update")
    parser.add_argument("--updates", type=int, default=200, help="updates timed per arm")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    args.command = (
        f"python -m benchmarks.atari_loop --acting_steps {args.acting_steps} --updates {args.updates}"
        + (f" --device {args.device}" if args.device != "cpu" else "")
    )
    torch.set_num_threads(1)
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as log_dir:
        for arm in args.arms.split(","):
            rows.append(measure(arm, args.acting_steps, args.updates, log_dir, args.device))
            print(rows[-1])
    write_section(rows, args, time.perf_counter() - started)
    print(f"wrote {SECTION}")


if __name__ == "__main__":
    main()
