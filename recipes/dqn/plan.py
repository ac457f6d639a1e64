"""What ``python -m recipes.dqn train`` is about to run, and how long it should take.

:func:`run_plan` turns a :class:`~recipes.dqn.config.DDQNConfig` into the
:class:`~recipes.common.launch.RunPlan` that the command prints (and, on a terminal, asks about)
before it starts.  The time comes from the agent steps per second that committed JSON files
recorded (:data:`MEASUREMENTS`): an entry whose environment, device and arm are the run's gives an
estimate; without one, the fastest entry gives a lower bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from recipes.common.launch import Measured, RunPlan, measured
from recipes.dqn.config import DDQNConfig, run_dir

__all__ = ["MEASUREMENTS", "QUICKEST_ENV", "measurement", "run_plan", "short_run"]

QUICKEST_ENV = "CartPole-v1"
"""The environment whose runs finish soonest, suggested for a first run."""


def _loop_arm(arm: str) -> Callable[[Any], float]:
    """An arm's ``steps_per_s`` in a ``benchmarks/atari_loop.py`` JSON (``arms``: a list of records)."""
    return lambda data: float(next(a["steps_per_s"] for a in data["arms"] if a["arm"] == arm))


def _sweep_arm(arm: str) -> Callable[[Any], Sequence[float]]:
    """An arm's per-run ``steps_per_s`` in a ``python -m recipes.dqn sweep`` JSON (their median counts)."""
    return lambda data: [float(v) for v in data[arm]["steps_per_s"]]


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
        known = [measurement(env, dev, arm) for env, dev, arm in MEASUREMENTS]
        rate = max((m for m in known if m is not None), key=lambda m: m.steps_per_s, default=None)
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
