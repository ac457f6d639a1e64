"""The off-policy recipe's results (``experiment.py``): RMSE curves per environment and the table
of final RMSE, fixed points and updates to tolerance."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recipes.common import outputs

Results = dict[str, dict[str, dict[str, dict[str, list[Any]]]]]
"""``{env: {representation: {arm: {metric: [value per seed]}}}}``."""


STYLE = {
    "on_policy": ("black", "on-policy (data from π)"),
    "uncorrected": ("gray", "uncorrected (no ρ)"),
    "ordinary_is": ("tab:green", "ordinary IS (w = ρ)"),
    "weighted_is": ("tab:olive", "weighted IS (α=0, β=1, c=ρ)"),
    "rejection": ("tab:purple", "rejection (p=min(1,ρ))"),
    "hybrid_proportional": ("tab:blue", "hybrid proportional (p=ρ|δ|)"),
    "hybrid_rank": ("tab:red", "hybrid rank (p=ρ|δ|)"),
}


def plot(results: Results, config: Any, out_dir: Path) -> list[Path]:
    """RMSE to V^π against updates: median over seeds, min–max shaded; one PNG per environment."""
    written = []
    for env, by_rep in results.items():
        path = out_dir / f"offpolicy_{env.split('-')[0].lower()}.png"
        size = (5.4 * len(by_rep), 4.6)
        margin = (0, 0.12, 1, 1)  # room for the legend below the panels
        with outputs.figure(
            path, size, dpi=110, layout_rect=margin, ncols=len(by_rep), squeeze=False
        ) as drawn:
            fig, axes = drawn
            _draw_env(fig, axes[0], env, by_rep, config)
        written.append(path)
    return written


def _draw_env(fig: Any, axes: Any, env: str, by_rep: dict[str, Any], config: Any) -> None:
    for ax, (rep, by_arm) in zip(axes, by_rep.items(), strict=True):
        for arm, values in by_arm.items():
            curves = np.array(values["rmse_curve"])
            x = np.arange(curves.shape[1]) * config.eval_every
            color, label = STYLE[arm]
            ax.plot(x, np.median(curves, axis=0), color=color, lw=1.6, label=label)
            ax.fill_between(x, curves.min(axis=0), curves.max(axis=0), color=color, alpha=0.15, lw=0)
        tolerance = config.tolerances.get(env)
        if tolerance:
            ax.axhline(tolerance, color="k", ls=":", lw=0.8, label=f"tolerance {tolerance:g}")
        ax.set_yscale("log")
        ax.set_xlabel(f"updates (minibatches of {config.batch_size})")
        ax.set_ylabel("RMSE(V, V^π) over occupied states")
        ax.set_title(f"{env}, {rep}", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)


TABLE_HEADERS = (
    "arm",
    "final RMSE",
    "fixed-point RMSE",
    "updates to tolerance",
    "updates to own fixed point",
    "final β",
    "mean w",
)


def _stats(values: Sequence[float | None]) -> tuple[float, float, float]:
    x = np.array([math.inf if v is None else v for v in values], dtype=np.float64)
    return float(np.median(x)), float(x.min()), float(x.max())


def _cell(values: Sequence[float | None], integer: bool = False) -> str:
    median, low, high = _stats(values)

    def fmt(v: float) -> str:
        if math.isinf(v):
            return "n.r."
        return f"{v:,.0f}" if integer else f"{v:.3g}"

    if math.isinf(low):
        return "n.r."
    return f"{fmt(median)} ({fmt(low)}–{fmt(high)})"


def markdown(
    results: Results, config: Any, runtime_s: float, pngs: list[Path], out_dir: Path, command: str
) -> str:
    """offpolicy.md: the setup, then median (min–max) RMSE and updates per environment and arm."""
    doc = os.path.relpath("docs/recipes/offpolicy.md", out_dir)
    lines = [
        "# Off-policy replay: RMSE to the exact V^π",
        "",
        "Written by `python -m recipes.offpolicy run`; "
        f"the setup, the mapping and a discussion are in [{doc}]({doc}).  "
        "Schaul et al. 2016, Sec. 6.",
        "",
        f"- command: `{command}`",
        f"- runtime: {runtime_s:,.0f} s wall clock, {config.workers} worker process(es) on "
        f"{outputs.machine_description()}",
        f"- {config.seeds} seeds per cell: median (min–max).  γ = {config.gamma:g}; π = "
        f"{config.target_epsilon:g}-greedy on Q*; μ = {1 - config.behaviour_mix:g}·uniform"
        + (f" + {config.behaviour_mix:g}·π" if config.behaviour_mix else "")
        + f"; memory {config.memory_size:,} transitions (exploring starts, episodes cut at "
        f"{config.episode_steps}); {config.updates:,} updates of {config.batch_size}; "
        f"η_t = {config.step_size:g} / (1 + t / {config.step_decay:g})",
        "- final RMSE: after the last update, over the occupied (non-terminal, reachable) states; "
        "fixed point: RMSE of the exact limit of the arm's TD(0) on its memory (β = 1 for the hybrids)",
        "- updates to tolerance: first evaluation (every "
        f"{config.eval_every} updates) with RMSE ≤ "
        + ", ".join(f"{env} {config.tolerances.get(env, 0):g}" for env in config.envs)
        + "; to own fixed point: the same tolerance on the RMSE between V and the arm's fixed point; "
        "n.r. = not reached within the run (counted as infinitely many in the median)",
        f"- weights of the sampler-weighted arms normalised by `{config.weight_norm}`",
        "",
    ]
    for env, by_rep in results.items():
        for rep, by_arm in by_rep.items():
            lines += [f"## {env}, {rep}", ""]
            rows = [
                [
                    arm,
                    _cell(values["final_rmse"]),
                    _cell(values["fixed_point_rmse"]),
                    _cell(values["updates_to_tolerance"], integer=True),
                    _cell(values["updates_to_fixed_point"], integer=True),
                    f"{np.median(values['beta_final']):.2g}",
                    f"{np.median(values['weight_mean']):.3g}",
                ]
                for arm, values in by_arm.items()
            ]
            lines += [outputs.markdown_table(TABLE_HEADERS, rows), ""]
    lines += ["## Plots", ""]
    lines += [f"![{p.stem}]({p.name})" for p in pngs]
    return "\n".join(lines) + "\n"


def write(results: Results, config: Any, runtime_s: float, command: str) -> list[Path]:
    """offpolicy.json, the PNGs and offpolicy.md in ``config.out_dir`` (``config``: OffPolicyConfig)."""
    out_dir = Path(config.out_dir)

    def table(pngs: list[Path]) -> str:
        return markdown(results, config, runtime_s, pngs, out_dir, command)

    def figure(out: Path) -> list[Path]:
        return plot(results, config, out)

    return outputs.write_results(out_dir, "offpolicy", results, table, figure, compact_lists=True)
