"""Ape-X Double DQN on Ray: many actors, one prioritized memory, one learner (Horgan et al., ICLR 2018).

Ape-X ("Distributed Prioritized Experience Replay", Horgan, Quan, Budden, Barth-Maron, Hessel,
van Hasselt & Silver 2018) splits Double DQN with prioritized replay (Schaul et al. 2016,
Algorithm 1) into actors that only act and a learner that only learns.  Actor ``i`` of ``N``
(Horgan et al., Algorithm 1; ε_i from Sec. 4)::

    ε_i = ε^(1 + α i / (N − 1))        ε = 0.4, α = 7; ε_0 = ε when N = 1
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
        optional rate limits on updates per env step since learning started:
            the learner waits above max_replay_ratio, the actors wait below min_replay_ratio
    (old transitions leave the sliding-window memory as new ones arrive: line 9)

An actor has no target network, so its initial priority takes its copy θ_i in both roles of the
Double DQN target (the paper's actors compute priorities with their local copy of the network);
the learner's priorities use θ and θ_target as the single-process recipe does.  Transitions reach
the memory complete (n-step; ``n_step = 1`` in the memory); a truncated episode (time limit) is cut
like a terminated one but keeps ``Γ = γ^m`` and bootstraps from its last observation; a terminated
one has ``Γ = 0``.

Here the actors are Ray actors (``num_cpus=1`` each by default), the memory is
:class:`prisample.ray.RemoteReplay` (one Ray actor per shard), and the learner is the driver
process: the single-process recipe's network (:class:`recipes.atari_ddqn.QNetwork`), optimiser
and update (``make_learner``, ``double_dqn_td_error``, η / 4 for the prioritized arms), on the
GPU with ``--device auto`` when there is one, its batches drawn ahead by
:meth:`RemoteReplay.prefetch`.  Every hyper-parameter of the learner comes from the recipe's
config files (``recipes/configs/atari_ddqn/<family>.yaml``, ``arms/<arm>.yaml``; ``--learner``
overrides them), so a run compares with ``python -m recipes.atari_ddqn train`` at the same env
steps.  Weights travel as ``ray.put`` objects: every chunk of ``actor_sync_every`` env steps an
actor is asked to run carries a reference to the latest published weights, loaded only when newer
(the publish and pull times are measured and reported).  Evaluation is the single-process recipe's
(:class:`recipes.dqn_parts.Evaluator`: ε = 0.01 play on fresh episodes every ``eval_every`` env
steps, the best policy re-evaluated at the end); meanwhile the actors run the chunks they were
given and then wait.

Commands (``PYTHONPATH=.``)::

    python -m recipes.apex_dqn train --env CartPole-v1 --actors 2 --total_steps 50000
    python -m recipes.apex_dqn train --env MinAtar/Breakout-v1 --actors 4 --device auto
    python -m recipes.apex_dqn scaling --env CartPole-v1 --actors 1,2,4 --seconds 60
    python -m recipes.apex_dqn compare --env CartPole-v1 --actors 2 --total_steps 50000 --seeds 3

``train`` writes ``apex_dqn.json`` (and the recipe's ``eval.csv``, ``metrics.csv``,
``best_q.pt``) to ``--out`` (default ``runs/apex_dqn/<env>_<actors>``).  ``scaling`` and
``compare`` live in ``recipes/apex_studies.py``.
"""

from __future__ import annotations

import copy
import json
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
from tqdm import tqdm  # type: ignore[import-untyped]

from prisample.ray import RemoteBatch, RemoteReplay, ReplayWriter
from recipes import cli
from recipes.atari_ddqn import (
    PAPER_ARMS,
    DDQNConfig,
    QNetwork,
    Schedules,
    act,
    as_batch,
    double_dqn_td_error,
    load_config,
    make_learner,
    make_optimizer,
    resolve_device,
    transition_targets,
)
from recipes.dqn_envs import EnvSpec, check_env, env_family, lives, make_env, seed_envs
from recipes.dqn_parts import EvalRecord, Evaluator, Logger, MetricWindow, Timer

