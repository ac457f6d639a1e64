"""The R2D2 loop (``recipes/r2d2/agent.py``, steps 1-7) over :class:`prisample.SequenceReplay`.

``python -m recipes.r2d2 train --preset tmaze --seed 0 --out runs/r2d2/tmaze.json``: ``num_envs``
actors step together; every step goes to the replay with the actor's state before it (step 1);
every ``update_every`` agent steps the learner draws ``batch_size`` items, takes one Adam step on
:func:`~recipes.r2d2.agent.sequence_loss` and writes the R2D2 priorities back (steps 2-6); every
``eval_every`` agent steps ``eval_episodes`` greedy episodes are played.  The run's JSON holds the
config, the evaluation curve (agent steps, mean return), the throughput and the replay's counters.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from prisample import SequenceReplay
from recipes.common import launch
from recipes.r2d2.agent import RecurrentQNetwork, epsilons, sequence_loss
from recipes.r2d2.config import R2D2Config, parse_command
from recipes.r2d2.envs import make_task

__all__ = ["evaluate", "main", "make_replay", "train"]


def make_envs(cfg: R2D2Config, num_envs: int) -> tuple[Any, tuple[int, ...], int, int, Any]:
    """``(vector env, observation shape, actions, frame stack, stored dtype)``: a CPU task with
    same-step autoreset (``recipes/r2d2/envs.py``), or an ``ALE/`` game through the Double DQN
    recipe's Atari env (stacks of 4 frames of 84×84, next-step autoreset)."""
    if cfg.task.startswith("ALE/"):
        from recipes.dqn.envs import make_env

        env, spec = make_env(cfg.task, num_envs)
        return env, spec.obs_shape, spec.num_actions, spec.frame_stack, spec.obs_dtype
    env = make_task(cfg.task, num_envs, cfg.task_options)
    shape = tuple(env.single_observation_space.shape or ())
    return env, shape, int(env.single_action_space.n), 1, np.float32  # type: ignore[attr-defined]


def make_replay(
    cfg: R2D2Config, obs_shape: tuple[int, ...], obs_dtype: Any, frame_stack: int = 1
) -> SequenceReplay:
    """The arm's replay: items of ``burn_in + length`` steps every ``period``; the LSTM's ``(h, c)``
    stored at item starts only for the stored-state arm; proportional or uniform sampling; frames
    stored once with ``frame_stack > 1`` (overlapping items share them)."""
    state = {"h": ((cfg.lstm_size,), np.float32), "c": ((cfg.lstm_size,), np.float32)}
    return SequenceReplay(
        cfg.capacity,
        obs_shape[1:] if frame_stack > 1 else obs_shape,
        frame_stack=frame_stack,
        burn_in=cfg.burn_in,
        length=cfg.length,
        period=cfg.period,
        state=state if cfg.stored_state else None,
        eta=cfg.eta,
        obs_dtype=obs_dtype,
        num_streams=cfg.num_envs,
        alpha=cfg.alpha,
        beta=cfg.beta,
        backend=cfg.replay,
        seed=cfg.seed,
    )


