"""Stable-Baselines3 DQN on CartPole-v1: uniform replay vs prioritized (proportional, rank).

Algorithm (Schaul et al. 2016, Algorithm 1 inside SB3's DQN): every arm is SB3's ``DQN`` with the
RL Zoo's CartPole-v1 hyper-parameters; the prioritized arms are ``prisample.sb3.PrioritizedDQN``,
which draws each transition with ``P(i) = p_i^α / Σ_k p_k^α`` (Eq. 1), weights its Huber loss by
``w_i = (N · P(i))^-β / max_j w_j`` (Sec. 3.4, β annealed linearly to 1 over the run) and writes
``|δ_i|`` back as its priority.  α and β₀ are the paper's (App. B.2.1: proportional α = 0.6,
β₀ = 0.4; rank α = 0.7, β₀ = 0.5).  Each arm runs ``seeds`` seeds; the result is the mean return of
``eval_episodes`` greedy episodes of the final policy, and learning curves of the training
episodes' returns.

Hyper-parameters: DLR-RM/rl-baselines3-zoo ``hyperparams/dqn.yml``, entry ``CartPole-v1``
("Almost Tuned"; commit 22e3ff2, April 2026): 5·10⁴ steps, lr 2.3e-3, batch 64, buffer 10⁵,
learning_starts 1000, γ 0.99, target_update_interval 10, train_freq 256, gradient_steps 128,
exploration_fraction 0.16, exploration_final_eps 0.04, net_arch [256, 256].

    python -m recipes.sb3_cartpole                                   # runs/sb3_cartpole.{json,png,md}
    python -m recipes.sb3_cartpole --seeds 2 --timesteps 2000        # a quick check
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from tqdm import tqdm

from prisample.sb3 import PrioritizedDQN
from recipes import outputs

ZOO_SOURCE = "DLR-RM/rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1 (commit 22e3ff2)"
ZOO_CARTPOLE: dict[str, Any] = {
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_fraction": 0.16,
    "exploration_final_eps": 0.04,
    "policy_kwargs": {"net_arch": [256, 256]},
}
ARMS = {
    "uniform": ("SB3 DQN, uniform replay", None),
    "proportional": ("PrioritizedDQN, proportional", {"alpha": 0.6, "beta": 0.4, "backend": "proportional"}),
    "rank": ("PrioritizedDQN, rank-based", {"alpha": 0.7, "beta": 0.5, "backend": "rank"}),
}


@dataclass(frozen=True)
class Config:
    """One comparison: each arm on the same seeds (environment, network initialisation, replay)."""

    seeds: int = 5
    """Independent runs per arm (seeds 0 .. seeds-1)."""
    timesteps: int = 50_000
    """Environment steps per run (the zoo's n_timesteps)."""
    arms: str = "uniform,proportional,rank"
    """Comma list of arms: uniform, proportional, rank."""
    eval_episodes: int = 10
    """Greedy episodes that score the final policy."""
    curve_points: int = 50
    """Points of the learning curves (evenly spaced over the run)."""
    curve_window: int = 10
    """Each curve point: the mean return of the last this many training episodes."""
    out: str = "runs/sb3_cartpole"
    """Output prefix: writes <out>.json, <out>.png and <out>.md."""

    def __post_init__(self) -> None:
        for name in ("seeds", "timesteps", "eval_episodes", "curve_points", "curve_window"):
            value = getattr(self, name)
            if not value >= 1:
                raise ValueError(f"{name} should be >= 1, but got {name}={value!r}")
        unknown = [a for a in self.arm_list if a not in ARMS]
        if unknown or not self.arm_list:
            raise ValueError(f"arms should be a comma list of {list(ARMS)}, but got arms={self.arms!r}")

    @property
    def arm_list(self) -> list[str]:
        return [a.strip() for a in self.arms.split(",") if a.strip()]


class EpisodeReturns(BaseCallback):
    """Records ``(timestep, return)`` of each training episode (SB3's Monitor info) and moves a bar."""

    def __init__(self, bar: tqdm[Any]) -> None:
        super().__init__()
        self.bar = bar
        self.episodes: list[tuple[int, float]] = []

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:
                self.episodes.append((self.num_timesteps, float(info["episode"]["r"])))
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


def train_one(cfg: Config, arm: str, seed: int, bar: tqdm[Any]) -> dict[str, Any]:
    """One run: learn, then score the greedy policy."""
    _, buffer_kwargs = ARMS[arm]
    common = dict(ZOO_CARTPOLE, seed=seed, device="cpu", verbose=0)
    if buffer_kwargs is None:
        model: DQN = DQN("MlpPolicy", "CartPole-v1", **common)
    else:
        # PER: the only change: the prioritized buffer and the weighted loss with |δ| fed back.
        model = PrioritizedDQN(
            "MlpPolicy", "CartPole-v1", replay_buffer_kwargs={**buffer_kwargs, "seed": seed}, **common
        )
    callback = EpisodeReturns(bar)
    start = time.perf_counter()
    model.learn(cfg.timesteps, callback=callback)
    seconds = time.perf_counter() - start
    eval_env = Monitor(gym.make("CartPole-v1"))
    eval_env.reset(seed=10_000 + seed)
    returns, _ = evaluate_policy(
        model, eval_env, n_eval_episodes=cfg.eval_episodes, return_episode_rewards=True
    )
    eval_env.close()
    assert isinstance(returns, list)  # return_episode_rewards: one return per episode, not their mean
    points = np.linspace(cfg.timesteps / cfg.curve_points, cfg.timesteps, cfg.curve_points).round()
    return {
        "seed": seed,
        "eval_mean_return": float(np.mean(returns)),
        "eval_returns": [float(r) for r in returns],
        "train_seconds": round(seconds, 2),
        "train_episodes": len(callback.episodes),
        "curve_steps": points.astype(int).tolist(),
        "curve": learning_curve(callback.episodes, points, cfg.curve_window),
    }


def run(cfg: Config) -> dict[str, Any]:
    torch.set_num_threads(1)  # two shared cores; also keeps runs reproducible
    arms: dict[str, Any] = {}
    # SB3 collects whole rollouts of train_freq steps, so a run ends on a multiple of it.
    per_run = math.ceil(cfg.timesteps / ZOO_CARTPOLE["train_freq"]) * ZOO_CARTPOLE["train_freq"]
    with tqdm(total=len(cfg.arm_list) * cfg.seeds * per_run, desc="sb3_cartpole", unit="step") as bar:
        for arm in cfg.arm_list:
            runs = []
            for seed in range(cfg.seeds):
                bar.set_postfix_str(f"{arm} seed {seed}")
                runs.append(train_one(cfg, arm, seed, bar))
            scores = [r["eval_mean_return"] for r in runs]
            arms[arm] = {
                "label": ARMS[arm][0],
                "replay": ARMS[arm][1] or "uniform",
                "eval_mean_return": float(np.mean(scores)),
                "eval_std_return": float(np.std(scores)),
                "runs": runs,
            }
    return {"config": asdict(cfg), "hyperparameters": ZOO_CARTPOLE, "source": ZOO_SOURCE, "arms": arms}


def write_plot(result: dict[str, Any], path: Path) -> Path:
    with outputs.figure(path, figsize=(6.4, 4.0)) as (_, ax):
        for arm in result["arms"].values():
            steps = np.array(arm["runs"][0]["curve_steps"])
            curves = np.array([[math.nan if v is None else v for v in r["curve"]] for r in arm["runs"]])
            with np.errstate(all="ignore"):
                mean, std = np.nanmean(curves, axis=0), np.nanstd(curves, axis=0)
            ax.plot(steps, mean, label=f"{arm['label']} ({len(arm['runs'])} seeds)")
            ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
        ax.set_xlabel("environment steps")
        ax.set_ylabel(f"training return (last {result['config']['curve_window']} episodes)")
        ax.set_title("SB3 DQN on CartPole-v1: uniform vs prioritized replay")
        ax.legend(loc="lower right", fontsize=8)
    return path


def markdown_table(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"SB3 DQN on CartPole-v1, {cfg['timesteps']} steps, hyper-parameters of {result['source']}; "
        f"final greedy policy, mean return of {cfg['eval_episodes']} episodes per seed (max 500).",
        "",
    ]
    rows = []
    for arm in result["arms"].values():
        replay = arm["replay"] if isinstance(arm["replay"], str) else json.dumps(arm["replay"])
        per_seed = ", ".join(f"{r['eval_mean_return']:.1f}" for r in arm["runs"])
        seconds = np.mean([r["train_seconds"] for r in arm["runs"]])
        score = f"{arm['eval_mean_return']:.1f} ± {arm['eval_std_return']:.1f}"
        rows.append([arm["label"], f"`{replay}`", score, per_seed, f"{seconds:.0f}"])
    headers = ["arm", "replay", "eval return, mean ± std over seeds", "per seed", "train s per run"]
    return "\n".join([*lines, outputs.markdown_table(headers, rows)]) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    for f in fields(Config):
        parser.add_argument(f"--{f.name}", type=type(f.default), default=f.default)
    args = parser.parse_args(argv)
    try:
        cfg = Config(**vars(args))
    except ValueError as error:
        parser.error(str(error))
    result = run(cfg)
    out = Path(cfg.out)
    table = markdown_table(result)
    outputs.write_results(
        out.parent,
        out.name,
        result,
        table,
        figure=lambda to: write_plot(result, to / f"{out.name}.png"),
        indent=2,
    )
    print(table)
    return result


if __name__ == "__main__":
    main()
