"""Pong at 10M frames on a lent GPU against Dopamine's baselines: the registered study, run by run.

The protocol (``recipes/studies/configs/atari_pong.yaml``, registered before any run) trains the
paper's three arms (uniform at η, proportional and rank at η/4; Double DQN, Algorithm 1) for 10M
frames under Dopamine's Atari protocol (``recipes/dqn/configs/protocols/dopamine_atari.yaml``:
sticky actions, ε 1 → 0.01 over 250,000 agent steps, ...) and scores them as Dopamine scores its
baselines: per iteration of 250,000 agent steps, the mean return of the training episodes that
ended within it.  A lent GPU machine runs a command for at most 600 s, so the study runs one
(arm, seed) per call and its results accumulate::

    python -m recipes.studies atari-pong next --out "$OUT"          # on the GPU machine
    python -m recipes.studies atari-pong merge --runs <run json> ... # here, into the results

``next`` takes the first (arm, seed) of the registered order that the results lack.  It first
trains a probe of the same config for ``gate.probe_steps`` learning-phase steps, and trains the run
only when the probe's rate reaches the gate (``gate.min_agent_steps_per_s``) and lets the run end
within the call; otherwise it writes ``atari_pong_gate.json`` (the probe, the rate it needed) and
trains nothing.  A finished run writes ``atari_pong_<arm>_seed<k>.json``: its iteration curve, AUC
(mean over iterations 0-9), final value (iteration 9), the evaluation after training, its speed,
device and source commit.  ``merge`` (``recipes/studies/atari_pong_report.py``) adds such files to
``docs/results/atari_pong.json`` and writes its table and plot.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from recipes.common import cli, launch, outputs
from recipes.common.provenance import now, source_tree
from recipes.studies.atari_pong_config import (
    PROG,
    MergeConfig,
    NextConfig,
    load_protocol,
    parse_command,
    planned,
)

__all__ = [
    "iteration_returns",
    "main",
    "pending",
    "required_rate",
    "run_config",
    "run_name",
    "run_next",
]


def pending(protocol: dict[str, Any], results: dict[str, Any] | None) -> list[tuple[str, int]]:
    """The registered runs the results lack, in order."""
    done = {(r["arm"], r["seed"]) for r in (results or {}).get("runs", [])}
    return [run for run in planned(protocol) if run not in done]


def run_name(arm: str, seed: int) -> str:
    """The stem of a run's JSON file."""
    return f"atari_pong_{arm}_seed{seed}"


def run_config(protocol: dict[str, Any], arm: str, seed: int, out: str, overrides: dict[str, Any]) -> Any:
    """The run's ``DDQNConfig``: the arm file on the Atari family's and Dopamine's protocol files,
    the protocol's ``set``, then ``overrides``."""
    from recipes.dqn.config import load_config

    values = {
        "total_steps": protocol["total_steps"],
        **protocol["set"],
        "log_dir": str(Path(out) / "runs"),
        "progress": False,
        **overrides,
    }
    return load_config(protocol["env"], arm, protocol=protocol["dqn_protocol"], seed=seed, **values)


def required_rate(protocol: dict[str, Any], total_steps: int, time_budget_s: float) -> float:
    """The agent steps/s a run needs: the gate's, and enough to end within the call's budget less
    its allowance (start-up, probe, evaluation)."""
    gate = protocol["gate"]
    training_s = time_budget_s - float(gate["allowance_s"])
    if training_s <= 0:
        return math.inf
    return max(float(gate["min_agent_steps_per_s"]), total_steps / training_s)


def iteration_returns(
    metrics_csv: Path, iteration_steps: int, iterations: int
) -> tuple[list[float], list[int]]:
    """Per iteration, the mean return of the training episodes that ended within it (NaN where
    none did) and their number, from ``metrics.csv``'s cumulative ``train/episodes`` and
    ``train/return_sum`` at each iteration's last step."""
    at: dict[int, tuple[float, float]] = {0: (0.0, 0.0)}
    with metrics_csv.open(newline="") as f:
        for row in csv.DictReader(f):
            step = int(float(row["step"]))
            if step % iteration_steps == 0:
                at[step] = (float(row["train/episodes"]), float(row["train/return_sum"]))
    means, counts = [], []
    for k in range(1, iterations + 1):
        if k * iteration_steps not in at:
            raise ValueError(
                f"metrics_csv should have a row at step {k * iteration_steps:,} (iteration {k - 1}'s "
                f"end), but got metrics_csv={str(metrics_csv)!r} without it"
            )
        (e0, s0), (e1, s1) = at[(k - 1) * iteration_steps], at[k * iteration_steps]
        episodes = round(e1 - e0)
        counts.append(episodes)
        means.append((s1 - s0) / episodes if episodes else math.nan)
    return means, counts


def _learning_rate(result: Any) -> float:
    phase = result.learning_phase
    return float(phase["steps"] / phase["wall_s"]) if phase and (phase["wall_s"] or 0) > 0 else 0.0


