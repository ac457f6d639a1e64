"""The configs of ``python -m recipes.studies per-vs-uniform run|stacked|report``, the registered
protocol and the runs it is made of, apart from the runs themselves: ``--help``, the checks of a
command line and the summary printed before ``run`` or ``stacked`` starts read this module without
importing torch.

The summary's time is ``Σ_env steps_env / rate_env`` divided by the processes at once, the rate being
the one that ``python -m benchmarks.minatar_stack`` measured for the environment's family alone on
this machine (``STACK_BENCHMARKS``): with one agent in its process for ``run``, with as many agents
as a process of ``stacked`` trains for ``stacked``.  "About" when the benchmark ran this environment
and nothing is ``--set``; otherwise "at least", from the fastest rate found.  The study's own records
give no rate: a stacked agent's speed is its share of a process, and a resumed run's is unknown.
Where the benchmark ran without evaluations, the summary says how many agent steps the runs'
evaluations add at most, outside the estimate.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from recipes.common import cli, launch
from recipes.common.launch import Measured, RunPlan
from recipes.dqn.config import DDQNConfig, load_config

__all__ = [
    "COMMANDS",
    "EPILOG",
    "PROG",
    "PROTOCOL",
    "STACK_BENCHMARKS",
    "ReportConfig",
    "RunConfig",
    "StackedConfig",
    "env_runs",
    "load_protocol",
    "parse_command",
    "run_plan",
    "stacked_plan",
]

PROG = "python -m recipes.studies per-vs-uniform"
PROTOCOL = Path(__file__).parent / "configs" / "per_vs_uniform.yaml"
STACK_BENCHMARKS = {
    "CartPole-v1": "benchmarks/cartpole_stack.json",
    "MinAtar": "benchmarks/minatar_stack.json",
}
"""Per environment, or per family (the name before ``/``), the stacked engine's measured throughput
(``python -m benchmarks.minatar_stack``): per agent count, the agent steps/s of one process."""


def load_protocol(path: Path = PROTOCOL) -> dict[str, Any]:
    """The registered protocol, as written."""
    protocol: dict[str, Any] = yaml.safe_load(path.read_text())
    return protocol


@dataclass(frozen=True)
class RunConfig:
    """Train the registered arms × seeds of some environments of the protocol."""

    envs: tuple[str, ...]
    """Environments of the protocol to run, a comma list (e.g. CartPole-v1,MinAtar/Breakout-v1)."""
    jobs: int = 2
    """Runs in parallel, one process and one torch thread each."""
    runs: str = "runs/per_vs_uniform"
    """Folder of the results: <runs>/<env>.json, .png, _weights.png, .md, and the run directories."""
    seeds: int | None = None
    """Only the first this many of each environment's registered seeds (a quick check; None: all)."""
    total_steps: int | None = None
    """Override the registered steps (a quick check only; None: as registered)."""
    set: dict[str, Any] | None = None
    """Fields of every run, as JSON, on top of the protocol (a quick check only)."""

    def __post_init__(self) -> None:
        if isinstance(self.envs, str):
            object.__setattr__(self, "envs", tuple(e.strip() for e in self.envs.split(",") if e.strip()))
        cli.subset_of(self, "envs", tuple(load_protocol()["envs"]))
        cli.at_least(self, 1, "jobs", "seeds", "total_steps")


@dataclass(frozen=True)
class ReportConfig:
    """Gather the runs of every registered environment into one JSON, table and plot."""

    runs: str = "runs/per_vs_uniform"
    """The folder ``run`` wrote (<runs>/<env>.json per environment)."""
    sb3: str | None = None
    """The Stable-Baselines3 comparison's JSON (python -m recipes.studies sb3-cartpole); None: left out."""
    out: str = "runs/per_vs_uniform/per_vs_uniform"
    """Output prefix: <out>.json, <out>.md and <out>.png (the committed results:
    docs/results/per_vs_uniform)."""


@dataclass(frozen=True)
class StackedConfig:
    """Train the registered arms × seeds of some environments with the stacked engine: every agent
    of one environment in one process (``python -m recipes.dqn`` ``minstack``), resumable."""

    envs: tuple[str, ...]
    """Environments of the protocol to run, a comma list (e.g. MinAtar/Breakout-v1,MinAtar/Asterix-v1)."""
    jobs: int = 2
    """Environments trained at once, one process and one torch thread each."""
    runs: str = "runs/per_vs_uniform"
    """Folder of the results: <runs>/<env>.json, .png, _weights.png, .md, the run directories under
    <runs>/runs, and each environment's process checkpoint under <runs>/stacked."""
    seeds: int | None = None
    """Only the first this many of each environment's registered seeds (a quick check; None: all)."""
    total_steps: int | None = None
    """Override the registered steps (a quick check only; None: as registered)."""
    set: dict[str, Any] | None = None
    """Fields of every run, as JSON, on top of the protocol (a quick check only)."""
    checkpoint_every: int = 50_000
    """Agent steps (of each agent) between the process's checkpoints."""
    stop_after: int | None = None
    """Stop each process (with a checkpoint) once its agents reach this many steps; the same command
    later continues from there.  None: run to the end."""
    time_budget_s: float | None = None
    """Stop each process (with a checkpoint) after this many seconds; None: no limit."""
    progress: bool = True
    """Show each process's progress bar of agent steps."""

    def __post_init__(self) -> None:
        if isinstance(self.envs, str):
            object.__setattr__(self, "envs", tuple(e.strip() for e in self.envs.split(",") if e.strip()))
        cli.subset_of(self, "envs", tuple(load_protocol()["envs"]))
        cli.at_least(self, 1, "jobs", "seeds", "total_steps", "checkpoint_every", "stop_after")
        cli.require(
            self.time_budget_s is None or self.time_budget_s > 0,
            "time_budget_s",
            "be > 0",
            self.time_budget_s,
        )


