"""``python -m recipes.studies atari-pong merge``: finished Pong runs into the accumulated results.

``docs/results/atari_pong.json`` holds ``{"protocol", "runs": [...], "summary", "command"}``:
``runs`` every merged run's record as ``next`` wrote it, in the registered order; ``summary``
per arm the per-seed AUC, final and evaluation scores, their IQM with a 95 % bootstrap interval
once an arm has 3 seeds, each prioritized arm's test against uniform once both have 3
(``rl_metrics.compare``), and Dopamine's reference curves with their AUC and final value.  The
``.md`` beside it is the table, the ``.png`` the iteration curves against Dopamine's.

A run file is refused (``ValueError`` naming ``runs`` and the file, the results left as they were)
unless it is a finished, registered run of this protocol from a clean commit that the results do
not hold yet.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from recipes.common import outputs, rl_metrics
from recipes.studies.atari_pong_config import PROG, MergeConfig, load_protocol, planned

__all__ = ["check_run", "markdown", "merge", "plot", "summarize"]

MIN_SEEDS = 3
"""Seeds per arm before the protocol aggregates or tests (``aggregate`` and ``test``)."""


def check_run(record: Any, protocol: dict[str, Any], held: set[tuple[str, int]], name: str) -> None:
    """``ValueError`` naming ``runs`` and ``name`` unless ``record`` may join the results."""

    def refuse(why: str) -> None:
        raise ValueError(f"runs should be finished registered runs of this protocol, but {name!r} {why}")

    if not isinstance(record, dict) or record.get("study") != "atari_pong":
        refuse("is not a run record of this study")
    if record.get("protocol") != protocol:
        refuse("ran under another protocol than the registered one")
    if (record.get("arm"), record.get("seed")) not in set(planned(protocol)):
        refuse(f"holds arm={record.get('arm')!r}, seed={record.get('seed')!r}, not a registered run")
    if not record.get("registered") or record.get("overrides"):
        refuse(f"ran with overrides {record.get('overrides')!r}")
    if not record.get("complete") or record.get("steps") != protocol["total_steps"]:
        refuse(f"did not finish (stopped: {record.get('stopped')!r}, steps: {record.get('steps')!r})")
    if record.get("auc") is None or record.get("final") is None:
        refuse("has an iteration in which no training episode ended (no AUC or final value)")
    source = record.get("source") or {}
    if not source.get("commit") or source.get("clean") is not True:
        refuse(f"does not come from a clean commit (source: {source!r})")
    if (record["arm"], record["seed"]) in held:
        refuse(f"is {record['arm']} seed {record['seed']}, already in the results")


def _curve_summary(curve: list[float]) -> dict[str, float]:
    return {"auc": sum(curve) / len(curve), "final": curve[-1]}


def summarize(protocol: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``summary`` of the results (see the module's docstring)."""
    arms: dict[str, dict[str, Any]] = {}
    for arm in protocol["arms"]:
        mine = [r for r in runs if r["arm"] == arm]
        arms[arm] = {
            "seeds": [r["seed"] for r in mine],
            "auc": [r["auc"] for r in mine],
            "final": [r["final"] for r in mine],
            "eval_score": [r.get("eval_score") for r in mine],
        }
        if len(mine) >= MIN_SEEDS:
            arms[arm]["auc_iqm"] = rl_metrics.iqm_interval(arms[arm]["auc"])
            arms[arm]["final_iqm"] = rl_metrics.iqm_interval(arms[arm]["final"])
    comparisons = {
        arm: rl_metrics.compare(arms[arm]["auc"], arms["uniform"]["auc"])
        for arm in protocol["arms"]
        if arm != "uniform" and min(len(arms[arm]["auc"]), len(arms["uniform"]["auc"])) >= MIN_SEEDS
    }
    references = {name: _curve_summary(c) for name, c in protocol["references"]["curves"].items()}
    return {"arms": arms, "comparisons": comparisons, "references": references}


def _num(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:+.2f}"


