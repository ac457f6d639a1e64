"""Several Double DQN agents of one game trained together in one process: the Atari sweep's engine.

Every agent ``a`` runs Algorithm 1 (see ``recipes/dqn/agent.py``) with its own arm (replay
distribution, α, β, step size), seed, environments, ε-greedy exploration and replay memory.  What
the agents share is only the work, so that a sweep fits one GPU:

* one ``AtariVectorEnv`` steps all agents' environments on ALE's C++ threads;
* one :class:`~recipes.dqn.stacked.StackedQNetwork` holds all Q-networks: acting is one captured
  forward for all agents, and one update of all agents is one captured graph
  (:class:`~recipes.dqn.update.OptimizerStep`), each agent's loss reaching only its own parameters;
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

Command (one process per game; ``python -m recipes.dqn atari-sweep`` runs several)::

    python -m recipes.dqn together --env ALE/Pong-v5 --arms uniform,proportional,rank --seeds 3 \\
        --protocol atari100k --device cuda --out runs/together/pong.json
"""

from __future__ import annotations

import copy
import math
import sys
import time
from dataclasses import asdict, replace
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from recipes.common import launch, outputs
from recipes.dqn.agent import PriorityWrites, draw, make_learner, make_replay, observe, store, sync_target
from recipes.dqn.config import DDQNConfig, load_config
from recipes.dqn.envs import SendRecv, lives, make_env, reset_with_seeds
from recipes.dqn.loop import Schedules, env_options
from recipes.dqn.networks import DQNRMSprop, QNetwork, optimizer_settings, resolve_device
from recipes.dqn.parts import Timer
from recipes.dqn.plan import together_plan
from recipes.dqn.stacked import StackedQNetwork
from recipes.dqn.together_config import PROG, parse_command
from recipes.dqn.update import Batch, GraphedForward, HostCopy

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
    "repeat_action_probability",
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
                f"together (python -m recipes.dqn train runs it), but got arm={c.arm!r}"
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
    run's timings (see the module's docstring).  Each agent's lines of Algorithm 1 are those of
    ``train`` (``recipes/dqn/agent.py``), run for all agents at once."""
    check_together(cfgs)
    cfg = cfgs[0]
    started = time.perf_counter()
    agents, per_agent = len(cfgs), cfg.num_envs
    device = resolve_device(cfg.device)
    graph = cfg.cuda_graph and device.type == "cuda"
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True  # as cuDNN's convolutions: TF32 matrix products
    env, spec = make_env(cfg.env, agents * per_agent, **env_options(cfg))
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
    learner = make_learner(q, q_target, optimizer, cfg, device)  # every agent's update in one call
    forward = GraphedForward(q, graph=graph)
    replays = [make_replay(c, spec, device, num_streams=per_agent) for c in cfgs]  # line 1, per agent
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
    writes = PriorityWrites(timer)  # a round of updates in flight on the GPU

    def write_priorities() -> None:
        """p_j ← |δ_j| for every agent of the round in flight (line 12); waits for the GPU."""
        for indices, values in writes.ready():
            host = values.reshape(2, agents, cfg.batch_size)
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
                        _, alpha, beta = schedule.at(step)  # PER: α, β annealed per arm
                        sample, drawn = draw(replay, cfg.batch_size, alpha, beta)  # PER: j ~ P(j) (line 9)
                        samples.append(sample)
                        draws.append(drawn)
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
                    writes.push([d.indices for d in draws], copier.start(td_abs, batch.weights))
                updates += 1
                due -= cfg.replay_period
        with timer("env"):  # observe S_t, R_t, γ_t (line 5)
            seen = observe(stepper.recv(), prev_done, life, cfg)
        with timer("add"):  # store (S_{t-1}, A_{t-1}, R_t, γ_t, S_t) in each agent's memory (line 6)
            for a, replay in enumerate(replays):
                rows = np.arange(a * per_agent, (a + 1) * per_agent)
                store(replay, obs, actions, seen, prev_done, rows, first_stream=a * per_agent)
        write_priorities()  # the GPU computed them while the transitions above were stored
        returns += np.where(prev_done, 0.0, seen.reward)
        for i in np.flatnonzero(seen.done):
            episode_returns[i // per_agent].append(float(returns[i]))
            returns[i] = 0.0
        prev_done, obs, life = seen.done, seen.next_obs, seen.life
        step += per_agent
        bar.update(per_agent)
        if step >= next_target:  # θ_target ← θ for every agent (line 17)
            sync_target(q, q_target)
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
    env, _ = make_env(cfg.env, agents * per_agent, **env_options(cfg))
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
    """``python -m recipes.dqn together [options]``: train the agents, write ``--out``; ``--help``
    lists the options.  What will run and its estimated time are printed first (and asked about on
    a terminal when over an hour; ``--yes`` does not ask)."""
    yes, argv = launch.take_yes(sys.argv[1:] if argv is None else argv)
    args, overrides = parse_command(argv)
    arms = [a for a in args.arms.split(",") if a]
    cfgs = agent_configs(args.env, arms, args.seeds, args.protocol or None, progress=False, **overrides)
    cfgs = [replace(c, tensorboard=False) for c in cfgs]
    what = f"{len(cfgs)} Double DQN agents ({args.arms} x {args.seeds} seeds) of {args.env} in one process"
    launch.confirm(together_plan(cfgs, str(args.out), what, PROG), yes)
    torch.set_num_threads(cfgs[0].threads)
    result = train_together(cfgs, progress=bool(args.progress))
    result["command"] = outputs.argv_command(PROG, argv)
    result["device_name"] = torch.cuda.get_device_name(0) if cfgs[0].device.startswith("cuda") else "CPU"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    outputs.write_json(args.out, result, default=float)
    return result
