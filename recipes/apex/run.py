"""Ape-X Double DQN on Ray: many actors, one prioritized memory, one learner (Horgan et al., ICLR 2018).

Ape-X ("Distributed Prioritized Experience Replay", Horgan, Quan, Budden, Barth-Maron, Hessel,
van Hasselt & Silver 2018) splits Double DQN with prioritized replay (Schaul et al. 2016,
Algorithm 1) into actors that only act and a learner that only learns.  Actor ``i`` of ``N``
(Horgan et al., Algorithm 1; ε_i from Sec. 4)::

    ε_i = ε^(1 + α i / (N − 1))        ε = 0.4, α = 7; ε_0 = ε when N = 1   (exploration.py)
    θ_i ← the learner's latest θ                                               (line 2)
    repeat, stepping all its environments together:
        A_t ~ ε_i-greedy(Q(S_t, ·; θ_i)); step → R_t, γ_t (0 at termination), S_{t+1}    (line 5-6)
        local buffer (per environment): once n steps followed S_t, or at the episode's end,  (line 7)
            G = Σ_{k<m} (Π_{j<k} γ_{t+j}) R_{t+k},  Γ = Π_{k<m} γ_{t+k},  s' = S_{t+m}
        every B complete transitions (s, a, G, Γ, s'):                         (line 8-11)
            p = |δ|,  δ = G + Γ Q(s', argmax_a Q(s', a; θ_i); θ_i) − Q(s, a; θ_i)
            memory.add(transitions, p)          # a ReplayWriter: at most max_pending sends unanswered
        every actor_sync_every env steps: θ_i ← the learner's latest θ         (line 13)

and the learner (Horgan et al., Algorithm 2, with Schaul et al.'s Algorithm 1 inside)::

    θ random (seeded as the single-process recipe); θ_target ← θ; publish θ
    wait until the memory holds learning_starts transitions
    until the actors have taken total_steps env steps, summed over actors:
        j ~ P(j) = p_j^α / Σ_i p_i^α,  w_j = (N · P(j))^-β / max_i w_i      (line 4; PER line 9-10)
        δ_j = G_j + Γ_j Q(s'_j, argmax_a Q(s'_j, a; θ); θ_target) − Q(s_j, a_j; θ)
        θ ← θ + η Σ_j w_j δ_j ∇_θ Q(s_j, a_j; θ)                             (line 5-6; PER 11-14)
        memory.update_priorities(j, |δ_j|)                                    (line 7-8; PER 12)
        every target_every updates θ_target ← θ; every publish_every updates publish θ
        optional replay-ratio control, one of:
            samples_per_insert: the memory's rate limiter holds the actors' sends and the
                learner's draws to that many items drawn per transition inserted (± a buffer);
            rate limits on updates per env step since learning started: the learner waits
                above max_replay_ratio, the actors wait below min_replay_ratio
    (old transitions leave the sliding-window memory as new ones arrive: line 9)

An actor has no target network, so its initial priority takes its copy θ_i in both roles of the
Double DQN target (the paper's actors compute priorities with their local copy of the network);
the learner's priorities use θ and θ_target as the single-process recipe does.  Transitions reach
the memory complete (n-step; ``n_step = 1`` in the memory); a truncated episode (time limit) is cut
like a terminated one but keeps ``Γ = γ^m`` and bootstraps from its last observation; a terminated
one has ``Γ = 0``.

Here the actors are Ray actors (``num_cpus=1`` each by default), the memory is
:class:`prisample.ray.RemoteReplay` (one Ray actor per shard), and the learner is the driver
process: the single-process recipe's network (:class:`recipes.dqn.networks.QNetwork`), optimiser
and update (``make_learner``, ``double_dqn_td_error``, η / 4 for the prioritized arms), on the
GPU with ``--device auto`` when there is one, its batches drawn ahead by
:meth:`RemoteReplay.prefetch`.  Every hyper-parameter of the learner comes from the recipe's
config files (``recipes/dqn/configs/<family>.yaml``, ``arms/<arm>.yaml``; ``--learner``
overrides them), so a run compares with ``python -m recipes.dqn train`` at the same env
steps.  Weights travel as ``ray.put`` objects: every chunk of ``actor_sync_every`` env steps an
actor is asked to run carries a reference to the latest published weights, loaded only when newer
(the publish and pull times are measured and reported).  Evaluation is the single-process recipe's
(:class:`recipes.dqn.parts.Evaluator`: ε = 0.01 play on fresh episodes every ``eval_every`` env
steps, the best policy re-evaluated at the end); meanwhile the actors run the chunks they were
given and then wait.

This module is the algorithm: the actors, the memory, the learner and the loop that joins them.
The plumbing lives beside it: the settings in ``recipes/apex/config.py``, the actors' local
n-step buffer in ``recipes/apex/nstep.py``, the driver's side of the Ray actors (start, weights,
chunks of env steps) in ``recipes/apex/fleet.py``, evaluation, logs and ``apex_dqn.json`` in
``recipes/apex/record.py``.

Commands (``PYTHONPATH=.``)::

    python -m recipes.apex train --env CartPole-v1 --actors 2 --total_steps 50000
    python -m recipes.apex train --env MinAtar/Breakout-v1 --actors 4 --device auto
    python -m recipes.apex scaling --env CartPole-v1 --actors 1,2,4 --seconds 60
    python -m recipes.apex compare --env CartPole-v1 --actors 2 --total_steps 50000 --seeds 3

``train`` writes ``apex_dqn.json`` (and the recipe's ``eval.csv``, ``metrics.csv``,
``best_q.pt``) to ``--out`` (default ``runs/apex_dqn/<env>_<actors>``).  The studies ``scaling``
and ``compare`` are ``recipes/apex/studies.py``.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from typing import Any

import numpy as np
import ray
import torch

from prisample.frame_stream import FrameStreamEncoder
from prisample.ray import RemoteBatch, RemoteReplay, ReplayWriter
from recipes.apex.config import (
    ApexConfig,
    learner_config,
    parse_command,
    rate_limit,
    ray_cpus,
    run_dir,
    run_plan,
    start_ray,
)
from recipes.apex.exploration import actor_epsilon
from recipes.apex.fleet import ActorFleet, publish, start_actors
from recipes.apex.nstep import FIELDS, NStepBuilder
from recipes.apex.record import RunRecord, wire_nbytes
from recipes.common import launch, outputs
from recipes.dqn.agent import act, double_dqn_td_error, make_learner, transition_targets
from recipes.dqn.config import DDQNConfig
from recipes.dqn.envs import EnvSpec, lives, make_env, seed_envs
from recipes.dqn.loop import Schedules
from recipes.dqn.networks import QNetwork, make_optimizer, resolve_device
from recipes.dqn.parts import MetricWindow, Timer
from recipes.dqn.update import as_batch

ACTOR_PARTS = ("act", "env", "build", "priorities", "send", "pull")
POLL_S = 0.01
"""Seconds the learner waits for a batch the rate limiter holds back before it looks at the actors."""
LEARNER_PARTS = ("wait_batch", "learn", "update_priorities", "publish", "poll", "throttle", "eval")


# -- the actors (Algorithm 1) ----------------------------------------------------------------------


@torch.no_grad()
def initial_priorities(
    q: torch.nn.Module, transitions: dict[str, np.ndarray], clip_priority: bool
) -> np.ndarray:
    """``|δ|`` of an actor's outgoing transitions with its copy θ_i in both roles of the Double DQN
    target: ``δ = G + Γ Q(s', argmax_a Q(s', a; θ_i); θ_i) − Q(s, a; θ_i)`` (Horgan et al. 2018,
    Algorithm 1, line 10), clipped to [−1, 1] as the learner's priorities are when ``clip_priority``."""
    delta = double_dqn_td_error(q, q, *(torch.as_tensor(transitions[key]) for key in FIELDS))
    return (delta.clamp(-1.0, 1.0) if clip_priority else delta).abs().numpy()


