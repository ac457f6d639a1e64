"""Human-normalised aggregates with stratified-bootstrap intervals for an Atari 100k sweep.

The sweep (``docs/results/atari_sweep.json``) holds, per game (ale-py ROM id) and per arm, the
final score of each seed::

    {"device": str, "protocol": {...},
     "games": {"pong": {"uniform": {"scores": [s_seed0, s_seed1, ...]}, "rank": {...}}, ...}}

and ``recipes/dqn/data/atari100k_reference.csv`` holds, per game, the random and human scores that
normalise Atari 100k results and the published per-game score of agents trained with uniform
replay (``drq_eps``: DrQ(ε) of Agarwal et al. 2021; the file's header cites every number).

The statistics follow Agarwal, Schwarzer, Castro, Courville, Bellemare (2021), "Deep Reinforcement
Learning at the Edge of the Statistical Precipice" (NeurIPS 2021), Sec. 4 and its library rliable:
for N runs on each of M games, with normalised scores ``x[n, m]``,

* ``mean   = (1/M) Σ_m x̄_m`` and ``median = median_m x̄_m`` of the per-game means
  ``x̄_m = (1/N) Σ_n x[n, m]``;
* ``IQM``, the interquartile mean of all N·M runs pooled, and a stratified bootstrap interval that
  redraws each game's N runs separately (:mod:`recipes.common.aggregates`).

``python -m recipes.dqn stats --json docs/results/atari_sweep.json --out docs/results/atari_sweep``
writes ``<out>.png`` (see :func:`plot`) and ``<out>.md`` (see :func:`table_markdown`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recipes.common import cli, outputs
from recipes.common.aggregates import FloatArray, Scores, Statistic, iqm, per_game, stratified_bootstrap_ci

REFERENCE_CSV = Path(__file__).with_name("data") / "atari100k_reference.csv"
REFERENCE_FIELDS = ("game", "random", "human")
"""Columns of the reference CSV that are not a published agent (``rom`` is the key)."""


# ---------------------------------------------------------------------------------------------------
# Normalisation and aggregate statistics


def human_normalized(score: npt.ArrayLike, random: float, human: float) -> Any:
    """Human-normalised score ``(score − random) / (human − random)`` (Mnih et al. 2015; Atari 100k
    papers, e.g. Kaiser et al. 2020 and Agarwal et al. 2021): 0 is the random policy, 1 the human
    player.  A float for a scalar ``score``, an array of ``score``'s shape otherwise.

    Raises ``ValueError`` when ``human == random`` (nothing to normalise by).
    """
    gap = float(human) - float(random)
    if gap == 0.0 or not math.isfinite(gap):
        raise ValueError(
            f"human and random scores should differ and be finite: human={human}, random={random}"
        )
    values = (np.asarray(score, dtype=np.float64) - float(random)) / gap
    return float(values) if values.ndim == 0 else values


def mean(scores: Scores) -> float:
    """Mean over games of each game's mean over runs, ``(1/M) Σ_m x̄_m``."""
    return float(np.mean([runs.mean() for runs in per_game(scores).values()]))


def median(scores: Scores) -> float:
    """Median over games of each game's mean over runs, ``median_m x̄_m``."""
    return float(np.median([runs.mean() for runs in per_game(scores).values()]))


STATISTICS: dict[str, Statistic] = {"median": median, "iqm": iqm, "mean": mean}


# ---------------------------------------------------------------------------------------------------
# Reference table and sweep


def load_reference(path: Path | str = REFERENCE_CSV) -> dict[str, dict[str, float | str]]:
    """The reference table keyed by ale-py ROM id: ``{"pong": {"game": "Pong", "random": -20.7,
    "human": 14.6, "drq_eps": -9.06}, ...}``; a score the source does not give is ``nan``."""
    from recipes.dqn.envs import load_atari_scores  # the same CSV layout as the paper's table

    return load_atari_scores(Path(path))


def published_agents(reference: Mapping[str, Mapping[str, float | str]]) -> list[str]:
    """The reference columns that are published agents (every column but game, random, human)."""
    names: list[str] = []
    for entry in reference.values():
        names.extend(k for k in entry if k not in REFERENCE_FIELDS and k not in names)
    return names


def load_sweep(sweep: Mapping[str, Any] | Path | str) -> dict[str, Any]:
    """The sweep dict, read from a JSON file when given a path."""
    if isinstance(sweep, Mapping):
        return dict(sweep)
    return dict(json.loads(Path(sweep).read_text()))


def sweep_scores(sweep: Mapping[str, Any]) -> dict[str, dict[str, FloatArray]]:
    """arm → game → final scores of its seeds (``null`` seeds dropped), arms in first-seen order."""
    arms: dict[str, dict[str, FloatArray]] = {}
    for game, by_arm in sweep["games"].items():
        for arm, entry in by_arm.items():
            runs = [float(s) for s in entry["scores"] if s is not None and math.isfinite(float(s))]
            if runs:
                arms.setdefault(arm, {})[game] = np.asarray(runs, dtype=np.float64)
    return arms


