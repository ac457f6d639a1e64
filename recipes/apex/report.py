"""What the Ape-X studies write (``recipes/apex/studies.py``): a line per run, summaries over
seeds, the Markdown tables and the throughput plot.

Each study writes ``<out>.json`` (it opens with :func:`provenance`: the command, the machine, Ray,
the study's config), ``<out>.png`` and ``<out>.md`` through :func:`recipes.common.outputs.write_results`;
the functions here build their contents from the runs' ``apex_dqn.json`` (``recipes/apex/record.py``)
and the single-process recipe's ``result.json``.
"""

from __future__ import annotations

import math
import os
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import ray

from recipes.common import outputs, rl_metrics
from recipes.dqn.sweep_report import seed_metrics

PROG = "python -m recipes.apex"
"""The studies' command."""


def provenance(argv: list[str], device: str, config: dict[str, Any]) -> dict[str, Any]:
    """The first keys of a study's JSON: its command line, the machine, Ray, the study's config."""
    return {
        "command": f"{PROG} {shlex.join(argv)}",
        "machine": outputs.machine_description(),
        "cores": os.cpu_count(),
        "device": device,
        "ray_version": ray.__version__,
        "config": config,
    }


def provenance_lines(report: dict[str, Any], learners: str) -> list[str]:
    """The Markdown's first lines: title aside, where it came from."""
    return [
        f"- command: `{report['command']}`",
        f"- machine: {report['machine']}; Ray {report['ray_version']}; {learners} on {report['device']}",
    ]


def cores() -> str:
    return f"{os.cpu_count()} CPU cores"


# -- throughput against actors ----------------------------------------------------------------------


def scaling_row(result: dict[str, Any]) -> dict[str, Any]:
    """One run's line: rates over the learning phase, replay ratio, where the time went."""
    learning, timing = result["learning_s"], result["learner_timing_s"]
    actor_parts: dict[str, float] = {}
    for actor in result["actors"]:
        for part, seconds in actor["timing_s"].items():
            actor_parts[part] = actor_parts.get(part, 0.0) + seconds
    busy = sum(actor_parts.values())
    return {
        "actors": result["config"]["actors"],
        "epsilons": [a["epsilon"] for a in result["actors"]],
        "device": result["device"],
        "env_steps": result["steps"],
        "updates": result["updates"],
        "learning_s": learning,
        "actor_steps_per_s": result["actor_steps_per_s"],
        "actor_steps_per_s_per_actor": result["actor_steps_per_s"] / result["config"]["actors"],
        "learner_updates_per_s": result["learner_updates_per_s"],
        "updates_per_env_step": result["replay_ratio"]["updates_per_env_step"],
        "replayed_per_added": result["replay_ratio"]["replayed_per_added"],
        "dropped_updates": result["dropped_updates"],
        "learner_share": {part: seconds / learning for part, seconds in timing.items()} if learning else {},
        "actor_share": {part: seconds / busy for part, seconds in actor_parts.items()} if busy else {},
        "publish_ms_mean": result["weights"]["publish_ms_mean"],
        "pull_ms_mean": result["weights"]["pull_ms_mean"],
        "wall_s": result["wall_s"],
        "loadavg": result["loadavg"],
        "run_dir": result["run_dir"],
    }


