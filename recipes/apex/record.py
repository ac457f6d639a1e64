"""What an Ape-X run records (``recipes/apex/run.py``): while it runs, the progress bar, the
actors' finished episodes, the time budget, the evaluations of θ and the metrics log; at its end,
``apex_dqn.json``.

Evaluation is the single-process recipe's (:class:`recipes.dqn.parts.Evaluator`: ε = 0.01 play
on fresh episodes every ``eval_every`` env steps, the best policy re-evaluated at the end); while
the learner evaluates, the actors run the chunks they were given and then wait.
"""

from __future__ import annotations

import math
import os
import pickle
import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import ray
import torch
from tqdm import tqdm

from recipes.apex.config import ApexConfig, command
from recipes.apex.fleet import ActorFleet
from recipes.common import outputs
from recipes.dqn.config import DDQNConfig
from recipes.dqn.envs import Evaluation, make_env
from recipes.dqn.parts import Evaluator, Logger, MetricWindow, Timer


class LearnerView(Protocol):
    """What the record reads of the learner (``recipes.apex.run.Learner``)."""

    @property
    def q(self) -> torch.nn.Module: ...
    @property
    def device(self) -> torch.device: ...
    @property
    def timer(self) -> Timer: ...
    @property
    def window(self) -> MetricWindow: ...
    @property
    def beta(self) -> float: ...
    @property
    def updates(self) -> int: ...
    @property
    def publishes(self) -> int: ...


