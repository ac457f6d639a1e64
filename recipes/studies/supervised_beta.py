"""Which β for prioritized supervised learning? Uniform vs prioritized β = 0 vs β annealed 0.4 → 1.

Algorithm (Schaul et al. 2016, Sec. 6, the supervised MNIST experiment): draw each training
example with ``P(i) = p_i^α / Σ_k p_k^α`` (Eq. 1), ``p_i`` its last-seen loss (+ ε), and weight its
loss by ``w_i = (N · P(i))^-β / max_j w_j`` (Sec. 3.4).  On class-imbalanced data the rare classes
keep high losses, so prioritization shows them more often; that rebalancing is what helps.  With
β = 1 the weights cancel the skew of ``P`` in expectation, ``E_P[w_i ∇L_i] ∝ E_uniform[∇L_i]``:
the rebalancing is undone and only the extra variance of the weighted estimate remains.

Data: a generated multi-class problem (Gaussian classes in ``dim`` dimensions, no downloads) whose
last ``rare_classes`` classes have ``rare_count`` training examples against ``common_count`` for
the others; the test set is balanced.  Model: a one-hidden-layer MLP, SGD.  Deterministic: fixed
seeds, CPU, one torch thread.

    python -m recipes.studies supervised-beta                            # writes runs/supervised_beta/
    python -m recipes.studies supervised-beta --out_dir docs/results     # the documented numbers
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from prisample import LinearSchedule, PrioritizedSampler
from recipes.common import launch, outputs
from recipes.studies.supervised_beta_config import ARMS, Config, parse, run_plan

__all__ = ["ARMS", "Config", "main", "make_data", "run", "train"]


def make_data(cfg: Config, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(10_000 + seed)
    means = torch.randn(cfg.classes, cfg.dim, generator=g) * cfg.separation / cfg.dim**0.5 * 2

    def draw(counts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.cat([torch.full((n,), c, dtype=torch.int64) for c, n in enumerate(counts)])
        x = means[y] + torch.randn(y.shape[0], cfg.dim, generator=g)
        return x, y

    common = cfg.classes - cfg.rare_classes
    x_train, y_train = draw([cfg.common_count] * common + [cfg.rare_count] * cfg.rare_classes)
    x_test, y_test = draw([cfg.test_per_class] * cfg.classes)
    return x_train, y_train, x_test, y_test


def train(cfg: Config, arm: str, seed: int, data: tuple[torch.Tensor, ...]) -> int:
    """Train one arm; returns its number of test errors."""
    x_train, y_train, x_test, y_test = data
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(cfg.dim, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, cfg.classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    n = x_train.shape[0]
    beta: float | LinearSchedule = 0.0
    if arm == "prioritized_annealed":
        beta = LinearSchedule(cfg.beta_start, cfg.beta_end, cfg.steps)
    # PER: one priority per training example; uniform is the same sampler with α = 0.
    sampler = PrioritizedSampler(
        n, alpha=0.0 if arm == "uniform" else cfg.alpha, beta=beta, batch_size=cfg.batch_size, seed=seed
    )
    for _ in range(cfg.steps):
        draw = sampler.sample(cfg.batch_size)
        idx = torch.from_numpy(draw.indices)
        losses = nn.functional.cross_entropy(model(x_train[idx]), y_train[idx], reduction="none")
        weights = torch.from_numpy(draw.weights)  # PER: all 1 at β = 0 and for uniform
        optimizer.zero_grad()
        (weights * losses).mean().backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        optimizer.step()
        sampler.update_priorities(draw.indices, losses.detach())  # PER: p_i = loss_i
    with torch.no_grad():
        return int((model(x_test).argmax(1) != y_test).sum())


def run(cfg: Config) -> dict[str, Any]:
    torch.set_num_threads(1)
    started = time.perf_counter()
    errors: dict[str, list[int]] = {arm: [] for arm in ARMS}
    with tqdm(total=cfg.seeds * len(ARMS), desc="supervised_beta") as bar:
        for seed in range(cfg.seeds):
            data = make_data(cfg, seed)
            for arm in ARMS:
                errors[arm].append(train(cfg, arm, seed, data))
                bar.update()
    return {
        "config": asdict(cfg),
        "test_examples": cfg.test_per_class * cfg.classes,
        "arms": {
            arm: {
                "label": label,
                "test_errors": errors[arm],
                "mean_test_errors": round(float(np.mean(errors[arm])), 1),
            }
            for arm, label in ARMS.items()
        },
        "wall_s": round(time.perf_counter() - started, 1),  # what the next run's summary estimates from
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``python -m recipes.studies supervised-beta [options]``: say what runs (and, on a terminal,
    ask before a run estimated over an hour; ``--yes`` does not), run every arm, write the JSON;
    ``--help`` lists the options."""
    yes, options = launch.take_yes(sys.argv[1:] if argv is None else argv)
    cfg = parse(options)
    launch.confirm(run_plan(cfg), yes)
    result = run(cfg)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    outputs.write_json(out / "supervised_beta.json", result, indent=2)
    for arm in ARMS:
        print(f"{arm:22s} test errors {result['arms'][arm]['test_errors']}")
    return result
