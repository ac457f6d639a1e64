"""Actors and a learner on one prioritized replay, in threads: the shape of Ape-X (Horgan et al. 2018).

Ape-X decouples acting from learning: many actors step their own environments with different
exploration rates (``ε_i = ε^(1 + 7 i / (N − 1))``, Horgan et al. 2018, Sec. 4), each with a copy of
the Q-network that the learner refreshes now and then, and feed one shared prioritized replay; one
learner samples from it, trains, and writes the new priorities back (Schaul et al. 2016,
Algorithm 1).  Here the actors and the learner are threads of one process around one
:class:`~prisample.PrioritizedReplay`, whose every public call is atomic under threads:

    actor thread i (×N)                       learner thread (here: the main thread)
    ──────────────────                        ─────────────────────────────────────
    ε_i-greedy on its network copy            batch, draw ← next(prefetcher)     # PER: line 9-10
    replay.add(s, a, r, γ_t, s', stream=…)    Double DQN loss · importance weights
      # PER: enters at the max priority       replay.update_priorities(|δ|)      # PER: line 12
    copy the learner's weights every …        publish weights every sync_every updates

The learner draws through :meth:`~prisample.PrioritizedReplay.prefetch`: a background thread draws
and gathers the next batch while the current one trains (``prefetch_depth``; the lag this brings
is measured in ``docs/concepts.md``, "Prefetch").  Ape-X computes initial priorities on the actors;
here new transitions enter at the maximum priority, as in Algorithm 1.  CartPole with a small MLP,
a bounded number of learner updates; it prints the actors' steps/s and the learner's updates/s and
writes JSON to ``out_dir``.

Replay ratio: left alone, the actors outrun the learner (about 0.02 updates per environment step
on two cores) and the learner trains on whatever ratio the threads' speeds give.  A
:class:`~prisample.rate_limit.RateLimiter` holds them to ``samples_per_insert`` (default 8: one
update of 32 per 4 steps, the DQN recipe's ratio): an actor waits before ``add`` while it is
ahead, the learner before an update while it is; ``samples_per_insert=0`` lets both run free.

Run: ``python -m recipes.apex actor-learner --updates 2000``
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from prisample import LinearSchedule, PrioritizedReplay
from prisample.rate_limit import RateLimiter, RateLimiterClosedError
from recipes.apex.actor_learner_config import ActorLearnerConfig, parse_command, run_plan
from recipes.apex.exploration import actor_epsilon
from recipes.common import launch
from recipes.dqn.agent import double_dqn_td_error

BATCH_FIELDS = ("obs", "action", "reward", "discount", "next_obs")  # double_dqn_td_error's order


def env_dims(env: gym.Env[Any, Any]) -> tuple[int, int]:
    """``(observation size, number of actions)`` of an environment with a flat Box observation and
    Discrete actions."""
    shape, actions = env.observation_space.shape, env.action_space
    if shape is None or not isinstance(actions, gym.spaces.Discrete):
        raise ValueError(f"env should have a flat observation and discrete actions, but has {env.spec}")
    return shape[0], int(actions.n)


def q_network(obs_dim: int, actions: int, hidden: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(obs_dim, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, actions),
    )


class Weights:
    """The learner's latest weights, published for the actors (a copy: actors never see a
    half-written network)."""

    def __init__(self, network: nn.Module) -> None:
        self._lock = threading.Lock()
        self.publish(network)

    def publish(self, network: nn.Module) -> None:
        state = copy.deepcopy(network.state_dict())
        with self._lock:
            self._state, self.version = state, getattr(self, "version", -1) + 1

    def load_into(self, network: nn.Module) -> None:
        with self._lock:
            state = self._state
        network.load_state_dict(state)


@dataclass
class ActorStats:
    steps: int = 0
    returns: list[float] | None = None


def rate_limiter(config: ActorLearnerConfig) -> RateLimiter | None:
    """The limiter of ``config.samples_per_insert``, or ``None`` for 0.

    Sampling starts once ``learning_starts`` transitions are drawable: an n-step replay holds the
    last ``n_step − 1`` transitions of each stream until their window completes, so that many more
    must be inserted.  The buffer (``± (batch_size + samples_per_insert)``) leaves room for one
    insert and one draw of a batch, so neither side waits on the other for good."""
    if config.samples_per_insert == 0:
        return None
    streams = config.actors * config.envs_per_actor
    return RateLimiter(
        config.samples_per_insert,
        min_size_to_sample=config.learning_starts + streams * (config.n_step - 1),
        error_buffer=config.batch_size + config.samples_per_insert,
        timeout=config.rate_timeout,
    )


def actor(
    i: int,
    config: ActorLearnerConfig,
    replay: PrioritizedReplay,
    weights: Weights,
    stop: threading.Event,
    stats: ActorStats,
    limiter: RateLimiter | None = None,
) -> None:
    """Step ``envs_per_actor`` environments in turn with ε_i-greedy on a copy of the learner's
    network, adding every transition to the shared replay on the environment's own stream (once
    ``limiter`` lets it; its close ends the actor)."""
    epsilon = actor_epsilon(i, config.actors, config.epsilon)
    rng = np.random.default_rng(config.seed + 1000 + i)
    envs = [gym.make(config.env_id) for _ in range(config.envs_per_actor)]
    obs = [env.reset(seed=config.seed + 100 * i + e)[0] for e, env in enumerate(envs)]
    episode_return = [0.0] * len(envs)
    obs_dim, num_actions = env_dims(envs[0])
    network = q_network(obs_dim, num_actions, config.hidden)
    weights.load_into(network)
    seen, stats.returns = weights.version, []
    while not stop.is_set():
        if weights.version != seen:  # the learner published newer weights
            seen = weights.version
            weights.load_into(network)
        for e, env in enumerate(envs):
            if rng.random() < epsilon:
                action = int(rng.integers(num_actions))
            else:
                with torch.no_grad():
                    action = int(network(torch.as_tensor(obs[e])).argmax())
            next_obs, reward, terminated, truncated, _ = env.step(action)
            if limiter is not None:
                try:
                    limiter.insert(1)  # waits while the actors are ahead of the learner
                except RateLimiterClosedError:
                    return
            # PER: the new transition enters at the maximum priority of the memory (line 6)
            replay.add(
                obs[e],
                action,
                float(reward),
                0.0 if terminated else config.gamma,
                next_obs,
                episode_end=terminated or truncated,
                stream=i * config.envs_per_actor + e,
            )
            episode_return[e] += float(reward)
            if terminated or truncated:
                stats.returns.append(episode_return[e])
                episode_return[e] = 0.0
                next_obs, _ = env.reset()
            obs[e] = next_obs
            stats.steps += 1


def main(config: ActorLearnerConfig | None = None) -> dict[str, Any]:
    """Run actors and learner; write ``actor_learner.json`` to ``config.out_dir``."""
    config = ActorLearnerConfig() if config is None else config
    torch.manual_seed(config.seed)
    torch.set_num_threads(1)  # threads share the cores: one each
    probe = gym.make(config.env_id)
    obs_dim, num_actions = env_dims(probe)
    online = q_network(obs_dim, num_actions, config.hidden)
    target = copy.deepcopy(online)
    optimizer = torch.optim.Adam(online.parameters(), lr=config.lr)
    # PER: one replay for every actor, one stream per environment, β annealed to 1 over the updates
    replay = PrioritizedReplay(
        config.capacity,
        (obs_dim,),
        obs_dtype=np.float32,
        num_streams=config.actors * config.envs_per_actor,
        n_step=config.n_step,
        alpha=config.alpha,
        beta=LinearSchedule(config.beta0, 1.0, config.updates),
        backend=config.backend,
        seed=config.seed,
    )
    weights, stop, limiter = Weights(online), threading.Event(), rate_limiter(config)
    stats = [ActorStats() for _ in range(config.actors)]
    threads = [
        threading.Thread(
            target=actor,
            args=(i, config, replay, weights, stop, stats[i], limiter),
            daemon=True,
            name=f"actor-{i}",
        )
        for i in range(config.actors)
    ]
    load_start, start = os.getloadavg(), time.perf_counter()
    for t in threads:
        t.start()
    try:
        while replay.sampler.size < config.learning_starts:  # complete n-step windows, drawable
            if not any(t.is_alive() for t in threads):
                raise RuntimeError("every actor thread ended before learning started")
            time.sleep(0.01)
        learn_start, steps_then = time.perf_counter(), sum(s.steps for s in stats)
        losses = []
        # PER: the next batch is drawn and gathered in the background while this one trains
        with replay.prefetch(config.batch_size, depth=config.prefetch_depth, total=config.updates) as batches:
            bar = tqdm(batches, total=config.updates, disable=not config.progress, desc="learner updates")
            for update, (batch, draw) in enumerate(bar):
                if limiter is not None:  # the batch was drawn ahead; the update waits for its turn
                    limiter.sample(config.batch_size)
                td = double_dqn_td_error(  # n-step reward and discount come from the replay
                    online, target, *(torch.as_tensor(batch[key]) for key in BATCH_FIELDS)
                )
                # PER: importance weights (N·P(i))^-β / max w correct the prioritized draw's bias
                huber = nn.functional.smooth_l1_loss(td, torch.zeros_like(td), reduction="none")
                loss = (torch.as_tensor(draw.weights) * huber).mean()
                optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
                optimizer.step()
                # PER: |δ| back to the sampler (line 12); stale updates (slot rewritten) dropped
                replay.update_priorities(draw.indices, td.detach().abs(), generations=batch.generation)
                losses.append(float(loss.detach()))
                if (update + 1) % config.target_every == 0:
                    target.load_state_dict(online.state_dict())
                if (update + 1) % config.sync_every == 0:
                    weights.publish(online)
        learn_s = time.perf_counter() - learn_start
        steps_during = sum(s.steps for s in stats) - steps_then
    finally:
        stop.set()
        if limiter is not None:
            limiter.close()  # wakes the actors waiting to insert
        for t in threads:
            t.join(30)
    total_s = time.perf_counter() - start
    returns = [r for s in stats for r in (s.returns or [])]
    results = {
        "config": asdict(config),
        "actor_steps": sum(s.steps for s in stats),
        "actor_steps_per_s": steps_during / learn_s,
        "learner_updates": config.updates,
        "learner_updates_per_s": config.updates / learn_s,
        "updates_per_env_step": config.updates / max(steps_during, 1),
        "rate_limiter": None if limiter is None else limiter.stats(),
        "episodes": len(returns),
        "mean_return_last_10": float(np.mean(returns[-10:])) if returns else None,
        "beta_final": replay.sampler.beta,
        "max_priority": replay.sampler.max_priority,
        "dropped_updates": replay.dropped_updates,
        "mean_loss_last_100": float(np.mean(losses[-100:])),
        "seconds": total_s,
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
    }
    print(
        f"actors: {results['actor_steps_per_s']:.0f} steps/s, "
        f"learner: {results['learner_updates_per_s']:.0f} updates/s, "
        f"{results['updates_per_env_step']:.3f} updates per env step, {len(returns)} episodes, "
        f"mean return of the last 10: {results['mean_return_last_10']}"
    )
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "actor_learner.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {out / 'actor_learner.json'}")
    return results


def command(argv: list[str]) -> dict[str, Any]:
    """``python -m recipes.apex actor-learner [options]``: its options, then :func:`main`."""
    yes, options = launch.take_yes(argv)
    config = parse_command(options)
    launch.confirm(run_plan(config), yes)
    return main(config)