class RunRecord:
    """A run's bookkeeping between learner updates (:meth:`after_chunks`), its last evaluation
    (:meth:`final_evaluation`) and its ``apex_dqn.json`` (:meth:`write`)."""

    def __init__(
        self,
        config: ApexConfig,
        cfg: DDQNConfig,
        folder: Path,
        learner: LearnerView,
        fleet: ActorFleet,
        started: float,
        load_start: tuple[float, float, float],
    ) -> None:
        self.config, self.cfg, self.folder, self.learner, self.fleet = config, cfg, folder, learner, fleet
        self.started, self.load_start = started, load_start
        self.logger = Logger(folder, tensorboard=False, resume=False)
        self.evaluator = Evaluator(
            make_env(config.env, cfg.eval_envs)[0],
            epsilon=cfg.eval_epsilon,
            max_steps=cfg.eval_steps,
            max_episodes=cfg.eval_episodes,
            seed=config.seed,
            device=learner.device,
            scores=None,
            logger=self.logger,
            run_dir=folder,
        )
        self.evaluating = config.eval_every != 0
        low, high = config.min_replay_ratio, config.max_replay_ratio
        self.eval_ratio = low if low is not None and low == high else None
        """The matched ratio r (min = max), or None: a nominal evaluation step t waits for the
        r · (t − learning_from) updates the single-process recipe has made by its step t."""
        self.learning_from: int | None = None
        """Env steps when learning started (set by the loop)."""
        self.next_eval: int | None = cfg.eval_every if self.evaluating else None
        self.next_log = cfg.log_every
        self.stopped = "done"
        self.returns: list[float] = []
        """Undiscounted returns of the actors' finished episodes, in the order their chunks returned."""
        self.eval_env_steps: list[int] = []
        """Env steps the actors had taken at each evaluation (its nominal step: a multiple of eval_every)."""
        self.best: Evaluation | None = None
        self.bar = tqdm(
            total=config.total_steps,
            desc=f"Ape-X {config.env} ×{config.actors}",
            unit="step",
            disable=not config.progress,
            dynamic_ncols=True,
            smoothing=0.05,
        )

    def after_chunks(self, results: list[dict[str, Any]]) -> None:
        """Chunks that returned: the bar, the actors' episodes, the time budget, due evaluations."""
        learner, fleet = self.learner, self.fleet
        for result in results:
            self.returns += result["returns"]
        self.bar.update(fleet.steps - self.bar.n)
        budget = self.config.time_budget_s
        if budget is not None and time.perf_counter() - self.started > budget:
            fleet.stop()
            self.stopped = "time_budget"
        if self.next_eval is not None and eval_due(
            fleet.steps, self.next_eval, learner.updates, self.eval_ratio, self.learning_from
        ):
            with learner.timer("eval"):  # the chunks queued run on; new ones wait for the learner
                result = self.evaluator.select(learner.q, self.next_eval)
            self.eval_env_steps.append(fleet.steps)
            self.next_eval += self.cfg.eval_every
            self.bar.set_postfix_str(f"eval {result.score:.1f}, {learner.updates} updates", refresh=False)
        if fleet.steps >= self.next_log:
            recent = self.returns[-20:]
            self.logger.log(
                "metrics",
                fleet.steps,
                {
                    "train/episode_return": float(np.mean(recent)) if recent else math.nan,
                    "train/episodes": float(len(self.returns)),
                    "per/beta": float(learner.beta),
                    "updates": float(learner.updates),
                    **learner.window.drain(),
                },
            )
            self.next_log += self.cfg.log_every

    def close_bar(self) -> None:
        self.bar.close()

    def final_evaluation(self) -> None:
        """θ at the last env step, unless evaluated there or cut by the time budget; then the best
        policy on fresh episodes (:attr:`best`)."""
        record, steps = self.evaluator.record, self.fleet.steps
        if self.evaluating and self.stopped == "done" and (not record.steps or record.steps[-1] < steps):
            with self.learner.timer("eval"):
                self.evaluator.select(self.learner.q, steps)
            self.eval_env_steps.append(steps)
        self.best = self.evaluator.reevaluate_best(self.learner.q) if self.evaluating else None
        self.logger.close()
        self.evaluator.env.close()

    def write(
        self, totals: list[dict[str, Any]], stats: dict[str, int], learning: dict[str, float]
    ) -> dict[str, Any]:
        """Write ``apex_dqn.json`` to the run folder and return its contents: :meth:`summary`, then
        the load average at the start and the end (other jobs on the machine show there)."""
        result = self.summary(totals, stats, learning, time.perf_counter() - self.started)
        result["loadavg"] = {"start": self.load_start, "end": os.getloadavg()}
        outputs.write_json(self.folder / "apex_dqn.json", result)
        return result

    def summary(
        self, totals: list[dict[str, Any]], stats: dict[str, int], learning: dict[str, float], wall: float
    ) -> dict[str, Any]:
        """Config, command, machine, rates, replay ratio, the eval curve.  Its keys ``eval_steps``,
        ``eval_scores``, ``best_score``, ``best_policy_score``, ``steps``, ``steps_per_s``,
        ``wall_s``, ``stopped`` and ``run_dir`` read as the single-process recipe's ``result.json``
        (``recipes.dqn.sweep_report.collect`` takes both).  ``totals``: the actors' :meth:`finish`;
        ``stats``: the memory's; ``learning``: seconds and env steps since the first update."""
        config, cfg, learner, record, best = (
            self.config,
            self.cfg,
            self.learner,
            self.evaluator.record,
            self.best,
        )
        env_steps, pulls = self.fleet.steps, sum(t["pulls"] for t in totals)
        seconds, timing = learning["s"], learner.timer.totals
        return {
            "config": asdict(config),
            "learner_config": asdict(cfg),
            "command": command(config),
            "machine": outputs.machine_description(),
            "device": describe_device(learner.device),
            "ray": {
                "version": ray.__version__,
                "actor_cpus": config.actor_cpus,
                "machine_cpus": os.cpu_count(),
            },
            "run_dir": str(self.folder),
            "stopped": self.stopped,
            "steps": env_steps,
            "transitions_sent": sum(t["transitions"] for t in totals),
            "transitions_added": stats["num_added"],
            "updates": learner.updates,
            "wall_s": wall,
            "steps_per_s": env_steps / wall,
            "learning_s": seconds,
            "learning_env_steps": learning["steps"],
            "actor_steps_per_s": learning["steps"] / seconds if seconds > 0 else math.nan,
            "learner_updates_per_s": learner.updates / seconds if seconds > 0 else math.nan,
            "replay_ratio": {
                "updates_per_env_step": learner.updates / env_steps,
                "updates_per_env_step_while_learning": learner.updates / max(learning["steps"], 1),
                "replayed_per_added": learner.updates * cfg.batch_size / max(stats["num_added"], 1),
                "max_updates_per_env_step": config.max_replay_ratio,
                "min_updates_per_env_step": config.min_replay_ratio,
                "samples_per_insert": config.samples_per_insert,
                "rate_limiter": {key: stats[key] for key in RATE_LIMITER_STATS if key in stats},
                "recipe_updates_per_env_step": 1.0 / cfg.replay_period,
            },
            "dropped_updates": stats["dropped_updates"],
            "wire": wire_summary(totals),
            "weights": {
                "publishes": learner.publishes,
                "publish_ms_mean": 1e3 * timing["publish"] / max(learner.publishes, 1),
                "pulls": pulls,
                "pull_ms_mean": 1e3 * sum(t["timing_s"]["pull"] for t in totals) / max(pulls, 1),
            },
            "learner_timing_s": dict(timing),
            "actors": [{"index": i, **t} for i, t in enumerate(totals)],
            "eval_steps": list(record.steps),
            "eval_scores": list(record.scores),
            "eval_episodes": list(record.episodes),
            "eval_env_steps": self.eval_env_steps,
            "best_score": record.best_score if record.best_step is not None else math.nan,
            "best_policy_score": best.score if best is not None else math.nan,
            "best_policy_episodes": best.episodes if best is not None else 0,
            "train_returns_last_20": float(np.mean(self.returns[-20:])) if self.returns else math.nan,
        }


