"""The Double DQN recipe's run around Algorithm 1: its start (threads, seed, device, run directory,
evaluator), schedules, what one step carries to the next, when to stop, the ``metrics.csv`` row,
checkpoints and the end of a run."""

from __future__ import annotations

import pickle
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cloudpickle  # type: ignore[import-untyped]
import numpy as np
import torch

from prisample import LinearSchedule
from recipes.common import checkpoint_file, outputs
from recipes.common.provenance import record_start
from recipes.dqn.config import DDQNConfig, differing_fields, run_dir
from recipes.dqn.envs import atari_rom, env_family, lives, load_atari_scores, make_env, seed_envs
from recipes.dqn.networks import resolve_device
from recipes.dqn.parts import (
    Evaluator,
    Logger,
    MetricWindow,
    RunResult,
    Timer,
    finite_or_none,
    normalized_or_nan,
)

if TYPE_CHECKING:
    from prisample.diagnostics import Diagnostics
    from prisample.replay import PrioritizedReplay

# -- the start of a run ------------------------------------------------------------------------------


def start_run(cfg: DDQNConfig) -> torch.device:
    """Threads, seed and device of the run, its directory with ``config.json`` and ``source.json``
    (:mod:`recipes.common.provenance`); on a CUDA device,
    cuDNN's autotuner (fixed input shapes: the fastest convolutions are picked once) and TF32
    matrix products (as cuDNN's convolutions)."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    run_dir(cfg).mkdir(parents=True, exist_ok=True)
    outputs.write_json(run_dir(cfg) / "config.json", asdict(cfg))
    record_start(run_dir(cfg))  # the commit, and whether the tree was clean
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
    return device


def env_options(cfg: DDQNConfig) -> dict[str, Any]:
    """Keywords of :func:`~recipes.dqn.envs.make_env` for the training and evaluation environments."""
    return dict(
        backend=cfg.env_backend,
        noop_max=cfg.noop_max,
        threads=cfg.env_threads,
        repeat_action_probability=cfg.repeat_action_probability,
    )


def make_evaluator(cfg: DDQNConfig, device: torch.device, logger: Logger) -> Evaluator:
    """The run's evaluations (App. B.2.3) on ``cfg.eval_envs`` environments of their own; on Atari
    they also report the human-normalised score (the paper's per-game scores)."""
    scores = load_atari_scores().get(atari_rom(cfg.env)) if env_family(cfg.env) == "atari" else None
    return Evaluator(
        make_env(cfg.env, cfg.eval_envs, **env_options(cfg))[0],
        epsilon=cfg.eval_epsilon,
        max_steps=cfg.eval_steps,
        max_episodes=cfg.eval_episodes,
        seed=cfg.seed,
        device=device,
        scores=scores,
        logger=logger,
        run_dir=run_dir(cfg),
    )


# -- schedules and loop state ------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedules:
    """ε, α and β as functions of the agent step ``t``, the one unit of every schedule.

    ε: ``eps_start`` until ``learning_starts``, then linear to ``eps_end`` over ``eps_decay_steps``
    (DQN release).  α and β: linear from their start values at the first update
    (``learning_starts``) to their end values at ``schedule_horizon``, the reference's whole
    budget, or ``total_steps`` without one (Sec. 3.4, Table 3: "the limiting value is reached at
    the end of training").  α changes in steps of 0.01: a new α rebuilds the
    sampler's distribution, which the paper also updated "infrequently" (App. B.2.1).
    """

    learning_starts: int
    epsilon: LinearSchedule
    alpha: LinearSchedule
    beta: LinearSchedule

    @classmethod
    def of(cls, cfg: DDQNConfig) -> Schedules:
        horizon = cfg.total_steps if cfg.schedule_horizon is None else cfg.schedule_horizon
        annealing = max(1, horizon - cfg.learning_starts)
        alpha_end = cfg.alpha if cfg.alpha_end is None else cfg.alpha_end
        return cls(
            cfg.learning_starts,
            LinearSchedule(cfg.eps_start, cfg.eps_end, cfg.eps_decay_steps),
            LinearSchedule(cfg.alpha, alpha_end, annealing),
            LinearSchedule(cfg.beta0, cfg.beta_end, annealing),
        )

    def at(self, t: int) -> tuple[float, float, float]:
        """``(ε, α, β)`` at agent step ``t``."""
        since = t - self.learning_starts
        epsilon = self.epsilon(since) if since >= 0 else self.epsilon.start
        return epsilon, round(self.alpha(since), 2), self.beta(since)


@dataclass
class LoopState:
    """Everything the loop carries from one agent step to the next (checkpointed whole)."""

    step: int
    """Agent steps t so far, summed over the environments."""
    next_target: int
    next_eval: int
    next_log: int
    next_checkpoint: int | None
    obs: np.ndarray
    prev_done: np.ndarray
    """Per environment: its last step ended an episode, so its next step only resets it."""
    life: np.ndarray
    returns: np.ndarray
    """Undiscounted, unclipped return of each environment's episode so far."""
    updates: int = 0
    due: int = 0
    """Agent steps not yet paid for by an update (one per replay_period)."""
    refill_until: int = 0
    """No update before this step (a resumed run without its memory refills it first)."""
    episode_returns: list[float] = field(default_factory=list)
    timer: Timer = field(default_factory=Timer)
    window: MetricWindow = field(default_factory=MetricWindow)

    def end_episodes(self, reward: np.ndarray, done: np.ndarray) -> None:
        """Add the step's rewards (not to a resetting environment's) and close finished episodes."""
        self.returns += np.where(self.prev_done, 0.0, reward)
        for i in np.flatnonzero(done):
            self.episode_returns.append(float(self.returns[i]))
            self.returns[i] = 0.0


def stopping(cfg: DDQNConfig, step: int, started: float) -> str | None:
    """Why the loop stops before agent step ``step``: ``"done"`` (``total_steps`` reached),
    ``"stop_after"`` or ``"time_budget"`` (seconds since ``started``); None while it goes on."""
    if step >= cfg.total_steps:
        return "done"
    if cfg.stop_after is not None and step >= cfg.stop_after:
        return "stop_after"
    if cfg.time_budget_s is not None and time.perf_counter() - started > cfg.time_budget_s:
        return "time_budget"
    return None


def metrics_row(
    state: LoopState, epsilon: float, replay: PrioritizedReplay, steps_per_s: float
) -> dict[str, float]:
    """One ``metrics.csv`` row: the mean return of the last 20 episodes, the number of finished
    episodes and the sum of their returns, ε, the memory's α, β and
    maximal priority (PER), its size, the updates so far, and the per-update values since the last
    row (loss, mean |δ|, the importance weights' mean and minimum; :class:`MetricWindow`)."""
    recent = state.episode_returns[-20:]
    return {
        "train/episode_return": float(np.mean(recent)) if recent else float("nan"),
        "train/episodes": float(len(state.episode_returns)),
        # with train/episodes, the mean return of the episodes between any two rows (Dopamine's
        # per-iteration training return)
        "train/return_sum": float(np.sum(state.episode_returns)),
        "train/epsilon": epsilon,
        "per/alpha": replay.sampler.alpha,
        "per/beta": replay.sampler.beta,
        # a device sampler gives a 0-d tensor, whose repr would land in metrics.csv
        "per/max_priority": float(replay.sampler.max_priority),
        "perf/steps_per_s": steps_per_s,
        "replay/size": float(len(replay)),
        "updates": float(state.updates),
        **state.window.drain(),
    }


# -- checkpoints and the end of a run ----------------------------------------------------------------


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` atomically, its arrays from their own memory
    (:mod:`recipes.common.checkpoint_file`)."""
    checkpoint_file.save(path, payload)


RESUME_MAY_CHANGE = frozenset(
    {"resume", "stop_after", "time_budget_s", "checkpoint_every", "progress", "tensorboard"}
    | {"device", "threads", "log_dir", "run_name"}
)
"""Fields in which a resumed run's config may differ from its checkpoint's: when it stops and
checkpoints, what it shows, where it runs and where its directory lies; none changes what it learns."""


def check_resumable(ck: dict[str, Any], cfg: DDQNConfig) -> None:
    """``ValueError`` when the checkpoint ``ck`` was written by a run whose config differs from
    ``cfg`` in a field outside ``RESUME_MAY_CHANGE``: resuming would continue another run."""
    stored = ck.get("config")
    if not isinstance(stored, dict):
        return
    changed = [f for f in differing_fields(stored, cfg) if f not in RESUME_MAY_CHANGE]
    if changed:
        was = ", ".join(f"{f}={stored.get(f)!r}" for f in changed)
        now = ", ".join(f"{f}={getattr(cfg, f, None)!r}" for f in changed)
        raise ValueError(
            f"resume should continue the run of {run_dir(cfg) / 'checkpoint.pt'}, whose checkpoint has "
            f"{was}, but got {now}; start a new run (another run_name) to change them"
        )


def load_checkpoint(path: Path, device: torch.device) -> dict[str, Any] | None:
    """The checkpoint at ``path``, or None when there is none."""
    if not path.exists():
        return None
    ck: dict[str, Any] = checkpoint_file.load(path, device)
    return ck


def checkpoint(cfg: DDQNConfig, state: LoopState, env: Any, parts: dict[str, Any]) -> dict[str, Any]:
    """Everything an exactly identical continuation needs (the memory only with checkpoint_memory)."""
    try:
        env_blob: bytes | None = cloudpickle.dumps(env)
    except Exception:  # ALE's vector env holds C++ state: episodes in flight restart on resume
        env_blob = None
    return {
        "config": asdict(cfg),
        "q": parts["q"].state_dict(),
        "q_target": parts["q_target"].state_dict(),
        "optimizer": parts["optimizer"].state_dict(),
        "replay": parts["replay"].state_dict(include_memory=cfg.checkpoint_memory),
        "rng": parts["rng"].bit_generator.state,
        "evaluator": parts["evaluator"].state_dict(),
        "torch_rng": torch.get_rng_state(),
        "loop": state,
        "env": env_blob,
        "laber": parts["laber"].state_dict() if parts["laber"] is not None else None,
    }


def periodic_checkpoint(cfg: DDQNConfig, state: LoopState, env: Any, parts: dict[str, Any]) -> None:
    """The checkpoint due every ``checkpoint_every`` steps: ``checkpoint.pt`` written (the loop state
    as it is, the step it was due at included), then the next one scheduled (none when a resumed
    run turned ``checkpoint_every`` off)."""
    save_checkpoint(run_dir(cfg) / "checkpoint.pt", checkpoint(cfg, state, env, parts))
    due, every = state.next_checkpoint, cfg.checkpoint_every
    state.next_checkpoint = None if due is None or every is None else due + every


def resume(
    cfg: DDQNConfig, ck: dict[str, Any] | None, env: Any, parts: dict[str, Any]
) -> tuple[LoopState, Any]:
    """The loop state (and environment) to start from: a fresh one, or the checkpoint's when
    ``cfg.resume`` and one exists."""
    if not cfg.resume or ck is None:
        obs, info = seed_envs(env, cfg.seed)
        n = cfg.num_envs
        return LoopState(
            0,
            cfg.target_update_period,
            cfg.eval_every,
            cfg.log_every,
            cfg.checkpoint_every,
            obs,
            np.zeros(n, dtype=bool),
            lives(info, n),
            np.zeros(n),
        ), env
    for name in ("q", "q_target", "optimizer"):
        parts[name].load_state_dict(ck[name])
    state: LoopState = ck["loop"]
    state.timer.resumes += 1
    if "memory" in ck["replay"]:
        parts["replay"].load_state_dict(ck["replay"])
    else:  # memory not saved: refill it (learning_starts steps); α and β follow the step anyway
        state.refill_until = state.step + cfg.learning_starts
    parts["rng"].bit_generator.state = ck["rng"]
    parts["evaluator"].load_state_dict(ck["evaluator"])
    if parts["laber"] is not None and ck.get("laber") is not None:
        parts["laber"].load_state_dict(ck["laber"])
    torch.set_rng_state(ck["torch_rng"])
    if ck["env"] is not None:  # gymnasium environments pickle; ALE's vector env does not
        env.close()
        env = pickle.loads(ck["env"])
    else:
        state.obs, info = seed_envs(env, cfg.seed + 1000 * state.step)
        state.prev_done, state.life = np.zeros(cfg.num_envs, dtype=bool), lives(info, cfg.num_envs)
        state.returns = np.zeros(cfg.num_envs)
    return state, env


def save_diagnostics(cfg: DDQNConfig, diagnostics: Diagnostics, step: int, replay: PrioritizedReplay) -> None:
    """The last snapshot of the memory, then ``diagnostics.json`` and its figures (Figs. 10-11)."""
    diagnostics.snapshot(step, replay.sampler)
    diagnostics.save_json(run_dir(cfg) / "diagnostics.json")
    diagnostics.plot(run_dir(cfg) / "diagnostics", title=f"{cfg.env} {cfg.arm}")


def finish(
    cfg: DDQNConfig,
    state: LoopState,
    env: Any,
    parts: dict[str, Any],
    stopped: str,
    logger: Logger,
    *,
    write_checkpoint: bool = True,
) -> RunResult:
    """Last evaluation, the best policy re-evaluated on fresh episodes (App. B.2.3), the final
    checkpoint (unless ``write_checkpoint`` is false: stacked agents keep one for their process)
    and ``result.json``."""
    learning = state.timer.learning_phase(state.step, state.updates)  # before the final evaluation
    evaluator: Evaluator = parts["evaluator"]
    record = evaluator.record
    if stopped == "done" and (not record.steps or record.steps[-1] < state.step):
        evaluator.select(parts["q"], state.step)
    if write_checkpoint:
        save_checkpoint(run_dir(cfg) / "checkpoint.pt", checkpoint(cfg, state, env, parts))
    best = evaluator.reevaluate_best(parts["q"]) if stopped != "stop_after" else None
    logger.close()
    env.close()
    evaluator.env.close()
    wall = state.timer.wall()
    best_score = record.best_score if record.best_step is not None else float("nan")
    best_policy = best.score if best is not None else float("nan")
    result = RunResult(
        config=asdict(cfg),
        run_dir=str(run_dir(cfg)),
        eval_steps=list(record.steps),
        eval_scores=list(record.scores),
        best_score=best_score,
        best_step=record.best_step,
        best_policy_score=best_policy,
        best_policy_episodes=best.episodes if best is not None else 0,
        normalized_best=finite_or_none(normalized_or_nan(best_policy, evaluator.scores)),
        normalized_best_selecting=finite_or_none(normalized_or_nan(best_score, evaluator.scores)),
        steps=state.step,
        updates=state.updates,
        wall_s=wall,
        steps_per_s=None if wall is None else state.step / wall,
        stopped=stopped,
        timing_s=dict(state.timer.totals),
        learning_phase=learning,
        resumes=state.timer.resumes,
    )
    outputs.write_json(run_dir(cfg) / "result.json", asdict(result))
    return result