def _bounds(reference: Mapping[str, Mapping[str, float | str]], game: str) -> tuple[float, float]:
    if game not in reference:
        raise KeyError(f"game {game!r} is not in the reference table (ale-py ROM ids such as 'pong')")
    return float(reference[game]["random"]), float(reference[game]["human"])


def aggregate(
    sweep: Mapping[str, Any] | Path | str,
    reference: Mapping[str, Mapping[str, float | str]] | None = None,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """Per-arm and per-published-agent results on the sweep's games.

    Returns ``{"games": [rom, ...], "reps", "confidence", "arms": {arm: {"seeds": {game: n},
    "score": {game: mean score}, "normalized": {game: mean human-normalised score},
    "median" | "iqm" | "mean": {"point", "low", "high"}}}, "published": {agent: {"score",
    "normalized", "median", "iqm", "mean"}}}``.  An arm's aggregates pool its seeds of all its
    games (normalised per game first); the intervals are :func:`stratified_bootstrap_ci` with the
    given ``reps``, ``confidence`` and ``seed``.  A published agent has one value per game, so its
    aggregates are point values over the sweep's games it reports (``nan`` where it reports none).
    """
    data = load_sweep(sweep)
    reference = load_reference() if reference is None else reference
    games = list(data["games"])
    result: dict[str, Any] = {"games": games, "reps": reps, "confidence": confidence}
    result.update(arms={}, published={})
    for arm, by_game in sweep_scores(data).items():
        normalized = {g: human_normalized(runs, *_bounds(reference, g)) for g, runs in by_game.items()}
        entry: dict[str, Any] = {
            "seeds": {g: int(runs.size) for g, runs in by_game.items()},
            "score": {g: float(runs.mean()) for g, runs in by_game.items()},
            "normalized": {g: float(runs.mean()) for g, runs in normalized.items()},
        }
        for name, statistic in STATISTICS.items():
            ci = stratified_bootstrap_ci(normalized, statistic, reps=reps, confidence=confidence, seed=seed)
            entry[name] = ci._asdict()
        result["arms"][arm] = entry
    for agent in published_agents(reference):
        score = {g: float(reference[g].get(agent, math.nan)) for g in games if g in reference}
        score = {g: v for g, v in score.items() if math.isfinite(v)}
        normalized = {g: float(human_normalized(v, *_bounds(reference, g))) for g, v in score.items()}
        published: dict[str, Any] = {"score": score, "normalized": normalized}
        for name, statistic in STATISTICS.items():
            published[name] = statistic(normalized) if normalized else math.nan
        result["published"][agent] = published
    return result


# ---------------------------------------------------------------------------------------------------
# Figure and table

AGENT_LABELS = {"drq_eps": "DrQ(ε), uniform replay (Agarwal et al. 2021, 100 runs)"}


def plot(
    sweep: Mapping[str, Any] | Path | str,
    reference: Mapping[str, Mapping[str, float | str]] | None,
    path: Path | str,
    result: Mapping[str, Any] | None = None,
) -> Path:
    """One PNG: left, one panel per game with each arm's seeds (dots) and their mean (bar), the
    published agents' scores as horizontal lines; right, the IQM and the median of the
    human-normalised scores per arm with their bootstrap intervals, the published agents' values
    on the same games as open diamonds.  ``result`` is :func:`aggregate`'s (computed when
    omitted)."""
    plt = outputs.pyplot()
    data = load_sweep(sweep)
    reference = load_reference() if reference is None else reference
    result = aggregate(data, reference) if result is None else result
    scores = sweep_scores(data)
    arms = list(scores)
    games = list(data["games"])
    palette = outputs.default_colors()
    colors = {arm: palette[i % len(palette)] for i, arm in enumerate(arms)}
    agents = list(result["published"])
    line_styles = ["--", ":", "-."]

    n_left = max(len(games), 1)
    fig = plt.figure(figsize=(2.4 * n_left + 7.0, 4.2))
    grid = fig.add_gridspec(1, n_left + 2, width_ratios=[1.0] * n_left + [1.5, 1.5], wspace=0.45)
    rng = np.random.default_rng(0)
    for j, game in enumerate(games):
        ax = fig.add_subplot(grid[0, j])
        for i, arm in enumerate(arms):
            runs = scores[arm].get(game)
            if runs is None:
                continue
            ax.bar(i, runs.mean(), color=colors[arm], alpha=0.35, width=0.7)
            jitter = rng.uniform(-0.15, 0.15, size=runs.size)
            ax.plot(i + jitter, runs, "o", color=colors[arm], ms=4)
        for k, agent in enumerate(agents):
            value = result["published"][agent]["score"].get(game)
            if value is not None:
                ax.axhline(
                    value,
                    color="k",
                    ls=line_styles[k % len(line_styles)],
                    lw=1.2,
                    label=AGENT_LABELS.get(agent, agent),
                )
        for bound, ls in (("random", (0, (1, 3))), ("human", (0, (5, 5)))):
            if game in reference:
                ax.axhline(float(reference[game][bound]), color="0.6", ls=ls, lw=0.8, label=bound)
        ax.set_xticks(range(len(arms)), arms, rotation=30, fontsize=8)
        title = str(reference[game]["game"]) if game in reference else game
        ax.set_title(title, fontsize=10)
        if j == 0:
            ax.set_ylabel("final score (dots: seeds; bar: mean)")
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = fig.axes[0].get_legend_handles_labels() if games else ([], [])

    for j, name in enumerate(("iqm", "median")):
        ax = fig.add_subplot(grid[0, n_left + j])
        for i, arm in enumerate(arms):
            ci = result["arms"][arm][name]
            ax.errorbar(
                i,
                ci["point"],
                yerr=[[ci["point"] - ci["low"]], [ci["high"] - ci["point"]]],
                fmt="o",
                color=colors[arm],
                capsize=4,
                ms=6,
            )
        for k, agent in enumerate(agents):
            value = result["published"][agent][name]
            if math.isfinite(value):
                ax.plot(len(arms) + k, value, "D", mfc="none", mec="k", ms=7)
        ticks = arms + [agent if len(agent) < 12 else agent[:11] for agent in agents]
        ax.set_xticks(range(len(ticks)), ticks, rotation=30, fontsize=8)
        ax.set_xlim(-0.6, len(ticks) - 0.4)
        label = "IQM" if name == "iqm" else "median"
        level = round(100 * float(result["confidence"]))
        ax.set_title(f"{label}, human-normalised ({level}% CI)", fontsize=10)
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.grid(True, axis="y", alpha=0.3)
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.subplots_adjust(bottom=0.24, left=0.06, right=0.98, top=0.9)
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _ci(entry: Mapping[str, float]) -> str:
    return f"{entry['point']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"


def table_markdown(
    result: Mapping[str, Any], reference: Mapping[str, Mapping[str, float | str]] | None = None
) -> str:
    """A Markdown table: one row per arm and per published agent; per game the mean final score
    with its human-normalised value in parentheses; then median, IQM and mean of the
    human-normalised scores (arms: point [low, high] at the aggregate's confidence)."""
    games = list(result["games"])
    names = {g: str(reference[g]["game"]) for g in games if reference and g in reference}
    level = round(100 * float(result["confidence"]))
    header = [
        "agent",
        "seeds",
        *(names.get(g, g) for g in games),
        f"median ({level}% CI)",
        f"IQM ({level}% CI)",
        f"mean ({level}% CI)",
    ]
    rows = []

    def cells(entry: Mapping[str, Any]) -> list[str]:
        out = []
        for g in games:
            if g in entry["score"]:
                out.append(f"{entry['score'][g]:.1f} ({entry['normalized'][g]:.3f})")
            else:
                out.append("–")
        return out

    for arm, entry in result["arms"].items():
        seeds = sorted(set(entry["seeds"].values()))
        row = [
            arm,
            "/".join(str(s) for s in seeds),
            *cells(entry),
            _ci(entry["median"]),
            _ci(entry["iqm"]),
            _ci(entry["mean"]),
        ]
        rows.append(row)
    for agent, entry in result["published"].items():
        row = [
            f"{agent} (published)",
            "–",
            *cells(entry),
            *(f"{entry[k]:.3f}" if math.isfinite(entry[k]) else "–" for k in ("median", "iqm", "mean")),
        ]
        rows.append(row)
    return outputs.markdown_table(header, rows) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    """``--json SWEEP --out PREFIX``: write ``PREFIX.png`` and ``PREFIX.md``."""
    parser = cli.PlainHelpParser(
        prog="python -m recipes.dqn stats", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument(
        "--json",
        required=True,
        type=Path,
        help="the sweep JSON, e.g. docs/results/atari_sweep.json (required)",
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="output prefix: PREFIX.png, PREFIX.md are written (required)"
    )
    parser.add_argument(
        "--reference",
        type=Path,
        default=REFERENCE_CSV,
        help="CSV of each game's random and human scores (default: %(default)s)",
    )
    parser.add_argument(
        "--reps",
        type=int,
        default=2000,
        help="stratified-bootstrap samples per interval (default: %(default)s)",
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="coverage of the percentile intervals (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the bootstrap's draws (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    reference = load_reference(args.reference)
    sweep = load_sweep(args.json)
    result = aggregate(sweep, reference, reps=args.reps, confidence=args.confidence, seed=args.seed)
    plot(sweep, reference, args.out.with_suffix(".png"), result)
    args.out.with_suffix(".md").write_text(table_markdown(result, reference))
    print(table_markdown(result, reference), end="")
