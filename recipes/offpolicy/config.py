"""The off-policy recipe's options (``recipes/offpolicy/experiment.py``): the arms, the representations and
:class:`OffPolicyConfig`, every field checked up front so that a bad value ends the command line
with one line naming the option (``recipes/common/cli.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from recipes.common import cli
from recipes.common.launch import RunPlan
from recipes.offpolicy.model import Representation

Arm = Literal[
    "on_policy",
    "uncorrected",
    "ordinary_is",
    "weighted_is",
    "rejection",
    "hybrid_proportional",
    "hybrid_rank",
]
REPRESENTATIONS: tuple[Representation, ...] = get_args(Representation)
ARMS: tuple[Arm, ...] = get_args(Arm)


@dataclass(frozen=True)
class OffPolicyConfig:
    """Off-policy evaluation from replay; every arm sees the same memory, updates and seeds."""

    envs: tuple[str, ...] = ("FrozenLake-v1", "CliffWalking-v1")
    """Gymnasium toy-text environments (FrozenLake-v1 is the 8x8 slippery map)."""
    representations: tuple[Representation, ...] = REPRESENTATIONS
    """'tabular': one value per state; 'linear': state aggregation over `block` x `block` grid cells."""
    arms: tuple[Arm, ...] = ARMS
    """Which arms to run (see the docstring of recipes/offpolicy/experiment.py)."""
    seeds: int = 5
    """Independent runs per (env, representation, arm): memory, replay order."""
    gamma: float = 0.95
    """Discount γ of the evaluated return (a horizon of about 20 steps)."""
    target_epsilon: float = 0.1
    """π is ε-greedy with this ε on the optimal Q* from value iteration (ties to the first action)."""
    behaviour_mix: float = 0.0
    """μ = (1 - m)·uniform + m·π with this m; 0 gives the uniform random behaviour policy."""
    memory_size: int = 65536
    """Transitions in each replay memory (filled once, then replayed)."""
    episode_steps: int = 100
    """Episodes are cut after this many steps (a cut is not a termination: the last step bootstraps)."""
    block: int = 2
    """Side of the square blocks of grid cells that share one weight in the linear representation."""
    updates: int = 20000
    """Minibatch updates per run."""
    batch_size: int = 32
    """Transitions per update."""
    step_size: float = 1.0
    """η_0 of the step size η_t = η_0 / (1 + t / step_decay) applied to the minibatch mean."""
    step_decay: float = 2000.0
    """Updates over which the step size halves (η_t = η_0 / (1 + t / step_decay))."""
    alpha_proportional: float = 0.6
    """α of hybrid_proportional (the paper's tuned proportional value, Sec. 4)."""
    beta0_proportional: float = 0.4
    """β at the start of hybrid_proportional's annealing (the paper's β0 for proportional)."""
    alpha_rank: float = 0.7
    """α of hybrid_rank (the paper's tuned rank-based value)."""
    beta0_rank: float = 0.5
    """β at the start of hybrid_rank's annealing (the paper's β0 for rank-based)."""
    beta_anneal: float = 0.5
    """Fraction of the updates over which the hybrids' β rises linearly to 1 (then stays at 1)."""
    hybrid_eps: float = 0.01
    """ε of hybrid_proportional, p = ρ·|δ| + ε (keeps slots of tiny ρ|δ| drawable)."""
    rejection_bound: float = 1.0
    """c in the rejection priority p = min(1, ρ/c): 1 is the paper's rule; c >= max ρ is exact."""
    tolerances: dict[str, float] = field(
        default_factory=lambda: {"FrozenLake-v1": 0.03, "CliffWalking-v1": 1.5}
    )
    """RMSE counted as converged, per environment: about 5% of max |V^π| (0.66 and 31.6).  Used for
    the RMSE to V^π and for the RMSE to the arm's own fixed point on its memory."""
    weight_norm: Literal["memory", "batch", "none"] = "memory"
    """Normalisation of the sampler's weights (weighted_is, hybrids): 'memory' is the paper's;
    'none' keeps w = ρ (N·P)^-β, whose mean under the draws is 1 at β = 1, like ordinary IS."""
    eval_every: int = 200
    """Updates between RMSE measurements."""
    workers: int = 1
    """Worker processes (one run each at a time)."""
    out_dir: str = "runs/offpolicy"
    """Where offpolicy.md, offpolicy.json and the plots go (the committed results: docs/results)."""

    def __post_init__(self) -> None:
        cli.at_least(
            self,
            1,
            "seeds",
            "memory_size",
            "episode_steps",
            "block",
            "updates",
            "batch_size",
            "eval_every",
            "workers",
        )
        cli.in_range(self, "gamma", 0.0, 1.0, high_open=True)
        cli.in_range(self, "target_epsilon", 0.0, 1.0)
        cli.in_range(self, "behaviour_mix", 0.0, 1.0, high_open=True)
        cli.positive(self, "step_size", "step_decay", "rejection_bound")
        cli.at_least(self, 0.0, "alpha_proportional", "alpha_rank", "hybrid_eps")
        # β0 outside [0, 1] used to surface as LinearSchedule's "beta.start" once the arm ran.
        cli.in_range(self, "beta0_proportional", 0.0, 1.0)
        cli.in_range(self, "beta0_rank", 0.0, 1.0)
        cli.in_range(self, "beta_anneal", 0.0, 1.0, low_open=True)
        cli.one_of(self, "weight_norm", ("memory", "batch", "none"))
        distinct = bool(self.envs) and len(set(self.envs)) == len(self.envs)
        cli.require(distinct, "envs", "be a comma list of distinct Gymnasium toy-text ids", self.envs)
        cli.subset_of(self, "representations", REPRESENTATIONS)
        cli.subset_of(self, "arms", ARMS)
        for env in self.envs:
            tolerance = self.tolerances.get(env)
            cli.require(
                tolerance is not None and tolerance > 0,
                "tolerances",
                f"give a tolerance > 0 for every env ({env})",
                self.tolerances,
            )


def parse_command(argv: Sequence[str]) -> OffPolicyConfig:
    """``run [options]``: the experiment's config (what ``--help`` lists)."""
    return cli.parse(OffPolicyConfig, argv, prog="python -m recipes.offpolicy run")


def run_plan(config: OffPolicyConfig) -> RunPlan:
    """What ``run`` is about to run, on one line: every (env, representation, arm, seed) run's
    updates; no throughput is recorded, so the time is unknown."""
    runs = len(config.envs) * len(config.representations) * len(config.arms) * config.seeds
    return RunPlan(
        command="python -m recipes.offpolicy run",
        what=f"{runs} runs ({len(config.envs)} envs x {len(config.representations)} representations x "
        f"{len(config.arms)} arms x {config.seeds} seeds)",
        steps=runs * config.updates,
        unit="updates",
        out_dir=config.out_dir,
        short="--seeds 1 --updates 2000",
        brief=True,
    )