def _device_name(cfg: Any) -> str:
    import torch

    if cfg.device.startswith("cuda") and torch.cuda.is_available():
        return str(torch.cuda.get_device_name(0))
    return f"CPU ({os.cpu_count()} logical cores)"


def _source(config: NextConfig) -> dict[str, Any]:
    tree = source_tree()
    if tree["commit"] is None and config.source_commit is not None:
        tree = {"commit": config.source_commit, "clean": config.source_clean, "given": True}
    return {**tree, "started": now()}


def _probe(cfg: Any, probe_steps: int) -> tuple[float, dict[str, Any]]:
    """Train ``cfg`` for its replay start plus ``probe_steps`` steps (at most its own); its
    learning-phase rate."""
    from recipes.dqn.run import train

    steps = cfg.learning_starts + min(probe_steps, cfg.total_steps - cfg.learning_starts)
    probe = replace(
        cfg,
        total_steps=steps,
        eval_every=steps,
        eval_steps=1_000,
        run_name=f"probe/{cfg.arm}_seed{cfg.seed}",
        time_budget_s=None,
    )
    result = train(probe)
    rate = _learning_rate(result)
    return rate, {"steps": result.steps, "wall_s": result.wall_s, "learning_steps_per_s": rate}


def run_next(config: NextConfig, argv: list[str]) -> dict[str, Any]:
    """``next`` (see the module's docstring); returns the record it wrote (``{}`` when the
    registered runs are all in the results)."""
    started = time.perf_counter()
    protocol = load_protocol()
    results_path = Path(config.results)
    results = json.loads(results_path.read_text()) if results_path.exists() else None
    todo = pending(protocol, results)
    if not todo:
        print(f"every registered run is in {config.results}: nothing to train", file=sys.stderr)
        return {}
    arm, seed = todo[0]
    overrides = cli.field_overrides(config.set)
    cfg = run_config(protocol, arm, seed, config.out, overrides)
    base = {
        "study": "atari_pong",
        "arm": arm,
        "seed": seed,
        "registered": not overrides,
        "overrides": overrides,
        "protocol": protocol,
        "device_name": _device_name(cfg),
        "source": _source(config),
        "loadavg_start": list(os.getloadavg()),
        "command": outputs.argv_command(f"{PROG} next", argv),
    }
    print(f"{arm} seed {seed}: probe of {protocol['gate']['probe_steps']:,} learning steps", file=sys.stderr)
    rate, probe = _probe(cfg, protocol["gate"]["probe_steps"])
    needed = required_rate(protocol, cfg.total_steps, config.time_budget_s)
    probe = {**probe, "needed_steps_per_s": needed}
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    if rate < needed:
        record = {**base, "probe": probe, "trained": False, "wall_s": time.perf_counter() - started}
        outputs.write_json(out / "atari_pong_gate.json", record)
        print(
            f"{arm} seed {seed}: the probe ran {rate:,.0f} agent steps/s, below the {needed:,.0f} the run "
            f"needs (gate and budget): not trained; wrote {out / 'atari_pong_gate.json'}",
            file=sys.stderr,
        )
        return record
    from recipes.dqn.run import train

    left = config.time_budget_s - (time.perf_counter() - started) - protocol["gate"]["allowance_s"] / 2
    result = train(replace(cfg, time_budget_s=max(left, 1.0)))
    iterations = cfg.total_steps // protocol["iteration_steps"]
    done = result.stopped == "done" and result.steps >= cfg.total_steps
    curve, episodes = (
        iteration_returns(Path(result.run_dir) / "metrics.csv", protocol["iteration_steps"], iterations)
        if done
        else ([], [])
    )
    finite = [v for v in curve if math.isfinite(v)]
    record = {
        **base,
        "probe": probe,
        "trained": True,
        "complete": done,
        "stopped": result.stopped,
        "steps": result.steps,
        "iteration_returns": curve,
        "iteration_episodes": episodes,
        "auc": sum(finite) / len(finite) if done and len(finite) == len(curve) else None,
        "final": curve[-1] if done and curve and math.isfinite(curve[-1]) else None,
        "eval_score": result.eval_scores[-1] if result.eval_scores else None,
        "learning_steps_per_s": _learning_rate(result),
        "train_wall_s": result.wall_s,
        "wall_s": time.perf_counter() - started,
        "loadavg_end": list(os.getloadavg()),
        "config": asdict(cfg),
    }
    path = out / f"{run_name(arm, seed)}.json"
    outputs.write_json(path, record, default=float)
    state = "finished" if done else f"stopped ({result.stopped}) at {result.steps:,} steps"
    print(f"{arm} seed {seed}: {state}; wrote {path}", file=sys.stderr)
    return record


def main(argv: list[str] | None = None) -> Any:
    """``python -m recipes.studies atari-pong next|merge [options]``."""
    _, options = launch.take_yes(sys.argv[1:] if argv is None else argv)
    config = parse_command(options)
    if isinstance(config, MergeConfig):
        from recipes.studies.atari_pong_report import merge

        return merge(config, options[1:])
    return run_next(config, options[1:])