def env_runs(
    protocol: dict[str, Any], env: str, config: RunConfig | StackedConfig
) -> tuple[list[DDQNConfig], list[str]]:
    """Every registered (arm, seed) run of ``env``, seed by seed: the arm file on the family's and
    protocol's files, the environment's ``set``, then the arm's ``set``; and each run's curve name.
    An arm runs the environment's ``seeds`` unless it registers ``seeds`` of its own (a subset of
    the environment's); ``config.seeds`` keeps the first that many of the environment's."""
    if isinstance(config, StackedConfig):  # the same runs as ``run`` would train them
        config = RunConfig(
            config.envs, config.jobs, config.runs, config.seeds, config.total_steps, config.set
        )
    spec = protocol["envs"][env]
    seeds = spec["seeds"][: config.seeds] if config.seeds is not None else spec["seeds"]
    for name, arm in spec["arms"].items():
        extra = sorted(set(arm.get("seeds", spec["seeds"])) - set(spec["seeds"]))
        if extra:
            raise ValueError(
                f"an arm's seeds should be among its environment's, but got {env} arm {name!r} seeds {extra}"
            )
    runs, names = [], []
    for seed in seeds:  # seed by seed: a run cut short leaves every arm with the same seeds
        for name, arm in spec["arms"].items():
            if seed not in arm.get("seeds", spec["seeds"]):
                continue
            values = {**spec["set"], **arm["set"], **(config.set or {})}
            runs.append(
                load_config(
                    env,
                    arm["arm"],
                    spec["protocol"],
                    total_steps=config.total_steps or spec["total_steps"],
                    seed=seed,
                    log_dir=str(Path(config.runs) / "runs"),
                    run_name=f"{env.replace('/', '_')}/{name.replace(' ', '_')}/seed{seed}",
                    progress=False,
                    tensorboard=False,
                    **values,
                )
            )
            names.append(name)
    return runs, names


COMMANDS = {
    "run": "train the registered arms x seeds of some environments (per environment: JSON, table, plots)",
    "stacked": "train the registered arms x seeds of some environments, every agent of one environment "
    "in one resumable process (the stacked engine); then the same records as run",
    "report": "gather every environment's runs into one JSON, table and plot, with the verdicts",
}
"""The study's commands and their summaries (``--help`` lists them)."""
EPILOG = (
    "The protocol: recipes/studies/configs/per_vs_uniform.yaml; its prose: docs/recipes/per_vs_uniform.md."
)


def parse_command(argv: Sequence[str] | None = None) -> RunConfig | StackedConfig | ReportConfig:
    """``run|report [options]``: the config of the command; every run of ``run`` is built
    (:func:`env_runs`), so that a bad one is refused before any starts.  No command prints the usage."""
    command, options = cli.subcommand(list(argv or []) or ["--help"], COMMANDS, prog=PROG, epilog=EPILOG)
    if command == "report":
        return cli.parse(ReportConfig, options, prog=f"{PROG} report", epilog=EPILOG)
    config: RunConfig | StackedConfig
    if command == "stacked":
        config = cli.parse(StackedConfig, options, prog=f"{PROG} stacked", epilog=EPILOG)
    else:
        config = cli.parse(RunConfig, options, prog=f"{PROG} run", epilog=EPILOG)
    protocol = load_protocol()
    with cli.reporting():
        for env in config.envs:
            env_runs(protocol, env, config)
    return config


def _stack_rate(env: str, agents: int) -> tuple[Measured | None, bool]:
    """The agent steps/s of one process of ``agents`` agents that the benchmark of ``env``'s family
    measured, and whether it measured ``env`` itself; ``(None, False)`` when it holds no such run."""
    path = _benchmark_path(env)
    if path is None:
        return None, False
    measured_env = launch.recorded_config(path).get("env", "?")
    plural = "s" if agents > 1 else ""
    label = f"{agents} agent{plural} in one process on {measured_env}, alone on the machine"
    rate = launch.measured(
        path, label, lambda d: next(r["agent_steps_per_s"] for r in d["runs"] if r["agents"] == agents)
    )
    return rate, rate is not None and measured_env == env