FIELDS = ("obs", "action", "reward", "discount", "next_obs")
"""A transition as the memory stores it and ``double_dqn_td_error`` takes it, in that order."""
ACTOR_PARTS = ("act", "env", "build", "priorities", "send", "pull")
LEARNER_PARTS = ("wait_batch", "learn", "update_priorities", "publish", "poll", "throttle", "eval")
SET_BY_APEX = ("env", "arm", "seed", "total_steps", "n_step", "device")
"""Fields of the learner's :class:`DDQNConfig` that :class:`ApexConfig` sets itself."""


@dataclass(frozen=True)
class ApexConfig:
    """One Ape-X run.  The learner's hyper-parameters (network, optimiser, step size, memory size,
    batch, γ, α, β, target period, evaluation) are the single-process recipe's for ``env`` and
    ``arm``; ``learner`` overrides them."""

    env: str = "CartPole-v1"
    """Gymnasium id: e.g. CartPole-v1 (classic control) or MinAtar/Breakout-v1."""
    arm: str = "proportional"
    """The recipe's arm (recipes/configs/atari_ddqn/arms/<arm>.yaml): uniform, proportional or rank."""
    actors: int = 2
    """Actor processes N (Ray actors)."""
    envs_per_actor: int = 4
    """Environments each actor steps together (one network forward for all of them)."""
    actor_cpus: float = 1.0
    """Ray CPUs each actor reserves."""
    total_steps: int = 50_000
    """Env steps summed over actors and their environments (a multiple of envs_per_actor), as the
    single-process recipe counts them: every step of every environment, autoreset steps included."""
    n_step: int = 3
    """Steps per return (Ape-X: 3)."""
    epsilon: float = 0.4
    """ε of ε_i = ε^(1 + α i / (N − 1)) (Ape-X: 0.4)."""
    epsilon_exponent: float = 7.0
    """α of that schedule (Ape-X: 7)."""
    actor_batch: int = 50
    """Complete transitions an actor gathers before it computes their priorities and sends them."""
    actor_sync_every: int = 400
    """Env steps per actor between weight pulls (a multiple of envs_per_actor; Ape-X: 400 frames)."""
    max_pending: int = 2
    """Sends an actor's ReplayWriter keeps unanswered before it waits."""
    publish_every: int = 20
    """Learner updates between publications of θ."""
    target_every: int | None = None
    """Learner updates between θ_target ← θ; None: the recipe's target_update_period / replay_period."""
    max_replay_ratio: float | None = None
    """At most this many learner updates per env step since learning started (the single-process
    recipe makes 1 / replay_period); None: no cap."""
    min_replay_ratio: float | None = None
    """Actors get no new chunk while the learner has made fewer updates than this per env step since
    learning started (a rate limiter, as Reverb's SampleToInsertRatio; Ape-X has none); None: they
    never wait.  With max_replay_ratio equal, a run replays as the single-process recipe does."""
    shards: int = 1
    """Ray actors holding the memory (prisample.ray.RemoteReplay shards)."""
    prefetch_depth: int = 1
    """Batches the learner's prefetch thread draws ahead."""
    eval_every: int | None = None
    """Env steps between evaluations; None: the learner config's (CartPole 5,000); 0: none."""
    device: str = "auto"
    """The learner's torch device: 'auto' (cuda when available), 'cpu', 'cuda'.  Actors use the CPU."""
    seed: int = 0
    """Seeds the learner's network (as the recipe: same initial θ), the memory, actors and evaluation."""
    time_budget_s: float | None = None
    """Stop handing out env steps after this many seconds (throughput runs)."""
    out: str | None = None
    """Run folder; None: runs/apex_dqn/<env>_<actors>."""
    learner: dict[str, Any] | None = None
    """Fields of the learner's recipe config as JSON, e.g. '{"lr": 0.001, "batch_size": 64}'."""
    progress: bool = True
    """Show a tqdm bar of env steps."""

    def __post_init__(self) -> None:
        check_env(self.env)
        cli.require(
            env_family(self.env) != "atari",
            "env",
            "be a classic-control or MinAtar id (the remote memory stores no frame stacks)",
            self.env,
        )
        cli.one_of(self, "arm", PAPER_ARMS)
        cli.positive(self, "actors", "envs_per_actor", "actor_cpus", "total_steps", "n_step")
        cli.positive(self, "actor_batch", "actor_sync_every", "max_pending", "publish_every", "shards")
        cli.positive(self, "prefetch_depth")
        cli.at_least(self, 1, "target_every")
        cli.at_least(self, 0, "seed", "eval_every", "epsilon_exponent")
        cli.in_range(self, "epsilon", 0.0, 1.0)
        for name in ("max_replay_ratio", "min_replay_ratio", "time_budget_s"):
            if getattr(self, name) is not None:
                cli.positive(self, name)
        low, high = self.min_replay_ratio, self.max_replay_ratio
        if low is not None and high is not None:
            cli.require(low <= high, "min_replay_ratio", f"be at most max_replay_ratio={high}", low)
        for name in ("total_steps", "actor_sync_every"):
            value = getattr(self, name)
            cli.require(
                value % self.envs_per_actor == 0,
                name,
                f"be a multiple of envs_per_actor={self.envs_per_actor}",
                value,
            )
        allowed = {f.name for f in fields(DDQNConfig)} - set(SET_BY_APEX)
        for key in self.learner or {}:
            cli.require(
                key in allowed, "learner", f"name fields of the recipe's config but {SET_BY_APEX}", key
            )
        learner_config(self)  # a value the recipe refuses is refused here, before Ray starts


