"""The options of the Ape-X ablation (``recipes/apex/ablate.py``): :data:`ABLATIONS`, :class:`AblateConfig`
and every run's config, refused before any run starts; parsed without importing torch, Gymnasium or
Ray, so that ``python -m recipes.apex ablate --help`` answers at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from recipes.apex.config import ApexConfig, apex_fields
from recipes.apex.study_config import COMPARE_SETS, CompareConfig, apex_run, recorded_rate, single_run
from recipes.common import cli
from recipes.common.launch import RunPlan
from recipes.dqn.config import PAPER_ARMS, DDQNConfig

__all__ = [
    "ABLATIONS",
    "PROG",
    "AblateConfig",
    "Run",
    "arm_run",
    "arms",
    "parse_command",
    "run_plan",
    "tasks",
]

PROG = "python -m recipes.apex ablate"


ABLATIONS: dict[str, dict[str, Any]] = {
    "epsilon": {"actor_epsilon": "schedule"},
    "priorities": {"actor_priorities": False},
    "staleness": {"actor_sync_every": 16, "publish_every": 4, "actor_queue": 1},
    "envs": {"envs_per_actor": 1},
}
"""One difference between Ape-X (matched) and the single process each, as the ApexConfig fields
that remove it:

* ``epsilon``: every actor acts with the single process's ε (1 until learning_starts, then linear
  to 0.04 over 8,000 env steps) instead of the fixed ε_i = 0.4^(1 + 7 i / (N − 1));
* ``priorities``: new transitions enter at the memory's maximum priority instead of their actor's |δ|;
* ``staleness``: actors pull θ every 16 of their env steps (one chunk queued, θ published every 4
  updates: at most about 20 updates old at the matched ratio) instead of every 400 (two chunks
  queued, every 20 updates: up to about 800 updates old);
* ``envs``: one environment per actor (2 in all) instead of 4 (8 in all); the single process steps 1.

n-step (3 in both), the target period (128 updates = 256 env steps in both), learning_starts, the
β schedule (over env steps in both), the optimiser, θ_0 and the evaluation are the same already."""
SINGLE, MATCHED, FREE, ALL = "single", "apex_matched", "apex_free", "apex_all_matched"


def all_matched() -> dict[str, Any]:
    """Every ablation's fields at once."""
    return {key: value for fields in ABLATIONS.values() for key, value in fields.items()}


@dataclass(frozen=True)
class AblateConfig:
    """The single process, Ape-X matched and free, Ape-X matched with each difference removed and
    with all removed: the same env steps, seeds, arm and n-step."""

    env: str = "CartPole-v1"
    """Gymnasium id (classic control or MinAtar)."""
    arm: str = "proportional"
    """The recipe's arm, for every run: uniform, proportional or rank."""
    actors: int = 2
    """Ape-X actors."""
    envs_per_actor: int = 4
    """Environments per Ape-X actor (the ``envs`` ablation sets 1)."""
    total_steps: int = 50_000
    """Env steps of every run (summed over Ape-X's actors)."""
    seeds: int = 5
    """Seeds seed, seed + 1, ...: each gets one run of every arm."""
    seed: int = 0
    """The first seed."""
    n_step: int = 3
    """n of every run (Ape-X: 3)."""
    ablations: tuple[str, ...] = tuple(ABLATIONS)
    """The one-difference arms to run, a comma list of names in ABLATIONS."""
    free: bool = True
    """Also run Ape-X without a rate limit (apex_free)."""
    all: bool = True
    """Also run Ape-X with every ablation at once (apex_all_matched)."""
    device: str = "auto"
    """Every learner's device."""
    jobs: int = 2
    """Runs at a time, each a process of its own."""
    interleave: bool = False
    """Every arm of a seed back to back, seed after seed, so that a slow or busy spell of the
    machine meets every arm alike (the interleaved rerun; with jobs 1, one run at a time).  False:
    the first study's registered groups (FIRST, then SECOND, then the rest, each seed-major)."""
    rerun: bool = False
    """Rerun a run whose result file is already in its folder (False: read it)."""
    report_only: bool = False
    """Run nothing: write the report from the result files already in the run folders (a study
    stopped before its end, or whose pool had not yet read the runs finished)."""
    learner: dict[str, Any] | None = None
    """Fields of the recipe's config for every run, as JSON."""
    apex: dict[str, Any] | None = None
    """Other ApexConfig fields of every Ape-X run as JSON."""
    out: str = "runs/apex_dqn/apex_matched"
    """Output prefix: <out>.json, <out>.md, <out>.png; runs under <out>_runs/."""

    def __post_init__(self) -> None:
        cli.one_of(self, "arm", PAPER_ARMS)
        cli.positive(self, "actors", "envs_per_actor", "seeds", "n_step", "jobs")
        cli.at_least(self, 0, "seed")
        if self.ablations:
            cli.subset_of(self, "ablations", tuple(ABLATIONS))
        taken = set(COMPARE_SETS) | set(all_matched())
        apex_fields(self.apex, tuple(taken))
        tasks(self)  # every run's config: a value one refuses is refused here, before any run starts


