"""Shared parts of the DQN recipes: timers, metric windows, CSV/TensorBoard logging, the progress bar,
evaluation bookkeeping and the run's result record (DQN Zoo's ``parts.py``).

None of this is the algorithm: ``recipes/dqn/agent.py`` holds the learning rule and
``recipes/dqn/run.py`` the loop, which calls these parts, so it reads as Algorithm 1 of Schaul et
al. (2016).
"""

from __future__ import annotations

import csv
import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm import tqdm

if TYPE_CHECKING:
    from recipes.dqn.config import DDQNConfig

COLUMNS = {
    "metrics": (
        "step",
        "train/episode_return",
        "train/episodes",
        "train/return_sum",
        "train/epsilon",
        "train/loss",
        "train/td_abs",
        "per/alpha",
        "per/beta",
        "per/weight_mean",
        "per/weight_min",
        "per/max_priority",
        "perf/steps_per_s",
        "replay/size",
        "updates",
    ),
    "eval": ("step", "eval/score", "eval/episodes", "eval/normalized"),
}
"""Columns of ``metrics.csv`` (every log_every steps) and ``eval.csv`` (every evaluation; the
re-evaluation of the best policy is the row whose step is ``best``)."""

TIMED = ("act", "env", "add", "sample", "learn", "update_priorities")
"""Parts of the loop whose seconds ``Timer`` adds up."""


@dataclass
class Timer:
    """Seconds spent in each part of the loop (``TIMED``), the totals when learning began, and the
    run's wall-clock time over every process it ran in.

    Pickling (a checkpoint) banks this process's wall-clock time into ``wall_before``; unpickling
    (the resumed process) starts counting anew.  A timer from a checkpoint written before the run's
    wall time was kept knows none of it: ``wall_before`` is None and so is :meth:`wall`."""

    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TIMED, 0.0))
    learning_from: dict[str, Any] | None = None
    """``{"step", "totals", "wall"}`` at the first update: splits acting from learning in the result."""
    wall_before: float | None = 0.0
    """Wall-clock seconds of the run's earlier processes (None: unknown)."""
    since: float = field(default_factory=time.perf_counter)
    """When this process began counting (``time.perf_counter``: meaningful in this process only)."""
    resumes: int = 0
    """Times the run continued from a checkpoint."""

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "wall_before": self.wall(), "since": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # a checkpoint written before the run's wall time was kept: its earlier processes are unknown
        state.setdefault("wall_before", None)
        state.setdefault("resumes", 0)
        if state.get("learning_from") is not None and "wall" not in state["learning_from"]:
            state["learning_from"] = {**state["learning_from"], "wall": None}
        self.__dict__.update(state, since=time.perf_counter())

    def start(self, started: float) -> None:
        """Count this process from ``started`` (its ``time.perf_counter()`` at the start, set-up
        included)."""
        self.since = started

    def wall(self) -> float | None:
        """The run's wall-clock seconds so far, over every process it ran in (None: unknown)."""
        return None if self.wall_before is None else self.wall_before + time.perf_counter() - self.since

    @contextmanager
    def __call__(self, part: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.totals[part] += time.perf_counter() - start

    def mark_learning(self, step: int) -> None:
        if self.learning_from is None:
            self.learning_from = {"step": step, "totals": dict(self.totals), "wall": self.wall()}

    def learning_phase(self, step: int, updates: int) -> dict[str, Any] | None:
        """``{"steps", "updates", "timing_s", "wall_s"}`` since the first update (None before it);
        ``wall_s`` is the wall-clock time since then, the loop's untimed work included (None when a
        checkpoint written before it was kept lies in between)."""
        if self.learning_from is None:
            return None
        since = self.learning_from["totals"]
        now, then = self.wall(), self.learning_from["wall"]
        return {
            "steps": step - self.learning_from["step"],
            "updates": updates,
            "timing_s": {k: self.totals[k] - since[k] for k in self.totals},
            "wall_s": None if now is None or then is None else now - then,
        }


@dataclass
class MetricWindow:
    """Per-update values averaged into the next ``metrics.csv`` row."""

    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, **values: float) -> None:
        for key, value in values.items():
            self.values.setdefault(key, []).append(value)

    def add_update(self, values: np.ndarray) -> None:
        """One update's values as the loop copies them to the host, ``[|δ_1|, ..., |δ_k|, loss,
        mean w, min w]``: its loss, mean ``|δ|``, and the importance weights' mean and minimum."""
        self.add(
            loss=float(values[-3]),
            td_abs=float(values[:-3].mean()),
            weight_mean=float(values[-2]),
            weight_min=float(values[-1]),
        )

    def drain(self) -> dict[str, float]:
        """Means since the last drain, keyed ``per/weight_*`` or ``train/*``; then empty."""
        out = {
            ("per/" if key.startswith("weight") else "train/") + key: sum(v) / len(v)
            for key, v in self.values.items()
        }
        self.values.clear()
        return out