class ApexActor:
    """Actor ``index``: ε_i-greedy play of ``envs_per_actor`` environments on a copy of θ, n-step
    transitions with initial priorities sent to the memory.  The driver makes it a Ray actor
    (:func:`recipes.apex.fleet.start_actors`) and asks it for chunks of env steps (:meth:`run`),
    then :meth:`finish`."""

    def __init__(self, index: int, config: ApexConfig, learner: DDQNConfig, replay: RemoteReplay) -> None:
        torch.set_num_threads(1)
        self.config, self.learner = config, learner
        self.epsilon = actor_epsilon(index, config.actors, config.epsilon, config.epsilon_exponent)
        # actor_epsilon 'schedule': the single-process recipe's ε, read at the env steps of all actors
        self.schedules = Schedules.of(learner) if config.actor_epsilon == "schedule" else None
        self.env, self.spec = make_env(learner.env, config.envs_per_actor)
        self.q = QNetwork(learner.network, self.spec, learner.hidden, learner.shared_bias)
        self.q.eval()
        self.version = -1
        self.rng = np.random.default_rng([config.seed, 100 + index])
        self.obs, info = seed_envs(self.env, 100_000 * (index + 1) + config.seed)  # none the evaluator uses
        self.prev_done = np.zeros(config.envs_per_actor, dtype=bool)
        self.life = lives(info, config.envs_per_actor)
        self.returns = np.zeros(config.envs_per_actor)
        self.builder = NStepBuilder(config.n_step, config.envs_per_actor)
        self.writer = ReplayWriter(replay, shard=index % replay.num_shards, max_pending=config.max_pending)
        self.timer = Timer(totals=dict.fromkeys(ACTOR_PARTS, 0.0))
        self.counts = {"steps": 0, "transitions": 0, "reset_steps": 0, "episodes": 0, "pulls": 0}
        self.counts.update(wire_bytes=0, stack_bytes=0, frames_sent=0)
        self.encoder, self.first_stream = frame_encoder(config, self.spec), index * config.envs_per_actor

    def run(
        self,
        steps: int,
        version: int,
        weights: list[ray.ObjectRef[dict[str, np.ndarray]]],
        start: int = 0,
    ) -> dict[str, Any]:
        """Take ``steps`` env steps (``steps / envs_per_actor`` steps of all environments), first
        loading ``weights`` (a one-element list, so Ray does not fetch it unless used) if its
        ``version`` is newer.  ``start``: the env steps handed out to all actors before this chunk
        (the clock of ``actor_epsilon='schedule'``).  Returns the counts so far and this chunk's
        finished episodes."""
        if version > self.version:
            with self.timer("pull"):
                state = ray.get(weights[0])
                self.q.load_state_dict({name: torch.tensor(value) for name, value in state.items()})
            self.version, self.counts["pulls"] = version, self.counts["pulls"] + 1
        finished: list[float] = []
        device = torch.device("cpu")
        for k in range(steps // self.config.envs_per_actor):
            if self.schedules is not None:  # the single-process recipe's ε at this env step
                self.epsilon = self.schedules.at(start + k * self.config.envs_per_actor)[0]
            with self.timer("act"):  # A_t ~ ε_i-greedy(Q(S_t, ·; θ_i))
                actions = act(self.q, self.obs, self.epsilon, self.rng, self.spec.num_actions, device)
            with self.timer("env"):
                next_obs, reward, terminated, truncated, info = self.env.step(actions.astype(np.int64))
            with self.timer("build"):
                reward, terminated = np.asarray(reward, dtype=np.float64), np.asarray(terminated, dtype=bool)
                done = (terminated | np.asarray(truncated, dtype=bool)) & ~self.prev_done
                life = lives(info, self.config.envs_per_actor)
                life_lost = (life < self.life) & self.learner.terminal_on_life_loss
                learn_reward, discount = transition_targets(
                    reward, terminated, life_lost, self.learner.clip_reward, self.learner.gamma
                )
                for e in np.flatnonzero(~self.prev_done):  # an autoreset step stores nothing
                    self.builder.add(
                        int(e),
                        self.obs[e],
                        int(actions[e]),
                        float(learn_reward[e]),
                        float(discount[e]),
                        next_obs[e],
                        bool(done[e]),
                    )
                self.returns += np.where(self.prev_done, 0.0, reward)
                for e in np.flatnonzero(done):
                    finished.append(float(self.returns[e]))
                    self.returns[e] = 0.0
                self.counts["reset_steps"] += int(self.prev_done.sum())
                self.prev_done, self.obs, self.life = done, next_obs, life
            if self.builder.ready >= self.config.actor_batch:
                self._send()
        self.counts["steps"] += steps
        self.counts["episodes"] += len(finished)
        return {**self.counts, "returns": finished}

    def finish(self) -> dict[str, Any]:
        """Send the open windows (cut short) and wait for every send: the actor's totals, with
        ``stored`` (transitions the memory acknowledged) and its seconds per part."""
        self.builder.flush()
        if self.builder.ready:
            self._send()
        stored = self.writer.flush()
        self.env.close()
        return {**self.counts, "stored": stored, "epsilon": self.epsilon, "timing_s": dict(self.timer.totals)}

    def _send(self) -> None:
        transitions, envs, ends = self.builder.take_with_origin()
        priorities = None  # actor_priorities false: they enter at the memory's maximum priority
        if self.config.actor_priorities:
            with self.timer("priorities"):
                priorities = initial_priorities(self.q, transitions, self.learner.clip_priority)
        with self.timer("send"):  # waits while max_pending earlier sends are unanswered
            message = transitions
            if self.encoder is not None:  # each environment's new frames once (its stream)
                stacks = self.encoder.encode(
                    transitions["obs"], transitions["next_obs"], self.first_stream + envs
                )
                rest = {key: value for key, value in transitions.items() if key not in ("obs", "next_obs")}
                message = {**stacks, **rest, "episode_end": ends}
                self.counts["frames_sent"] = self.encoder.frames_sent
            self.writer.add(message, priorities)
        self.counts["wire_bytes"] += wire_nbytes(message, priorities)
        self.counts["stack_bytes"] += wire_nbytes(transitions, priorities)
        self.counts["transitions"] += len(transitions["action"])


def frame_encoder(config: ApexConfig, spec: EnvSpec) -> FrameStreamEncoder | None:
    """For stacked observations (Atari), the actors' encoder: one stream per environment of every
    actor (actor ``i``'s environment ``e`` is stream ``i · envs_per_actor + e``); else None."""
    if spec.frame_stack == 1:
        return None
    return FrameStreamEncoder(config.actors * config.envs_per_actor, spec.frame_stack)


# -- the memory ------------------------------------------------------------------------------------


def make_memory(config: ApexConfig, cfg: DDQNConfig, spec: EnvSpec) -> RemoteReplay:
    """One prioritized memory for every actor, ``config.shards`` Ray actors holding it
    (Schaul et al. 2016, Secs. 3.3-3.4): ``P(j) = p_j^α / Σ_i p_i^α``, weights ``(N·P(j))^-β / max_i w_i``;
    a sliding window, the oldest transitions leaving as new ones arrive (Horgan et al., Algorithm 2,
    line 9).  Stacked observations (Atari) are stored one frame at a time on each actor
    environment's stream, as :func:`frame_encoder`'s messages bring them."""
    stacked: dict[str, Any] = {}
    if spec.frame_stack > 1:
        stacked = {"frame_stack": spec.frame_stack, "num_streams": config.actors * config.envs_per_actor}
    return RemoteReplay(
        cfg.memory_size,
        spec.obs_shape[1:] if stacked else spec.obs_shape,
        shards=config.shards,
        beta=cfg.beta0,
        weight_norm=cfg.weight_norm,
        seed=config.seed,
        obs_dtype=spec.obs_dtype,
        alpha=cfg.alpha,
        eps=cfg.priority_eps,
        backend=cfg.replay,
        **rate_limit(config, cfg.batch_size, cfg.learning_starts),
        **stacked,
    )


# -- the learner (Algorithm 2) ---------------------------------------------------------------------


class Learner:
    """θ, θ_target, the single-process recipe's update, and what the learner counts.

    :meth:`learn` is lines 4-8 of Algorithm 2 on one drawn batch; the loop around it is
    :func:`train`'s.
    """

    def __init__(self, config: ApexConfig, learner: DDQNConfig, spec: EnvSpec, replay: RemoteReplay) -> None:
        self.device = resolve_device(config.device)
        torch.set_num_threads(learner.threads)
        torch.manual_seed(config.seed)  # θ_0 as the single-process recipe draws it
        self.q = QNetwork(learner.network, spec, learner.hidden, learner.shared_bias).to(self.device)
        self.q_target = copy.deepcopy(self.q)
        graph = learner.cuda_graph and self.device.type == "cuda"
        optimizer = make_optimizer(learner, self.q.parameters(), capturable=graph)  # PER: η / 4
        self.update = make_learner(self.q, self.q_target, optimizer, learner, self.device)
        self.replay, self.schedules = replay, Schedules.of(learner)
        recipe_period = max(1, learner.target_update_period // learner.replay_period)  # steps → updates
        self.target_every = config.target_every or recipe_period
        self.timer = Timer(totals=dict.fromkeys(LEARNER_PARTS, 0.0))
        self.window = MetricWindow()
        self.updates = self.publishes = 0
        self.beta: float = learner.beta0
        """β of the draws (the memory's), annealed by :meth:`anneal`."""
        self._sent: list[ray.ObjectRef[Any]] = []

    def learn(self, batch: RemoteBatch) -> None:
        """One update on ``batch``, its priorities sent back, θ_target ← θ when due."""
        with self.timer("learn"):  # PER: θ ← θ + η Σ_j w_j δ_j ∇Q, Double DQN target
            loss, td_abs = self.update(as_batch(batch, batch.weights, self.device))
            priorities = td_abs.cpu().numpy()
        with self.timer("update_priorities"):  # PER: p_j ← |δ_j|; a shard drops it if j was rewritten
            self._sent += self.replay.update_priorities(batch, priorities)
        self.updates += 1
        weights = batch.weights
        self.window.add(
            loss=float(loss),
            td_abs=float(priorities.mean()),
            weight_mean=float(weights.mean()),
            weight_min=float(weights.min()),
        )
        if self.updates % self.target_every == 0:
            self.q_target.load_state_dict(self.q.state_dict())

    def anneal(self, env_steps: int) -> None:
        """β of the next draws, annealed over env steps as the single-process recipe anneals it."""
        self.beta = self.replay.beta = self.schedules.at(env_steps)[2]

    def publish(self) -> ray.ObjectRef[dict[str, np.ndarray]]:
        """θ for the actors; first waits for the priority updates sent since the last time (a
        shard's error surfaces here, and the calls in flight stay bounded)."""
        with self.timer("update_priorities"):
            ray.get(self._sent)
            self._sent = []
        with self.timer("publish"):  # the weights' transport alone, as reported
            self.publishes += 1
            return publish(self.q)


# -- the loop: actors, memory and learner together -------------------------------------------------


def make_fleet(config: ApexConfig, actors: list[Any]) -> ActorFleet:
    """The actors' work: chunks of ``actor_sync_every`` env steps, ``actor_queue`` queued per actor."""
    return ActorFleet(actors, config.actor_sync_every, config.total_steps, depth=config.actor_queue)


def train(config: ApexConfig) -> dict[str, Any]:
    """Run actors and learner until ``total_steps`` env steps; write ``apex_dqn.json`` to the run
    folder and return its contents.  Starts Ray (and shuts it down) unless it is running."""
    started, load_start = time.perf_counter(), os.getloadavg()
    cfg = learner_config(config)
    folder = run_dir(config)
    folder.mkdir(parents=True, exist_ok=True)
    own_ray = start_ray(ray_cpus(config))
    probe, spec = make_env(config.env, 1)
    probe.close()
    replay = make_memory(config, cfg, spec)
    learner = Learner(config, cfg, spec, replay)
    actors = start_actors(ApexActor, config.actors, config.actor_cpus, config, cfg, replay)
    fleet = make_fleet(config, actors)
    record = RunRecord(config, cfg, folder, learner, fleet, started, load_start)
    try:
        fleet.start(publish(learner.q))
        while not fleet.finished and replay.stats()["size"] < cfg.learning_starts:
            record.after_chunks(fleet.poll(timeout=0.05))
        learning_from = (time.perf_counter(), fleet.steps)
        record.learning_from = fleet.steps  # a matched run evaluates at the updates due by then

        def below(ratio: float | None) -> bool:
            """Fewer updates than ``ratio`` per env step since learning started."""
            return ratio is not None and learner.updates < ratio * (fleet.steps - learning_from[1])

        limited = config.samples_per_insert is not None

        def done() -> bool:
            """Every env step taken and, under a rate limit, every transition sent (the actors'
            last sends may wait in the memory's limiter for the learner's draws)."""
            if not fleet.finished or below(config.min_replay_ratio):
                return False
            return not limited or fleet.finishing_done()

        with replay.prefetch(cfg.batch_size, depth=config.prefetch_depth) as batches:
            while not done():
                with learner.timer("poll"):
                    results = fleet.poll()
                record.after_chunks(results)
                if config.min_replay_ratio is not None:  # the learner is behind: actors wait
                    fleet.hold(below(config.min_replay_ratio))
                if config.max_replay_ratio is not None and not below(config.max_replay_ratio):
                    if fleet.finished:
                        break
                    with learner.timer("throttle"):  # ahead of the allowed replay ratio: wait for env steps
                        record.after_chunks(fleet.poll(timeout=0.01))
                    continue
                learner.anneal(fleet.steps)
                with learner.timer("wait_batch"):  # PER: j ~ P(j), drawn ahead by the prefetch thread
                    batch = batches.get(timeout=POLL_S if limited else None)
                if batch is None:  # the rate limiter holds the learner back: look at the actors
                    continue
                learner.learn(batch)
                if learner.updates % config.publish_every == 0:
                    fleet.set_weights(learner.publish())
        learning = {"s": time.perf_counter() - learning_from[0], "steps": fleet.steps - learning_from[1]}
        learner.publish()  # waits for the last priority updates
        totals = fleet.finish()
        stats = replay.stats()
    finally:
        record.close_bar()
        fleet.kill()
        replay.shutdown()
        if own_ray:
            ray.shutdown()
    record.final_evaluation()
    return record.write(totals, stats, learning)


SHOWN = (
    "steps",
    "updates",
    "actor_steps_per_s",
    "learner_updates_per_s",
    "replay_ratio",
    "dropped_updates",
    "wire",
    "best_policy_score",
    "wall_s",
)
"""The keys of ``apex_dqn.json`` that ``train`` prints."""


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``python -m recipes.apex train [options]``; ``--help`` lists them.  What will run is printed
    first (and asked about on a terminal when over an hour; ``--yes`` does not ask)."""
    yes, argv = launch.take_yes(sys.argv[1:] if argv is None else argv)
    config = parse_command(argv)
    launch.confirm(run_plan(config), yes)
    result = train(config)
    print(outputs.json_text({key: result[key] for key in SHOWN}), end="")
    print(f"wrote {result['run_dir']}/apex_dqn.json")
    return result