Run = ApexConfig | DDQNConfig


def compare_config(config: AblateConfig) -> CompareConfig:
    return CompareConfig(
        env=config.env,
        arm=config.arm,
        actors=config.actors,
        envs_per_actor=config.envs_per_actor,
        total_steps=config.total_steps,
        seeds=config.seeds,
        seed=config.seed,
        device=config.device,
        n_step=config.n_step,
        learner=config.learner,
        apex=config.apex,
        out=config.out,
    )


def arms(config: AblateConfig) -> list[tuple[str, dict[str, Any] | None]]:
    """``(label, fields)`` of every arm: ``fields`` None for the single process, else the
    ApexConfig fields that differ from ``apex_matched`` ("free" for apex_free)."""
    out: list[tuple[str, dict[str, Any] | None]] = [(SINGLE, None), (MATCHED, {})]
    out += [(f"ablation {name}", ABLATIONS[name]) for name in config.ablations]
    if config.all:
        out.append((ALL, all_matched()))
    if config.free:
        out.append((FREE, {"free": True}))
    return out


FIRST = (SINGLE, MATCHED, "ablation epsilon", ALL)
"""The arms run first, every seed of them before any other arm's: the baseline, the arm with the
gap, the difference our reading ranked likeliest (docs/recipes/apex_dqn.md) and all of them."""
SECOND = ("ablation staleness",)
"""The arms run next, every seed of them before the rest's."""


def tasks(config: AblateConfig) -> list[tuple[str, int, Run]]:
    """``(label, seed, run config)`` of every run: the arms of :data:`FIRST` seed-major (every such
    arm of a seed, then the next seed), then those of :data:`SECOND`, then the others, so that a
    study cut short holds whole seeds of the first arms; with ``interleave``, every arm seed-major."""
    base = compare_config(config)
    out: list[tuple[str, int, Run]] = []
    every = arms(config)
    groups = [
        [arm for arm in every if arm[0] in FIRST],
        [arm for arm in every if arm[0] in SECOND],
        [arm for arm in every if arm[0] not in FIRST + SECOND],
    ]
    if config.interleave:  # one group: every arm of a seed back to back
        groups = [every]
    for group in groups:
        for seed in range(config.seed, config.seed + config.seeds):
            out += [(label, seed, arm_run(config, base, label, fields, seed)) for label, fields in group]
    return out


def arm_run(
    config: AblateConfig, base: CompareConfig, label: str, fields: dict[str, Any] | None, seed: int
) -> Run:
    """The run of one arm and seed."""
    if fields is None:
        return replace(single_run(base, seed), log_dir=f"{config.out}_runs/single")
    if fields.get("free"):
        return replace(apex_run(base, seed, "free"), out=f"{config.out}_runs/{FREE}/seed{seed}")
    folder = label.replace("ablation ", "ablation_")
    run = replace(apex_run(base, seed, "matched"), out=f"{config.out}_runs/{folder}/seed{seed}")
    return replace(run, **fields)


def parse_command(argv: Sequence[str]) -> AblateConfig:
    """``ablate [options]``: the study's config (what ``--help`` lists)."""
    return cli.parse(AblateConfig, argv, prog=PROG)


RESULT = "docs/results/apex_matched_first.json"


def run_plan(config: AblateConfig) -> RunPlan:
    """What ``ablate`` is about to run: every arm and seed's env steps, ``jobs`` runs at once, at the
    per-job rate of the first committed ablation (``docs/results/apex_matched_first.json``, two
    runs at a time as the default)."""
    runs = len(tasks(config))
    rate, exact = recorded_rate(RESULT, config, "the committed ablation, per job", per=2)
    return RunPlan(
        command=PROG,
        what=f"{runs} runs ({len(arms(config))} arms x {config.seeds} seeds) on {config.env}",
        steps=runs * config.total_steps,
        out_dir=f"{config.out}.json, .md, .png and {config.out}_runs/",
        short="--seeds 1 --total_steps 10000 --ablations epsilon",
        rate=rate,
        exact=exact and config.jobs == 2,
        unit="env steps",
        parallel=config.jobs,
    )
