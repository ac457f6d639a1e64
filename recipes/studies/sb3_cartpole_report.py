"""The outputs of the Stable-Baselines3 CartPole comparison (``recipes/studies/sb3_cartpole.py``):
its plot, its Markdown table with the tests and where the runs' code came from, and the three files
written together."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from recipes.common import outputs, rl_metrics
from recipes.common.provenance import describe

__all__ = ["markdown_table", "test_lines", "write_outputs", "write_plot"]


def write_plot(result: dict[str, Any], path: Path) -> Path:
    """Left: training return (last ``curve_window`` episodes); right: the evaluation curve.  Mean ±
    std over seeds."""
    with outputs.figure(path, figsize=(11.0, 4.0), ncols=2) as (fig, (left, right)):
        for arm in result["arms"].values():
            label = f"{arm['label']} ({len(arm['runs'])} seeds)"
            steps = np.array(arm["runs"][0]["curve_steps"])
            curves = np.array([[math.nan if v is None else v for v in r["curve"]] for r in arm["runs"]])
            mean, std = rl_metrics.seed_mean_std(curves)
            left.plot(steps, mean, label=label)
            left.fill_between(steps, mean - std, mean + std, alpha=0.2)
            evals = np.array(arm["eval_curves"])
            mean, std = evals.mean(axis=0), evals.std(axis=0)
            right.plot(arm["eval_steps"], mean, marker="o", ms=3, label=label)
            right.fill_between(arm["eval_steps"], mean - std, mean + std, alpha=0.2)
        left.set_xlabel("environment steps")
        left.set_ylabel(f"training return (last {result['config']['curve_window']} episodes)")
        right.set_xlabel("environment steps")
        right.set_ylabel(f"greedy return ({result['config']['eval_episodes']} episodes)")
        right.legend(loc="lower right", fontsize=8)
        fig.suptitle("SB3 DQN on CartPole-v1: uniform vs prioritized replay")
    return path


def markdown_table(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"SB3 DQN on CartPole-v1, {cfg['timesteps']} steps, hyper-parameters of {result['source']}. "
        f"Greedy policy evaluated every {cfg['eval_every']} steps and at the end, mean return of "
        f"{cfg['eval_episodes']} episodes (max 500); AUC: the mean over the evaluations; final: the last "
        "evaluation; IQM across seeds with its 95 % stratified-bootstrap interval; w̄: the mean "
        "importance weight of the last 100 batches.",
        "",
    ]
    if "command" in result:
        lines[1:1] = ["", f"Command: `{result['command']}`"]
    if "sources" in result:
        lines[1:1] = ["", describe(result["sources"])]
    rows = []
    for arm in result["arms"].values():
        replay = arm["replay"] if isinstance(arm["replay"], str) else _replay_text(arm["replay"])
        weights = [w for w in arm["weight_mean_last"] if w is not None]
        seconds = np.mean([r["train_seconds"] for r in arm["runs"]])
        rows.append(
            [
                arm["label"],
                replay,
                _interval(arm["auc_iqm"]),
                ", ".join(f"{v:.1f}" for v in arm["auc"]),
                _interval(arm["final_iqm"]),
                ", ".join(f"{v:.1f}" for v in arm["final"]),
                f"{np.mean(weights):.3g}" if weights else "–",
                f"{seconds:.0f}",
            ]
        )
    headers = ["arm", "replay", "AUC, IQM [95% CI]", "AUC per seed", "final, IQM [95% CI]"]
    headers += ["final per seed", "w̄ at the end", "s per run (with evaluations)"]
    return "\n".join([*lines, outputs.markdown_table(headers, rows), *test_lines(result)]) + "\n"


def test_lines(result: dict[str, Any]) -> list[str]:
    """The tests against uniform, one table row each (none in a JSON written before they were)."""
    tests = result.get("comparisons", {})
    if not tests:
        return []
    adjusted = result["holm"]["adjusted_p"]
    rows = []
    for arm, t in tests.items():
        e = t["equivalence"]
        rows.append(
            [
                f"{arm} − {t['baseline']}",
                f"{_signed(t['difference'])} {t['verdict']}",
                f"{t['welch_p']:.3f}",
                f"{adjusted[arm]:.3f}",
                f"{_signed(e['interval'])} {e['verdict']}",
                f"{e['margin']:.1f}",
            ]
        )
    headers = ["AUC IQM", "difference [95% CI] → verdict", "Welch p", "Holm-adjusted p"]
    headers += ["[90% CI] → equivalence (TOST)", "margin m"]
    return ["", outputs.markdown_table(headers, rows)]


def _signed(values: list[float]) -> str:
    point, low, high = values
    return f"{point:+.1f} [{low:+.1f}, {high:+.1f}]"


def _interval(values: list[float]) -> str:
    point, low, high = values
    return f"{point:.1f} [{low:.1f}, {high:.1f}]"


def _replay_text(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in kwargs.items())


def write_outputs(result: dict[str, Any], out: Path) -> str:
    """``<out>.json``, ``<out>.png`` and ``<out>.md``; the table."""
    table = markdown_table(result)
    outputs.write_results(
        out.parent,
        out.name,
        result,
        table,
        figure=lambda to: write_plot(result, to / f"{out.name}.png"),
        indent=2,
    )
    return table
