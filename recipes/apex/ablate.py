"""Why Ape-X learns worse than one process: ``python -m recipes.apex ablate``.

At the single-process recipe's replay ratio (``matched``), Ape-X still differs from
``python -m recipes.dqn train`` in what it is built of.  This study removes those differences one
at a time (:data:`ABLATIONS`: each is ``apex_matched`` with one set of ``ApexConfig`` fields taking
the single process's value), then all of them together (``apex_all_matched``), and runs every arm
with the same seeds, env steps and evaluation as the single process::

    single            python -m recipes.dqn train (n-step 3)
    apex_matched      Ape-X, min_replay_ratio = max_replay_ratio = 1 / replay_period
    apex_free         Ape-X as published (no rate limit): the replay ratio's part of the gap
    ablation <name>   apex_matched with ABLATIONS[name]
    apex_all_matched  apex_matched with every ablation's fields

Each run is one process of its own (a Ray of its own for Ape-X), ``jobs`` at a time, in seed-major
order, so a study cut short holds whole seeds.  A run whose result file is already in its folder is
read, not rerun (``--rerun true`` reruns it).  ``<out>.json`` (per arm and seed the final score and
the AUC; per arm their IQM with a 95 % bootstrap interval; each arm against ``apex_matched`` and
against ``single``), ``<out>.md`` and ``<out>.png`` are rewritten after every run::

    python -m recipes.apex ablate --env CartPole-v1 --actors 2 --total_steps 50000 --seeds 5 \\
        --out runs/apex_dqn/apex_matched
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from recipes.apex.config import ApexConfig, apex_fields, run_dir
from recipes.apex.report import ablate_markdown, ablate_summary, compare_row
from recipes.apex.studies import COMPARE_SETS, CompareConfig, apex_run, single_run
from recipes.common import cli, outputs
from recipes.dqn.config import PAPER_ARMS, DDQNConfig
from recipes.dqn.config import run_dir as single_dir
from recipes.dqn.sweep_report import collect, plot

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
    study cut short holds whole seeds of the first arms."""
    base = compare_config(config)
    out: list[tuple[str, int, Run]] = []
    every = arms(config)
    groups = [
        [arm for arm in every if arm[0] in FIRST],
        [arm for arm in every if arm[0] in SECOND],
        [arm for arm in every if arm[0] not in FIRST + SECOND],
    ]
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


def result_path(run: Run) -> Path:
    if isinstance(run, ApexConfig):
        return run_dir(run) / "apex_dqn.json"
    return single_dir(run) / "result.json"


def run_one(task: tuple[str, int, Run, bool]) -> dict[str, Any]:
    """One run (in a process of its own), or its result file when there is one and not ``rerun``."""
    label, _, run, rerun = task
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    path = result_path(run)
    if path.exists() and not rerun:
        result: dict[str, Any] = json.loads(path.read_text())
    elif isinstance(run, ApexConfig):
        from recipes.apex.run import train

        result = train(run)
    else:
        from recipes.dqn.run import train as train_single

        result = asdict(train_single(run))
    return {**result, "label": label}


def ablate(config: AblateConfig, argv: list[str]) -> dict[str, Any]:
    """Every run, ``jobs`` at a time; the report rewritten after each."""
    started = time.perf_counter()
    todo = tasks(config)
    results: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    if config.report_only:
        for label, seed, run in todo:
            if result_path(run).exists():
                results.append(run_one((label, seed, run, False)))
        print(f"{len(results)} of {len(todo)} runs have finished")
        return write(config, argv, results, todo, time.perf_counter() - started) if results else report
    context = multiprocessing.get_context("spawn")  # a fresh process (and Ray) per run
    with context.Pool(config.jobs, maxtasksperchild=1) as pool:
        work = [(label, seed, run, config.rerun) for label, seed, run in todo]
        for result in pool.imap_unordered(run_one, work):
            results.append(result)
            print(
                f"{result['label']}, seed {result['config']['seed']}: {result['wall_s']:.0f} s, "
                f"{result['updates']} updates, final {compare_row(result)['final_score']:.1f} "
                f"({len(results)}/{len(todo)})",
                flush=True,
            )
            report = write(config, argv, results, todo, time.perf_counter() - started)
    return report


def write(
    config: AblateConfig,
    argv: list[str],
    results: list[dict[str, Any]],
    todo: list[tuple[str, int, Run]],
    wall: float,
) -> dict[str, Any]:
    """``<out>.json``, ``<out>.md`` and ``<out>.png`` of the runs finished so far."""
    from recipes.apex.report import provenance

    order = [label for label, _ in arms(config)]
    results = sorted(results, key=lambda r: (order.index(r["label"]), r["config"]["seed"]))
    done = {(r["label"], r["config"]["seed"]) for r in results}
    missing = [f"{label} seed {seed}" for label, seed, _ in todo if (label, seed) not in done]
    results = [{**r, "curve": f"{config.arm} {r['label']}"} for r in results]  # collect's names
    curves = collect([{**r, "label": r["curve"]} for r in results])
    device = next((r["device"] for r in results if "device" in r), config.device)  # result.json has none
    report = {
        **provenance(argv, device, asdict(config)),
        "wall_s": wall,
        "loadavg_end": os.getloadavg(),
        "partial": bool(missing),
        "missing": missing,
        "ablation_fields": {**ABLATIONS, "all": all_matched()},
        **ablate_summary(results, curves, order),
        "runs": [compare_row(r) for r in results],
        "curves": curves,
    }
    out = Path(config.out)
    outputs.write_results(
        out.parent,
        out.stem,
        report,
        table=ablate_markdown(report, out.stem),
        figure=lambda folder: plot(
            curves, folder / f"{out.stem}.png", title=f"{config.env}, {config.total_steps:,} env steps"
        ),
    )
    return report


def main(argv: list[str]) -> dict[str, Any]:
    """``python -m recipes.apex ablate [options]``; ``--help`` lists them."""
    prog = "python -m recipes.apex ablate"
    return ablate(cli.parse(AblateConfig, argv, prog=prog), ["ablate", *argv])
