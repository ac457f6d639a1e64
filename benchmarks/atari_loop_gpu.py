"""The Double DQN loop on a GPU against CleanRL's ``dqn_atari.py``, in one run, against the loop's
targets (:data:`TARGET_STEPS_PER_S`, :data:`TARGET_REPLAY_SHARE`, :data:`DEVICE_PRIORITY_TARGETS`).

Both run Pong with the paper's Atari settings: Nature CNN, memory capacity 10^6, minibatch 32,
one update per 4 agent steps, timed over their learning phase while ε is still ≈ 1.

* ours: ``benchmarks.atari_loop`` for every arm with the GPU settings of the recipe: the update
  and the acting forward captured as CUDA graphs, the replay's frames on the GPU, 16 environments
  on 8 ALE threads, their emulation overlapped with the updates (``overlap_env``), each update's
  priorities written after the next minibatch is drawn (``defer_priorities``).  Agent steps/s
  are wall-clock over the learning phase; the replay share is ``replay.add + replay.sample +
  update_priorities`` over the sum of the timed parts.  With the priorities on the device the
  draw, gather and priority write run inside the update's captured graph (``learn``), so the
  share then counts the host's part only (``replay_in_update_graph``); the device part is
  ``benchmarks/replay_device.py --backend device_proportional``'s ``captured`` entry;
* CleanRL (``benchmarks.cleanrl_dqn``): its source with only the gymnasium 1.x renames, its
  agent steps/s from its own log.

Writes ``{"device", "arms": {arm: {"agent_steps_per_s", "replay_share", ...}},
"cleanrl_agent_steps_per_s", ...}``; the committed copy is ``docs/results/atari_loop_gpu.json``::

    python -m benchmarks.atari_loop_gpu --out docs/results/atari_loop_gpu.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

GPU_SETTINGS: dict[str, Any] = {
    "num_envs": 16,
    "env_threads": 8,
    "overlap_env": True,
    "defer_priorities": True,
    "cuda_graph": True,
    "replay_on_device": True,
    "priorities_on_device": True,
}
"""The recipe's options for a GPU (every other value: the Atari preset and the arm's file);
``--host_priorities`` measures the priorities on the host instead (the setting of
:data:`TARGET_STEPS_PER_S` and :data:`TARGET_REPLAY_SHARE`)."""
TARGET_STEPS_PER_S = 3000.0
TARGET_REPLAY_SHARE = 0.15
"""The loop's targets with the priorities on the host: agent steps/s and the replay's share."""
DEVICE_PRIORITY_TARGETS: dict[str, float] = {
    "agent_steps_per_s": 8000.0,  # uniform and proportional, priorities on the device
    "rank_agent_steps_per_s": 4000.0,
    "replay_share": 0.10,
    "over_cleanrl": 15.0,
}
"""The loop's targets with the priorities on the device (``priorities_on_device``)."""
DEVICE_BACKENDS = ("proportional", "uniform")
"""The arms whose priorities can live on the device (rank needs the host's exact order)."""


def table(result: dict[str, Any]) -> str:
    """The docs' table: per arm the agent steps/s, against CleanRL, the replay's share and the
    per-update milliseconds of each part; every number a value of ``result``."""
    lines = [
        "| arm | agent steps/s | × CleanRL | replay share | act | env | replay.add | replay.sample "
        "| update (wait included) | update_priorities |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, r in result["arms"].items():
        per = r["per_update_ms"]
        over = f"{r['over_cleanrl']:.1f}" if "over_cleanrl" in r else "–"
        lines.append(
            f"| {arm} | {r['agent_steps_per_s']:,.0f} | {over} | {100 * r['replay_share']:.0f}% "
            + " ".join(
                f"| {per[p]:.2f}" for p in ("act", "env", "add", "sample", "learn", "update_priorities")
            )
            + " |"
        )
    if result.get("cleanrl_agent_steps_per_s"):
        lines.append(
            f"| CleanRL `dqn_atari.py` | {result['cleanrl_agent_steps_per_s']:,.0f} | 1.0 | | | | | | | |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from benchmarks import atari_loop, cleanrl_dqn

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", default="uniform,proportional,rank")
    parser.add_argument("--acting_steps", type=int, default=4000)
    parser.add_argument("--updates", type=int, default=3000)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--cleanrl_source", type=Path, default=Path(".peer/cleanrl/dqn_atari.py"))
    parser.add_argument("--cleanrl_seconds", type=float, default=45.0)
    parser.add_argument("--cleanrl_learning_starts", type=int, default=5000)
    parser.add_argument("--cleanrl_buffer_size", type=int, default=1_000_000)
    parser.add_argument(
        "--host_priorities",
        action="store_true",
        help="keep the priorities on the host (the setting of the host targets)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/atari_loop_gpu.json"))
    parser.add_argument("--loop_out", type=Path, default=None, help="also write atari_loop's full JSON here")
    parser.add_argument("--cleanrl_out", type=Path, default=None, help="also write CleanRL's full JSON here")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.atari_loop_gpu " + " ".join(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    arms = [a for a in args.arms.split(",") if a]
    settings = {**GPU_SETTINGS, "priorities_on_device": not args.host_priorities}
    loop = atari_loop.run(args.acting_steps, args.updates, arms, args.device, command, settings)
    if args.loop_out is not None:
        args.loop_out.write_text(json.dumps(loop, indent=1, default=float) + "\n")
    result: dict[str, Any] = {
        "device": loop["config"]["device_name"],
        "command": command,
        "settings": settings,
        "targets": {"agent_steps_per_s": TARGET_STEPS_PER_S, "replay_share": TARGET_REPLAY_SHARE},
        "targets_priorities_on_device": DEVICE_PRIORITY_TARGETS,
        "arms": {},
        "machine": loop["machine"],
    }
    for r in loop["arms"]:
        result["arms"][r["arm"]] = {
            "agent_steps_per_s": r["wall_steps_per_s"],
            "timed_parts_steps_per_s": r["steps_per_s"],
            "replay_share": r["replay_share_of_loop"],
            "device_backend": settings["priorities_on_device"] and r["arm"] in DEVICE_BACKENDS,
            "replay_in_update_graph": settings["priorities_on_device"] and r["arm"] in DEVICE_BACKENDS,
            "update_ms": r["update_ms"],
            "per_update_ms": r["per_update_ms"],
            "updates": r["updates"],
        }
    print(json.dumps(result["arms"], indent=1), flush=True)
    try:
        cleanrl = cleanrl_dqn.run(
            args.cleanrl_source,
            seconds=args.cleanrl_seconds,
            device=args.device,
            learning_starts=args.cleanrl_learning_starts,
            buffer_size=args.cleanrl_buffer_size,
        )
    except Exception as error:  # the loop's numbers stand without CleanRL's
        cleanrl = {"error": repr(error)}
    if args.cleanrl_out is not None:
        args.cleanrl_out.write_text(json.dumps(cleanrl, indent=1, default=float) + "\n")
    rate = cleanrl.get("agent_steps_per_s_learning")
    result["cleanrl_agent_steps_per_s"] = rate
    result["cleanrl"] = {k: v for k, v in cleanrl.items() if k not in ("stdout_tail",)}
    if rate:
        for entry in result["arms"].values():
            entry["over_cleanrl"] = entry["agent_steps_per_s"] / rate
    result["elapsed_s"] = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=float) + "\n")
    print(f"wrote {args.out}: CleanRL {rate}")
    return result


if __name__ == "__main__":
    main()
