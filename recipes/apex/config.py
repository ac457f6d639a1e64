"""The Ape-X recipe's settings (``recipes/apex/run.py``): :class:`ApexConfig`, the learner's config
it takes from the single-process recipe, the command and folder of a run, and the Ray it starts.

A run's learner is the single-process recipe's (``recipes/dqn/configs/<family>.yaml``,
``arms/<arm>.yaml``), so :func:`learner_config` builds a :class:`recipes.dqn.config.DDQNConfig`
from those files, ``ApexConfig.learner`` and the fields Ape-X sets itself (:data:`SET_BY_APEX`).
The studies (``recipes/apex/studies.py``) build their single-process runs with the same
:func:`recipe_config` and check their ``--apex`` options with :func:`apex_fields`.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from recipes.apex.exploration import EPSILON, EPSILON_EXPONENT
from recipes.common import cli, outputs
from recipes.common.launch import RunPlan
from recipes.dqn.config import PAPER_ARMS, DDQNConfig, load_config
from recipes.dqn.env_ids import check_env

SET_BY_APEX = ("env", "arm", "seed", "total_steps", "n_step", "device")
"""Fields of the learner's :class:`DDQNConfig` that :class:`ApexConfig` sets itself."""
PROG = "python -m recipes.apex train"
ACTOR_EPSILONS = ("apex", "schedule")
"""Values of ``ApexConfig.actor_epsilon``."""


@dataclass(frozen=True)
class ApexConfig:
    """One Ape-X run.  The learner's hyper-parameters (network, optimiser, step size, memory size,
    batch, γ, α, β, target period, evaluation) are the single-process recipe's for ``env`` and
    ``arm``; ``learner`` overrides them."""

    env: str = "CartPole-v1"
    """Gymnasium id: e.g. CartPole-v1 (classic control), MinAtar/Breakout-v1 or ALE/Pong-v5 (its
    stacks travel and are stored one frame at a time: prisample.frame_stream)."""
    arm: str = "proportional"
    """The recipe's arm (recipes/dqn/configs/arms/<arm>.yaml): uniform, proportional or rank."""
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
    epsilon: float = EPSILON
    """ε of ε_i = ε^(1 + α i / (N − 1)) (Ape-X: 0.4)."""
    epsilon_exponent: float = EPSILON_EXPONENT
    """α of that schedule (Ape-X: 7)."""
    actor_epsilon: str = "apex"
    """'apex': actor i acts with its fixed ε_i above (Horgan et al., Sec. 4); 'schedule': every actor
    acts with the single-process recipe's ε (eps_start until learning_starts, then linear to eps_end
    over eps_decay_steps), read at the env steps handed out to all actors before its chunk plus its
    own steps in the chunk (an ablation: docs/recipes/apex_dqn.md, "Why Ape-X learns worse")."""
    actor_priorities: bool = True
    """Actors send their transitions' |δ| as initial priorities (Ape-X, Algorithm 1, line 10); False:
    the transitions enter at the memory's maximum priority, as in the single-process recipe
    (Schaul et al. 2016, Algorithm 1, line 6)."""
    actor_batch: int = 50
    """Complete transitions an actor gathers before it computes their priorities and sends them."""
    actor_sync_every: int = 400
    """Env steps per actor between weight pulls (a multiple of envs_per_actor; Ape-X: 400 frames)."""
    actor_queue: int = 2
    """Chunks of actor_sync_every env steps queued per actor.  Each carries the weights published when
    it was queued, so an actor acts on θ up to actor_queue chunks old; 1 keeps the least staleness
    (the actor waits for its next chunk's round trip)."""
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
    samples_per_insert: float | None = None
    """Hold the learner and the actors to this many items drawn per transition inserted with the
    memory's rate limiter (prisample.rate_limit, Reverb's SampleToInsertRatio): actors' sends wait
    while the inserts are ahead, the learner's draws while it is ahead; sampling starts at
    learning_starts transitions (see rate_error_buffer, rate_timeout).  The single-process recipe's
    ratio is batch_size / replay_period (CartPole: 32 / 2 = 16).  None: no limiter
    (min/max_replay_ratio may throttle instead)."""
    rate_error_buffer: float | None = None
    """The limiter's buffer e (inserts · samples_per_insert − samples stays within ± e of its value
    when sampling starts); None: (actor_batch + envs_per_actor) · samples_per_insert + batch_size,
    room for one actor's send and one draw (a narrower buffer can stall both sides)."""
    rate_timeout: float | None = None
    """Seconds an actor's send or the learner's draw waits in the limiter before TimeoutError (a
    stalled side then fails the run instead of hanging it); None: no limit."""
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
        cli.one_of(self, "arm", PAPER_ARMS)
        cli.one_of(self, "actor_epsilon", ACTOR_EPSILONS)
        cli.positive(self, "actors", "envs_per_actor", "actor_cpus", "total_steps", "n_step")
        cli.positive(self, "actor_batch", "actor_sync_every", "max_pending", "publish_every", "shards")
        cli.positive(self, "prefetch_depth", "actor_queue")
        cli.at_least(self, 1, "target_every")
        cli.at_least(self, 0, "seed", "eval_every", "epsilon_exponent")
        cli.in_range(self, "epsilon", 0.0, 1.0)
        for name in ("max_replay_ratio", "min_replay_ratio", "time_budget_s", "samples_per_insert"):
            if getattr(self, name) is not None:
                cli.positive(self, name)
        low, high = self.min_replay_ratio, self.max_replay_ratio
        if low is not None and high is not None:
            cli.require(low <= high, "min_replay_ratio", f"be at most max_replay_ratio={high}", low)
        self._check_rate_limit()
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

    def _check_rate_limit(self) -> None:
        if self.samples_per_insert is None:
            for name in ("rate_error_buffer", "rate_timeout"):
                value = getattr(self, name)
                cli.require(value is None, name, "come with samples_per_insert", value)
            return
        if self.rate_timeout is not None:
            cli.positive(self, "rate_timeout")
        for name in ("min_replay_ratio", "max_replay_ratio"):
            value = getattr(self, name)
            cli.require(value is None, name, "be unset with samples_per_insert (one ratio control)", value)
        if self.rate_error_buffer is not None:
            batch_size = learner_config(self).batch_size
            room = (self.actor_batch + self.envs_per_actor) * self.samples_per_insert + batch_size
            cli.require(
                self.rate_error_buffer >= room / 2,
                "rate_error_buffer",
                f"be at least {room / 2:g}: its width must hold one actor's send and one draw",
                self.rate_error_buffer,
            )


