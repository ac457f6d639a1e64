"""Several Double DQN agents of one game trained together in one process: the Atari sweep's engine.

Every agent ``a`` runs Algorithm 1 (see ``recipes/atari_ddqn.py``) with its own arm (replay
distribution, α, β, step size), seed, environments, ε-greedy exploration and replay memory.  What
the agents share is only the work, so that a sweep fits one GPU:

* one ``AtariVectorEnv`` steps all agents' environments on ALE's C++ threads;
* one :class:`~recipes.dqn_stacked.StackedQNetwork` holds all Q-networks: acting is one captured
  forward for all agents, and one update of all agents is one captured graph
  (:class:`~recipes.dqn_update.OptimizerStep`), each agent's loss reaching only its own parameters;
* the replay memories are separate (one :class:`prisample.replay.PrioritizedReplay` each), their
  frames on the GPU when the networks are.

One difference from ``train``: the minibatches of agent step ``t`` are drawn and learned from while
the emulators compute step ``t`` (``send`` / ``recv``), so they are drawn from the memory before
transition ``t`` is stored — a lag of one transition in a memory of thousands (``train`` with
``overlap_env``).  The GPU computes the update while the new transitions are stored; their
priorities are written before the next minibatch is drawn.  Each agent's
update otherwise follows Algorithm 1 line by line (``tests/test_dqn_together.py`` checks the
stacked update against separate agents).

The final score of an agent is the mean return of the first episode of each of its
``eval_envs`` fresh evaluation environments, played ε-greedily (``eval_epsilon``) after training,
up to ``eval_steps`` agent steps each (an unfinished episode is not a score).

Command (one process per game; ``python -m recipes.atari_sweep`` runs several)::

    python -m recipes.dqn_together --env ALE/Pong-v5 --arms uniform,proportional,rank --seeds 3 \\
        --protocol atari100k --device cuda --out runs/together/pong.json
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from recipes import cli, outputs
from recipes.atari_ddqn import (
    ARMS,
    Batch,
    DDQNConfig,
    DQNRMSprop,
    QNetwork,
    Schedules,
    load_config,
    resolve_device,
    td_loss,
    transition_targets,
)
from recipes.dqn_envs import SendRecv, lives, make_env, reset_with_seeds
from recipes.dqn_model import optimizer_settings
from recipes.dqn_parts import Timer
from recipes.dqn_stacked import StackedQNetwork
from recipes.dqn_update import GraphedForward, HostCopy, OptimizerStep, Pending

SHARED = (
    "env",
    "algorithm",
    "total_steps",
    "device",
    "num_envs",
    "env_backend",
    "memory_size",
    "batch_size",
    "replay_period",
    "learning_starts",
    "network",
    "hidden",
    "shared_bias",
    "optimizer",
    "lr",
    "rmsprop_decay",
    "rmsprop_eps",
    "eps_follows_lr",
    "clip_priority",
    "loss_reduction",
    "gamma",
    "n_step",
    "target_update_period",
    "clip_reward",
    "clip_td",
    "eps_start",
    "eps_end",
    "eps_decay_steps",
    "terminal_on_life_loss",
    "eval_steps",
    "eval_envs",
    "noop_max",
    "cuda_graph",
    "replay_on_device",
)
"""Config fields every agent of one process must agree on (the rest is per agent: the arm's
replay, α, β, ε of p, weight normalisation, step-size divisor, evaluation ε, and the seed)."""


def check_together(cfgs: list[DDQNConfig]) -> None:
    """``ValueError`` naming the field when the agents differ where they must not (:data:`SHARED`)."""
    if not cfgs:
        raise ValueError("cfgs should hold at least one agent's config, but got none")
    for name in SHARED:
        values = {repr(getattr(c, name)) for c in cfgs}
        if len(values) > 1:
            raise ValueError(
                f"{name} should be the same for every agent trained together, but got {sorted(values)}"
            )
    for c in cfgs:  # the stacked loop draws from the sampler and writes |δ|: no LaBER, no LAP rule
        if c.sampling != "replay" or c.priority_rule != "abs_td":
            raise ValueError(
                f"arm should be one whose sampling is 'replay' and priority_rule 'abs_td' to train agents "
                f"together (python -m recipes.atari_ddqn train runs it), but got arm={c.arm!r}"
            )
    if cfgs[0].optimizer != "dqn_rmsprop":
        raise ValueError(
            f"optimizer should be dqn_rmsprop to train agents together, but got {cfgs[0].optimizer!r}"
        )


def _stack(values: list[Any], device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    if isinstance(values[0], torch.Tensor):
        return torch.stack(values).to(device=device, dtype=dtype)
    return torch.as_tensor(np.stack(values), device=device, dtype=dtype)


def train_together(cfgs: list[DDQNConfig], *, progress: bool = True) -> dict[str, Any]:
    """Train every agent of ``cfgs`` (one per config) together; returns their final scores and the
    run's timings (see the module's docstring)."""
    from prisample.replay import PrioritizedReplay

    check_together(cfgs)
    cfg = cfgs[0]
    started = time.perf_counter()
    agents, per_agent = len(cfgs), cfg.num_envs
    device = resolve_device(cfg.device)
    graph = cfg.cuda_graph and device.type == "cuda"
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True  # as cuDNN's convolutions: TF32 matrix products
    env, spec = make_env(
        cfg.env, agents * per_agent, backend=cfg.env_backend, noop_max=cfg.noop_max, threads=cfg.env_threads
    )
    members = []
    for c in cfgs:
        torch.manual_seed(c.seed)  # as train(): the same seed gives every arm the same initial θ
        members.append(QNetwork(cfg.network, spec, cfg.hidden, cfg.shared_bias))
    q = StackedQNetwork(members).to(device)
    q_target = copy.deepcopy(q)
    # PER: the prioritized arms step η / 4 (Table 3) with ε paired: one step size and ε per agent.
    settings = [optimizer_settings(c) for c in cfgs]
    lr = torch.tensor([s[0] for s in settings], device=device)
    eps = torch.tensor([s[1] for s in settings], device=device)
    optimizer = DQNRMSprop(q.parameters(), lr, cfg.rmsprop_decay, eps)
    learner = OptimizerStep(td_loss(q, q_target, cfg), list(q.parameters()), optimizer, graph=graph)
    forward = GraphedForward(q, graph=graph)
    frame_shape = spec.obs_shape[1:] if spec.frame_stack > 1 else spec.obs_shape
    replays = [
        PrioritizedReplay(
            cfg.memory_size,
            frame_shape,
            frame_stack=spec.frame_stack,
            obs_dtype=spec.obs_dtype,
            num_streams=per_agent,
            n_step=cfg.n_step,
            alpha=c.alpha,
            beta=c.beta0,
            eps=c.priority_eps,
            weight_norm=c.weight_norm,
            backend=c.replay,
            seed=c.seed,
            device=device if cfg.replay_on_device and device.type == "cuda" else None,
        )
        for c in cfgs
    ]
    schedules = [Schedules.of(c) for c in cfgs]
    rngs = [np.random.default_rng([c.seed, 1]) for c in cfgs]
    env_seeds = np.array([c.seed * 10_000 + e for c in cfgs for e in range(per_agent)])
    obs, info = reset_with_seeds(env, env_seeds)
    stepper = SendRecv(env)
    n = agents * per_agent
    prev_done, life, returns = np.zeros(n, dtype=bool), lives(info, n), np.zeros(n)
    episode_returns: list[list[float]] = [[] for _ in cfgs]
    timer, step, due, updates, next_target = Timer(), 0, 0, 0, cfg.target_update_period
    window: list[list[float]] = [[] for _ in cfgs]  # per agent: mean importance weight per update
    bar = tqdm(
        total=cfg.total_steps,
        desc=f"{cfg.env} ×{agents}",
        unit="step",
        disable=not progress,
        dynamic_ncols=True,
        smoothing=0.05,
    )
    copier = HostCopy(device)
    pending: list[tuple[list[np.ndarray], Pending]] = []  # a round of updates in flight on the GPU

    def write_priorities() -> None:
        """p_j ← |δ_j| for every agent of the round in flight (line 12); waits for the GPU."""
        while pending:
            indices, values = pending.pop(0)
            with timer("learn"):
                host = values.wait().reshape(2, agents, cfg.batch_size)
            with timer("update_priorities"):
                for a, (replay, drawn) in enumerate(zip(replays, indices, strict=True)):
                    replay.update_priorities(drawn, host[0, a])  # PER: p_j ← |δ_j| (line 12)
                    window[a].append(float(host[1, a].mean()))

    stopped = "done"
    while step < cfg.total_steps:
        if cfg.time_budget_s is not None and time.perf_counter() - started > cfg.time_budget_s:
            stopped = "time_budget"
            break
        epsilon, _, _ = schedules[0].at(step)  # ε's schedule is shared; α and β are per arm
        with timer("act"):  # A_t ~ ε-greedy(Q_a(S_t, ·)) for every agent's environments (line 4)
            actions = np.concatenate([rng.integers(0, spec.num_actions, per_agent) for rng in rngs])
            if epsilon < 1.0:
                obs_t = torch.as_tensor(obs, device=device).view(agents, per_agent, *obs.shape[1:])
                greedy = forward(obs_t).argmax(dim=-1).view(-1).cpu().numpy()
                explore = np.concatenate([rng.random(per_agent) < epsilon for rng in rngs])
                actions = np.where(explore, actions, greedy)
        with timer("env"):
            stepper.send(actions.astype(np.int64))  # the emulators step while the agents learn
        if step >= cfg.learning_starts:
            timer.mark_learning(step)
            due += per_agent
            while due >= cfg.replay_period:  # one minibatch update per K agent steps (line 7)
                write_priorities()  # the previous round's, before this round draws
                with timer("sample"):
                    samples, draws = [], []
                    for replay, schedule in zip(replays, schedules, strict=True):
                        _, alpha, beta = schedule.at(step)
                        if replay.sampler.alpha != alpha:
                            replay.sampler.alpha = alpha  # PER: α annealed (Table 3)
                        replay.sampler.beta = beta  # PER: β annealed β0 → 1 (Sec. 3.4)
                        sample, draw = replay.sample(cfg.batch_size)  # PER: j ~ P(j) (line 9)
                        samples.append(sample)
                        draws.append(draw)
                    batch = Batch(
                        _stack([s.obs for s in samples], device),
                        _stack([s.action for s in samples], device),
                        _stack([s.reward for s in samples], device, torch.float32),
                        _stack([s.discount for s in samples], device, torch.float32),
                        _stack([s.next_obs for s in samples], device),
                        _stack([d.weights for d in draws], device, torch.float32),
                    )
                with timer("learn"):  # PER: w_j (line 10), Δ += w_j δ_j ∇Q for every agent at once
                    _, td_abs = learner(batch)  # queued on the GPU: it runs while the envs step
                    pending.append(([d.indices for d in draws], copier.start(td_abs, batch.weights)))
                updates += 1
                due -= cfg.replay_period
        with timer("env"):  # observe S_t, R_t, γ_t (line 5)
            next_obs, reward, terminated, truncated, info = stepper.recv()
            reward, terminated = np.asarray(reward, dtype=np.float64), np.asarray(terminated, dtype=bool)
            done = (terminated | np.asarray(truncated, dtype=bool)) & ~prev_done
            next_life = lives(info, n)
            life_lost = (next_life < life) & cfg.terminal_on_life_loss
            learn_reward, discount = transition_targets(
                reward, terminated, life_lost, cfg.clip_reward, cfg.gamma
            )
        with timer("add"):  # store (S_{t-1}, A_{t-1}, R_t, γ_t, S_t) in each agent's memory (line 6)
            for a, replay in enumerate(replays):
                rows = np.arange(a * per_agent, (a + 1) * per_agent)
                live = rows[~prev_done[rows]]
                if live.size:  # PER: new transitions enter at the maximal priority
                    replay.add_many(
                        obs[live],
                        actions[live],
                        learn_reward[live],
                        discount[live],
                        next_obs[live],
                        episode_end=done[live],
                        streams=live - a * per_agent,
                    )
        write_priorities()  # the GPU computed them while the transitions above were stored
        returns += np.where(prev_done, 0.0, reward)
        for i in np.flatnonzero(done):
            episode_returns[i // per_agent].append(float(returns[i]))
            returns[i] = 0.0
        prev_done, obs, life = done, next_obs, next_life
        step += per_agent
        bar.update(per_agent)
        if step >= next_target:  # θ_target ← θ for every agent (line 17)
            q_target.load_state_dict(q.state_dict())
            next_target += cfg.target_update_period
    write_priorities()
    learning = timer.learning_phase(step, updates)  # before the evaluation
    bar.close()
    env.close()
    trained_s = time.perf_counter() - started
    scores, episodes = evaluate_together(forward, cfgs, spec.num_actions, device)
    results = []
    for a, c in enumerate(cfgs):
        finished = episode_returns[a]
        results.append(
            {
                "arm": c.arm,
                "seed": c.seed,
                "score": scores[a],
                "eval_episodes": episodes[a],
                "train_episodes": len(finished),
                "train_return_last10": float(np.mean(finished[-10:])) if finished else math.nan,
                "weight_mean_last1000": float(np.mean(window[a][-1000:])) if window[a] else math.nan,
            }
        )
    return {
        "env": cfg.env,
        "stopped": stopped,
        "agents": results,
        "steps_per_agent": step,
        "updates_per_agent": updates,
        "train_s": trained_s,
        "wall_s": time.perf_counter() - started,
        "timing_s": dict(timer.totals),
        "learning_phase": learning,
        "config": {k: v for k, v in asdict(cfg).items() if k in SHARED},
    }


@torch.no_grad()
def evaluate_together(
    forward: GraphedForward, cfgs: list[DDQNConfig], num_actions: int, device: torch.device
) -> tuple[list[float], list[int]]:
    """Each agent's mean return over the first episode of each of its ``eval_envs`` fresh
    environments, ε-greedy with its ``eval_epsilon``, at most ``eval_steps`` agent steps per
    environment; NaN for an agent none of whose episodes finished."""
    cfg, agents = cfgs[0], len(cfgs)
    per_agent = cfg.eval_envs
    env, _ = make_env(
        cfg.env, agents * per_agent, backend=cfg.env_backend, noop_max=cfg.noop_max, threads=cfg.env_threads
    )
    n = agents * per_agent
    seeds = np.array([10**6 + c.seed * 10_000 + e for c in cfgs for e in range(per_agent)])
    obs, _ = reset_with_seeds(env, seeds)
    rng = np.random.default_rng([cfgs[0].seed, 2])
    eps = np.repeat([c.eval_epsilon for c in cfgs], per_agent)
    running, first = np.zeros(n), np.full(n, math.nan)
    fresh = np.zeros(n, dtype=bool)
    # The stacked forward was captured for one observation per agent environment of training;
    # evaluation calls it per group of that shape.
    groups = per_agent // cfg.num_envs if per_agent % cfg.num_envs == 0 else None
    for _ in range(cfg.eval_steps):
        if not np.isnan(first).any():
            break
        obs_t = torch.as_tensor(obs, device=device)
        if groups is not None:
            shaped = obs_t.view(agents, groups, cfg.num_envs, *obs.shape[1:])
            greedy = torch.cat([forward(shaped[:, g]) for g in range(groups)], dim=1).argmax(-1)
        else:
            greedy = forward.module(obs_t.view(agents, per_agent, *obs.shape[1:])).argmax(-1)
        actions = np.where(
            rng.random(n) < eps, rng.integers(0, num_actions, n), greedy.view(-1).cpu().numpy()
        )
        obs, reward, terminated, truncated, _ = env.step(actions.astype(np.int64))
        running += np.where(fresh, 0.0, np.asarray(reward, dtype=np.float64))
        done = (np.asarray(terminated) | np.asarray(truncated)) & ~fresh
        newly = done & np.isnan(first)
        first[newly] = running[newly]
        running[done] = 0.0
        fresh = done
    env.close()
    per = first.reshape(agents, per_agent)
    finished = (~np.isnan(per)).sum(axis=1)
    scores = [float(np.nanmean(row)) if k else math.nan for row, k in zip(per, finished, strict=True)]
    return scores, [int(k) for k in finished]


def agent_configs(
    env: str, arms: list[str], seeds: int, protocol: str | None, **overrides: Any
) -> list[DDQNConfig]:
    """One config per arm × seed (seeds 0 .. seeds-1), from the config files as ``train`` loads them."""
    cfgs = []
    for arm in arms:
        for seed in range(seeds):
            cfgs.append(load_config(env, arm, protocol=protocol, seed=seed, **overrides))
    return cfgs


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--arms", default="uniform,proportional,rank", help=f"comma list of {','.join(ARMS)}")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--protocol", default="atari100k", help="a file of recipes/configs/atari_ddqn/protocols"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a config field (YAML value), e.g. --set total_steps=4000",
    )
    parser.add_argument("--progress", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        overrides = cli.field_overrides(args.set)
    except ValueError as error:
        parser.error(str(error))
    arms = [a for a in args.arms.split(",") if a]
    cfgs = agent_configs(args.env, arms, args.seeds, args.protocol or None, progress=False, **overrides)
    cfgs = [replace(c, tensorboard=False) for c in cfgs]
    torch.set_num_threads(cfgs[0].threads)
    result = train_together(cfgs, progress=bool(args.progress))
    result["command"] = outputs.argv_command(
        "python -m recipes.dqn_together", sys.argv[1:] if argv is None else argv
    )
    result["device_name"] = torch.cuda.get_device_name(0) if cfgs[0].device.startswith("cuda") else "CPU"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    outputs.write_json(args.out, result, default=float)
    return result


if __name__ == "__main__":
    main()
