"""Agent steps per second of N Double DQN agents stacked in one process on one game of the protocol.

For each N (default 1, 4, 8, 16, 20) one process of :func:`recipes.dqn.minstack.train_stacked`
trains N agents of the registered study's arms (``recipes/studies/configs/per_vs_uniform.yaml``:
agent ``i`` runs arm ``i mod arms`` with seed ``i div arms``, under the game's registered
protocol and evaluation settings) for ``learning_starts + steps`` agent steps each.  The figure
is the learning phase's throughput, all agents together:

    agent steps/s per process = N · (agent steps since the first update) / (wall seconds since then)

evaluations included when ``--evaluate 1`` (the registered schedule; 0: none), start-up and the
ε = 1 fill excluded.  One run after the other in this process, one torch thread; the load
average before and after each is written beside it: a figure taken while other processes used
the cores is not the engine's alone.

Run alone, under the heavy-job lock::

    flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 python -m benchmarks.minatar_stack \\
        --env MinAtar/Breakout-v1 --agents 1,4,8,16,20 --steps 20000 --out benchmarks/minatar_stack.json

A smoke run: ``--agents 1,2 --steps 200 --set '{"memory_size": 2000}' --out /tmp/smoke.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path("runs") / "minatar_stack.json"
DEFAULT_AGENTS = "1,4,8,16,20"

__all__ = ["DEFAULT_AGENTS", "DEFAULT_OUT", "agent_configs", "main", "measure"]


def agent_configs(
    env: str, agents: int, total_steps: int, log_dir: str, overrides: dict[str, Any]
) -> list[Any]:
    """``agents`` configs of the registered arms of ``env``, cycled, seeds counting up per arm."""
    from recipes.dqn.config import load_config
    from recipes.studies.per_vs_uniform_config import load_protocol

    protocol = load_protocol()
    if env not in protocol["envs"]:
        raise ValueError(f"env should be one of the protocol's {sorted(protocol['envs'])}, but got {env!r}")
    spec = protocol["envs"][env]
    arms = list(spec["arms"].items())
    cfgs = []
    for i in range(agents):
        name, arm = arms[i % len(arms)]
        seed = i // len(arms)
        values = {**spec["set"], **arm["set"], **overrides}
        values.setdefault("total_steps", total_steps)
        cfgs.append(
            load_config(
                env,
                arm["arm"],
                spec["protocol"],
                seed=seed,
                log_dir=log_dir,
                run_name=f"{name.replace(' ', '_')}/seed{seed}",
                progress=False,
                tensorboard=False,
                **values,
            )
        )
    return cfgs


def measure(env: str, agents: int, steps: int, evaluate: bool, overrides: dict[str, Any]) -> dict[str, Any]:
    """One process's learning-phase throughput with ``agents`` agents (see the module's docstring)."""
    from recipes.dqn.minstack import train_stacked

    extra = dict(overrides) if evaluate else {**overrides, "eval_every": 10**12, "log_every": 10**12}
    load_start = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        start = agent_configs(env, 1, 10**9, tmp, extra)[0].learning_starts
        cfgs = agent_configs(env, agents, start + steps, tmp, extra)
        summary = train_stacked(cfgs, progress=False)
    learning = summary["learning_phase"]
    return {
        "agents": agents,
        "arms": [f"{c.arm} lr_divisor={c.lr_divisor:g} seed {c.seed}" for c in cfgs],
        "agent_steps_per_s": agents * learning["steps"] / learning["wall_s"],
        "steps_per_s_per_agent": learning["steps"] / learning["wall_s"],
        "learning_steps_per_agent": learning["steps"],
        "updates_per_agent": summary["updates_per_agent"],
        "learning_wall_s": learning["wall_s"],
        "learning_timing_s": learning["timing_s"],
        "wall_s": summary["wall_s"],
        "loadavg_start": load_start,
        "loadavg_end": list(os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``python -m benchmarks.minatar_stack [options]``: measure, then write ``--out``."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.minatar_stack", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--env", default="MinAtar/Breakout-v1", help="an environment of the protocol (default: %(default)s)"
    )
    parser.add_argument(
        "--agents", default=DEFAULT_AGENTS, help="agents per process, a comma list (default: %(default)s)"
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=20_000,
        help="agent steps per agent after learning starts (default: %(default)s)",
    )
    parser.add_argument(
        "--evaluate",
        type=int,
        default=1,
        help="1: the registered evaluations run and count; 0: none (default: %(default)s)",
    )
    parser.add_argument("--set", default="{}", help="config fields of every agent, as JSON (default: none)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON written (default: %(default)s)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        counts = [int(a) for a in args.agents.split(",") if a.strip()]
        overrides = json.loads(args.set)
    except ValueError as error:
        parser.error(f"--agents should be a comma list of integers and --set a JSON object: {error}")
    if not counts or min(counts) < 1 or args.steps < 1 or not isinstance(overrides, dict):
        parser.error(
            f"--agents should be integers >= 1 and --steps >= 1, but got {args.agents!r}, {args.steps}"
        )
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from benchmarks.run_all import machine

    torch.set_num_threads(1)
    results: dict[str, Any] = {
        "benchmark": "minatar_stack",
        "command": "python -m benchmarks.minatar_stack " + shlex.join(sys.argv[1:] if argv is None else argv),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": {"env": args.env, "steps": args.steps, "evaluate": bool(args.evaluate), "set": overrides},
        "runs": [],
    }
    for n in counts:
        started = time.perf_counter()
        run = measure(args.env, n, args.steps, bool(args.evaluate), overrides)
        results["runs"].append(run)
        print(
            f"{n:3d} agents: {run['agent_steps_per_s']:8.0f} agent steps/s per process "
            f"({time.perf_counter() - started:.0f} s, load {run['loadavg_start'][0]:.2f})",
            file=sys.stderr,
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")  # after every N: a cut run keeps the rest
    return results


if __name__ == "__main__":
    main()