def learner_config(config: ApexConfig) -> DDQNConfig:
    """The single-process recipe's config for the learner: the family's and the arm's files, then
    ``config.learner``, then the fields Ape-X sets (:data:`SET_BY_APEX`)."""
    overrides = {"tensorboard": False, "progress": False, **(config.learner or {})}
    if "hidden" in overrides:
        overrides["hidden"] = tuple(overrides["hidden"])
    learner = load_config(
        config.env,
        config.arm,
        seed=config.seed,
        total_steps=config.total_steps,
        n_step=config.n_step,
        device=config.device,
        **overrides,
    )
    return replace(learner, eval_every=config.eval_every) if config.eval_every else learner


def run_dir(config: ApexConfig) -> Path:
    return Path(config.out or f"runs/apex_dqn/{config.env.replace('/', '_')}_{config.actors}")


def actor_epsilon(i: int, n: int, epsilon: float = 0.4, exponent: float = 7.0) -> float:
    """``ε_i = ε^(1 + α i / (N − 1))`` for actor ``i`` of ``N`` (Horgan et al. 2018, Sec. 4); ``ε``
    for a single actor."""
    if not 0 <= i < n:
        raise ValueError(f"i should lie in [0, {n}), but got i={i}")
    return epsilon if n == 1 else float(epsilon ** (1.0 + exponent * i / (n - 1)))


# -- the actor -----------------------------------------------------------------------------------


class NStepBuilder:
    """Complete n-step transitions of ``num_envs`` environments, built as they step.

    Transition ``t`` of an environment, with reward ``r_t`` and per-step discount ``γ_t`` (0 where
    the episode terminated, else γ), leaves as (Sutton & Barto 2018, Sec. 7.1; the sums of
    :mod:`prisample.nstep`)::

        reward   G = Σ_{k<m} (Π_{j<k} γ_{t+j}) r_{t+k}
        discount Γ = Π_{k<m} γ_{t+k}
        next_obs s_{t+m}

    with ``m = n`` once ``n`` steps of its environment followed it, fewer when the episode ended
    first (``episode_end``: every pending transition leaves; termination made Γ = 0, truncation
    kept Γ = γ^m, so it bootstraps from its last observation) or at :meth:`flush`.  Kept here,
    not in :class:`prisample.nstep.NStepAccumulator`, which completes windows of a memory's slots:
    an actor holds no memory and sends each transition once.
    """

    def __init__(self, n: int, num_envs: int) -> None:
        self.n, self.num_envs = n, num_envs
        self._pending: list[list[list[Any]]] = [[] for _ in range(num_envs)]  # [obs, action, G, Γ]
        self._last_next: list[Any] = [None] * num_envs
        self._ready: list[tuple[Any, ...]] = []

    @property
    def ready(self) -> int:
        """Complete transitions not taken yet."""
        return len(self._ready)

    @property
    def pending(self) -> int:
        """Transitions whose window is still open (at most ``n − 1`` per environment)."""
        return sum(len(p) for p in self._pending)

    def add(
        self,
        env: int,
        obs: Any,
        action: int,
        reward: float,
        discount: float,
        next_obs: Any,
        episode_end: bool,
    ) -> None:
        """One step of environment ``env``: ``(S_t, A_t, r_t, γ_t, S_{t+1})``."""
        pending = self._pending[env]
        for entry in pending:  # G += Γ r_t, Γ *= γ_t for the windows still open
            entry[2] += entry[3] * reward
            entry[3] *= discount
        pending.append([obs, action, float(reward), float(discount)])
        self._last_next[env] = next_obs
        if episode_end:
            self._emit(env, len(pending))
        elif len(pending) == self.n:
            self._emit(env, 1)

    def flush(self) -> None:
        """Every open window leaves as it is (``m < n``, bootstrapping from the last observation):
        the end of the run."""
        for env in range(self.num_envs):
            self._emit(env, len(self._pending[env]))

    def take(self) -> dict[str, np.ndarray]:
        """The complete transitions as arrays with a leading axis (``FIELDS``); then none is ready."""
        obs, action, reward, discount, next_obs = zip(*self._ready, strict=True)
        self._ready = []
        return {
            "obs": np.stack(obs),
            "action": np.asarray(action, dtype=np.int64),
            "reward": np.asarray(reward, dtype=np.float32),
            "discount": np.asarray(discount, dtype=np.float32),
            "next_obs": np.stack(next_obs),
        }

    def _emit(self, env: int, count: int) -> None:
        pending, next_obs = self._pending[env], self._last_next[env]
        for obs, action, g, gamma in pending[:count]:
            self._ready.append((obs, action, g, gamma, next_obs))
        del pending[:count]


