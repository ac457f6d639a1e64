"""The class-imbalanced MNIST comparison's results (``python -m recipes.imbalanced_mnist compare``):
the curves of Fig. 5 and the table of test errors and loss per arm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from recipes.common import outputs


def _median(values: list[list[float]]) -> list[float]:
    return [float(np.median(v)) for v in values]


def plot(results: dict[str, Any], out_dir: Path, name: str) -> list[Path]:
    """Fig. 5: test misclassifications (left) and test loss (right) against updates, median of seeds."""
    colours = {"uniform": "black", "informed": "tab:green", "prioritized": "tab:blue"}
    labels = {
        "uniform": "uniform (uninformed)",
        "informed": "uniform, informed (×100)",
        "prioritized": "prioritized α=1, β=0 (uninformed)",
    }
    paths = []
    for key, ylabel in (("test_errors", "misclassified test examples"), ("test_loss", "test loss")):
        path = out_dir / f"{name}_{key}.png"
        with outputs.figure(path, figsize=(5.5, 4), dpi=110) as (_, ax):
            for arm, data in results["arms"].items():
                values = np.asarray(data[key])
                ax.plot(data["updates"], np.median(values, axis=1), color=colours[arm], label=labels[arm])
                ax.fill_between(data["updates"], values.min(1), values.max(1), color=colours[arm], alpha=0.15)
            ax.set_xlabel("updates (minibatches of 60)")
            ax.set_ylabel(ylabel)
            title = f"class-imbalanced {results['dataset']} (median of {results['seeds']} seeds, min-max)"
            ax.set_title(title, fontsize=9)
            if key == "test_errors":
                ax.set_yscale("log")
            ax.legend(fontsize=8)
        paths.append(path)
    return paths


def markdown(results: dict[str, Any], runtime: float, pngs: list[Path], command: str) -> str:
    """The table of the comparison: median (min-max) test errors and loss at a few update counts."""
    ds = results["dataset"]
    lines = [
        f"# Class-imbalanced {ds}: uniform, informed and prioritized sampling (Fig. 5)",
        "",
        f"Dataset: **{ds}** (training set: 1% of classes 0-4, all of 5-9; per-class counts "
        f"{results['train_counts']}); untouched test set of 10,000.",
        f"Median over {results['seeds']} seeds, (min-max) in brackets. Produced by `{command}` in "
        f"{runtime:.0f} s on {outputs.machine_description()}.",
        "",
    ]
    arms = results["arms"]
    updates = next(iter(arms.values()))["updates"]
    shown = sorted({updates[0], updates[len(updates) // 4], updates[len(updates) // 2], updates[-1]})
    for key, title, fmt in (
        ("test_errors", "Misclassified test examples (of 10,000)", "{:.0f}"),
        ("test_rare_errors", "... of which in the rare classes 0-4 (of ~5,000)", "{:.0f}"),
        ("test_loss", "Test loss (mean negative log-likelihood)", "{:.3f}"),
    ):
        rows = []
        for arm, data in arms.items():
            cells = []
            for u in shown:
                v = np.asarray(data[key][data["updates"].index(u)])
                cells.append(f"{fmt.format(np.median(v))} ({fmt.format(v.min())}-{fmt.format(v.max())})")
            rows.append([arm, f"{data['lr']:g}", *cells])
        headers = ["arm", "lr", *(f"{u} updates" for u in shown)]
        lines += [f"### {title}", "", outputs.markdown_table(headers, rows), ""]
    best_rows = []
    for arm, data in arms.items():
        med = _median(data["test_loss"])
        best = int(np.argmin(med))
        best_rows.append([arm, f"{med[best]:.3f}", data["updates"][best]])
    lines += ["### Best median test loss over the run", ""]
    lines += [outputs.markdown_table(["arm", "best", "at updates"], best_rows)]
    lines += ["", *[f"![{p.stem}]({p.name})" for p in pngs], ""]
    return "\n".join(lines)


def write(results: dict[str, Any], out_dir: Path, name: str, runtime: float, command: str) -> list[Path]:
    """``<name>.json``, the two PNGs and ``<name>.md`` in ``out_dir``."""
    return outputs.write_results(
        out_dir,
        name,
        results,
        lambda pngs: markdown(results, runtime, pngs, command),
        lambda out: plot(results, out, name),
    )
