"""Prioritized against uniform replay, as registered before it ran: does PER help the recipes' agents?

The protocol is ``recipes/studies/configs/per_vs_uniform.yaml``, committed before its first run: per
environment, the arms (arm files of the Double DQN recipe, ``python -m recipes.dqn train``, each with the
uniform arm of the same step size as its baseline), the seeds, the steps, the primary metric and
the test.  Each run is Algorithm 1 (Schaul et al. 2016) with its arm's replay:

    j ~ P(j) = p_j^α / Σ_i p_i^α,   w_j = (N·P(j))^-β / max w,   θ ← θ + η/d Σ_j w_j δ_j ∇Q,   p_j ← |δ_j|

and is scored by evaluations every few thousand steps.  Per seed: the area under the evaluation
curve (AUC, the mean over evaluations; the primary metric) and the final score; per arm: their IQM
with a 95 % bootstrap interval; per arm against its baseline: the interval of the IQM difference,
whose sign is the verdict (``recipes/common/rl_metrics.py``).

Commands (each prints its usage without arguments)::

    python -m recipes.studies per-vs-uniform run --envs CartPole-v1 --jobs 2  # runs/per_vs_uniform/<env>.*
    python -m recipes.studies per-vs-uniform stacked --envs MinAtar/Breakout-v1,MinAtar/Asterix-v1 --jobs 2
    python -m recipes.studies per-vs-uniform report --sb3 runs/sb3_cartpole.json \\
        --out docs/results/per_vs_uniform                                  # .json, .md, .png

``run`` trains every (arm, seed) of the named environments (``stacked``: every agent of one
environment in one resumable process, :mod:`recipes.studies.per_vs_uniform_stacked`) and writes,
per environment, the sweep record of ``recipes/dqn/sweep.py`` (``<env>.json`` curves, ``.png``,
``_weights.png``, ``.md``);
``report`` reads those (and the Stable-Baselines3 comparison's JSON, ``recipes/studies/sb3_cartpole.py``)
and writes ``per_vs_uniform.json``: ``{"protocol": <the YAML as registered>, "envs": {env: {arm:
{"seeds", "auc", "final", "weight_mean_last", ...}}}, "aggregates": {env: {arm: {"auc_iqm",
"final_iqm"}}}, "comparisons": {env: {arm: {"difference", "welch_p", "verdict", "equivalence"}}},
"holm": {"adjusted_p": {env: {arm: p}}, "survives": ...}, "verdict": {env: "..."}, "sources": {env:
{"runs", "commits", "all_clean", "unrecorded"}}, "not_reported": [env]}``, ``sources`` saying
which commits every run started or resumed from (:mod:`recipes.common.provenance`; SB3's from its
JSON), ``not_reported`` the registered environments whose records were not given (their
comparisons are missing from the Holm family, which the table says).  Per comparison
the difference test decides "better" / "worse" / "no difference detected"; where the protocol
registers an environment's ``equivalence_margin`` (a fraction of the baseline arm's AUC IQM), the
two one-sided tests decide "equivalent within ±m" / "not shown equivalent"
(:func:`recipes.common.rl_metrics.equivalence`); Holm–Bonferroni over every comparison of the report
is reported beside them (:func:`recipes.common.rl_metrics.holm`).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from recipes.common import launch, outputs, rl_metrics
from recipes.common.provenance import describe, run_sources
from recipes.dqn import sweep_report as report
from recipes.dqn.config import run_dir
from recipes.dqn.sweep import run_all
from recipes.studies.per_vs_uniform_config import (
    COMMANDS,
    EPILOG,
    PROG,
    PROTOCOL,
    ReportConfig,
    RunConfig,
    StackedConfig,
    env_runs,
    load_protocol,
    parse_command,
    run_plan,
    stacked_plan,
)

__all__ = [
    "COMMANDS",
    "EPILOG",
    "PROTOCOL",
    "SB3_ENV",
    "ReportConfig",
    "RunConfig",
    "StackedConfig",
    "env_runs",
    "env_sources",
    "family",
    "gather",
    "load_protocol",
    "main",
    "margin_fraction",
    "run",
    "write_report",
]

SB3_ENV = "SB3 CartPole-v1"
"""The key of the Stable-Baselines3 comparison among the environments of the results."""


# -- run ---------------------------------------------------------------------------------------------


def run(config: RunConfig, argv: list[str]) -> dict[str, Any]:
    """``run``: every environment's runs, then its sweep record."""
    protocol = load_protocol()
    out_dir = Path(config.runs)
    planned = {env: env_runs(protocol, env, config) for env in config.envs}  # all checked before any runs
    curves_by_env = {}
    command = outputs.argv_command(f"{PROG} run", argv)
    for env, (runs, names) in planned.items():
        stem = env.replace("/", "_")
        started = time.perf_counter()
        finished = run_all(runs, names, config.jobs, out_dir / f"{stem}.json", desc=env, reuse=True)
        wall = time.perf_counter() - started
        curves_by_env[env] = report.write_record(env, runs[0], finished, config.jobs, command, wall, out_dir)
    return curves_by_env


