"""The Double DQN recipe's full loop on Pong: agent steps/s and the time spent in the replay memory.

For each arm, one run of ``recipes.dqn.run.train`` on ``ALE/Pong-v5`` (the Atari preset: Nature
CNN, 4 AtariVectorEnv environments, memory capacity 10^6, one update of 32 per 4 agent steps):
``L`` acting steps (ε = 1 while the memory fills), then ``U`` updates, after a short warm-up run
that compiles the replay's kernels.  The loop records the seconds spent in each of its parts
(acting, environment step, ``replay.add``, ``replay.sample``, the network update,
``replay.update_priorities``) for its acting and learning phases, so the steps/s and shares below
exclude start-up, logging and evaluation.
``replay.sample`` includes the sampler's draw and importance weights and the memory's gathering
of the frame stacks.  All arms run one after the other in one process, so the ratios compare
like with like.

Run alone, under the heavy-job lock (the JSON's numbers are the docs' numbers)::

    flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 python -m benchmarks.atari_loop \\
        --acting_steps 2000 --updates 300 --out benchmarks/atari_loop.json

It writes the JSON only (machine, versions, command, date, and per arm the numbers of the docs'
table); ``python -m benchmarks.run_all --from-json benchmarks/results.json --out docs/benchmarks.md``
then fills the tables of ``benchmarks/sections/atari_ddqn.md`` from it with :func:`run_facts` and
:func:`table` (see ``benchmarks.report.TABLES``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PARTS = ("act", "env", "add", "sample", "learn", "update_priorities")
DEFAULT_OUT = Path("runs") / "atari_loop.json"


def measure(
    arm: str,
    acting_steps: int,
    updates: int,
    log_dir: str,
    device: str,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Timings of the acting and learning phases of one arm's run (``overrides``: config fields)."""
    from recipes.dqn.config import load_config
    from recipes.dqn.run import train

    common: dict[str, Any] = dict(
        env="ALE/Pong-v5",
        arm=arm,
        eval_every=10**9,
        eval_steps=8,
        log_every=10**9,
        log_dir=log_dir,
        progress=False,
        tensorboard=False,
        device=device,
        seed=0,
        **(overrides or {}),
    )
    # compiles and loads the replay's kernels, so that the timed run measures steady state
    train(load_config(total_steps=64, learning_starts=32, run_name=f"{arm}-warmup", **common))
    run = train(
        load_config(
            total_steps=acting_steps + 4 * updates, learning_starts=acting_steps, run_name=arm, **common
        )
    )
    assert run.learning_phase is not None
    phase = run.learning_phase["timing_s"]
    done = run.learning_phase["updates"]
    acting = {part: run.timing_s[part] - phase[part] for part in PARTS}
    loop = sum(phase[part] for part in PARTS)
    replay = phase["add"] + phase["sample"] + phase["update_priorities"]
    return {
        "arm": arm,
        "overrides": overrides or {},
        "updates": done,
        "acting_steps_per_s": (run.steps - run.learning_phase["steps"]) / sum(acting.values()),
        "steps_per_s": run.learning_phase["steps"] / loop,
        "wall_steps_per_s": run.learning_phase["steps"] / run.learning_phase["wall_s"],
        "update_ms": 1000 * phase["learn"] / done,
        "per_update_ms": {p: 1000 * phase[p] / done for p in PARTS},
        "replay_share_of_loop": replay / loop,
        "replay_over_update": replay / phase["learn"],
        "sampler_over_update": (phase["sample"] + phase["update_priorities"]) / phase["learn"],
    }


def run(
    acting_steps: int,
    updates: int,
    arms: list[str],
    device: str,
    command: str,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every arm, one after the other, with the machine and versions they ran on."""
    from importlib import metadata

    import torch

    from benchmarks.run_all import machine

    torch.set_num_threads(1)
    started = time.perf_counter()
    info = machine()
    info["versions"]["ale-py"] = metadata.version("ale-py")
    info["versions"]["gymnasium"] = metadata.version("gymnasium")
    results: dict[str, Any] = {
        "command": command,
        "machine": info,
        "config": {
            "env": "ALE/Pong-v5",
            "acting_steps": acting_steps,
            "updates": updates,
            "arms": arms,
            "device": device,
            "device_name": "CPU"
            if torch.device(device).type == "cpu"
            else torch.cuda.get_device_name(device),
            "overrides": overrides or {},
        },
        "arms": [],
    }
    with tempfile.TemporaryDirectory() as log_dir:
        for arm in arms:
            results["arms"].append(measure(arm, acting_steps, updates, log_dir, device, overrides))
            print(results["arms"][-1], flush=True)
    results["elapsed_s"] = time.perf_counter() - started
    return results


def run_facts(results: dict[str, Any]) -> str:
    """The run behind the docs' table (``docs/benchmarks.md``): environment, lengths, machine."""
    from benchmarks.report import facts

    m, c = results["machine"], results["config"]
    return facts(
        [
            ("Environment", f"`{c['env']}`, networks on {c['device_name']}"),
            ("Timed", f"{c['updates']} updates after {c['acting_steps']:,} acting steps"),
            (
                "Machine",
                f"{m['usable_cpus']} × {m['cpu']}, torch {m['versions']['torch']}, ale-py "
                f"{m['versions']['ale-py']}, Python {m['python']}, prisample `{m['prisample_commit']}`, "
                f"{m['date'][:10]}",
            ),
            ("Command", f"`{results['command']}` ({results['elapsed_s']:.0f} s)"),
        ]
    )


def table(results: dict[str, Any]) -> str:
    """Per arm: steps/s with and without updates and the replay's time per update; every number of
    the table is a value of ``results``."""
    lines = [
        "| arm | acting only, steps/s | full loop, steps/s | network update, ms | replay.add per update, ms "
        "| replay.sample, ms | update_priorities, ms | replay share of the loop | replay / update "
        "| sampler (sample + update) / update |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["arms"]:
        per = r["per_update_ms"]
        lines.append(
            f"| {r['arm']} | {r['acting_steps_per_s']:,.0f} | {r['steps_per_s']:,.1f} | {r['update_ms']:.1f} "
            f"| {per['add']:.2f} | {per['sample']:.2f} | {per['update_priorities']:.2f} "
            f"| {100 * r['replay_share_of_loop']:.2f}% | {100 * r['replay_over_update']:.2f}% "
            f"| {100 * r['sampler_over_update']:.2f}% |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from recipes.dqn.config import PAPER_ARMS as ARMS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--acting_steps", type=int, default=2_000, help="steps before the first update")
    parser.add_argument("--updates", type=int, default=200, help="updates timed per arm")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated arms")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a config field for every arm (YAML value), e.g. --set num_envs=16",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"JSON results (default: {DEFAULT_OUT}; the docs cite benchmarks/atari_loop.json)",
    )
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown or not arms:
        parser.error(f"--arms should be a comma-separated subset of {','.join(ARMS)}, but got {args.arms!r}")
    command = "python -m benchmarks.atari_loop " + " ".join(sys.argv[1:] if argv is None else argv)
    from recipes.common import cli

    try:
        overrides = cli.field_overrides(args.set)
    except ValueError as error:
        parser.error(str(error))
    results = run(args.acting_steps, args.updates, arms, args.device, command.strip(), overrides)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=float) + "\n")
    print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
