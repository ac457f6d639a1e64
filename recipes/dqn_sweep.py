"""Sweeps of the Double DQN recipe: many (arm, seed) runs in parallel processes, one JSON, PNG and table.

``python -m recipes.atari_ddqn sweep --env CartPole-v1 --seeds 5 --jobs 14`` runs every arm × seed
of one environment and writes (``--out docs/results/cartpole`` for the committed results)

* ``<out>.json``: ``{arm: {"steps": [...], "returns": [[score per seed] per step], ...}}``, the
  evaluation score of each seed at each evaluation (``null`` where a run stopped earlier);
* ``<out>.png``: mean over seeds with the min–max band, one colour per arm, at the evaluations
  every seed reached;
* ``<out>.md``: the command, the machine, steps/s and wall time per run, a summary table.

``python -m recipes.atari_ddqn plot --json <out>.json`` re-draws the PNG from the JSON.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import platform
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm  # type: ignore[import-untyped]

from recipes import cli
from recipes.atari_ddqn import ARMS, Arm, DDQNConfig, resolve, train
from recipes.dqn_envs import atari_rom, env_family, load_atari_scores, normalized_score


@dataclass(frozen=True)
class SweepConfig(DDQNConfig):
    """A :class:`DDQNConfig` (every run's settings) plus the sweep's own fields."""

    arms: tuple[Arm, ...] = ARMS
    """Arms to run, a comma list (``uniform,rank``)."""
    seeds: int = 3
    """Seeds per arm: seed, seed + 1, ..."""
    jobs: int = 1
    """Runs in parallel (one process each, one torch thread each)."""
    out: str = "runs/atari_ddqn/sweep"
    """Output prefix: writes <out>.json, <out>.png and <out>.md (the committed results:
    docs/results/<env>)."""

    def __post_init__(self) -> None:
        if isinstance(self.arms, str):  # a comma list from Python code
            object.__setattr__(self, "arms", tuple(a.strip() for a in self.arms.split(",") if a.strip()))
        super().__post_init__()
        cli.subset_of(self, "arms", ARMS)
        cli.at_least(self, 1, "seeds", "jobs")


def arm_list(config: SweepConfig) -> list[str]:
    """The sweep's arms, in the order given."""
    return list(config.arms)


def run_config(config: SweepConfig, arm: str, seed: int) -> DDQNConfig:
    """The :class:`DDQNConfig` of one run of the sweep."""
    base = {f.name: getattr(config, f.name) for f in fields(DDQNConfig)}
    base.update(arm=arm, seed=seed, progress=False, run_name=None)
    return DDQNConfig(**base)


@dataclass(frozen=True)
class PlotConfig:
    """Re-draw a sweep's PNG from its JSON."""

    json: str
    """The sweep's JSON, e.g. docs/results/cartpole.json."""
    out: str | None = None
    """PNG to write; default the JSON's path with .png."""
    title: str | None = None
    """Plot title; default the JSON's file name."""
    runs: str | None = None
    """First rebuild the JSON from the ``result.json`` files of the run directories under this path
    (e.g. a sweep's log_dir copied from another machine)."""


def _run(config: DDQNConfig) -> dict[str, Any]:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    return asdict(train(config))


def sweep(config: SweepConfig) -> dict[str, Any]:
    """Run every (arm, seed), then write ``<out>.json``, ``<out>.png`` and ``<out>.md``.

    ``<out>.json`` is rewritten after every finished run, and a run that fails is reported and
    left out, so a sweep cut short still leaves the curves of the runs that finished.
    """
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the workers before torch starts there
    runs = [run_config(config, arm, config.seed + k) for arm in arm_list(config) for k in range(config.seeds)]
    out = Path(config.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: list[dict[str, Any] | None] = [None] * len(runs)
    bar = tqdm(total=len(runs), desc=f"sweep {config.env}", unit="run")

    def finish(i: int, outcome: dict[str, Any] | BaseException) -> None:
        run = runs[i]
        if isinstance(outcome, BaseException):
            print(f"run {run.arm} seed {run.seed} failed: {outcome!r}", file=sys.stderr)
        else:
            results[i] = outcome
            bar.set_postfix_str(f"{run.arm} s{run.seed}: {outcome['steps_per_s']:.0f} steps/s", refresh=False)
            out.with_suffix(".json").write_text(to_json(collect([r for r in results if r is not None])))
        bar.update()

    if config.jobs == 1:
        for i, run in enumerate(runs):
            try:
                outcome: dict[str, Any] | BaseException = _run(run)
            except Exception as error:
                outcome = error
            finish(i, outcome)
    else:
        context = multiprocessing.get_context("spawn")  # CUDA and torch threads need fresh processes
        with ProcessPoolExecutor(min(config.jobs, len(runs)), mp_context=context) as pool:
            futures = {pool.submit(_run, run): i for i, run in enumerate(runs)}
            for future in as_completed(futures):
                error = future.exception()
                finish(futures[future], error if error is not None else future.result())
    bar.close()
    wall = time.perf_counter() - started
    finished = [r for r in results if r is not None]
    if not finished:
        raise RuntimeError(f"every run of the sweep failed (see above); nothing written to {out}.*")
    curves = collect(finished)
    out.with_suffix(".json").write_text(to_json(curves))
    plot(curves, out.with_suffix(".png"), title=config.env)
    write_markdown(config, finished, curves, wall, out.with_suffix(".md"))
    print(f"wrote {out}.json, {out}.png and {out}.md ({len(finished)} of {len(runs)} runs, {wall:.0f} s)")
    return curves


def collect(results: list[dict[str, Any]]) -> dict[str, Any]:
    """``{arm: {"steps", "returns" (per step, per seed), "seeds", "best", "steps_reached", ...}}``."""
    curves: dict[str, Any] = {}
    for arm in ARMS:
        mine = sorted((r for r in results if r["config"]["arm"] == arm), key=lambda r: r["config"]["seed"])
        if not mine:
            continue
        steps = sorted({s for r in mine for s in r["eval_steps"]})
        table = []
        for step in steps:
            row = []
            for r in mine:
                at = dict(zip(r["eval_steps"], r["eval_scores"], strict=True))
                row.append(at.get(step))
            table.append(row)
        curves[arm] = {
            "steps": steps,
            "returns": table,
            "seeds": [r["config"]["seed"] for r in mine],
            "best": [r["best_score"] for r in mine],
            "steps_reached": [r["steps"] for r in mine],
            "steps_per_s": [round(r["steps_per_s"], 1) for r in mine],
            "wall_s": [round(r["wall_s"], 1) for r in mine],
            "stopped": [r["stopped"] for r in mine],
        }
    return curves


def to_json(curves: dict[str, Any]) -> str:
    """JSON with one line per innermost list."""
    text = json.dumps(curves, indent=1)
    return re.sub(r"\[[^\[\]]*\]", lambda m: json.dumps(json.loads(m.group(0))), text) + "\n"


STYLE = {"uniform": ("black", "uniform (Double DQN)"), "proportional": ("blue", "proportional"),
         "rank": ("red", "rank-based")}  # fmt: skip
"""The paper's colours (Figs. 9-10)."""


def curve_stats(returns: list[list[float | None]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per evaluation point: mean, min, max over the seeds that reached it, and their count."""
    x = np.array([[math.nan if v is None else v for v in row] for row in returns], dtype=np.float64)
    count = np.sum(np.isfinite(x), axis=1)
    with np.errstate(all="ignore"):
        mean = np.where(count > 0, np.nanmean(np.where(np.isfinite(x), x, np.nan), axis=1), np.nan)
        low = np.where(count > 0, np.nanmin(np.where(np.isfinite(x), x, np.inf), axis=1), np.nan)
        high = np.where(count > 0, np.nanmax(np.where(np.isfinite(x), x, -np.inf), axis=1), np.nan)
    return mean, low, high, count


def plot(curves: dict[str, Any], path: Path, title: str) -> Path:
    """Mean evaluation score over seeds with the min–max band, per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, data in curves.items():
        if not data["steps"]:
            continue
        color, label = STYLE.get(arm, ("gray", arm))
        steps = np.asarray(data["steps"], dtype=np.float64)
        mean, low, high, count = curve_stats(data["returns"])
        seeds = len(data["returns"][0]) if data["returns"] else 0
        every = count == seeds  # a point some seed did not reach (time budget) would bias the mean
        ax.plot(steps[every], mean[every], color=color, lw=2, label=f"{label} ({seeds} seeds)")
        ax.fill_between(steps[every], low[every], high[every], color=color, alpha=0.15, lw=0)
    ax.set_xlabel("agent steps")
    ax.set_ylabel("evaluation score (mean, min–max over seeds)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def replot(config: PlotConfig) -> Path:
    """``plot`` command: the PNG of a sweep JSON."""
    source = Path(config.json)
    if config.runs is not None:
        results = [json.loads(p.read_text()) for p in sorted(Path(config.runs).rglob("result.json"))]
        if not results:
            raise ValueError(f"no result.json under runs={config.runs!r}")
        source.write_text(to_json(collect(results)))
    curves = json.loads(source.read_text())
    out = Path(config.out) if config.out else source.with_suffix(".png")
    plot(curves, out, title=config.title or source.stem)
    print(f"wrote {out}")
    return out


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{os.cpu_count()} × {cpu}"
    try:
        import torch

        if torch.cuda.is_available():
            text += f"; GPU {torch.cuda.get_device_name(0)}"
        text += f"; torch {torch.__version__}, Python {platform.python_version()}"
    except ImportError:
        pass
    return text


def command_line(config: SweepConfig) -> str:
    """The command that reproduces the sweep: its non-default arguments."""
    return cli.command_line("python -m recipes.atari_ddqn sweep", config, SweepConfig())


def _fmt(values: list[float]) -> str:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return "–"
    return f"{np.mean(finite):.1f} ({min(finite):.1f} to {max(finite):.1f})"


def write_markdown(
    config: SweepConfig,
    results: list[dict[str, Any]],
    curves: dict[str, Any],
    wall: float,
    path: Path,
    machine: str | None = None,
) -> None:
    """The sweep's record: command, machine, hyper-parameters, per-arm summary, per-run speed."""
    resolved = asdict(resolve(run_config(config, arm_list(config)[0], config.seed)))
    scores = load_atari_scores().get(atari_rom(config.env)) if env_family(config.env) == "atari" else None
    lines = [
        f"# Double DQN replay arms on {config.env}",
        "",
        "Written by `python -m recipes.atari_ddqn sweep` (`recipes/atari_ddqn.py`); setup, sources of every "
        "hyper-parameter and discussion in `docs/recipes/atari_ddqn.md`.",
        "",
        f"- command: `{command_line(config)}`",
        f"- machine: {machine or _machine()}; {config.jobs} parallel run(s), one torch thread each, "
        f"device `{config.device}`",
        f"- sweep wall time: {wall:,.0f} s for {len(results)} runs",
        f"- score: mean return of the evaluation episodes (ε = {config.eval_epsilon:g}, at most "
        f"{resolved['eval_episodes']} episodes / {resolved['eval_steps']:,} agent steps), every "
        f"{resolved['eval_every']:,} agent steps",
        "",
        "| arm | seeds | steps reached | final score, mean (min to max) | best score, mean (min to max) "
        "| agent steps/s per run | wall s per run |" + (" best normalised score (mean) |" if scores else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if scores else ""),
    ]
    for arm, data in curves.items():
        finals = []
        for seed_index in range(len(data["seeds"])):
            column = [row[seed_index] for row in data["returns"] if row[seed_index] is not None]
            finals.append(column[-1] if column else math.nan)
        row = (
            f"| {arm} | {len(data['seeds'])} | {min(data['steps_reached']):,}–{max(data['steps_reached']):,} "
            f"| {_fmt(finals)} | {_fmt(data['best'])} | {_fmt(data['steps_per_s'])} "
            f"| {_fmt(data['wall_s'])} |"
        )
        if scores:
            best = [b for b in data["best"] if math.isfinite(b)]
            random, human = float(scores["random"]), float(scores["human"])
            norm = float(np.mean(normalized_score(best, random, human))) if best else math.nan
            row += f" {100 * norm:.0f}% |"
        lines.append(row)
    if scores:
        lines += [
            "",
            f"Paper (human starts, 200M frames, best policy): random {scores['random']:g}, human "
            f"{scores['human']:g}, Double DQN {scores['ddqn']:g}, rank-based {scores['ddqn_rank']:g}, "
            f"proportional {scores['ddqn_proportional']:g}.",
        ]
    lines += ["", "## Hyper-parameters of every run", "", "| field | value |", "|---|---|"]
    skip = {"arm", "seed", "run_name", "progress", "log_dir", "resume", "alpha", "beta0", "beta_end"}
    lines += [f"| {k} | `{v}` |" for k, v in resolved.items() if k not in skip]
    lines += [
        "",
        "α and β per arm: uniform α = 0, β = 0; proportional α = 0.6, β 0.4 → 1; rank α = 0.7, β 0.5 → 1, "
        "unless given on the command line.",
        "",
        f"![{path.stem}]({path.stem}.png)",
        "",
    ]
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    print("use: python -m recipes.atari_ddqn sweep|plot ...", file=sys.stderr)
    raise SystemExit(2)