def _plan_rate(steps: dict[str, int], agents: dict[str, int], changed: bool) -> tuple[Measured | None, bool]:
    """The rate of a plan that trains ``steps[env]`` agent steps per environment, ``agents[env]`` to a
    process: the measured one of every environment combined (``exact`` when each is that
    environment's own and ``changed`` is false), else the fastest one found, else ``None``."""
    found = {env: _stack_rate(env, agents[env]) for env in steps}
    rates = {env: m for env, (m, _) in found.items() if m is not None}
    if len(rates) < len(found):
        return max(rates.values(), key=lambda m: m.steps_per_s, default=None), False
    seconds = sum(steps[env] / m.steps_per_s for env, m in rates.items())
    paths = ", ".join(dict.fromkeys(m.path for m in rates.values()))
    labels = "; ".join(dict.fromkeys(m.label for m in rates.values()))
    exact = not changed and all(own for _, own in found.values())
    return Measured(sum(steps.values()) / seconds, paths, labels), exact


def _steps(run: DDQNConfig) -> int:
    return run.total_steps if run.stop_after is None else min(run.total_steps, run.stop_after)


def _evaluation_steps(run: DDQNConfig) -> int:
    """The most agent steps a run's evaluations take: one every ``eval_every`` steps and one at the
    stop, then the best policy's re-evaluation, each of at most ``eval_steps``."""
    return (-(-_steps(run) // run.eval_every) + 1) * run.eval_steps


def _benchmark_path(env: str) -> str | None:
    return STACK_BENCHMARKS.get(env) or STACK_BENCHMARKS.get(env.split("/")[0])


def _evaluations(per_env: dict[str, list[DDQNConfig]]) -> str:
    """The summary's note on the evaluations that the rate leaves out: those of the environments
    whose benchmark ran without evaluations (``--evaluate 0``)."""
    left_out = [
        env
        for env, path in ((env, _benchmark_path(env)) for env in per_env)
        if path is not None and launch.recorded_config(path).get("evaluate") is False
    ]
    most = sum(_evaluation_steps(r) for env in left_out for r in per_env[env])
    return f"evaluations add at most {most:,} agent steps, which it leaves out" if most else ""


def run_plan(config: RunConfig) -> RunPlan:
    """What ``run`` is about to train: every (arm, seed) of its environments, ``jobs`` at once."""
    protocol = load_protocol()
    per_env = {env: env_runs(protocol, env, config)[0] for env in config.envs}
    steps = {env: sum(_steps(r) for r in runs) for env, runs in per_env.items()}
    rate, exact = _plan_rate(steps, dict.fromkeys(config.envs, 1), config.set is not None)
    runs = sum(len(r) for r in per_env.values())
    counts = ", ".join(f"{len(per_env[env])} on {env}" for env in config.envs)
    return RunPlan(
        command=f"{PROG} run",
        what=f"{runs} Double DQN runs ({counts}; finished ones under {config.runs} are reused)",
        steps=sum(steps.values()),
        out_dir=f"{config.runs}/<env>.json, .png, .md and runs under {config.runs}/runs",
        short='--seeds 1 --total_steps 2000 --set \'{"learning_starts": 500, "eval_every": 1000}\'',
        rate=rate,
        exact=exact,
        parallel=max(1, min(config.jobs, runs, os.cpu_count() or 1)),
        not_estimated=_evaluations(per_env),
    )


def stacked_plan(config: StackedConfig) -> RunPlan:
    """What ``stacked`` is about to train: per environment one process of all its (arm, seed)
    agents, ``jobs`` processes at once; the rate is the measured one for that many agents, if any
    (``STACK_BENCHMARKS``)."""
    protocol = load_protocol()
    per_env = {env: env_runs(protocol, env, config)[0] for env in config.envs}
    steps = {env: sum(_steps(r) for r in runs) for env, runs in per_env.items()}
    agents = {env: len(runs) for env, runs in per_env.items()}
    changed = config.set is not None or config.total_steps is not None
    rate, exact = _plan_rate(steps, agents, changed)
    counts = ", ".join(f"{len(per_env[env])} agents on {env}" for env in config.envs)
    return RunPlan(
        command=f"{PROG} stacked",
        what=f"{counts}, one process each (finished ones under {config.runs} are reused, "
        f"stopped ones resume from {config.runs}/stacked)",
        steps=sum(steps.values()),
        out_dir=f"{config.runs}/<env>.json, .png, .md and runs under {config.runs}/runs",
        short="--seeds 1 --total_steps 2000 --set '{\"eval_every\": 1000}'",
        rate=rate,
        exact=exact,
        time_budget_s=config.time_budget_s,
        parallel=max(1, min(config.jobs, len(config.envs), os.cpu_count() or 1)),
        not_estimated=_evaluations(per_env),
    )