@torch.no_grad()
def initial_priorities(q: torch.nn.Module, transitions: dict[str, np.ndarray], clip_td: bool) -> np.ndarray:
    """``|δ|`` of an actor's outgoing transitions with its copy θ_i in both roles of the Double DQN
    target: ``δ = G + Γ Q(s', argmax_a Q(s', a; θ_i); θ_i) − Q(s, a; θ_i)`` (Horgan et al. 2018,
    Algorithm 1, line 10), clipped to [−1, 1] as the learner's priorities are when ``clip_td``."""
    delta = double_dqn_td_error(q, q, *(torch.as_tensor(transitions[key]) for key in FIELDS))
    return (delta.clamp(-1.0, 1.0) if clip_td else delta).abs().numpy()


class ApexActor:
    """Actor ``index``: ε_i-greedy play of ``envs_per_actor`` environments on a copy of θ, n-step
    transitions with initial priorities sent to the memory.  ``ray.remote`` makes it a Ray actor;
    the driver asks it for chunks of env steps (:meth:`run`), then :meth:`finish`."""

    def __init__(self, index: int, config: ApexConfig, learner: DDQNConfig, replay: RemoteReplay) -> None:
        torch.set_num_threads(1)
        self.config, self.learner = config, learner
        self.epsilon = actor_epsilon(index, config.actors, config.epsilon, config.epsilon_exponent)
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

    def run(self, steps: int, version: int, weights: list[ray.ObjectRef]) -> dict[str, Any]:
        """Take ``steps`` env steps (``steps / envs_per_actor`` steps of all environments), first
        loading ``weights`` (a one-element list, so Ray does not fetch it unless used) if its
        ``version`` is newer.  Returns the counts so far and this chunk's finished episodes."""
        if version > self.version:
            with self.timer("pull"):
                state = ray.get(weights[0])
                self.q.load_state_dict({name: torch.tensor(value) for name, value in state.items()})
            self.version, self.counts["pulls"] = version, self.counts["pulls"] + 1
        finished: list[float] = []
        device = torch.device("cpu")
        for _ in range(steps // self.config.envs_per_actor):
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
        transitions = self.builder.take()
        with self.timer("priorities"):
            priorities = initial_priorities(self.q, transitions, self.learner.clip_td)
        with self.timer("send"):  # waits while max_pending earlier sends are unanswered
            self.writer.add(transitions, priorities)
        self.counts["transitions"] += len(priorities)


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()})"


