"""Stable-Baselines3 DQN on CartPole-v1: uniform replay vs prioritized (proportional, rank).

Algorithm (Schaul et al. 2016, Algorithm 1 inside SB3's DQN): every arm is SB3's ``DQN`` with the
RL Zoo's CartPole-v1 hyper-parameters; the prioritized arms are ``prisample.sb3.PrioritizedDQN``,
which draws each transition with ``P(i) = p_i^α / Σ_k p_k^α`` (Eq. 1, ``p_i = |δ_i| + ε``), weights
its Huber loss by ``w_i = (N · P(i))^-β / max_j w_j`` (Sec. 3.4, the maximum over the batch, β
annealed linearly to 1 over the run) and writes ``|δ_i|`` back as its priority.  α and β₀ are the
paper's (App. B.2.1: proportional α = 0.6, β₀ = 0.4; rank α = 0.7, β₀ = 0.5); ε = 0.01 and the
batch maximum are the adapter's defaults (``ARMS`` names the source of each value).

Metrics, per seed: every ``eval_every`` steps, and once more at the end, the greedy policy plays
``eval_episodes`` episodes on an evaluation environment of its own (seeded from the run's seed);
``auc`` is the mean of these evaluation scores (the area under the evaluation curve divided by its
length), ``final`` the last one (the final policy), ``weight_mean_last`` the mean importance weight
over the last 100 batches (``PrioritizedDQN.weight_mean``; 1 for uniform replay).  Across seeds:
the interquartile mean with a 95 % bootstrap interval (``recipes.common.rl_metrics.iqm_interval``,
the registered protocol's 5,000 resamples); per prioritized arm against uniform, the registered
difference and equivalence tests and a Holm–Bonferroni family (:func:`comparisons`).
Learning curves of the training episodes' returns are kept as well.

Hyper-parameters: DLR-RM/rl-baselines3-zoo ``hyperparams/dqn.yml``, entry ``CartPole-v1``
("Almost Tuned"; commit 22e3ff2, April 2026): 5·10⁴ steps, lr 2.3e-3, batch 64, buffer 10⁵,
learning_starts 1000, γ 0.99, target_update_interval 10, train_freq 256, gradient_steps 128,
exploration_fraction 0.16, exploration_final_eps 0.04, net_arch [256, 256].

    python -m recipes.studies sb3-cartpole --run                             # runs/sb3_cartpole.{json,png,md}
    python -m recipes.studies sb3-cartpole --seeds 2 --timesteps 2000        # a quick check
    python -m recipes.studies sb3-cartpole --run --jobs 2                    # two runs at a time
    python -m recipes.studies sb3-cartpole --report runs/sb3_cartpole.json --out runs/sb3_again
                                                     # recompute the statistics of recorded runs

Without arguments it prints its usage and runs nothing.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from tqdm import tqdm

from prisample.sb3 import PrioritizedDQN
from recipes.common import launch, outputs, rl_metrics
from recipes.common.provenance import source_tree, tally
from recipes.studies.per_vs_uniform_config import load_protocol
from recipes.studies.sb3_cartpole_config import (
    ARMS,
    ENV_ID,
    PROG,
    ZOO_CARTPOLE,
    ZOO_SOURCE,
    Config,
    parse,
    run_plan,
)
from recipes.studies.sb3_cartpole_report import write_outputs

__all__ = [
    "ARMS",
    "ENV_ID",
    "PROG",
    "RUN_SETTINGS",
    "ZOO_CARTPOLE",
    "ZOO_SOURCE",
    "Config",
    "comparisons",
    "finished_run",
    "main",
    "parse",
    "run",
    "run_path",
    "summarize",
    "train_and_keep",
    "train_one",
]

EVAL_SEED_OFFSET = 10_000
"""The evaluation environment of seed ``s`` is reset once with seed ``10_000 + s``."""


# -- one run ----------------------------------------------------------------------------------------


def train_one(cfg: Config, arm: str, seed: int, bar: tqdm[Any] | None = None) -> dict[str, Any]:
    """One run: learn with periodic evaluations, then score the final greedy policy."""
    _, buffer_kwargs = ARMS[arm]
    code = source_tree()  # the commit this run's code comes from, and whether the tree is clean
    common = dict(ZOO_CARTPOLE, seed=seed, device="cpu", verbose=0)
    if buffer_kwargs is None:
        model: DQN = DQN("MlpPolicy", ENV_ID, **common)
    else:
        # PER: the only change: the prioritized buffer and the weighted loss with |δ| fed back.
        model = PrioritizedDQN(
            "MlpPolicy", ENV_ID, replay_buffer_kwargs={**buffer_kwargs, "seed": seed}, **common
        )
    evaluator = GreedyEvaluator(seed, cfg.eval_episodes)
    episodes = EpisodeReturns(bar)
    evaluations = PeriodicEvaluation(cfg.eval_steps[:-1], evaluator)
    start = time.perf_counter()
    model.learn(cfg.timesteps, callback=CallbackList([episodes, evaluations]))
    seconds = time.perf_counter() - start
    final_returns = evaluator(model)  # the final policy, after the last training rollout
    evaluator.close()
    scores = [*evaluations.scores, float(np.mean(final_returns))]
    points = np.linspace(cfg.timesteps / cfg.curve_points, cfg.timesteps, cfg.curve_points).round()
    weight_mean = model.weight_mean if isinstance(model, PrioritizedDQN) else 1.0  # uniform: all w = 1
    return {
        "seed": seed,
        "code": code,
        "auc": float(np.mean(scores)),
        "final": scores[-1],
        "weight_mean_last": None if math.isnan(weight_mean) else weight_mean,  # None: no batch drawn
        "eval_steps": [*evaluations.steps, int(model.num_timesteps)],
        "eval_curve": scores,
        "eval_mean_return": scores[-1],
        "eval_returns": final_returns,
        "train_seconds": round(seconds, 2),  # learn(), the periodic evaluations included
        "train_episodes": len(episodes.episodes),
        "curve_steps": points.astype(int).tolist(),
        "curve": learning_curve(episodes.episodes, points, cfg.curve_window),
    }


class GreedyEvaluator:
    """``evaluator(model)``: the returns of ``episodes`` greedy episodes on an environment of its own,
    reset once with seed ``EVAL_SEED_OFFSET + seed`` (later evaluations continue its RNG), so every
    arm meets the same start states at the same evaluation."""

    def __init__(self, seed: int, episodes: int) -> None:
        self.env = Monitor(gym.make(ENV_ID))
        self.env.reset(seed=EVAL_SEED_OFFSET + seed)
        self.episodes = episodes

    def __call__(self, model: DQN) -> list[float]:
        # deterministic=True: DQN.predict acts greedily and draws no random number, so evaluating
        # does not change the training run.
        returns, _ = evaluate_policy(
            model, self.env, n_eval_episodes=self.episodes, deterministic=True, return_episode_rewards=True
        )
        assert isinstance(returns, list)  # return_episode_rewards: one return per episode
        return [float(r) for r in returns]

    def close(self) -> None:
        self.env.close()


class PeriodicEvaluation(BaseCallback):
    """Scores the greedy policy when the run passes each of ``at`` (SB3 trains between rollouts, so
    an evaluation sees the policy of the last rollout that ended before it)."""

    def __init__(self, at: Sequence[int], evaluate: Callable[[DQN], list[float]]) -> None:
        super().__init__()
        self.at, self.evaluate = list(at), evaluate
        self.steps: list[int] = []
        self.scores: list[float] = []

    def _on_step(self) -> bool:
        if len(self.steps) < len(self.at) and self.num_timesteps >= self.at[len(self.steps)]:
            assert isinstance(self.model, DQN)
            self.scores.append(float(np.mean(self.evaluate(self.model))))
            self.steps.append(self.num_timesteps)
        return True


class EpisodeReturns(BaseCallback):
    """Records ``(timestep, return)`` of each training episode (SB3's Monitor info) and moves a bar."""

    def __init__(self, bar: tqdm[Any] | None = None) -> None:
        super().__init__()
        self.bar = bar
        self.episodes: list[tuple[int, float]] = []

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:
                self.episodes.append((self.num_timesteps, float(info["episode"]["r"])))
        if self.bar is not None:
            self.bar.update(self.training_env.num_envs)
        return True


def learning_curve(episodes: list[tuple[int, float]], points: np.ndarray, window: int) -> list[float | None]:
    """At each point ``t``: the mean return of the last ``window`` episodes finished by ``t``."""
    steps = np.array([s for s, _ in episodes], dtype=np.int64)
    returns = np.array([r for _, r in episodes])
    curve: list[float | None] = []
    for t in points:
        done = returns[steps <= t][-window:]
        curve.append(float(done.mean()) if done.size else None)
    return curve


# -- the comparison ---------------------------------------------------------------------------------


def run(cfg: Config) -> dict[str, Any]:
    """Every arm on every seed; per arm the per-seed metrics and their IQM across seeds, and the
    tests of :func:`summarize`.  Each finished run is kept at once (:func:`run_path`) and a run kept
    with the same settings is read, not trained again, so a comparison stopped midway (the end of
    a session) continues with the same command."""
    tasks = [(arm, seed) for arm in cfg.arm_list for seed in range(cfg.seeds)]
    kept = {task: finished_run(cfg, *task) for task in tasks}
    todo = [task for task in tasks if kept[task] is None]
    if todo:
        where = Path(cfg.out + "_runs")
        print(f"{len(tasks) - len(todo)} of {len(tasks)} runs kept under {where}; training {len(todo)}")
    fresh = {} if not todo else run_in_process(cfg, todo) if cfg.jobs == 1 else run_in_pool(cfg, todo)
    done = {task: kept[task] or fresh[task] for task in tasks}
    runs = {arm: [done[(arm, seed)] for seed in range(cfg.seeds)] for arm in cfg.arm_list}
    return summarize(asdict(cfg), runs)


RUN_SETTINGS = ("timesteps", "eval_every", "eval_episodes", "curve_points", "curve_window")
"""The settings a kept run must share with the command to be read instead of trained."""


def run_path(cfg: Config, arm: str, seed: int) -> Path:
    """Where the run of ``arm`` and ``seed`` is kept: ``<out>_runs/<arm>_seed<seed>.json``."""
    return Path(cfg.out + "_runs") / f"{arm}_seed{seed}.json"


def finished_run(cfg: Config, arm: str, seed: int) -> dict[str, Any] | None:
    """The kept run of ``arm`` and ``seed`` if it ran with ``cfg``'s settings, else None."""
    path = run_path(cfg, arm, seed)
    if not path.exists():
        return None
    kept = json.loads(path.read_text())
    same = kept.get("settings") == {name: getattr(cfg, name) for name in RUN_SETTINGS}
    return dict(kept["run"]) if same else None


def train_and_keep(cfg: Config, arm: str, seed: int, bar: tqdm[Any] | None = None) -> dict[str, Any]:
    """:func:`train_one`, its result written to :func:`run_path` as soon as it is done."""
    result = train_one(cfg, arm, seed, bar)
    path = run_path(cfg, arm, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    settings = {name: getattr(cfg, name) for name in RUN_SETTINGS}
    path.write_text(json.dumps({"settings": settings, "arm": arm, "run": result}))
    return result


def summarize(config: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The comparison's JSON from its runs (``{arm: [run of seed 0, …]}``, as :func:`train_one`
    returns them): per arm the per-seed AUC and final score with their IQMs and intervals
    (:func:`recipes.common.rl_metrics.iqm_interval`, the protocol's 5,000 resamples), and
    ``comparisons`` and ``holm`` (:func:`comparisons`)."""
    arms: dict[str, Any] = {}
    for arm, mine in runs.items():
        auc, final = [r["auc"] for r in mine], [r["final"] for r in mine]
        arms[arm] = {
            "label": ARMS[arm][0],
            "replay": ARMS[arm][1] or "uniform",
            "seeds": [r["seed"] for r in mine],
            "auc": auc,
            "final": final,
            "weight_mean_last": [r["weight_mean_last"] for r in mine],
            "auc_iqm": rl_metrics.iqm_interval(auc),
            "final_iqm": rl_metrics.iqm_interval(final),
            "eval_steps": mine[0]["eval_steps"],
            "eval_curves": [r["eval_curve"] for r in mine],
            "eval_mean_return": float(np.mean(final)),
            "eval_std_return": float(np.std(final)),
            "runs": mine,
        }
    result = {
        "config": config,
        "hyperparameters": ZOO_CARTPOLE,
        "source": ZOO_SOURCE,
        "arms": arms,
        "sources": tally([r["code"]] if "code" in r else None for mine in runs.values() for r in mine),
    }
    return {**result, **comparisons(arms)}


def comparisons(arms: dict[str, Any]) -> dict[str, Any]:
    """Each prioritized arm's AUC against the uniform arm's, as the registered protocol
    (``recipes/studies/configs/per_vs_uniform.yaml``, ``sb3``) tests it: the difference test and the
    equivalence test within ``equivalence_margin`` × the uniform arm's AUC IQM
    (:func:`recipes.common.rl_metrics.compare`), and Holm–Bonferroni over these tests
    (:func:`recipes.common.rl_metrics.holm`) beside them: ``{"comparisons": {arm: {...}}, "holm":
    {...}}``; none where the uniform arm is missing or an arm has fewer than 2 seeds."""
    protocol = load_protocol()["sb3"]
    base = protocol["baseline"]
    tests: dict[str, Any] = {}
    if base in arms and len(arms[base]["auc"]) >= 2:
        margin = rl_metrics.relative_margin(arms[base]["auc"], protocol["equivalence_margin"])
        for arm, data in arms.items():
            if arm != base and len(data["auc"]) >= 2:
                tests[arm] = {
                    "baseline": base,
                    **rl_metrics.compare(data["auc"], arms[base]["auc"], margin=margin),
                }
    return {"comparisons": tests, "holm": rl_metrics.holm({arm: t["welch_p"] for arm, t in tests.items()})}


def run_in_process(cfg: Config, tasks: list[tuple[str, int]]) -> dict[tuple[str, int], dict[str, Any]]:
    torch.set_num_threads(1)  # two shared cores; also keeps runs reproducible
    done = {}
    with tqdm(total=len(tasks) * cfg.steps_per_run, desc="sb3_cartpole", unit="step") as bar:
        for arm, seed in tasks:
            bar.set_postfix_str(f"{arm} seed {seed}")
            done[(arm, seed)] = train_and_keep(cfg, arm, seed, bar)
    return done


def _one_thread() -> None:
    torch.set_num_threads(1)


def run_in_pool(cfg: Config, tasks: list[tuple[str, int]]) -> dict[tuple[str, int], dict[str, Any]]:
    """``cfg.jobs`` runs at a time in fresh (spawned) processes, one torch thread each; the results
    are the in-process ones (every run is seeded)."""
    done = {}
    context = multiprocessing.get_context("spawn")
    workers = min(cfg.jobs, len(tasks))
    with (
        ProcessPoolExecutor(workers, mp_context=context, initializer=_one_thread) as pool,
        tqdm(total=len(tasks), desc="sb3_cartpole", unit="run") as bar,
    ):
        futures = {pool.submit(train_and_keep, cfg, arm, seed): (arm, seed) for arm, seed in tasks}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            bar.set_postfix_str("{} seed {}".format(*futures[future]))
            bar.update()
    return done


# -- command line -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``python -m recipes.studies sb3-cartpole [options]``: say what runs (and, on a terminal, ask
    before a run estimated over an hour; ``--yes`` does not), run every arm and seed, write the
    JSON, the plot and the table."""
    yes, args = launch.take_yes(sys.argv[1:] if argv is None else argv)
    cfg = parse(args)
    if cfg.report:
        result = rerender(Path(cfg.report), outputs.argv_command(PROG, args))
    else:
        launch.confirm(run_plan(cfg), yes)
        result = {**run(cfg), "command": outputs.argv_command(PROG, args)}
    print(write_outputs(result, Path(cfg.out)))
    return result


def rerender(path: Path, command: str) -> dict[str, Any]:
    """A comparison's JSON recomputed from the runs it records (:func:`summarize`); its
    ``command`` stays the one that ran them, ``rendered_by`` is ``command``."""
    recorded = json.loads(path.read_text())
    if not isinstance(recorded, dict) or not isinstance(recorded.get("arms"), dict):
        raise ValueError(
            f"report should be a JSON this command wrote, with its arms, but got report={str(path)!r}"
        )
    runs = {arm: data["runs"] for arm, data in recorded["arms"].items()}
    result = summarize(recorded["config"], runs)
    if "command" in recorded:
        result["command"] = recorded["command"]
    return {**result, "rendered_by": command}
