"""Atari sweep: arms × seeds × games on one GPU, one process per game (``recipes/dqn/together.py``).

Each game's agents (every arm × seed) train together in one process: one vector environment, one
stacked network, one captured update for all of them; the games' processes run side by side on
the GPU and the CPU cores.  The sweep writes ``{"device", "protocol", "games": {game: {arm:
{"scores": [final score per seed]}}}}`` plus each process's timings, then the human-normalised
aggregates (median, IQM with stratified-bootstrap confidence intervals, Agarwal et al. 2021) and
a plot, with ``recipes/dqn/stats.py``.

The committed results (a lent H100; see ``docs/recipes/atari_ddqn.md``)::

    python -m recipes.dqn atari-sweep --games ALE/Pong-v5,ALE/Breakout-v5,ALE/Boxing-v5 \\
        --arms uniform,proportional,rank --seeds 3 --protocol atari100k --device cuda \\
        --set env_threads=4 --out docs/results/atari_sweep.json

A tiny run on a CPU (the test does this): ``--device cpu --set total_steps=400 --set
learning_starts=100 --set memory_size=1000 --set eval_steps=50``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from recipes.common import cli, launch, outputs
from recipes.dqn.config import CONFIG_DIR, load_config
from recipes.dqn.env_ids import atari_rom, check_env
from recipes.dqn.plan import atari_sweep_plan


def game_command(env: str, arms: str, seeds: int, protocol: str, sets: list[str], out: Path) -> list[str]:
    """The ``python -m recipes.dqn together`` command of one game."""
    command = [
        sys.executable,
        "-m",
        "recipes.dqn",
        "together",
        "--env",
        env,
        "--arms",
        arms,
        "--seeds",
        str(seeds),
        "--protocol",
        protocol,
        "--progress",
        "0",
        "--out",
        str(out),
        "--yes",  # the sweep asked once, before its games started
    ]
    for item in sets:
        command += ["--set", item]
    return command


def run_games(games: list[str], commands: list[list[str]], jobs: int) -> dict[str, float]:
    """Run the games' processes, ``jobs`` at a time; their wall seconds. A failure raises with its output."""
    pending = list(zip(games, commands, strict=True))
    running: list[tuple[str, subprocess.Popen[bytes], float]] = []
    walls: dict[str, float] = {}
    while pending or running:
        while pending and len(running) < jobs:
            game, command = pending.pop(0)
            print("start", game, " ".join(command[1:]), flush=True)
            running.append((game, subprocess.Popen(command), time.perf_counter()))
        for item in list(running):
            game, process, started = item
            if process.poll() is not None:
                running.remove(item)
                if process.returncode != 0:
                    raise RuntimeError(f"{game}: {' '.join(command)} exited with {process.returncode}")
                walls[game] = time.perf_counter() - started
                print(f"done {game} in {walls[game]:.0f} s", flush=True)
        time.sleep(0.5)
    return walls