def plot_scaling(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Actor env steps/s and learner updates/s against actors, side by side."""
    actors = [row["actors"] for row in rows]
    with outputs.figure(path, figsize=(9, 3.6), ncols=2) as (fig, axes):
        for ax, key, label in (
            (axes[0], "actor_steps_per_s", "actor env steps/s (all actors)"),
            (axes[1], "learner_updates_per_s", "learner updates/s"),
        ):
            ax.plot(actors, [row[key] for row in rows], "o-", color="tab:blue")
            ax.set_xlabel("actors")
            ax.set_ylabel(label)
            ax.set_xticks(actors)
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
        fig.suptitle(title, fontsize=10)
    return path


def scaling_markdown(report: dict[str, Any], stem: str) -> str:
    config = report["config"]
    headers = (
        "actors",
        "ε_i",
        "env steps/s (all actors)",
        "per actor",
        "learner updates/s",
        "updates per env step",
        "replayed per added",
        "dropped updates",
        "learner waiting for batches",
        "learner updating",
    )
    rows = [
        (
            row["actors"],
            ", ".join(f"{e:.3g}" for e in row["epsilons"]),
            f"{row['actor_steps_per_s']:,.0f}",
            f"{row['actor_steps_per_s_per_actor']:,.0f}",
            f"{row['learner_updates_per_s']:,.0f}",
            f"{row['updates_per_env_step']:.3f}",
            f"{row['replayed_per_added']:.2f}",
            f"{row['dropped_updates']:,}",
            f"{100 * row['learner_share'].get('wait_batch', 0.0):.0f}%",
            f"{100 * row['learner_share'].get('learn', 0.0):.0f}%",
        )
        for row in report["runs"]
    ]
    actor_time = "; ".join(
        f"{row['actors']} actor(s): "
        + ", ".join(f"{part} {100 * value:.0f}%" for part, value in row["actor_share"].items())
        for row in report["runs"]
    )
    lines = [
        f"# Ape-X throughput against actors on {config['env']}",
        "",
        f"Written by `{PROG} scaling`; discussion in `docs/recipes/apex_dqn.md`.",
        "",
        *provenance_lines(report, "learner"),
        f"- each run: {config['seconds']:g} s in all (actors' start and the learner's wait for "
        f"learning_starts included), {config['envs_per_actor']} environments per actor, no evaluation, "
        "no cap on updates; rates over the learning phase (first update to the end)",
        f"- wall time: {report['wall_s']:,.0f} s",
        "",
        outputs.markdown_table(headers, rows),
        "",
        f"Actors' time per part (share of the actors' busy time, all actors): {actor_time}",
        "",
        f"![{stem}]({stem}.png)",
        "",
    ]
    return "\n".join(lines)


# -- learning against the single-process recipe ------------------------------------------------------


def final_score(scores: list[float]) -> float:
    finite = [s for s in scores if s is not None and math.isfinite(s)]
    return finite[-1] if finite else math.nan


def updates_per_step(result: dict[str, Any]) -> float:
    return result["updates"] / result["steps"] if result["steps"] else math.nan


def compare_row(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "label": result["label"],
        "seed": result["config"]["seed"],
        "steps": result["steps"],
        "updates": result["updates"],
        "updates_per_env_step": updates_per_step(result),
        "final_score": final_score(result["eval_scores"]),
        "best_policy_score": result["best_policy_score"],
        "wall_s": result["wall_s"],
        "steps_per_s": result["steps_per_s"],
        "run_dir": result["run_dir"],
        **_run_record(result.get("run_record")),
    }


def _run_record(record: dict[str, Any] | None) -> dict[str, Any]:
    """When the run ran, the load average at its start and end, and its code's commit (absent from
    runs that predate the record)."""
    if not record:
        return {}
    code = record.get("code", {})
    return {
        "started": record["started"],
        "ended": record["ended"],
        "loadavg_start": record["loadavg_start"],
        "loadavg_end": record["loadavg_end"],
        "commit": code.get("commit"),
        "clean": code.get("clean"),
    }


def compare_summary(results: list[dict[str, Any]], curve: dict[str, Any]) -> dict[str, Any]:
    """Means over seeds (with min and max) of what the table shows."""

    def stats(values: list[float]) -> dict[str, float]:
        finite = [v for v in values if math.isfinite(v)]
        if not finite:
            return {"mean": math.nan, "min": math.nan, "max": math.nan}
        return {"mean": float(np.mean(finite)), "min": min(finite), "max": max(finite)}

    return {
        "seeds": len(results),
        "final_score": stats([final_score(r["eval_scores"]) for r in results]),
        "best_policy_score": stats([r["best_policy_score"] for r in results]),
        "updates_per_env_step": stats([updates_per_step(r) for r in results]),
        "wall_s": stats([r["wall_s"] for r in results]),
        "steps_per_s": stats([r["steps_per_s"] for r in results]),
        "eval_steps": curve["steps"],
    }


def compare_markdown(report: dict[str, Any], stem: str) -> str:
    config = report["config"]

    def cell(s: dict[str, float], fmt: str) -> str:
        return f"{s['mean']:{fmt}} ({s['min']:{fmt}} to {s['max']:{fmt}})"

    lines = [
        f"# Ape-X against the single-process recipe on {config['env']}",
        "",
        f"Written by `{PROG} compare`; discussion in `docs/recipes/apex_dqn.md`.",
        "",
        *provenance_lines(report, "learners"),
        f"- {config['total_steps']:,} env steps per run, seeds {config['seed']} to "
        f"{config['seed'] + config['seeds'] - 1}, arm {config['arm']}, n-step {config['n_step']} for both; "
        "the single-process runs are `python -m recipes.dqn train` with those values",
        f"- wall time: {report['wall_s']:,.0f} s",
        "",
        outputs.markdown_table(
            (
                "run",
                "seeds",
                "final score, mean (min to max)",
                "best policy score, mean (min to max)",
                "updates per env step",
                "env steps/s",
                "wall s per run",
            ),
            [
                (
                    label,
                    s["seeds"],
                    cell(s["final_score"], ".1f"),
                    cell(s["best_policy_score"], ".1f"),
                    f"{s['updates_per_env_step']['mean']:.3f}",
                    f"{s['steps_per_s']['mean']:,.0f}",
                    f"{s['wall_s']['mean']:,.0f}",
                )
                for label, s in report["summary"].items()
            ],
        ),
        "",
        f"![{stem}]({stem}.png)",
        "",
    ]
    return "\n".join(lines)


# -- why Ape-X learns worse: the ablation study -------------------------------------------------------


def arm_metrics(curve: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's per-seed final score and AUC (``recipes.common.rl_metrics``) with their IQM and
    95 % bootstrap interval, and its runs' updates per env step."""
    metrics = seed_metrics(curve)
    return {
        "seeds": curve["seeds"],
        "final": metrics["final"],
        "auc": metrics["auc"],
        "final_iqm": rl_metrics.iqm_interval(metrics["final"]),
        "auc_iqm": rl_metrics.iqm_interval(metrics["auc"]),
        "updates_per_env_step": [updates_per_step(r) for r in results],
        "wall_s": [r["wall_s"] for r in results],
    }