RATE_LIMITER_STATS = ("inserts", "samples", "insert_waits", "sample_waits", "insert_wait_s", "sample_wait_s")
"""The memory's rate-limiter counters a run reports (``RemoteReplay.stats``; absent without one)."""


def wire_nbytes(message: dict[str, np.ndarray], priorities: np.ndarray | None) -> int:
    """Bytes of a send as pickled (protocol 5, what Ray's serializer builds on)."""
    return len(pickle.dumps((message, priorities), protocol=5))


def wire_summary(totals: list[dict[str, Any]]) -> dict[str, Any]:
    """Bytes the actors' sends took as pickled, per transition: as sent (frame stacks one frame
    at a time for Atari) and as the same transitions with whole stacks would have been; and the
    frames sent per transition (Atari; 0 otherwise)."""
    sent = max(sum(t["transitions"] for t in totals), 1)
    return {
        "bytes_per_transition": sum(t["wire_bytes"] for t in totals) / sent,
        "full_stack_bytes_per_transition": sum(t["stack_bytes"] for t in totals) / sent,
        "frames_per_transition": sum(t["frames_sent"] for t in totals) / sent,
        "transitions": sum(t["transitions"] for t in totals),
    }


def eval_due(steps: int, nominal: int, updates: int, ratio: float | None, learning_from: int | None) -> bool:
    """Whether the evaluation of nominal env step ``nominal`` is due: the actors have taken that
    many env steps, and, in a matched run (``ratio``: min_replay_ratio = max_replay_ratio), the
    learner has made the ``ratio · (nominal − learning_from)`` updates the single-process recipe
    has made by its step ``nominal``.  (The actors run ahead of the learner by up to their queued
    chunks: evaluating as soon as their steps reach ``nominal`` measured θ some 500 updates short
    of the single process's on CartPole, which lowered Ape-X's curve but not its final score.)"""
    if steps < nominal:
        return False
    if ratio is None or learning_from is None:
        return True
    return updates >= ratio * (nominal - learning_from)


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()})"