class Logger:
    """CSV rows (``metrics.csv``, ``eval.csv``; columns in ``COLUMNS``) and TensorBoard scalars."""

    def __init__(self, run_dir: Path, tensorboard: bool, resume: bool) -> None:
        self.paths = {name: run_dir / f"{name}.csv" for name in COLUMNS}
        self.columns = dict(COLUMNS)
        for name, path in self.paths.items():
            if resume and path.exists():  # a file begun by an earlier version keeps its columns
                with path.open(newline="") as f:
                    self.columns[name] = tuple(next(csv.reader(f), COLUMNS[name]))
            else:
                with path.open("w", newline="") as f:
                    csv.writer(f).writerow(COLUMNS[name])
        self.writer: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError:
                print("tensorboard is not installed: metrics go to the CSV files only", file=sys.stderr)

    def log(self, name: str, step: int | str, metrics: dict[str, float]) -> None:
        row = {"step": step, **metrics}
        with self.paths[name].open("a", newline="") as f:
            csv.writer(f).writerow([row.get(c, "") for c in self.columns[name]])
        if self.writer is not None and isinstance(step, int):
            for key, value in metrics.items():
                if math.isfinite(value):
                    self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def normalized_or_nan(score: float, scores: dict[str, Any] | None) -> float:
    """``(score − random) / |human − random|`` with the paper's per-game scores; NaN without them
    or without a score (an evaluation that finished no episode)."""
    if scores is None or not math.isfinite(score):
        return math.nan
    random, human = float(scores["random"]), float(scores["human"])
    return (score - random) / abs(human - random)


@dataclass
class EvalRecord:
    """Every selecting evaluation of a run and the best one (App. B.2.3: the best policy is kept).

    An evaluation that finished no episode scores NaN: it can neither be the best nor give a
    normalised score.
    """

    steps: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    episodes: list[int] = field(default_factory=list)
    best_score: float = -math.inf
    best_step: int | None = None

    def add(self, step: int, score: float, episodes: int) -> bool:
        """Record one evaluation; True when it is the best so far (its network should be kept)."""
        self.steps.append(step)
        self.scores.append(score)
        self.episodes.append(episodes)
        if episodes > 0 and math.isfinite(score) and score > self.best_score:
            self.best_score, self.best_step = score, step
            return True
        return False


@dataclass
class RunResult:
    """What one run returns (and ``result.json`` in its directory holds)."""

    config: dict[str, Any]
    run_dir: str
    eval_steps: list[int]
    """Nominal step of each selecting evaluation (multiples of eval_every; the last at the stop)."""
    eval_scores: list[float]
    """Mean return of each one's finished episodes; NaN where none finished."""
    best_score: float
    """The best selecting evaluation (NaN when none finished an episode): biased upwards, since it
    also chose the policy."""
    best_step: int | None
    best_policy_score: float
    """The best policy re-evaluated on fresh episodes (App. B.2.3); NaN when none finished."""
    best_policy_episodes: int
    normalized_best: float | None
    """``best_policy_score`` human-normalised (Atari); None without the game's scores or a score."""
    normalized_best_selecting: float | None
    """``best_score`` human-normalised, for comparison."""
    steps: int
    updates: int
    wall_s: float | None
    """Wall-clock seconds over every process the run ran in (None: it resumed from a checkpoint
    written before they were kept)."""
    steps_per_s: float | None
    """``steps / wall_s``."""
    stopped: str
    """'done', 'time_budget' or 'stop_after'."""
    timing_s: dict[str, float]
    """Seconds spent acting, stepping the environments, in replay.add, replay.sample, the network
    update ('learn') and replay.update_priorities."""
    learning_phase: dict[str, Any] | None = None
    """From the first update on: {"steps", "updates", "timing_s", "wall_s"} (None if learning never
    started)."""
    resumes: int = 0
    """Times the run continued from a checkpoint."""


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def progress_bar(cfg: DDQNConfig, initial: int) -> Any:
    """The run's ``tqdm`` bar over its agent steps (hidden without ``cfg.progress``)."""
    return tqdm(
        total=cfg.total_steps,
        initial=initial,
        desc=f"{cfg.env} {cfg.arm}",
        unit="step",
        disable=not cfg.progress,
        dynamic_ncols=True,
        smoothing=0.05,
    )


