"""The Blind Cliffwalk recipe's results (``experiment.py``): the plots of Figs. 1 (right) and 2 and
the table of updates until convergence."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recipes.common import outputs

Results = dict[str, dict[str, dict[str, list[int | None]]]]
"""``{representation: {agent: {str(n): [updates per seed, None where capped]}}}``."""


def summarize(values: Sequence[int | None]) -> tuple[float, float, float]:
    """(median, min, max) of the updates, a capped run counting as infinitely many."""
    x = np.array([math.inf if v is None else v for v in values], dtype=np.float64)
    return float(np.median(x)), float(x.min()), float(x.max())


def memory_size(n: int) -> int:
    """``2^(n+1) - 2`` transitions in the memory of a chain of length ``n``."""
    return int(2 ** (n + 1) - 2)


STYLE = {
    "uniform": ("black", "uniform"),
    "oracle": ("deepskyblue", "oracle"),
    "greedy": ("darkorange", "greedy TD error"),
    "rank": ("red", "rank-based"),
    "proportional": ("blue", "proportional"),
}
FIGURES: tuple[tuple[str, str, str, tuple[tuple[str, str], ...]], ...] = (
    (
        "fig1_right",
        "Fig. 1 (right): uniform vs oracle, tabular",
        "tabular",
        (("tabular", "uniform"), ("tabular", "oracle")),
    ),
    (
        "fig2_left",
        "Fig. 2 (left): greedy TD error, tabular",
        "tabular",
        (("tabular", "uniform"), ("tabular", "oracle"), ("tabular", "greedy")),
    ),
    (
        "fig2_right",
        "Fig. 2 (right): rank-based and proportional, linear",
        "linear",
        (
            ("linear", "uniform"),
            ("linear", "oracle"),
            ("tabular", "oracle"),
            ("linear", "rank"),
            ("linear", "proportional"),
        ),
    ),
)
"""(file suffix, title, the panel's representation, (representation, agent) per line).  A line from
the other representation is dashed: the linear oracle stalls for larger n (docs/recipes/cliffwalk.md),
so the tabular one is drawn as a reference."""


def plot(results: Results, out_dir: Path) -> list[Path]:
    """Log-log plots in the style of Figs. 1 (right) and 2: median line, faint min and max."""
    written = []
    for name, title, panel, lines in FIGURES:
        shown = [(rep, agent) for rep, agent in lines if agent in results.get(rep, {})]
        if not any(rep == panel for rep, _ in shown):
            continue
        path = out_dir / f"cliffwalk_{name}.png"
        with outputs.figure(path, figsize=(5.5, 4.2)) as (_, ax):
            _draw_panel(ax, results, title, panel, shown)
        written.append(path)
    return written


def _draw_panel(ax: Any, results: Results, title: str, panel: str, shown: list[tuple[str, str]]) -> None:
    for rep, agent in shown:
        color, label = STYLE[agent]
        style = "-" if rep == panel else "--"
        label += "" if rep == panel else f" ({rep})"
        ns = sorted(int(n) for n in results[rep][agent])
        stats = np.array([summarize(results[rep][agent][str(n)]) for n in ns])
        x = np.array([memory_size(n) for n in ns], dtype=np.float64)
        if not np.isfinite(stats[:, 0]).all():
            label += f", no median for N ≥ {x[~np.isfinite(stats[:, 0])].min():,.0f}"
        stats[~np.isfinite(stats)] = np.nan  # a median or max that did not converge is not drawn
        ax.plot(x, stats[:, 0], color=color, ls=style, lw=2, marker="o", ms=3, label=label)
        for k in (1, 2):
            ax.plot(x, stats[:, k], color=color, ls=style, lw=0.8, alpha=0.35)
    if ax.has_data() and np.isfinite(ax.dataLim.bounds).all():  # not when no run converged
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("memory size N (transitions)")
    ax.set_ylabel("updates until MSE < 1e-3")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="major", alpha=0.3)


def _cell(values: Sequence[int | None]) -> str:
    median, low, high = summarize(values)
    failed = sum(v is None for v in values)

    def fmt(x: float) -> str:
        return "n.c." if math.isinf(x) else f"{x:,.0f}"

    text = f"{fmt(median)} ({fmt(low)}–{fmt(high)})"
    return text + (f" [{failed} n.c.]" if failed else "")


def markdown(
    results: Results, config: Any, runtime_s: float, pngs: list[Path], out_dir: Path, command: str
) -> str:
    """cliffwalk.md: the setup, then median (min–max) updates per memory size and agent."""
    lines = [
        "# Blind Cliffwalk: updates until convergence",
        "",
        "Written by `recipes/cliffwalk/experiment.py`; the setup and a discussion are in "
        f"[docs/recipes/cliffwalk.md]({os.path.relpath('docs/recipes/cliffwalk.md', out_dir)}).  "
        "Schaul et al. 2016, Figs. 1 (right) and 2.",
        "",
        f"- command: `{command}`",
        f"- runtime: {runtime_s:,.0f} s wall clock, {config.workers} worker process(es) on "
        f"{outputs.machine_description()}",
        f"- {config.seeds} seeds per cell: median number of updates (min–max).  `n.c.` = not converged: "
        f"the run reached the cap of {config.max_updates:,} updates "
        f"({min(config.max_updates, config.max_oracle_updates):,} for the oracle), or (oracle only) "
        "stopped at a state where its best update changes no Q-value, which it would repeat up to any "
        "cap; `null` in cliffwalk.json, counted as infinitely many updates in the median",
        f"- convergence: MSE(Q, Q_true) over all 2n (state, action) pairs < {config.tolerance:g}; "
        f"η = {config.step_size:g}, θ_i ~ N(0, {config.init_std:g}²), γ = 1 − 1/n",
        f"- rank-based α = {config.alpha_rank:g}; proportional α = {config.alpha_proportional:g}, "
        f"ε = {config.eps:g}; β = 0 (no importance weights); one transition per update",
        "- initial priority: "
        + (
            "the maximal priority of the memory, 1, for every transition (the paper)"
            if config.initial_priority == "max"
            else "**variant, not the paper**: each slot's own |δ| under the initial θ"
        ),
        "",
    ]
    for rep in config.representations:
        agents = list(results[rep])
        lines += [f"## {rep.capitalize()}", ""]
        rows = [
            [n, f"{memory_size(n):,}", *(_cell(results[rep][a][str(n)]) for a in agents)]
            for n in range(config.min_n, config.max_n + 1)
        ]
        lines += [outputs.markdown_table(["n", "memory size", *agents], rows), ""]
    lines += ["## Plots", ""]
    lines += [f"![{p.stem}]({p.name})" for p in pngs]
    return "\n".join(lines) + "\n"


def write(results: Results, config: Any, runtime_s: float, command: str) -> list[Path]:
    """cliffwalk.json, the PNGs and cliffwalk.md in ``config.out_dir`` (``config``: a ``CliffwalkConfig``)."""
    out_dir = Path(config.out_dir)

    def table(pngs: list[Path]) -> str:
        return markdown(results, config, runtime_s, pngs, out_dir, command)

    return outputs.write_results(
        out_dir, "cliffwalk", results, table, lambda out: plot(results, out), compact_lists=True
    )