def rate_limit(config: ApexConfig, batch_size: int, learning_starts: int) -> dict[str, Any]:
    """``RemoteReplay``'s rate-limiter arguments for ``config``: none without samples_per_insert."""
    if config.samples_per_insert is None:
        return {}
    buffer = config.rate_error_buffer
    if buffer is None:
        buffer = (config.actor_batch + config.envs_per_actor) * config.samples_per_insert + batch_size
    return {
        "samples_per_insert": config.samples_per_insert,
        "min_size_to_sample": learning_starts,
        "error_buffer": buffer,
        "rate_timeout": config.rate_timeout,
    }


def recipe_config(env: str, arm: str, learner: dict[str, Any] | None, **fields: Any) -> DDQNConfig:
    """The single-process recipe's config of ``env`` and ``arm`` (its files, then ``fields``, then
    the JSON overrides ``learner``), as ``python -m recipes.dqn train`` builds it."""
    return load_config(env, arm, **fields, **(learner or {}))


def learner_config(config: ApexConfig) -> DDQNConfig:
    """The single-process recipe's config for the learner: the family's and the arm's files, then
    ``config.learner``, then the fields Ape-X sets (:data:`SET_BY_APEX`)."""
    learner = recipe_config(
        config.env,
        config.arm,
        {"tensorboard": False, "progress": False, **(config.learner or {})},
        seed=config.seed,
        total_steps=config.total_steps,
        n_step=config.n_step,
        device=config.device,
    )
    return replace(learner, eval_every=config.eval_every) if config.eval_every else learner


def apex_fields(values: dict[str, Any] | None, taken: tuple[str, ...]) -> dict[str, Any]:
    """A study's ``--apex`` JSON: fields of :class:`ApexConfig` the study does not set itself."""
    names = {f.name for f in fields(ApexConfig)} - set(taken)
    for key in values or {}:
        cli.require(key in names, "apex", f"name fields of ApexConfig but {', '.join(taken)}", key)
    return dict(values or {})


def command(config: ApexConfig) -> str:
    """The ``python -m recipes.apex train`` line that runs ``config``."""
    return outputs.command_line(PROG, config, ApexConfig(), skip=("progress",))


def run_dir(config: ApexConfig) -> Path:
    return Path(config.out or f"runs/apex_dqn/{config.env.replace('/', '_')}_{config.actors}")


def ray_cpus(config: ApexConfig) -> int:
    """Logical CPUs of a Ray this recipe starts: every actor's reservation, and at least the
    machine's cores (more actors than cores then share them: the OS schedules, Ray does not refuse)."""
    return max(os.cpu_count() or 1, math.ceil(config.actors * config.actor_cpus))


def start_ray(cpus: int) -> bool:
    """Start a local Ray of ``cpus`` logical CPUs unless one runs; whether it was started here (the
    caller then shuts it down)."""
    import ray  # here: the config, its checks and --help do without Ray

    if ray.is_initialized():
        return False
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    return True


COMMANDS = ("train",)
STUDIES = ("scaling", "compare")
"""The commands of ``recipes/apex/studies.py``, refused by ``train``'s command line."""
EPILOG = "Studies (throughput against actors, learning against one process): python -m recipes.apex."


def parse_command(argv: Sequence[str] | None = None) -> ApexConfig:
    """``train [options]``: the config of one run (a study's name is refused with the command to use)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in STUDIES:
        print(f"error: {argv[0]} is a study: python -m recipes.apex {argv[0]}", file=sys.stderr)
        raise SystemExit(2)
    _, options = cli.subcommand(argv, COMMANDS, prog="python -m recipes.apex", epilog=EPILOG)
    return cli.parse(ApexConfig, options, prog=PROG)


def run_plan(config: ApexConfig) -> RunPlan:
    """What ``train`` is about to run: no throughput of a configuration is recorded in a form that
    applies to another, so the time is unknown unless the run has a time budget."""
    return RunPlan(
        command=PROG,
        what=f"Ape-X, arm {config.arm}, {config.actors} actors x {config.envs_per_actor} environments "
        f"on {config.env}",
        steps=config.total_steps,
        out_dir=str(run_dir(config)),
        short="--total_steps 20000 --env CartPole-v1, or --time_budget_s 60",
        unit="env steps",
        time_budget_s=config.time_budget_s,
    )