class StepRate:
    """Agent steps per second since the previous reading (wall clock; not checkpointed)."""

    def __init__(self, step: int) -> None:
        self.step, self.clock = step, time.perf_counter()

    def __call__(self, step: int) -> float:
        now = time.perf_counter()
        rate = (step - self.step) / max(now - self.clock, 1e-9)
        self.step, self.clock = step, now
        return rate


class Evaluator:
    """The paper's "test" evaluations (App. B.2.3) and their bookkeeping.

    ``select`` evaluates the current network every ``eval_every`` steps, logs the row and keeps the
    best network in ``best_q.pt``; ``reevaluate_best`` plays that network again on fresh episodes
    (other start seeds, its own random stream), the score a run reports: the maximum of the
    selecting evaluations is biased upwards, since the same noise chose the policy.
    """

    def __init__(
        self,
        env: Any,
        *,
        epsilon: float,
        max_steps: int,
        max_episodes: int,
        seed: int,
        device: torch.device,
        scores: dict[str, Any] | None,
        logger: Logger,
        run_dir: Path,
    ) -> None:
        self.env, self.epsilon, self.max_steps, self.max_episodes = env, epsilon, max_steps, max_episodes
        self.seed, self.device, self.scores, self.logger = seed, device, scores, logger
        self.best_path = run_dir / "best_q.pt"
        self.rng = np.random.default_rng([seed, 2])
        self.record = EvalRecord()

    def _play(self, q: torch.nn.Module, rng: Any, seed: int) -> Any:
        from recipes.dqn.envs import evaluate

        return evaluate(
            q,
            self.env,
            epsilon=self.epsilon,
            max_steps=self.max_steps,
            max_episodes=self.max_episodes,
            rng=rng,
            device=self.device,
            seed=seed,
        )

    def select(self, q: torch.nn.Module, at: int) -> Any:
        """Evaluate ``q`` at step ``at``; keep it in ``best_q.pt`` if it is the best so far."""
        result = self._play(q, self.rng, self.seed + 10_000 + len(self.record.steps))
        if self.record.add(at, result.score, result.episodes):
            torch.save(q.state_dict(), self.best_path)
        self.logger.log("eval", at, self._row(result))
        return result

    def reevaluate_best(self, q: torch.nn.Module) -> Any:
        """The kept best network on fresh episodes (start seeds and ε-draws no selecting
        evaluation used); NaN with 0 episodes when no evaluation finished an episode."""
        import copy

        from recipes.dqn.envs import Evaluation

        if self.record.best_step is None or not self.best_path.exists():
            return Evaluation(math.nan, 0, 0)
        best = copy.deepcopy(q)
        best.load_state_dict(torch.load(self.best_path, map_location=self.device))
        result = self._play(best, np.random.default_rng([self.seed, 3]), self.seed + 20_000)
        self.logger.log("eval", "best", self._row(result))
        return result

    def _row(self, result: Any) -> dict[str, float]:
        row = {"eval/score": result.score, "eval/episodes": float(result.episodes)}
        if self.scores is not None:
            row["eval/normalized"] = normalized_or_nan(result.score, self.scores)
        return row

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "record": self.record}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.record = state["record"]