def _greedy_or_random(q_values: torch.Tensor, eps: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    greedy = q_values.argmax(dim=-1).cpu().numpy()
    explore = rng.random(len(eps)) < eps
    return np.where(explore, rng.integers(0, q_values.shape[-1], len(eps)), greedy)


def evaluate(q: RecurrentQNetwork, cfg: R2D2Config, seed: int, device: torch.device) -> float:
    """Mean return of ``eval_episodes`` greedy episodes (one per environment copy, run together;
    each copy's first episode counts)."""
    env = make_envs(cfg, cfg.eval_episodes)[0]
    obs, _ = env.reset(seed=seed)  # copies seeded seed, seed + 1, …
    state = q.initial_state(cfg.eval_episodes, device)
    returns = np.zeros(cfg.eval_episodes)
    running = np.ones(cfg.eval_episodes, dtype=bool)
    with torch.no_grad():
        while running.any():
            values, state = q(torch.as_tensor(obs, device=device).unsqueeze(1), state)
            obs, reward, terminated, truncated, _ = env.step(values[:, 0].argmax(-1).cpu().numpy())
            returns += np.where(running, reward, 0.0)
            running &= ~(terminated | truncated)
    env.close()
    return float(returns.mean())


def train(cfg: R2D2Config) -> dict[str, Any]:
    """One run; returns (and writes to ``cfg.out``) its record."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    device = torch.device(cfg.device)
    env, obs_shape, num_actions, frame_stack, obs_dtype = make_envs(cfg, cfg.num_envs)
    atari = frame_stack > 1
    obs, _ = env.reset(seed=cfg.seed * 1000)  # copies seeded 1000·seed + i
    torso = "nature_cnn" if atari else "mlp"
    q = RecurrentQNetwork(obs_shape, num_actions, torso, cfg.torso_size, cfg.lstm_size).to(device)
    q_target = copy.deepcopy(q)
    optimizer = torch.optim.Adam(q.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
    replay = make_replay(cfg, obs_shape, obs_dtype, frame_stack)
    reset = np.zeros(cfg.num_envs, dtype=bool)  # next-step autoreset: the env resets at this step
    eps = epsilons(cfg.num_envs)
    streams = np.arange(cfg.num_envs)
    state = q.initial_state(cfg.num_envs, device)
    curve: list[list[float]] = []
    updates, losses, abs_td = 0, [], []
    started = time.perf_counter()
    for step in range(cfg.num_envs, cfg.total_steps + cfg.num_envs, cfg.num_envs):
        with torch.no_grad():  # 1. act from the carried state; store the state before the step
            values, next_state = q(torch.as_tensor(obs, device=device).unsqueeze(1), state)
        action = _greedy_or_random(values[:, 0], eps, rng)
        next_obs, reward, terminated, truncated, infos = env.step(action)
        done = terminated | truncated
        stored = {"h": state[0].cpu().numpy(), "c": state[1].cpu().numpy()} if cfg.stored_state else None
        if atari:  # the memory's converter skips the rows of envs that only reset
            replay.add_vector_step(
                obs, action, reward, terminated, truncated, next_obs, infos, cfg.gamma, state=stored,
                autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
            )  # fmt: skip
            new_episode, reset = reset, done
        else:
            final = next_obs.copy()
            if done.any():
                final[done] = np.stack([infos["final_obs"][i] for i in np.flatnonzero(done)])
            replay.add_many(
                obs, action, reward, cfg.gamma * (1.0 - terminated), final,
                episode_end=done, streams=streams, state=stored,
            )  # fmt: skip
            new_episode = done
        keep = torch.as_tensor(~new_episode, device=device, dtype=torch.float32).unsqueeze(1)
        state = (next_state[0] * keep, next_state[1] * keep)  # a new episode starts from zeros
        obs = next_obs
        if step >= cfg.learning_starts and len(replay) > 0 and step % cfg.update_every < cfg.num_envs:
            for _ in range(max(1, cfg.num_envs // cfg.update_every)):
                batch, draw = replay.sample(cfg.batch_size)  # 2.
                out = sequence_loss(
                    q, q_target, batch, burn_in=cfg.burn_in, n=cfg.n_step,
                    gamma_eps=cfg.rescale_eps if cfg.rescale_eps >= 0 else None,
                    stored_state=cfg.stored_state, device=device,
                )  # fmt: skip
                optimizer.zero_grad()
                out.loss.backward()  # type: ignore[no-untyped-call]  # 5.
                torch.nn.utils.clip_grad_norm_(q.parameters(), cfg.max_grad_norm)
                optimizer.step()
                if cfg.replay != "uniform":  # 6.
                    replay.update_from_td(
                        draw.indices, out.td.cpu().numpy(), batch.learn, generations=batch.generation
                    )
                updates += 1
                losses.append(float(out.loss.detach()))
                abs_td.append(out.mean_abs_td)
                if updates % cfg.target_period == 0:  # 7.
                    q_target.load_state_dict(q.state_dict())
        if step % cfg.eval_every < cfg.num_envs:
            score = evaluate(q, cfg, 10**6 + step, device)
            curve.append([step, score])
    wall = time.perf_counter() - started
    env.close()
    record = {
        "config": dataclasses.asdict(cfg),
        "eval_steps": [int(s) for s, _ in curve],
        "returns": [r for _, r in curve],
        "wall_s": wall,
        "steps_per_s": cfg.total_steps / wall,
        "updates": updates,
        "loss_last": float(np.mean(losses[-100:])) if losses else None,
        "abs_td_last": float(np.mean(abs_td[-100:])) if abs_td else None,
        "dropped_updates": int(replay.dropped_updates),
        "retired_items": int(replay.retired_items),
        "items": len(replay),
    }
    out_path = Path(cfg.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(record, indent=1) + "\n")
    return record


def main(argv: list[str]) -> dict[str, Any]:
    """``python -m recipes.r2d2 train [options]``: say what runs, train, print the final score."""
    yes, options = launch.take_yes(argv)
    cfg = parse_command(options)
    plan = launch.RunPlan(
        command=f"python -m recipes.r2d2 train --preset {cfg.preset}",
        what=f"R2D2 ({cfg.replay}, {'stored state' if cfg.stored_state else 'zero state'}) on {cfg.task}",
        steps=cfg.total_steps,
        out_dir=cfg.out,
        short="--total_steps 3000 --learning_starts 500 --eval_every 1000",
    )
    launch.confirm(plan, yes)
    torch.set_num_threads(1)
    record = train(cfg)
    final = record["returns"][-1] if record["returns"] else float("nan")
    print(f"{cfg.task}: final evaluation {final:.2f} after {cfg.total_steps} steps; wrote {cfg.out}")
    return record
