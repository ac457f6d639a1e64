"""The Double DQN sweep's results (``recipes/dqn/sweep.py``): its curves, their plots and its table.

:func:`collect` turns the runs' ``result.json`` records (and their ``metrics.csv``) into one curve
per arm (per arm and grid point): the evaluation score of each seed at each evaluation, and the
mean importance weight ``per/weight_mean`` of each logged row.  :func:`plot` draws the mean over
seeds with the min–max band, :func:`markdown` writes the sweep's record (command, machine,
hyper-parameters, a summary per curve, the speed of the runs).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recipes.common import outputs, rl_metrics
from recipes.dqn.config import ARMS, DDQNConfig
from recipes.dqn.envs import atari_rom, env_family, load_atari_scores, normalized_score

# -- the curves --------------------------------------------------------------------------------------


def _name(result: dict[str, Any]) -> str:
    return str(result.get("label", result["config"]["arm"]))


def _weight_means(result: dict[str, Any]) -> dict[int, float]:
    """``{step: per/weight_mean}`` from the run's ``metrics.csv`` (empty if it is gone)."""
    path = Path(result.get("run_dir", "")) / "metrics.csv"
    if "run_dir" not in result or not path.exists():
        return {}
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return {int(row["step"]): float(row["per/weight_mean"]) for row in rows if row.get("per/weight_mean")}


def _finite(value: Any) -> Any:
    return value if value is None or math.isfinite(value) else None


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def collect(results: list[dict[str, Any]]) -> dict[str, Any]:
    """``{curve: {"steps", "returns" (per step, per seed), "seeds", "best", "best_selecting",
    "steps_reached", ..., "log_steps", "weight_mean" (per logged step, per seed)}}``; one curve per
    arm, or per arm and grid point."""
    curves: dict[str, Any] = {}
    names = sorted({_name(r) for r in results}, key=lambda n: (ARMS.index(n.split()[0]), n))
    for name in names:
        mine = sorted((r for r in results if _name(r) == name), key=lambda r: r["config"]["seed"])
        steps = sorted({s for r in mine for s in r["eval_steps"]})
        table = []
        for step in steps:
            row = []
            for r in mine:
                at = dict(zip(r["eval_steps"], r["eval_scores"], strict=True))
                row.append(_finite(at.get(step)))
            table.append(row)
        weights = [_weight_means(r) for r in mine]
        log_steps = sorted({s for w in weights for s in w})
        curves[name] = {
            "steps": steps,
            "returns": table,
            "seeds": [r["config"]["seed"] for r in mine],
            "best": [_finite(r.get("best_policy_score", r["best_score"])) for r in mine],
            "best_selecting": [_finite(r["best_score"]) for r in mine],
            "steps_reached": [r["steps"] for r in mine],
            "steps_per_s": [_rounded(r["steps_per_s"]) for r in mine],
            "wall_s": [_rounded(r["wall_s"]) for r in mine],
            "stopped": [r["stopped"] for r in mine],
            "log_steps": log_steps,
            "weight_mean": [[w.get(s) for w in weights] for s in log_steps],
        }
    return curves


def to_json(curves: dict[str, Any]) -> str:
    """JSON with one line per innermost list."""
    return outputs.json_text(curves, compact_lists=True)


# -- plots -------------------------------------------------------------------------------------------


STYLE = {
    "uniform": ("black", "uniform (Double DQN)"),
    "proportional": ("blue", "proportional"),
    "rank": ("red", "rank-based"),
    "lap": ("green", "LAP"),
    "laber": ("orange", "LaBER-mean"),
}
"""The paper's colours (Figs. 9-10), then the ablation's LAP and LaBER."""


