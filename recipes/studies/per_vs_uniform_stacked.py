"""The registered PER-vs-uniform study through the stacked engine: one resumable process per game.

``python -m recipes.studies per-vs-uniform stacked --envs MinAtar/Breakout-v1,MinAtar/Asterix-v1``
builds every registered (arm, seed) run of each environment exactly as ``run`` does
(:func:`~recipes.studies.per_vs_uniform_config.env_runs`: the arm file on the family's and
protocol's files, the environment's ``set``, the arm's ``set``; arms and seeds read from
``recipes/studies/configs/per_vs_uniform.yaml`` as it stands) and trains all of them as agents of
one process (:func:`recipes.dqn.minstack.train_stacked`), ``jobs`` processes at once.  Each agent
is Algorithm 1 with its own arm, seed, environment and replay, and writes ``train``'s run
directory, so the environment's sweep record (``<runs>/<env>.json``, ``.md``, ``.png``) and
``report`` are the same as after ``run``.

A process checkpoints every ``checkpoint_every`` agent steps and when it stops early
(``stop_after``, ``time_budget_s``) to ``<runs>/stacked/<env>.pt``; the same command continues
from there, in this session or a later one.  An environment whose runs all finished with these
configs is not run again.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from recipes.common import outputs
from recipes.dqn.minstack import train_stacked
from recipes.dqn.stack_parts import check_stacked
from recipes.dqn.sweep import finished_result
from recipes.dqn.sweep_report import write_record
from recipes.studies.per_vs_uniform_config import PROG, StackedConfig, env_runs, load_protocol

__all__ = ["checkpoint_path", "run_stacked", "train_env"]


def checkpoint_path(config: StackedConfig, env: str) -> Path:
    """Where the process of ``env`` keeps its checkpoint."""
    return Path(config.runs) / "stacked" / f"{env.replace('/', '_')}.pt"


def train_env(env: str, config: StackedConfig, position: int = 0) -> dict[str, Any]:
    """One environment's process: its agents trained (or their finished results taken as they are)
    up to the end or the stop; ``results`` holds each finished agent's ``result.json`` record with
    its curve's name as ``label``."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    runs, names = env_runs(load_protocol(), env, config)
    earlier = [finished_result(r) for r in runs]
    if all(e is not None for e in earlier):
        results = [{**e, "label": n} for e, n in zip(earlier, names, strict=True) if e is not None]
        walls = [r["wall_s"] for r in results]  # every agent of a process runs its whole time
        wall = None if None in walls else max(walls)
        return {"env": env, "stopped": "done", "reused": True, "run_wall_s": wall, "results": results}
    summary = train_stacked(
        runs,
        checkpoint=checkpoint_path(config, env),
        checkpoint_every=config.checkpoint_every,
        stop_after=config.stop_after,
        time_budget_s=config.time_budget_s,
        progress=config.progress,
        position=position,
    )
    if summary["results"]:  # the agents are done: each record gets its curve's name
        summary["results"] = [{**r, "label": n} for r, n in zip(summary["results"], names, strict=True)]
    return {**summary, "reused": False, "total_steps": runs[0].total_steps}


def run_stacked(config: StackedConfig, argv: list[str]) -> dict[str, Any]:
    """``stacked``: every environment's process, then, for each that finished, its sweep record.
    Every environment's agents are checked (:func:`~recipes.dqn.stack_parts.check_stacked`)
    before any process starts.  Returns ``{env: curves}`` of the finished environments."""
    protocol = load_protocol()
    planned = {env: env_runs(protocol, env, config) for env in config.envs}
    for runs, _ in planned.values():
        check_stacked(runs)
    out_dir = Path(config.runs)
    command = outputs.argv_command(f"{PROG} stacked", argv)
    curves: dict[str, Any] = {}

    def done(outcome: dict[str, Any]) -> None:
        env = outcome["env"]
        if outcome["stopped"] != "done":
            print(
                f"{env}: stopped ({outcome['stopped']}) at {outcome['steps_per_agent']:,} of "
                f"{outcome['total_steps']:,} agent steps per agent, "
                f"{outcome['agent_steps_per_s']:,.0f} agent steps/s in this process; the same command "
                f"continues from {checkpoint_path(config, env)}",
                file=sys.stderr,
            )
            return
        first = planned[env][0][0]
        curves[env] = write_record(
            env, first, outcome["results"], config.jobs, command, outcome["run_wall_s"], out_dir
        )
        what = "reused" if outcome["reused"] else f"{outcome['agent_steps_per_s']:,.0f} agent steps/s"
        stem = out_dir / env.replace("/", "_")
        print(
            f"{env}: done ({len(outcome['results'])} runs, {what}); wrote {stem}.json, .md, .png",
            file=sys.stderr,
        )

    jobs = max(1, min(config.jobs, len(config.envs)))
    if jobs == 1:
        for env in config.envs:
            done(train_env(env, config))
        return curves
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the workers before torch starts there
    context = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = {pool.submit(train_env, env, config, i): env for i, env in enumerate(config.envs)}
        for future in as_completed(futures):
            error = future.exception()
            if error is not None:
                print(
                    f"{futures[future]} failed after {time.perf_counter() - started:.0f} s: {error!r}",
                    file=sys.stderr,
                )
                continue
            done(future.result())
    return curves
