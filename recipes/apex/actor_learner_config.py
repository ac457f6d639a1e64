"""The options of the actor-learner recipe (``recipes/apex/actor_learner.py``): :class:`ActorLearnerConfig`,
parsed without importing torch or Gymnasium, so that ``python -m recipes.apex actor-learner --help``
answers at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from recipes.apex.exploration import EPSILON
from recipes.common import cli, launch
from recipes.common.launch import RunPlan

__all__ = ["PROG", "ActorLearnerConfig", "parse_command", "run_plan"]

PROG = "python -m recipes.apex actor-learner"


@dataclass(frozen=True)
class ActorLearnerConfig:
    """Ape-X-shaped actors and learner on CartPole (small defaults: a run of about a minute)."""

    env_id: str = "CartPole-v1"
    """A gymnasium environment with a flat Box observation and Discrete actions."""
    actors: int = 2
    """Actor threads."""
    envs_per_actor: int = 2
    """Environments each actor steps in turn, one replay stream each."""
    updates: int = 2000
    """Learner updates; the actors stop when the learner is done."""
    learning_starts: int = 500
    """Transitions stored before the learner starts."""
    capacity: int = 50_000
    """Replay capacity (transitions)."""
    batch_size: int = 32
    """Transitions per update."""
    n_step: int = 3
    """n-step returns (Ape-X: 3)."""
    gamma: float = 0.99
    """Discount."""
    lr: float = 5e-4
    """Adam step size."""
    hidden: int = 64
    """Units per hidden layer of the MLP."""
    target_every: int = 200
    """Updates between copies of the online network to the target network."""
    sync_every: int = 50
    """Updates between publications of the learner's weights to the actors."""
    epsilon: float = EPSILON
    """Base ε of the actors' schedule ε_i = ε^(1 + 7 i / (N − 1)) (Ape-X)."""
    alpha: float = 0.6
    """Priority exponent α (Schaul et al. 2016, proportional: 0.6)."""
    beta0: float = 0.4
    """Initial importance-sampling exponent β, annealed linearly to 1 over the updates."""
    backend: str = "proportional"
    """'proportional' or 'rank'."""
    prefetch_depth: int = 1
    """Batches drawn ahead by the prefetch thread (0: drawn when needed)."""
    samples_per_insert: float = 8.0
    """Transitions the learner draws per transition the actors add (batch_size × updates per
    step; 8: one update of 32 per 4 steps); 0: no rate limiter (the learner runs free)."""
    rate_timeout: float = 120.0
    """Seconds an actor or the learner waits for the other side before giving up."""
    seed: int = 0
    """Seed of the environments, the networks and the replay."""
    out_dir: str = "runs/actor_learner"
    """Where actor_learner.json goes."""
    progress: bool = True
    """Show a tqdm bar of the learner's updates."""

    def __post_init__(self) -> None:
        cli.positive(self, "actors", "envs_per_actor", "updates", "learning_starts", "capacity", "batch_size")
        cli.positive(self, "n_step", "lr", "hidden", "target_every", "sync_every")
        cli.in_range(self, "gamma", 0.0, 1.0)
        cli.in_range(self, "epsilon", 0.0, 1.0)
        cli.one_of(self, "backend", ["proportional", "rank"])
        cli.at_least(self, 0, "prefetch_depth", "alpha", "samples_per_insert")
        cli.positive(self, "rate_timeout")
        cli.require(
            self.learning_starts <= self.capacity,
            "learning_starts",
            "be at most capacity",
            self.learning_starts,
        )


def parse_command(argv: Sequence[str]) -> ActorLearnerConfig:
    """``actor-learner [options]``: the run's config (what ``--help`` lists)."""
    return cli.parse(ActorLearnerConfig, argv, prog=PROG)


SAME = ("env_id", "actors", "envs_per_actor", "batch_size", "samples_per_insert")
"""The fields a recorded run must share with this one for its rate to count as this one's."""


def run_plan(config: ActorLearnerConfig) -> RunPlan:
    """What ``actor-learner`` is about to run: its learner updates at the rate a committed run of
    the same rate limit recorded (``docs/results/actor_learner_{limited,free}.json``)."""
    path = f"docs/results/actor_learner_{'limited' if config.samples_per_insert > 0 else 'free'}.json"
    rate = launch.measured(path, "learner updates/s of a committed run", lambda d: d["learner_updates_per_s"])
    recorded = launch.recorded_config(path)
    return RunPlan(
        command=PROG,
        what=f"{config.actors} actor threads x {config.envs_per_actor} envs and a learner on {config.env_id}",
        steps=config.updates,
        unit="learner updates",
        out_dir=config.out_dir,
        short="--updates 500",
        rate=rate,
        exact=all(recorded.get(k) == getattr(config, k) for k in SAME),
    )