def merge(games: list[str], game_jsons: list[Path], protocol: str, walls: dict[str, float]) -> dict[str, Any]:
    """The sweep's JSON from the games' results."""
    result: dict[str, Any] = {"device": None, "protocol": {"name": protocol}, "games": {}, "processes": {}}
    result["protocol"]["settings"] = yaml.safe_load(
        (CONFIG_DIR / "protocols" / f"{protocol}.yaml").read_text()
    )
    for env, path in zip(games, game_jsons, strict=True):
        run = json.loads(path.read_text())
        result["device"] = run["device_name"]
        arms: dict[str, Any] = {}
        for agent in run["agents"]:
            entry = arms.setdefault(agent["arm"], {"scores": [], "seeds": [], "eval_episodes": []})
            entry["scores"].append(agent["score"])
            entry["seeds"].append(agent["seed"])
            entry["eval_episodes"].append(agent["eval_episodes"])
        result["games"][atari_rom(env)] = arms
        result["protocol"]["config"] = run["config"]
        result["processes"][atari_rom(env)] = {
            "wall_s": walls.get(env),
            "train_s": run["train_s"],
            "steps_per_agent": run["steps_per_agent"],
            "updates_per_agent": run["updates_per_agent"],
            "timing_s": run["timing_s"],
            "agents": run["agents"],
        }
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``python -m recipes.dqn atari-sweep [options]``: run the games, write ``--out`` and the
    aggregates; ``--help`` lists the options.  What will run and its estimated time are printed
    first, and asked about once on a terminal when over an hour (``--yes`` does not ask); the
    games' ``together`` processes get ``--yes``, so that none asks again."""
    parser = cli.PlainHelpParser(prog="python -m recipes.dqn atari-sweep", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--games",
        default="ALE/Pong-v5,ALE/Breakout-v5,ALE/Boxing-v5",
        help="Atari games, a comma list of Gymnasium ids; one process each (default: %(default)s)",
    )
    parser.add_argument(
        "--arms",
        default="uniform,proportional,rank",
        help="arms, a comma list of recipes/dqn/configs/arms/<arm>.yaml (default: %(default)s)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=3,
        help="agents per arm and game, seeds 0 .. seeds-1 (default: %(default)s)",
    )
    parser.add_argument(
        "--protocol",
        default="atari100k",
        help="a file of recipes/dqn/configs/protocols (default: %(default)s)",
    )
    parser.add_argument(
        "--device", default="cuda", help="torch device of every game's process (default: %(default)s)"
    )
    parser.add_argument(
        "--jobs", type=int, default=0, help="games run at once, 0: all (default: %(default)s)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a config field of every agent (YAML value), e.g. --set total_steps=400; "
        "repeatable (default: none)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs/atari_sweep/atari_sweep.json"),
        help="JSON of every game's scores, timings and aggregates (default: %(default)s)",
    )
    parser.add_argument(
        "--plot", type=Path, default=None, help="PNG of scores and aggregates (default: beside --out)"
    )
    yes, argv = launch.take_yes(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    games = [g for g in args.games.split(",") if g]
    try:
        overrides = {**cli.field_overrides(args.set), "device": args.device}
    except ValueError as error:
        parser.error(str(error))
    with cli.reporting():
        for env in games:
            check_env(env)
        arms = [a for a in args.arms.split(",") if a]
        per_game = [
            [
                load_config(env, arm, protocol=args.protocol, seed=s, **overrides)
                for arm in arms
                for s in range(args.seeds)
            ]
            for env in games
        ]
    launch.confirm(atari_sweep_plan(games, per_game, args.jobs or len(games), str(args.out)), yes)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        game_jsons = [Path(tmp) / f"{atari_rom(env)}.json" for env in games]
        sets = [f"device={args.device}", *args.set]
        commands = [
            game_command(env, args.arms, args.seeds, args.protocol, sets, out)
            for env, out in zip(games, game_jsons, strict=True)
        ]
        walls = run_games(games, commands, args.jobs or len(games))
        result = merge(games, game_jsons, args.protocol, walls)
    result["wall_s"] = time.perf_counter() - started
    result["command"] = outputs.argv_command("python -m recipes.dqn atari-sweep", argv)
    try:
        from recipes.dqn import stats as atari_stats
    except ImportError:  # the aggregates need recipes/dqn/stats.py
        atari_stats = None  # type: ignore[assignment]
    args.out.parent.mkdir(parents=True, exist_ok=True)  # before the plot, which is written beside it
    if atari_stats is not None:
        reference = atari_stats.load_reference()
        result["aggregates"] = atari_stats.aggregate(result, reference)
        atari_stats.plot(result, reference, args.plot or args.out.with_suffix(".png"))
    outputs.write_json(args.out, result, default=float)
    print(f"wrote {args.out} ({result['wall_s']:.0f} s)")
    return result
