"""What ``python -m recipes.dqn train`` is about to run, and how long it should take.

:func:`run_plan` turns a :class:`~recipes.dqn.config.DDQNConfig` into the
:class:`~recipes.common.launch.RunPlan` that the command prints (and, on a terminal, asks about)
before it starts.  The time comes from the agent steps per second that committed JSON files
recorded (:data:`MEASUREMENTS`): an entry whose environment, device and arm are the run's gives an
estimate; without one, the fastest entry gives a lower bound.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from recipes.common.launch import Measured, RunPlan, measured
from recipes.dqn.config import DDQNConfig, run_dir
from recipes.dqn.env_ids import atari_rom
from recipes.dqn.sweep_config import SweepConfig, grid_points, run_config

__all__ = [
    "MEASUREMENTS",
    "QUICKEST_ENV",
    "SWEEP_JSON",
    "atari_sweep_plan",
    "measurement",
    "run_plan",
    "short_run",
    "sweep_plan",
    "together_plan",
]

QUICKEST_ENV = "CartPole-v1"
"""The environment whose runs finish soonest, suggested for a first run."""


def _loop_arm(arm: str) -> Callable[[Any], float]:
    """An arm's ``steps_per_s`` in a ``benchmarks/atari_loop.py`` JSON (``arms``: a list of records)."""
    return lambda data: float(next(a["steps_per_s"] for a in data["arms"] if a["arm"] == arm))


def _sweep_arm(arm: str) -> Callable[[Any], Sequence[float]]:
    """An arm's per-run ``steps_per_s`` in a ``python -m recipes.dqn sweep`` JSON (their median counts;
    a run whose speed is unknown, None, does not)."""
    return lambda data: [float(v) for v in data[arm]["steps_per_s"] if v is not None]


_SOURCES: tuple[tuple[str, str, str, str, Callable[[str], Callable[[Any], float | Sequence[float]]]], ...] = (
    # (env, device type, JSON, what was measured, reader of an arm's rate)
    (
        "ALE/Pong-v5",
        "cpu",
        "benchmarks/atari_loop.json",
        "learning loop on 2 CPU cores, one torch thread",
        _loop_arm,
    ),
    (
        "ALE/Pong-v5",
        "cuda",
        "docs/results/atari_loop_gpu.json",
        "learning loop on an NVIDIA H100, --env_threads 8 --overlap_env",
        lambda arm: lambda data: float(data["arms"][arm]["agent_steps_per_s"]),
    ),
    (
        "CartPole-v1",
        "cpu",
        "docs/results/cartpole.json",
        "median of a sweep's runs, one CPU core each",
        _sweep_arm,
    ),
    (
        "MinAtar/Breakout-v1",
        "cpu",
        "docs/results/minatar_breakout.json",
        "median of a sweep's runs, one CPU core each",
        _sweep_arm,
    ),
)
MEASUREMENTS: tuple[tuple[str, str, str], ...] = tuple(
    (env, device, arm) for env, device, *_ in _SOURCES for arm in ("uniform", "proportional", "rank")
)
"""``(env, device type, arm)`` of the configurations with a recorded throughput."""


def measurement(env: str, device: str, arm: str) -> Measured | None:
    """The agent steps/s recorded for ``env`` on ``device`` (``"cpu"`` or ``"cuda"``) with ``arm``."""
    for env_, device_, path, what, reader in _SOURCES:
        if (env_, device_) == (env, device):
            return measured(path, f"{env}, {arm} arm, {what}", reader(arm))
    return None


def short_run(cfg: DDQNConfig) -> str:
    """How to run a short version of ``cfg``: twice ``learning_starts`` steps (updates start halfway),
    or the quickest environment."""
    short = f"--total_steps {2 * cfg.learning_starts or 1000}"
    return (
        short if cfg.env == QUICKEST_ENV else f"{short}, or --env {QUICKEST_ENV} (the quickest environment)"
    )


def run_plan(cfg: DDQNConfig, device: str) -> RunPlan:
    """The plan of one ``train`` run of ``cfg`` on ``device`` (its type: ``"cpu"``, ``"cuda"``)."""
    steps = cfg.total_steps if cfg.stop_after is None else min(cfg.total_steps, cfg.stop_after)
    rate = measurement(cfg.env, device, cfg.arm)
    exact = rate is not None
    if rate is None:
        rate = _fastest()
    return RunPlan(
        command="python -m recipes.dqn train",
        what=f"Double DQN, arm {cfg.arm}, on {cfg.env} (device {device})",
        steps=steps,
        out_dir=str(run_dir(cfg)),
        short=short_run(cfg),
        rate=rate,
        exact=exact,
        time_budget_s=cfg.time_budget_s,
    )


def _combined(rates: Sequence[tuple[int, Measured]], label: str) -> Measured:
    """One rate for runs of several arms: total steps over the sum of each run's ``steps / rate``."""
    steps = sum(n for n, _ in rates)
    seconds = sum(n / m.steps_per_s for n, m in rates)
    return Measured(steps / seconds if seconds > 0 else rates[0][1].steps_per_s, rates[0][1].path, label)