def curve_stats(returns: list[list[float | None]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per evaluation point: mean, min, max over the seeds that reached it, and their count."""
    x = np.array([[math.nan if v is None else v for v in row] for row in returns], dtype=np.float64)
    x = x.reshape(len(returns), -1) if x.size else np.empty((len(returns), 0))
    finite = np.isfinite(x)
    count = np.sum(finite, axis=1)
    reached = count > 0  # a point no seed reached has no mean, min or max: NaN, not an empty slice
    mean = np.full(count.shape, np.nan)
    mean[reached] = np.sum(np.where(finite, x, 0.0), axis=1)[reached] / count[reached]
    low = np.where(reached, np.min(np.where(finite, x, np.inf), axis=1, initial=np.inf), np.nan)
    high = np.where(reached, np.max(np.where(finite, x, -np.inf), axis=1, initial=-np.inf), np.nan)
    return mean, low, high, count


def plot(curves: dict[str, Any], path: Path, title: str, metric: str = "returns") -> Path:
    """Mean over seeds with the min–max band, per curve: the evaluation score (``returns``) or
    the mean importance weight of the batches (``weight_mean``)."""
    x_key = "steps" if metric == "returns" else "log_steps"
    palette = outputs.default_colors()
    with outputs.figure(path, figsize=(6, 4)) as (_, ax):
        _draw_curves(ax, curves, x_key, metric, palette, title)
    return path


def _draw_curves(
    ax: Any, curves: dict[str, Any], x_key: str, metric: str, palette: list[str], title: str
) -> None:
    for i, (name, data) in enumerate(curves.items()):
        if not data.get(x_key):
            continue
        color, shown = STYLE.get(name, (palette[i % len(palette)], name))
        steps = np.asarray(data[x_key], dtype=np.float64)
        mean, low, high, count = curve_stats(data[metric])
        seeds = len(data["seeds"])
        every = count == seeds  # a point some seed did not reach (time budget) would bias the mean
        ax.plot(steps[every], mean[every], color=color, lw=2, label=f"{shown} ({seeds} seeds)")
        ax.fill_between(steps[every], low[every], high[every], color=color, alpha=0.15, lw=0)
    ax.set_xlabel("agent steps")
    ax.set_ylabel(
        "evaluation score (mean, min–max over seeds)"
        if metric == "returns"
        else "per/weight_mean: mean importance weight of the batches"
    )
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[1]:  # no curve drawn (no run reached a point): no legend
        ax.legend(fontsize=8, loc="best")


# -- the record --------------------------------------------------------------------------------------


def _fmt_known(values: Sequence[float | None]) -> str:
    """``_fmt`` when every run's value is known, "–" otherwise (a part would read as the whole)."""
    return "–" if any(v is None for v in values) else _fmt(values)


def _fmt(values: Sequence[float | None]) -> str:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return "–"
    return f"{np.mean(finite):.1f} ({min(finite):.1f} to {max(finite):.1f})"


def markdown(
    config: DDQNConfig,
    jobs: int,
    command: str,
    results: list[dict[str, Any]],
    curves: dict[str, Any],
    wall: float | None,
    stem: str,
    machine: str | None = None,
) -> str:
    """The sweep's record: command, machine, per-arm summary (AUC and final score per seed, their
    IQM with a 95 % bootstrap interval), speed, and the hyper-parameters — those every curve shares
    once, those that differ with each curve's own value.

    ``config``: the sweep's settings, run in ``jobs`` parallel processes; ``results``: the runs'
    records (each with its ``config``); ``command``: the command line that reproduces it.
    """
    scores = load_atari_scores().get(atari_rom(config.env)) if env_family(config.env) == "atari" else None
    settings = curve_settings(results)
    first = next(iter(settings.values()))
    lines = [
        f"# Double DQN replay arms on {config.env}",
        "",
        "Written by the command below (`python -m recipes.dqn train` runs); setup, sources of every "
        "hyper-parameter and discussion in `docs/recipes/atari_ddqn.md`.",
        "",
        f"- command: `{command}`",
        f"- machine: {machine or outputs.machine_description()}; {jobs} parallel run(s), one torch "
        "thread each, "
        f"device `{config.device}`",
        f"- sweep wall time: {wall:,.0f} s for {len(results)} runs"
        if wall is not None
        else f"- sweep wall time: unknown for {len(results)} runs (a run resumed from a checkpoint "
        "written before its wall time was kept; its speed too)",
        f"- score: mean return of the evaluation episodes (at most {first['eval_episodes']} episodes / "
        f"{first['eval_steps']:,} agent steps, ε as in the table below), every "
        f"{first['eval_every']:,} agent steps; "
        "AUC: a seed's mean over its evaluations (the area under its evaluation curve per step); "
        "IQM [95 % bootstrap interval over seeds] (`recipes/common/rl_metrics.py`)",
        "",
    ]
    headers = [
        "arm",
        "seeds",
        "steps reached",
        "AUC, IQM [95% CI]",
        "final score, IQM [95% CI]",
        "final score, mean (min to max)",
        "best score, mean (min to max)",
        "agent steps/s per run",
        "wall s per run",
        *(["best normalised score (mean)"] if scores else []),
    ]
    rows = []
    for arm, data in curves.items():
        metrics = seed_metrics(data)
        reached = f"{min(data['steps_reached']):,}–{max(data['steps_reached']):,}"
        row = [
            arm,
            len(data["seeds"]),
            reached,
            _interval(metrics["auc"]),
            _interval(metrics["final"]),
            _fmt(metrics["final"]),
            _fmt(data["best"]),
            _fmt_known(data["steps_per_s"]),
            _fmt_known(data["wall_s"]),
        ]
        if scores:
            best = [b for b in data["best"] if b is not None and math.isfinite(b)]
            random, human = float(scores["random"]), float(scores["human"])
            norm = float(np.mean(normalized_score(best, random, human))) if best else math.nan
            row.append(f"{100 * norm:.0f}%")
        rows.append(row)
    lines.append(outputs.markdown_table(headers, rows))
    if scores:
        lines += [
            "",
            f"Paper (human starts, 200M frames, best policy): random {scores['random']:g}, human "
            f"{scores['human']:g}, Double DQN {scores['ddqn']:g}, rank-based {scores['ddqn_rank']:g}, "
            f"proportional {scores['ddqn_proportional']:g}.",
        ]
    shared, differing = split_settings(settings)
    lines += ["", "## Hyper-parameters", ""]
    if differing:
        lines += [
            "Each arm's own values (where the arms differ):",
            "",
            outputs.markdown_table(
                ["field", *settings], [(k, *(f"`{settings[c][k]}`" for c in settings)) for k in differing]
            ),
            "",
            "Every arm's values (where they agree):",
            "",
        ]
    lines.append(outputs.markdown_table(["field", "value"], [(k, f"`{v}`") for k, v in shared.items()]))
    lines += ["", f"![{stem}]({stem}.png)", ""]
    return "\n".join(lines)


PER_RUN_FIELDS = frozenset({"arm", "seed", "run_name", "progress", "log_dir", "resume"})
"""Config fields that name or steer one run, not the arm's settings."""


def curve_settings(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{curve: config}``: the settings each curve ran with (its first seed's config, less the
    per-run fields), in the curves' order."""
    settings: dict[str, dict[str, Any]] = {}
    for name in sorted({_name(r) for r in results}, key=lambda n: (ARMS.index(n.split()[0]), n)):
        run = min((r for r in results if _name(r) == name), key=lambda r: r["config"]["seed"])
        settings[name] = {k: v for k, v in run["config"].items() if k not in PER_RUN_FIELDS}
    return settings


def split_settings(settings: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """The fields every curve shares (with their value) and the names of those that differ."""
    configs = list(settings.values())
    shared = {k: v for k, v in configs[0].items() if all(c.get(k) == v for c in configs)}
    return shared, [k for k in configs[0] if k not in shared]


def seed_metrics(data: dict[str, Any]) -> dict[str, list[float]]:
    """Per seed of one curve: ``auc`` (mean over its evaluations) and ``final`` (its last one)."""
    metrics: dict[str, list[float]] = {"auc": [], "final": []}
    for seed_index in range(len(data["seeds"])):
        column = [row[seed_index] for row in data["returns"]]
        metrics["auc"].append(rl_metrics.auc(column))
        metrics["final"].append(rl_metrics.final(column))
    return metrics


def _interval(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "–"
    point, low, high = rl_metrics.iqm_interval(finite)
    return f"{point:.1f} [{low:.1f}, {high:.1f}]"


def write_record(
    env: str,
    first: DDQNConfig,
    finished: list[dict[str, Any]],
    jobs: int,
    command: str,
    wall: float | None,
    out_dir: Path,
) -> dict[str, Any]:
    """One environment's sweep record (``per-vs-uniform run`` and ``stacked``) from its finished
    runs' ``result.json`` records (each with its curve's name as ``label``): ``<env>.json``
    curves, ``.md`` table (``jobs``: processes side by side), ``.png`` and ``_weights.png``;
    returns the curves."""
    stem = env.replace("/", "_")
    curves = collect(finished)
    table = markdown(first, jobs, command, finished, curves, wall, stem)

    def figures(_: Path) -> list[Path]:
        return [
            plot(curves, out_dir / f"{stem}.png", title=env),
            plot(curves, out_dir / f"{stem}_weights.png", title=env, metric="weight_mean"),
        ]

    outputs.write_results(out_dir, stem, curves, table, figures, compact_lists=True)
    return curves