def markdown(results: dict[str, Any], png: str = "atari_pong.png") -> str:
    """The results' page: every run, the references, the aggregates and tests once due, the plot."""
    protocol, summary = results["protocol"], results["summary"]
    lines = [
        "# Pong at 10M frames against Dopamine's baselines",
        "",
        f"- protocol: `recipes/studies/configs/atari_pong.yaml` (registered {protocol['registered']}); "
        "prose: [docs/recipes/atari_pong.md](../recipes/atari_pong.md)",
        f"- command: `{results['command']}`",
        f"- runs: {len(results['runs'])} of {len(planned(protocol))} registered",
        "",
        "Per iteration (250,000 agent steps = 1M frames): the mean return of the training episodes "
        "that ended within it. AUC: the mean over iterations 0-9; final: iteration 9.",
        "",
    ]
    rows = [
        [
            r["arm"],
            r["seed"],
            _num(r["auc"]),
            _num(r["final"]),
            _num(r.get("eval_score")),
            f"{r['learning_steps_per_s']:,.0f}",
            r["device_name"],
            f"`{str(r['source']['commit'])[:7]}`",
        ]
        for r in results["runs"]
    ]
    headers = ["arm", "seed", "AUC", "final", "evaluation", "agent steps/s", "device", "commit"]
    lines += [outputs.markdown_table(headers, rows), "", "Dopamine's baselines (mean of 5 runs):", ""]
    refs = [[name, _num(v["auc"]), _num(v["final"])] for name, v in summary["references"].items()]
    lines += [outputs.markdown_table(["agent", "AUC", "final"], refs), ""]
    due = [arm for arm, v in summary["arms"].items() if "auc_iqm" in v]
    if not due:
        lines.append(f"No aggregate and no verdict yet: the protocol needs {MIN_SEEDS} seeds per arm.")
    for arm in due:
        low_high = summary["arms"][arm]["auc_iqm"]
        lines.append(f"- {arm}: AUC IQM {_num(low_high[0])} [{_num(low_high[1])}, {_num(low_high[2])}]")
    for arm, c in summary["comparisons"].items():
        d = c["difference"]
        lines.append(f"- {arm} − uniform: {_num(d[0])} [{_num(d[1])}, {_num(d[2])}], **{c['verdict']}**")
    lines += ["", f"![iteration curves]({png})", ""]
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> Path:
    """Each run's iteration curve (colour per arm) against Dopamine's mean curves (grey)."""
    colors = dict(zip(results["protocol"]["arms"], outputs.default_colors(), strict=False))
    with outputs.figure(path, figsize=(7.0, 4.5)) as (_, ax):
        styles = ["--", ":", "-."]
        for style, (name, curve) in zip(
            styles, results["protocol"]["references"]["curves"].items(), strict=False
        ):
            ax.plot(range(len(curve)), curve, style, color="0.45", label=f"Dopamine {name}")
        shown: set[str] = set()
        for r in results["runs"]:
            label = None if r["arm"] in shown else r["arm"]
            shown.add(r["arm"])
            curve = r["iteration_returns"]
            ax.plot(range(len(curve)), curve, color=colors[r["arm"]], label=label)
        ax.set_xlabel("iteration (250,000 agent steps = 1M frames)")
        ax.set_ylabel("mean training return")
        ax.set_title("ALE/Pong-v5, 10M frames, sticky actions")
        ax.legend(fontsize=7)
    return path


def merge(config: MergeConfig, argv: list[str]) -> dict[str, Any]:
    """Add ``config.runs`` to ``config.results`` (all or none) and rewrite its .json, .md, .png."""
    protocol = load_protocol()
    path = Path(config.results)
    results: dict[str, Any] = (
        json.loads(path.read_text()) if path.exists() else {"protocol": protocol, "runs": []}
    )
    if results.get("protocol") != protocol:
        raise ValueError(
            f"results should hold this protocol's runs, but results={config.results!r} holds another protocol"
        )
    held = {(r["arm"], r["seed"]) for r in results["runs"]}
    added = []
    for name in config.runs:
        try:
            record = json.loads(Path(name).read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"runs should be readable JSON files, but got {name!r}: {error}") from None
        check_run(record, protocol, held, name)
        held.add((record["arm"], record["seed"]))
        added.append(record)
    order = {run: i for i, run in enumerate(planned(protocol))}
    runs = sorted([*results["runs"], *added], key=lambda r: order[(r["arm"], r["seed"])])
    merged = {
        "protocol": protocol,
        "runs": runs,
        "summary": summarize(protocol, runs),
        "command": outputs.argv_command(f"{PROG} merge", argv),
    }
    outputs.write_results(
        path.parent,
        path.stem,
        merged,
        lambda _: markdown(merged, f"{path.stem}.png"),
        lambda out: plot(merged, out / f"{path.stem}.png"),
        default=float,
    )
    return merged