def sweep_plan(config: SweepConfig) -> RunPlan:
    """The plan of ``python -m recipes.dqn sweep``: every arm × seed × grid point, ``jobs`` at once
    (each on one CPU core, as the sweeps' throughputs were measured), each run at its arm's rate."""
    runs = [
        run_config(config, arm, config.seed + k, point)
        for arm in config.arms
        for point in grid_points(config)
        for k in range(config.seeds)
    ]
    device = "cuda" if config.device.startswith("cuda") else "cpu"
    steps = [c.total_steps if c.stop_after is None else min(c.total_steps, c.stop_after) for c in runs]
    rates = [measurement(c.env, device, c.arm) for c in runs]
    rate: Measured | None = None
    exact = all(r is not None for r in rates)
    if exact:
        rate = _combined([(n, r) for n, r in zip(steps, rates, strict=True) if r is not None], "per arm")
        rate = Measured(rate.steps_per_s, rate.path, f"{config.env}, each arm's rate, " + _what(config.env))
    else:
        rate = _fastest()
    parallel = max(1, min(config.jobs, len(runs), os.cpu_count() or 1))
    return RunPlan(
        command="python -m recipes.dqn sweep",
        what=f"{len(runs)} Double DQN runs ({', '.join(config.arms)} x {config.seeds} seeds) on {config.env}",
        steps=sum(steps),
        out_dir=f"{config.out}.json, .png, .md and runs under {config.log_dir}",
        short=f"--seeds 1 --total_steps {2 * runs[0].learning_starts or 1000}",
        rate=rate,
        exact=exact,
        parallel=parallel,
    )


def _what(env: str) -> str:
    return next(what for env_, _, _, what, _ in _SOURCES if env_ == env)


def _fastest() -> Measured | None:
    known = [measurement(env, dev, arm) for env, dev, arm in MEASUREMENTS]
    return max((m for m in known if m is not None), key=lambda m: m.steps_per_s, default=None)


SWEEP_JSON = "docs/results/atari_sweep.json"
"""The committed Atari sweep: its games' processes' agent steps and seconds are the rates of
``together`` and ``atari-sweep`` on a GPU."""


def _game_rates(data: Any) -> dict[str, float]:
    """Agent steps per second of each game's ``together`` process in the Atari sweep's JSON."""
    return {
        game: len(p["agents"]) * p["steps_per_agent"] / p["train_s"] for game, p in data["processes"].items()
    }


def _lower_bound(cfg: DDQNConfig) -> Measured | None:
    """A rate no slower than the agents of ``cfg``'s kind train at: off a GPU, one agent's loop on
    the CPU (agents trained together share its cores); on one, the Atari sweep's fastest game."""
    if not cfg.device.startswith("cuda"):
        single = measurement(cfg.env, "cpu", cfg.arm)
        if single is not None:
            return single
    return measured(
        SWEEP_JSON, "the fastest game of the Atari sweep, on a GPU", lambda d: max(_game_rates(d).values())
    )


def together_plan(cfgs: Sequence[DDQNConfig], out: str, what: str, command: str) -> RunPlan:
    """The plan of one ``together`` process training the agents ``cfgs`` (one game): its rate is
    the committed sweep's for that game on a GPU; otherwise the fastest game's (a lower bound)."""
    env = cfgs[0].env
    on_gpu = cfgs[0].device.startswith("cuda")
    label = f"{env}, the Atari sweep's process on a GPU"
    rate = measured(SWEEP_JSON, label, lambda d: _game_rates(d)[atari_rom(env)])  # ValueError: not Atari
    exact = rate is not None and on_gpu
    if not exact:
        rate = _lower_bound(cfgs[0])
    return RunPlan(
        command=command,
        what=what,
        steps=sum(c.total_steps for c in cfgs),
        out_dir=out,
        short="--seeds 1 --set total_steps=4000 --set learning_starts=1000",
        rate=rate,
        exact=exact,
    )


def atari_sweep_plan(
    games: Sequence[str], per_game: Sequence[Sequence[DDQNConfig]], jobs: int, out: str
) -> RunPlan:
    """The plan of ``atari-sweep``: the games' ``together`` processes, ``jobs`` at once; the rate is
    the committed sweep's, all its games at once, when these are its games on a GPU."""
    on_gpu = all(c.device.startswith("cuda") for cfgs in per_game for c in cfgs)

    def whole(data: Any) -> float:
        steps = sum(len(p["agents"]) * int(p["steps_per_agent"]) for p in data["processes"].values())
        if not on_gpu or sorted(map(atari_rom, games)) != sorted(data["processes"]) or jobs < len(games):
            raise KeyError("another configuration")
        return float(steps) / float(data["wall_s"])

    rate = measured(SWEEP_JSON, "its games at once on a GPU", whole)
    exact = rate is not None
    if rate is None:
        rate = _lower_bound(per_game[0][0])
    agents = sum(len(cfgs) for cfgs in per_game)
    return RunPlan(
        command="python -m recipes.dqn atari-sweep",
        what=f"{len(games)} games ({', '.join(games)}), {agents} agents in all, {jobs} processes at once",
        steps=sum(c.total_steps for cfgs in per_game for c in cfgs),
        out_dir=out,
        short="--games ALE/Pong-v5 --seeds 1 --set total_steps=4000 --set learning_starts=1000",
        rate=rate,
        exact=exact,
        parallel=1 if exact else max(1, min(jobs, len(games))),
    )