def ablate_summary(results: list[dict[str, Any]], curves: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """The study's keys: ``single``, ``apex_matched``, ``apex_free``, ``apex_all_matched`` and
    ``ablations`` (``{name: arm}``, ``all`` among them), each arm as :func:`arm_metrics`; ``tests``:
    per arm, its AUC and final score against ``apex_matched`` and against ``single``
    (:func:`recipes.common.rl_metrics.compare`, at least 2 seeds each), each with the equivalence
    test within ±``EQUIVALENCE_FRACTION`` of the other arm's IQM; ``holm``: Holm–Bonferroni over
    the family of every AUC test (:func:`recipes.common.rl_metrics.holm_by_group`), beside them."""
    arms: dict[str, dict[str, Any]] = {}
    for label in order:
        mine = sorted((r for r in results if r["label"] == label), key=lambda r: r["config"]["seed"])
        if mine:
            arms[label] = arm_metrics(curves[mine[0]["curve"]], mine)
    out: dict[str, Any] = {key: arms[key] for key in ("single", "apex_matched", "apex_free") if key in arms}
    out["ablations"] = {
        label.removeprefix("ablation "): arm for label, arm in arms.items() if label.startswith("ablation ")
    }
    if "apex_all_matched" in arms:
        out["apex_all_matched"] = out["ablations"]["all"] = arms["apex_all_matched"]
    tests: dict[str, Any] = {}
    for label, arm in arms.items():
        for base in ("apex_matched", "single"):
            other = arms.get(base)
            if base == label or other is None or min(len(arm["seeds"]), len(other["seeds"])) < 2:
                continue
            tests.setdefault(label, {})[f"vs_{base}"] = {
                metric: rl_metrics.compare(arm[metric], other[metric], margin=_margin(other[metric]))
                for metric in ("auc", "final")
            }
    out["tests"] = tests
    family: dict[str, dict[str, float]] = {}
    for label, per in tests.items():
        for vs, t in per.items():  # a test once: single vs apex_matched is apex_matched vs single
            if f"vs_{label}" not in family.get(vs.removeprefix("vs_"), {}):
                family.setdefault(label, {})[vs] = t["auc"]["welch_p"]
    out["holm"] = rl_metrics.holm_by_group(family)
    return out


EQUIVALENCE_FRACTION = 0.10
"""The equivalence margin of the ablation study's tests: this fraction of the compared-with arm's
IQM of the metric tested (±10 %, the margin the PER-vs-uniform protocol registers)."""


def _margin(baseline: list[float]) -> float | None:
    """``EQUIVALENCE_FRACTION`` × |IQM(baseline)|; None (no equivalence test) where that is 0."""
    margin = rl_metrics.relative_margin(baseline, EQUIVALENCE_FRACTION)
    return margin if margin > 0.0 else None


def ablate_markdown(report: dict[str, Any], stem: str) -> str:
    """The table: per arm its seeds, final and AUC IQM [95 % interval], AUC against apex_matched and
    against the single process."""
    config = report["config"]

    def interval(values: list[float]) -> str:
        return f"{values[0]:.1f} [{values[1]:.1f}, {values[2]:.1f}]"

    def test(label: str, base: str) -> str:
        result = report["tests"].get(label, {}).get(f"vs_{base}")
        if result is None:
            return "–"
        d = result["auc"]["difference"]
        cell = f"{d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}] {result['auc']['verdict']}"
        equivalence = result["auc"].get("equivalence")
        if equivalence is not None:
            cell += f"; {equivalence['verdict']}, m = {equivalence['margin']:.1f}"
        adjusted = report.get("holm", {}).get("adjusted_p", {}).get(label, {}).get(f"vs_{base}")
        return cell if adjusted is None else f"{cell}; Holm p {adjusted:.3f}"

    arms: dict[str, Any] = {
        key: report[key] for key in ("single", "apex_matched", "apex_free") if key in report
    }
    arms |= {f"ablation {k}": v for k, v in report["ablations"].items() if k != "all"}
    if "apex_all_matched" in report:
        arms["apex_all_matched"] = report["apex_all_matched"]
    rows = [
        (
            label,
            len(arm["seeds"]),
            interval(arm["final_iqm"]),
            interval(arm["auc_iqm"]),
            " ".join(f"{v:.0f}" for v in arm["final"]),
            test(label, "apex_matched"),
            test(label, "single"),
            f"{np.mean(arm['updates_per_env_step']):.3f}",
        )
        for label, arm in arms.items()
    ]
    status = "partial: missing " + ", ".join(report["missing"]) if report["partial"] else "complete"
    lines = [
        f"# Why Ape-X learns worse than one process on {config['env']}",
        "",
        f"Written by `{PROG} ablate`; protocol and discussion in `docs/recipes/apex_dqn.md`.",
        "",
        *provenance_lines(report, "learners"),
        f"- {config['total_steps']:,} env steps per run, seeds from {config['seed']}, arm {config['arm']}, "
        f"n-step {config['n_step']}, {config['actors']} actors; {status}",
        f"- wall time: {report['wall_s']:,.0f} s",
        "",
        outputs.markdown_table(
            (
                "arm",
                "seeds",
                "final, IQM [95% CI]",
                "AUC, IQM [95% CI]",
                "final per seed",
                "AUC − apex_matched",
                "AUC − single",
                "updates per env step",
            ),
            rows,
        ),
        "",
        f"![{stem}]({stem}.png)",
        "",
    ]
    return "\n".join(lines)