def ray_cpus(config: ApexConfig) -> int:
    """Logical CPUs of a Ray this recipe starts: every actor's reservation, and at least the
    machine's cores (more actors than cores then share them: the OS schedules, Ray does not refuse)."""
    return max(os.cpu_count() or 1, math.ceil(config.actors * config.actor_cpus))


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
        self._sent: list[ray.ObjectRef] = []

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
        self.replay.beta = self.schedules.at(env_steps)[2]

    def publish(self) -> ray.ObjectRef:
        """θ for the actors; first waits for the priority updates sent since the last time (a
        shard's error surfaces here, and the calls in flight stay bounded)."""
        with self.timer("update_priorities"):
            ray.get(self._sent)
            self._sent = []
        with self.timer("publish"):  # the weights' transport alone, as reported
            self.publishes += 1
            return publish(self.q)


def publish(q: torch.nn.Module) -> ray.ObjectRef:
    """θ as numpy arrays in Ray's object store: one copy, read by every actor that pulls it."""
    return ray.put({name: value.detach().cpu().numpy() for name, value in q.state_dict().items()})


class ActorFleet:
    """The actors' work in chunks: each actor has ``depth`` :meth:`ApexActor.run` calls of
    ``chunk`` env steps queued, each carrying the weights published last, until ``total`` env
    steps are handed out.  ``steps`` counts the env steps of the chunks that returned."""

    def __init__(self, actors: Sequence[Any], chunk: int, total: int, depth: int = 2) -> None:
        self.actors, self.chunk, self.remaining = list(actors), chunk, total
        self.depth, self.steps, self.version = depth, 0, -1
        self.weights: ray.ObjectRef | None = None
        self._inflight: dict[ray.ObjectRef, tuple[int, int]] = {}
        self._held = False
        self._owed: list[int] = []  # actors whose chunk returned while held

    def start(self, weights: ray.ObjectRef) -> None:
        self.set_weights(weights)
        for i in range(len(self.actors)):
            for _ in range(self.depth):
                self._submit(i)

    def set_weights(self, weights: ray.ObjectRef) -> None:
        """Chunks asked for from now on carry ``weights`` (version + 1)."""
        self.weights, self.version = weights, self.version + 1

    def poll(self, timeout: float = 0.0) -> list[dict[str, Any]]:
        """The chunks that returned (within ``timeout`` seconds); each of their actors gets its next."""
        if not self._inflight:
            return []
        ready, _ = ray.wait(list(self._inflight), num_returns=len(self._inflight), timeout=timeout)
        results = []
        for ref in ready:
            i, steps = self._inflight.pop(ref)
            results.append(ray.get(ref))
            self.steps += steps
            if self._held:
                self._owed.append(i)
            else:
                self._submit(i)
        return results

    def hold(self, held: bool) -> None:
        """While held, an actor whose chunk returns gets no next one; released, each gets what it is owed."""
        self._held = held
        if not held:
            owed, self._owed = self._owed, []
            for i in owed:
                self._submit(i)

    def stop(self) -> None:
        """Hand out no more env steps (the chunks queued still run)."""
        self.remaining = 0

    @property
    def finished(self) -> bool:
        """Every env step handed out and taken (a held fleet with steps left is not finished)."""
        return not self._inflight and self.remaining == 0

    def _submit(self, i: int) -> None:
        steps = min(self.chunk, self.remaining)
        if steps > 0:
            self.remaining -= steps
            self._inflight[self.actors[i].run.remote(steps, self.version, [self.weights])] = (i, steps)


@dataclass
class RunState:
    """What :func:`train`'s loop carries besides the learner."""

    next_eval: int | None
    next_log: int
    stopped: str = "done"
    returns: list[float] = field(default_factory=list)
    """Undiscounted returns of the actors' finished episodes, in the order their chunks returned."""
    eval_env_steps: list[int] = field(default_factory=list)
    """Env steps the actors had taken at each evaluation (its nominal step: a multiple of eval_every)."""


