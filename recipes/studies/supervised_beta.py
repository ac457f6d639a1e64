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

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from prisample import LinearSchedule, PrioritizedSampler
from recipes.common import cli, outputs


@dataclass
class Config:
    """One comparison: every arm trained from the same initialisation on the same data per seed."""

    seeds: int = 3
    """Independent repetitions (data, initialisation and sampling seeds)."""
    steps: int = 2000
    """SGD steps per run."""
    batch_size: int = 32
    """Examples per SGD step."""
    classes: int = 10
    """Classes of the generated problem."""
    rare_classes: int = 5
    """The last classes are rare in the training set (balanced in the test set)."""
    common_count: int = 1000
    """Training examples of each common class."""
    rare_count: int = 10
    """Training examples of each rare class."""
    test_per_class: int = 500
    """Test examples of every class."""
    dim: int = 20
    """Dimension of the inputs."""
    separation: float = 2.0
    """Scale of the class means (noise has unit variance): smaller is harder."""
    hidden: int = 64
    """Units of the MLP's hidden layer."""
    lr: float = 0.05
    """SGD step size of every arm."""
    alpha: float = 1.0
    """α of the prioritized arms (the paper's supervised setting)."""
    beta_start: float = 0.4
    """Annealed arm: β from this value to ``beta_end`` over the run (the paper's RL schedule)."""
    beta_end: float = 1.0
    """Annealed arm: β at the end of the run."""
    out_dir: str = "runs/supervised_beta"
    """Where supervised_beta.json is written (the documented numbers: docs/results)."""


ARMS = {
    "uniform": "uniform sampling",
    "prioritized_beta0": "prioritized, β = 0",
    "prioritized_annealed": "prioritized, β annealed",
}


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
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``python -m recipes.studies supervised-beta [options]``: run every arm, write the JSON;
    ``--help`` lists the options."""
    parser = cli.PlainHelpParser(
        prog="python -m recipes.studies supervised-beta", description=__doc__.splitlines()[0]
    )
    cli.add_field_options(parser, Config)
    cfg = Config(**vars(parser.parse_args(argv)))
    result = run(cfg)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    outputs.write_json(out / "supervised_beta.json", result, indent=2)
    for arm in ARMS:
        print(f"{arm:22s} test errors {result['arms'][arm]['test_errors']}")
    return result