# -- report ------------------------------------------------------------------------------------------


def arm_results(curves: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per curve of one sweep: the seeds, per seed AUC, final score and last mean weight, and the
    evaluation curves themselves."""
    arms = {}
    for name, data in curves.items():
        metrics = report.seed_metrics(data)
        weights = data.get("weight_mean") or []
        last = [
            next((row[i] for row in reversed(weights) if row[i] is not None), None)
            for i in range(len(data["seeds"]))
        ]
        arms[name] = {
            "seeds": data["seeds"],
            "auc": metrics["auc"],
            "final": metrics["final"],
            "weight_mean_last": last,
            "eval_steps": data["steps"],
            "returns": data["returns"],
        }
    return arms


def sb3_results(sb3: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The Stable-Baselines3 comparison's arms in the same form (its JSON holds them per arm)."""
    arms = sb3.get("arms", sb3)
    keys = ("seeds", "auc", "final", "weight_mean_last", "eval_steps", "returns")
    return {name: {k: data[k] for k in keys if k in data} for name, data in arms.items()}


def baselines(protocol: dict[str, Any], env: str, arms: list[str]) -> dict[str, str]:
    """``{arm: its baseline}`` for the arms that have one."""
    if env == SB3_ENV:
        base = protocol["sb3"]["baseline"]
        return {a: base for a in arms if a != base}
    registered = protocol["envs"][env]["arms"]
    return {a: registered[a]["baseline"] for a in arms if registered.get(a, {}).get("baseline")}


def decimals(aggregates: dict[str, dict[str, list[float]]]) -> int:
    """Decimals that show an environment's scores to about three significant digits (at least one):
    1 for CartPole's hundreds, 2 for MinAtar Breakout's single digits."""
    points = [abs(a["auc_iqm"][0]) for a in aggregates.values()]
    scale = max((p for p in points if np.isfinite(p)), default=0.0)
    return 1 if scale <= 0 else max(1, 2 - int(np.floor(np.log10(scale))))


def verdict_sentence(comparisons: dict[str, dict[str, Any]], bases: dict[str, str], digits: int = 1) -> str:
    """One sentence per environment: each arm's verdict against its baseline, with the interval, and
    the equivalence test's verdict with its margin where one is registered; ``digits`` decimals."""
    parts = []
    for arm, c in comparisons.items():
        point, low, high = c["difference"]
        part = (
            f"{arm} vs {bases[arm]}: {c['verdict']} (AUC IQM difference {point:+.{digits}f}, "
            f"95% CI {low:+.{digits}f} to {high:+.{digits}f})"
        )
        if "equivalence" in c:
            e = c["equivalence"]
            low, high = e["interval"][1], e["interval"][2]
            part += f", {_equivalence_text(e)} (90% CI {low:+.{digits}f} to {high:+.{digits}f})"
        parts.append(part)
    return "; ".join(parts) + "."


def _equivalence_text(e: dict[str, Any]) -> str:
    """The verdict with its margin written out: ``equivalent within ±12.3``, ``not shown equivalent
    within ±12.3``."""
    margin = f"±{e['margin']:.3g}"
    if e["verdict"] == rl_metrics.EQUIVALENT:
        return rl_metrics.EQUIVALENT.replace("±m", margin)
    return f"{e['verdict']} within {margin}"


def margin_fraction(protocol: dict[str, Any], env: str) -> float | None:
    """The registered equivalence margin of ``env`` as a fraction of its baseline arm's AUC IQM
    (``equivalence_margin``), or None where the protocol registers none."""
    spec = protocol["sb3"] if env == SB3_ENV else protocol["envs"][env]
    fraction = spec.get("equivalence_margin")
    return None if fraction is None else float(fraction)


def family(comparisons: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Holm–Bonferroni over every comparison of the report, all environments (SB3's included) one
    family (:func:`recipes.common.rl_metrics.holm` on their Welch p-values): ``{"alpha", "tests",
    "adjusted_p": {env: {arm: p}}, "survives": {env: {arm: bool}}}``, beside the per-test verdicts."""
    return rl_metrics.holm_by_group(
        {env: {arm: c["welch_p"] for arm, c in tests.items()} for env, tests in comparisons.items()}
    )


def gather(config: ReportConfig) -> dict[str, Any]:
    """The results JSON (see the module's docstring)."""
    protocol = load_protocol()
    envs: dict[str, dict[str, Any]] = {}
    for env in protocol["envs"]:
        path = Path(config.runs) / f"{env.replace('/', '_')}.json"
        if path.exists():
            envs[env] = arm_results(json.loads(path.read_text()))
    sb3 = json.loads(Path(config.sb3).read_text()) if config.sb3 is not None else None
    if sb3 is not None:
        envs[SB3_ENV] = sb3_results(sb3)
    if not envs:
        raise ValueError(
            f"runs should hold <env>.json files of the registered environments, but got runs={config.runs!r}"
        )
    sources = {env: env_sources(protocol, env, config.runs) for env in envs if env != SB3_ENV}
    if sb3 is not None:
        sources[SB3_ENV] = sb3.get("sources", UNRECORDED)
    aggregates, comparisons, verdicts = {}, {}, {}
    for env, arms in envs.items():
        aggregates[env] = {
            arm: {
                "auc_iqm": rl_metrics.iqm_interval(_finite(data["auc"])),
                "final_iqm": rl_metrics.iqm_interval(_finite(data["final"])),
            }
            for arm, data in arms.items()
        }
        bases = baselines(protocol, env, list(arms))
        fraction = margin_fraction(protocol, env)
        comparisons[env] = {
            arm: rl_metrics.compare(
                _finite(arms[arm]["auc"]),
                _finite(arms[base]["auc"]),
                margin=None
                if fraction is None
                else rl_metrics.relative_margin(_finite(arms[base]["auc"]), fraction),
            )
            for arm, base in bases.items()
            if base in arms
        }
        verdicts[env] = verdict_sentence(comparisons[env], bases, decimals(aggregates[env]))
    return {
        "protocol": protocol,
        "envs": envs,
        "aggregates": aggregates,
        "comparisons": comparisons,
        "holm": family(comparisons),
        "verdict": verdicts,
        "sources": sources,
        "not_reported": [env for env in [*protocol["envs"], SB3_ENV] if env not in envs],
    }


UNRECORDED: dict[str, Any] = {"runs": None, "commits": {}, "all_clean": False, "unrecorded": None}
"""The sources of runs whose record names none (written before runs recorded their commit)."""


def env_sources(protocol: dict[str, Any], env: str, runs: str) -> dict[str, Any]:
    """Which commits the registered runs of ``env`` under ``runs`` started or resumed from, read
    from their run directories (:func:`recipes.common.provenance.run_sources`)."""
    cfgs, _ = env_runs(protocol, env, RunConfig(envs=(env,), runs=runs))
    return run_sources(run_dir(c) for c in cfgs)


def _finite(values: list[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and np.isfinite(v)]


def markdown(results: dict[str, Any], command: str) -> str:
    """The table: per environment and arm, the AUC and final IQMs with their intervals, the mean
    weight at the end, and the test against the baseline."""
    lines = [
        "# Prioritized against uniform replay: results of the registered comparison",
        "",
        f"Written by `{command}` from the runs of "
        "`python -m recipes.studies per-vs-uniform run` or `stacked`; the protocol "
        "is `recipes/studies/configs/per_vs_uniform.yaml` (copied into the JSON) and "
        "`docs/recipes/per_vs_uniform.md`.",
        "",
    ]
    missing = results.get("not_reported", [])
    if missing:
        tests = results.get("holm", {}).get("tests")
        lines += [
            f"Not in this report: {', '.join(missing)} (no record of their finished runs was given). "
            f"The Holm family below is this report's {tests} comparisons; theirs join it once reported.",
            "",
        ]
    for env, arms in results["envs"].items():
        lines += [f"## {env}", "", f"Verdict: {results['verdict'][env]}", ""]
        if "sources" in results:
            lines += [describe(results["sources"].get(env, UNRECORDED)), ""]
        digits = decimals(results["aggregates"][env])
        ci = functools.partial(_ci, digits=digits)
        rows = []
        for arm, data in arms.items():
            agg = results["aggregates"][env][arm]
            c = results["comparisons"][env].get(arm)
            holm = results.get("holm", {})
            adjusted = holm.get("adjusted_p", {}).get(env, {}).get(arm)
            survives = holm.get("survives", {}).get(env, {}).get(arm)
            equivalent = None if c is None else c.get("equivalence")
            weights = _finite(data.get("weight_mean_last", []))
            rows.append(
                (
                    arm,
                    len(data["seeds"]),
                    ci(agg["auc_iqm"]),
                    ci(agg["final_iqm"]),
                    f"{np.mean(weights):.3f}" if weights else "–",
                    "–" if c is None else f"{ci(c['difference'], signed=True)} → {c['verdict']}",
                    "–" if c is None else f"{c['welch_p']:.3f}",
                    "–" if adjusted is None else f"{adjusted:.3f}" + (" (survives)" if survives else ""),
                    "–"
                    if equivalent is None
                    else f"{ci(equivalent['interval'], signed=True)} → {_equivalence_text(equivalent)}",
                )
            )
        lines.append(
            outputs.markdown_table(
                [
                    "arm",
                    "seeds",
                    "AUC, IQM [95% CI]",
                    "final, IQM [95% CI]",
                    "mean weight at the end",
                    "AUC IQM − baseline [95% CI] → verdict",
                    "Welch p",
                    "Holm-adjusted p (family of every comparison)",
                    "AUC IQM − baseline [90% CI] → equivalence (TOST)",
                ],
                rows,
            )
        )
        lines += ["", "Per seed (AUC / final):", ""]
        lines.append(
            outputs.markdown_table(
                ["arm", "AUC per seed", "final per seed"],
                [
                    (arm, *(", ".join(_num(v, digits) for v in d[key]) for key in ("auc", "final")))
                    for arm, d in arms.items()
                ],
            )
        )
        lines.append("")
    lines += ["![per_vs_uniform](per_vs_uniform.png)", ""]
    return "\n".join(lines)


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def _ci(values: list[float], signed: bool = False, digits: int = 1) -> str:
    point, low, high = values
    f = f"{{:+.{digits}f}}" if signed else f"{{:.{digits}f}}"
    return f"{f.format(point)} [{f.format(low)}, {f.format(high)}]"


def tick_label(arm: str) -> str:
    """``uniform lr_divisor=4`` as ``uniform\nη/4``, ``proportional lr_divisor=1`` as ``proportional\nη``,
    ``proportional_dopamine`` as ``proportional\ndopamine``: one word to a line, so that neighbours
    do not run into each other."""
    name, _, divisor = arm.partition(" lr_divisor=")
    name = name.replace("_", "\n")
    if not divisor:
        return name
    return f"{name}\nη" if float(divisor) == 1.0 else f"{name}\nη/{float(divisor):g}"


PANELS_PER_ROW = 3


def plot(results: dict[str, Any], path: Path) -> Path:
    """One panel per environment, ``PANELS_PER_ROW`` to a row: each seed's AUC (dots) and the arm's
    IQM with its interval (bar)."""
    envs = list(results["envs"])
    ncols = min(len(envs), PANELS_PER_ROW)
    nrows = -(-len(envs) // ncols)
    size = (4.4 * ncols, 3.9 * nrows)
    with outputs.figure(path, figsize=size, nrows=nrows, ncols=ncols, squeeze=False) as (_, axes):
        panels = list(axes.flat)
        for ax in panels[len(envs) :]:
            ax.set_visible(False)
        for ax, env in zip(panels, envs, strict=False):
            arms = results["envs"][env]
            for x, (arm, data) in enumerate(arms.items()):
                point, low, high = results["aggregates"][env][arm]["auc_iqm"]
                values = _finite(data["auc"])
                jitter = np.linspace(-0.15, 0.15, len(values)) if len(values) > 1 else [0.0]
                ax.scatter(x + np.asarray(jitter), values, s=10, color="gray", alpha=0.7, zorder=2)
                ax.errorbar(
                    x, point, yerr=[[point - low], [high - point]], fmt="o", color="C0", capsize=4, zorder=3
                )
            ax.set_xticks(range(len(arms)))
            ax.set_xticklabels([tick_label(a) for a in arms], fontsize=7)
            ax.set_title(env, fontsize=9)
            ax.set_ylabel("AUC: mean evaluation score over the run")
            ax.grid(True, axis="y", alpha=0.3)
    return path


def write_report(config: ReportConfig, argv: list[str]) -> dict[str, Any]:
    """``report``: the JSON, the table and the plot."""
    results = gather(config)
    out = Path(config.out)
    command = outputs.argv_command("python -m recipes.studies per-vs-uniform report", argv)

    def figures(_: Path) -> list[Path]:
        return [plot(results, out.with_suffix(".png"))]

    outputs.write_results(
        out.parent, out.name, results, markdown(results, command), figures, compact_lists=True
    )
    for env, sentence in results["verdict"].items():
        print(f"{env}: {sentence}")
    return results


def main(argv: list[str] | None = None) -> Any:
    """``python -m recipes.studies per-vs-uniform run|stacked|report [options]``.  Before ``run`` trains,
    what it will run and its estimated time are printed (and asked about on a terminal when over an
    hour; ``--yes`` does not ask); ``report`` runs nothing and prints no summary."""
    yes, options = launch.take_yes(sys.argv[1:] if argv is None else argv)
    config = parse_command(options)
    if isinstance(config, ReportConfig):
        return write_report(config, options[1:])
    if isinstance(config, StackedConfig):
        from recipes.studies.per_vs_uniform_stacked import run_stacked

        launch.confirm(stacked_plan(config), yes)
        return run_stacked(config, options[1:])
    launch.confirm(run_plan(config), yes)
    return run(config, options[1:])