def train(config: ApexConfig) -> dict[str, Any]:
    """Run actors and learner until ``total_steps`` env steps; write ``apex_dqn.json`` to the run
    folder and return its contents.  Starts Ray (and shuts it down) unless it is running."""
    started, load_start = time.perf_counter(), os.getloadavg()
    cfg = learner_config(config)
    folder = run_dir(config)
    folder.mkdir(parents=True, exist_ok=True)
    own_ray = not ray.is_initialized()
    if own_ray:
        ray.init(num_cpus=ray_cpus(config), include_dashboard=False, log_to_driver=False)
    probe, spec = make_env(config.env, 1)
    probe.close()
    # PER: one memory for every actor: P(j) ∝ (|δ_j| + ε)^α, weights (N·P(j))^-β / max_i w_i
    replay = RemoteReplay(
        cfg.memory_size,
        spec.obs_shape,
        shards=config.shards,
        beta=cfg.beta0,
        weight_norm=cfg.weight_norm,
        seed=config.seed,
        obs_dtype=spec.obs_dtype,
        alpha=cfg.alpha,
        eps=cfg.priority_eps,
        backend=cfg.replay,
    )
    learner = Learner(config, cfg, spec, replay)
    remote_actor = ray.remote(num_cpus=config.actor_cpus)(ApexActor)
    actors = [remote_actor.remote(i, config, cfg, replay) for i in range(config.actors)]
    fleet = ActorFleet(actors, config.actor_sync_every, config.total_steps)
    logger = Logger(folder, tensorboard=False, resume=False)
    evaluator = Evaluator(
        make_env(config.env, cfg.eval_envs)[0],
        epsilon=cfg.eval_epsilon,
        max_steps=cfg.eval_steps,
        max_episodes=cfg.eval_episodes,
        seed=config.seed,
        device=learner.device,
        scores=None,
        logger=logger,
        run_dir=folder,
    )
    evaluating = config.eval_every != 0
    run = RunState(next_eval=cfg.eval_every if evaluating else None, next_log=cfg.log_every)
    bar = tqdm(
        total=config.total_steps,
        desc=f"Ape-X {config.env} ×{config.actors}",
        unit="step",
        disable=not config.progress,
        dynamic_ncols=True,
        smoothing=0.05,
    )

    def between_updates(results: list[dict[str, Any]]) -> None:
        """Chunks that returned: the bar, the actors' episodes, the time budget, due evaluations."""
        for result in results:
            run.returns += result["returns"]
        bar.update(fleet.steps - bar.n)
        if config.time_budget_s is not None and time.perf_counter() - started > config.time_budget_s:
            fleet.stop()
            run.stopped = "time_budget"
        if run.next_eval is not None and fleet.steps >= run.next_eval:
            with learner.timer("eval"):  # the chunks queued run on; new ones wait for the learner
                result = evaluator.select(learner.q, run.next_eval)
            run.eval_env_steps.append(fleet.steps)
            run.next_eval += cfg.eval_every
            bar.set_postfix_str(f"eval {result.score:.1f}, {learner.updates} updates", refresh=False)
        if fleet.steps >= run.next_log:
            recent = run.returns[-20:]
            logger.log(
                "metrics",
                fleet.steps,
                {
                    "train/episode_return": float(np.mean(recent)) if recent else math.nan,
                    "train/episodes": float(len(run.returns)),
                    "per/beta": float(replay.beta),
                    "updates": float(learner.updates),
                    **learner.window.drain(),
                },
            )
            run.next_log += cfg.log_every

    try:
        fleet.start(publish(learner.q))
        while not fleet.finished and replay.stats()["size"] < cfg.learning_starts:
            between_updates(fleet.poll(timeout=0.05))
        learning_from = (time.perf_counter(), fleet.steps)

        def below(ratio: float | None) -> bool:
            """Fewer updates than ``ratio`` per env step since learning started."""
            return ratio is not None and learner.updates < ratio * (fleet.steps - learning_from[1])

        with replay.prefetch(cfg.batch_size, depth=config.prefetch_depth) as batches:
            while not fleet.finished or below(config.min_replay_ratio):
                with learner.timer("poll"):
                    results = fleet.poll()
                between_updates(results)
                if config.min_replay_ratio is not None:  # the learner is behind: actors wait
                    fleet.hold(below(config.min_replay_ratio))
                if config.max_replay_ratio is not None and not below(config.max_replay_ratio):
                    if fleet.finished:
                        break
                    with learner.timer("throttle"):  # ahead of the allowed replay ratio: wait for env steps
                        between_updates(fleet.poll(timeout=0.01))
                    continue
                learner.anneal(fleet.steps)
                with learner.timer("wait_batch"):  # PER: j ~ P(j), drawn ahead by the prefetch thread
                    batch = next(batches)
                learner.learn(batch)
                if learner.updates % config.publish_every == 0:
                    fleet.set_weights(learner.publish())
        learning = {"s": time.perf_counter() - learning_from[0], "steps": fleet.steps - learning_from[1]}
        learner.publish()  # waits for the last priority updates
        totals = ray.get([actor.finish.remote() for actor in actors])
        stats = replay.stats()
    finally:
        bar.close()
        for actor in actors:
            ray.kill(actor)
        replay.shutdown()
        if own_ray:
            ray.shutdown()
    record = evaluator.record
    if evaluating and run.stopped == "done" and (not record.steps or record.steps[-1] < fleet.steps):
        with learner.timer("eval"):
            evaluator.select(learner.q, fleet.steps)
        run.eval_env_steps.append(fleet.steps)
    best = evaluator.reevaluate_best(learner.q) if evaluating else None
    logger.close()
    evaluator.env.close()
    result = summary(
        config,
        cfg,
        learner,
        run,
        record,
        totals,
        stats,
        fleet.steps,
        learning,
        best,
        time.perf_counter() - started,
        folder,
    )
    result["loadavg"] = {"start": load_start, "end": os.getloadavg()}  # other jobs on the machine show here
    (folder / "apex_dqn.json").write_text(to_json(result))
    return result


def summary(
    config: ApexConfig,
    cfg: DDQNConfig,
    learner: Learner,
    run: RunState,
    record: EvalRecord,
    totals: list[dict[str, Any]],
    stats: dict[str, int],
    env_steps: int,
    learning: dict[str, float],
    best: Any,
    wall: float,
    folder: Path,
) -> dict[str, Any]:
    """``apex_dqn.json``: config, command, machine, rates, replay ratio, the eval curve.  Its keys
    ``eval_steps``, ``eval_scores``, ``best_score``, ``best_policy_score``, ``steps``,
    ``steps_per_s``, ``wall_s``, ``stopped`` and ``run_dir`` read as the single-process recipe's
    ``result.json`` (``recipes.dqn_sweep.collect`` takes both)."""
    from recipes.dqn_sweep import _machine

    pulls = sum(t["pulls"] for t in totals)
    seconds, timing = learning["s"], learner.timer.totals
    return {
        "config": asdict(config),
        "learner_config": asdict(cfg),
        "command": cli.command_line(PROG, config, ApexConfig(), skip=("progress",)),
        "machine": _machine(),
        "device": describe_device(learner.device),
        "ray": {"version": ray.__version__, "actor_cpus": config.actor_cpus, "machine_cpus": os.cpu_count()},
        "run_dir": str(folder),
        "stopped": run.stopped,
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
            "recipe_updates_per_env_step": 1.0 / cfg.replay_period,
        },
        "dropped_updates": stats["dropped_updates"],
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
        "eval_env_steps": run.eval_env_steps,
        "best_score": record.best_score if record.best_step is not None else math.nan,
        "best_policy_score": best.score if best is not None else math.nan,
        "best_policy_episodes": best.episodes if best is not None else 0,
        "train_returns_last_20": float(np.mean(run.returns[-20:])) if run.returns else math.nan,
    }


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1) + "\n"


COMMANDS = ("train", "scaling", "compare")
PROG = "python -m recipes.apex_dqn train"


def main(argv: list[str] | None = None) -> Any:
    """``python -m recipes.apex_dqn train|scaling|compare [options]``; ``--help`` lists them."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        if argv and argv[0] in ("-h", "--help"):
            print(f"usage: python -m recipes.apex_dqn {{{','.join(COMMANDS)}}} [options]")
            raise SystemExit(0)
        got = argv[0] if argv else "nothing"
        print(f"error: the command should be one of {', '.join(COMMANDS)}, but got {got}", file=sys.stderr)
        raise SystemExit(2)
    if argv[0] != "train":
        from recipes import apex_studies

        return apex_studies.main(argv)
    result = train(cli.parse(ApexConfig, argv[1:], prog=PROG))
    shown = (
        "steps",
        "updates",
        "actor_steps_per_s",
        "learner_updates_per_s",
        "replay_ratio",
        "dropped_updates",
        "best_policy_score",
        "wall_s",
    )
    print(to_json({key: result[key] for key in shown}), end="")
    print(f"wrote {result['run_dir']}/apex_dqn.json")
    return result


if __name__ == "__main__":
    main()
